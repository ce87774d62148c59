// The normal order, LIVEALLOC_OVERRIDE first, with the header included again directly and
// through the others: must compile (consumer_flags.sh).
#define LIVEALLOC_OVERRIDE
#include <livealloc.h>
#include <livealloc.h>
#include <livealloc_reader.h>
#ifdef CONSUMER_FLAGS_MEMLIVE
#include <memlive.h>
#endif
#include <livealloc.h>

int main() { return 0; }
