// LIVEALLOC_OVERRIDE defined after livealloc.h came in through another header: must not compile
// (consumer_flags.sh expects the #error), else malloc would silently not be replaced.
#ifdef CONSUMER_FLAGS_MEMLIVE
#include <memlive.h>
#else
#include <livealloc_reader.h>
#endif
#define LIVEALLOC_OVERRIDE
#include <livealloc.h>

int main() { return 0; }
