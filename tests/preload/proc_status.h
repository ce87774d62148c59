// A field of /proc/self/status and the count of mappings, for the preload tests that watch their
// own memory.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

// The value of `field` ("RssAnon:", "VmSize:") in KiB, read without allocating (-1 on failure).
inline long status_kib(const char* field) {
  char buf[8192];
  int fd = open("/proc/self/status", O_RDONLY);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  const char* p = strstr(buf, field);
  return p ? strtol(p + strlen(field), nullptr, 10) : -1;
}

// How many mappings the process has (lines of /proc/self/maps; -1 on failure).
inline long mappings() {
  char buf[65536];
  int fd = open("/proc/self/maps", O_RDONLY);
  if (fd < 0) return -1;
  long lines = 0;
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0)
    for (ssize_t i = 0; i < n; ++i) lines += buf[i] == '\n';
  close(fd);
  return lines;
}
