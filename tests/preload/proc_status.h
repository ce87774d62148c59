// A field of /proc/self/status, for the preload tests that watch their own memory.
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
