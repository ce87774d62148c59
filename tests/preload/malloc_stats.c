/* malloc_stats() and malloc_info() under LD_PRELOAD describe livealloc's heaps, not glibc's empty
 * arena: with 8 MiB in 8,000 small blocks and 3 large blocks of 8 MiB live, stderr and the XML
 * must show at least that much in use and 3 mmap regions; malloc_info(1, fp) returns EINVAL.
 * A C program, so it sees the C declarations from <malloc.h>. Exit 0 when every check holds. */
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failures;
static void check(int ok, const char* what, const char* text) {
  printf("%s  %s\n", ok ? "ok  " : "FAIL", what);
  if (!ok) {
    printf("--- output:\n%s---\n", text);
    ++failures;
  }
}

/* The number after `label` and " = " on the first line after `after` that has it. */
static unsigned long long field(const char* text, const char* after, const char* label) {
  const char* p = strstr(text, after);
  p = p ? strstr(p, label) : NULL;
  return p && (p = strchr(p, '=')) ? strtoull(p + 1, NULL, 10) : 0;
}

int main(void) {
  enum { kSmall = 8000, kSmallSize = 1024, kLarge = 3 };
  const unsigned long long large_size = 8ull << 20;
  void* small[kSmall];
  void* large[kLarge];
  for (int i = 0; i < kSmall; ++i) memset(small[i] = malloc(kSmallSize), 1, kSmallSize);
  for (int i = 0; i < kLarge; ++i) memset(large[i] = malloc(large_size), 1, 4096);

  /* malloc_stats writes to stderr: catch it in a file. */
  static char text[8192];
  FILE* tmp = tmpfile();
  fflush(stderr);
  const int saved = dup(2);
  dup2(fileno(tmp), 2);
  malloc_stats();
  dup2(saved, 2);
  rewind(tmp);
  text[fread(text, 1, sizeof text - 1, tmp)] = 0;
  fclose(tmp);
  const unsigned long long live = (unsigned long long)kSmall * kSmallSize + kLarge * large_size;
  check(strstr(text, "livealloc") != NULL, "malloc_stats names livealloc", text);
  check(field(text, "Total", "in use bytes") >= live,
        "malloc_stats: total in use bytes >= the 32 MiB live", text);
  check(field(text, "livealloc", "in use bytes") >= (unsigned long long)kSmall * kSmallSize,
        "malloc_stats: heap in use bytes >= the 8 MiB of small blocks", text);
  check(field(text, "Total", "mmap regions") >= kLarge, "malloc_stats: >= 3 mmap regions", text);

  tmp = tmpfile();
  const int rc = malloc_info(0, tmp);
  rewind(tmp);
  text[fread(text, 1, sizeof text - 1, tmp)] = 0;
  fclose(tmp);
  check(rc == 0 && strstr(text, "allocator=\"livealloc\"") != NULL, "malloc_info names livealloc",
        text);
  const char* mm = strstr(text, "<total type=\"mmap\" count=\"");
  unsigned long long count = 0, size = 0;
  if (mm) sscanf(mm, "<total type=\"mmap\" count=\"%llu\" size=\"%llu\"", &count, &size);
  check(count >= kLarge && size >= kLarge * large_size, "malloc_info: the large blocks as mmap",
        text);
  errno = 0;
  check(malloc_info(1, stdout) == EINVAL && errno == 0,
        "malloc_info(1, fp) returns EINVAL, errno untouched (as glibc's)", "");

  for (int i = 0; i < kSmall; ++i) free(small[i]);
  for (int i = 0; i < kLarge; ++i) free(large[i]);
  return failures ? 1 : 0;
}
