// livealloc.h -- a thread-caching malloc replacement in one header.
// SPDX-License-Identifier: MIT
//
// Include it anywhere: the allocator is inline and safe in any number of translation units, and is
// reached through livealloc::allocate / deallocate / ... and the STL and pmr adapters below.
//
// Compile-time switches (define before including):
//   LIVEALLOC_OVERRIDE  Define in exactly ONE translation unit of a program to make that unit hold
//                       the strong definitions of malloc, free, ... and every replaceable
//                       operator new/delete. Default: undefined (nothing is replaced). Define it
//                       before the first include (also through livealloc_reader.h or memlive.h);
//                       not with -fsanitize=address or thread. Both are #errors.
//   LIVEALLOC_PRELOAD   Set by allocator/src/preload.cpp to build liblivealloc.so: implies
//                       LIVEALLOC_OVERRIDE, exports only the malloc ABI and the C++ operators, and
//                       references libstdc++ weakly so C programs do not load it.
//   LIVEALLOC_CHECKED   1 turns on the checked mode: double frees, frees of pointers livealloc never
//                       returned and sized frees with a wrong size abort with a message naming the
//                       address. Costs a bitmap per page and atomic updates. Default: 0.
//
// Layers, bottom-up (each uses only the ones above it in this file): platform (mmap, TLS, locks,
// environment) -> options -> core (size classes, segments, pages, heaps, cross-thread frees, large
// mappings) -> front (the C++ API, stl_allocator, pmr resource) -> override (the C ABI).
// allocator/README.md describes the design and the invariants in prose.
#ifndef LIVEALLOC_H
#define LIVEALLOC_H

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>  // malloc_info's FILE
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#ifndef MADV_POPULATE_WRITE  // Linux 5.14; older C libraries' headers lack it (EINVAL at run time)
#define MADV_POPULATE_WRITE 23
#endif
#ifndef MAP_FIXED_NOREPLACE  // Linux 4.17 (an older kernel takes the address as a hint)
#define MAP_FIXED_NOREPLACE 0x100000
#endif
#include <sys/prctl.h>
#if __has_include(<sys/single_threaded.h>)  // glibc 2.32
#include <sys/single_threaded.h>
#define LIVEALLOC_SINGLE_THREADED() (__libc_single_threaded != 0)
#else
#define LIVEALLOC_SINGLE_THREADED() false
#endif
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory_resource>
#include <new>

#define LIVEALLOC_VERSION_MAJOR 0
#define LIVEALLOC_VERSION_MINOR 1
#define LIVEALLOC_VERSION_PATCH 0

#if defined(LIVEALLOC_PRELOAD) && !defined(LIVEALLOC_OVERRIDE)
#define LIVEALLOC_OVERRIDE 1
#endif
#ifndef LIVEALLOC_CHECKED
#define LIVEALLOC_CHECKED 0
#endif
#if LIVEALLOC_CHECKED != 0 && LIVEALLOC_CHECKED != 1
#error "LIVEALLOC_CHECKED must be 0 or 1"
#endif
#if !defined(__x86_64__) || !defined(__linux__)
#error "livealloc supports Linux on x86-64 only"
#endif
// ASan's and TSan's runtimes own malloc: a second malloc in the program crashes it at start-up,
// before any message, so say it here.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)  // gcc
#define LIVEALLOC_SANITIZER_MALLOC 1
#elif defined(__has_feature)  // clang
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define LIVEALLOC_SANITIZER_MALLOC 1
#endif
#endif
#if defined(LIVEALLOC_OVERRIDE) && defined(LIVEALLOC_SANITIZER_MALLOC)
#error "LIVEALLOC_OVERRIDE cannot be combined with -fsanitize=address or -fsanitize=thread (their runtime replaces malloc): drop LIVEALLOC_OVERRIDE from sanitizer builds, or use LD_PRELOAD=liblivealloc.so without the sanitizer"
#endif
#if defined(LIVEALLOC_SANITIZER_MALLOC)
// Their shadow memory covers the region segments are mapped in (os_map_hinted), and TSan's mmap
// turns an address outside its application ranges into 0, which root may map.
#define LIVEALLOC_NO_MAP_HINT 1
#endif
#undef LIVEALLOC_SANITIZER_MALLOC
// ThreadSanitizer builds keep the counters' writes C++ atomics it can see (see bump).
#if defined(__SANITIZE_THREAD__)
#define LIVEALLOC_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define LIVEALLOC_TSAN 1
#endif
#endif

#define LIVEALLOC_LIKELY(x) __builtin_expect(!!(x), 1)
#define LIVEALLOC_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define LIVEALLOC_ALWAYS_INLINE inline __attribute__((always_inline))
#define LIVEALLOC_NOINLINE __attribute__((noinline))
// The functions of the fast paths (malloc, free, new, delete and the two they call): the compiler
// puts them apart, in .text.hot, which the linker gathers ahead of other code, each on a 64-byte
// line of its own. A change to other code then moves them together and by whole lines, never
// against each other: builds of the same fast-path instructions had measured 4-6% apart.
#define LIVEALLOC_HOT __attribute__((hot, aligned(64)))

// Every threshold, defined once: name, type, default, minimum, maximum, changeable while running,
// one line of documentation. The environment variable is LIVEALLOC_<NAME in upper case>; the
// README table is printed from this list (tests/unit/options.cpp checks it is current).
#define LIVEALLOC_OPTIONS(X)                                                                    \
  X(verbose, bool, 0, 0, 1, false, "print the options in effect at start, on stderr")           \
  X(profile, bool, 0, 0, 1, false,                                                              \
    "publish the counters in /dev/shm/livealloc.<pid> for memlive (allocator/TELEMETRY.md)")    \
  X(telemetry_slots, int, 256, 2, 4096, false,                                                  \
    "thread slots in the telemetry segment; threads past them count in one overflow slot")      \
  X(page_recycle, int, 2, 0, 4096, true,                                                        \
    "empty pages a thread keeps per size class, counted in 64 KiB units (but one page at "      \
    "least); past it they go back to the OS")                                                   \
  X(remote_batch, int, 32, 1, 4096, true,                                                       \
    "blocks freed for another thread's heap that are gathered before one atomic hand-back")     \
  X(idle_reclaim, int, 10, 0, 60000, true,                                                     \
    "milliseconds without a slow path after which a thread counts as idle: the blocks other "   \
    "threads freed for it, waiting for it to wake, are reused by a thread that would otherwise " \
    "take a new span for them (0: they wait)")                                                 \
  X(large_cache, int, 128, 0, 65536, true,                                                       \
    "MiB of freed large mappings kept (each for purge_delay ms) for reuse instead of munmap")   \
  X(purge_delay, int, 250, 0, 60000, true,                                                     \
    "milliseconds a released page stays mapped for quick reuse; then it goes back to the OS, "  \
    "a few pages at each slow path of any thread, or by background_purge (0: at its release; " \
    "without it a process where no thread allocates keeps them: malloc_trim(0) returns them)") \
  X(segment_cache, int, 4, 0, 4096, true,                                                       \
    "empty 4 MiB segments kept for reuse by any thread; also as much of the released pages as "  \
    "a thread's exit leaves waiting for the purge delay (the rest goes back at the exit)")       \
  X(hugepages, bool, 0, 0, 1, false,                                                            \
    "back segments and large mappings with transparent huge pages (MADV_HUGEPAGE)")             \
  X(stale_segments, int, 8, 0, 64, false,                                                       \
    "segments left in /dev/shm by this user's processes that are gone (killed, crashed) kept "  \
    "when a process publishes its own: the newest; older ones are removed")                     \
  X(background_purge, int, 0, 0, 2, true,                                                       \
    "1: a thread of the allocator's own (livealloc-purge) returns released pages and cached "   \
    "large mappings to the OS once purge_delay has passed, so a process whose threads all went " \
    "idle gives them back too; it starts at the next slow path or large allocation of any "     \
    "thread once the process runs a second thread (2: in a single-threaded process too), and "  \
    "ends when set to 0; while it runs, the program's threads leave that work to it (none of "   \
    "it in their malloc latency) unless it falls a second behind")

namespace livealloc {
inline namespace v0 {

// ------------------------------------------------------------------------------------------------
// Public API (declarations; definitions follow the core).
// ------------------------------------------------------------------------------------------------

// Like malloc: at least `size` bytes aligned to 16, or nullptr with errno = ENOMEM.
void* allocate(std::size_t size) noexcept;
// `alignment` must be a power of two; nullptr with errno = EINVAL otherwise, ENOMEM on exhaustion.
void* allocate_aligned(std::size_t size, std::size_t alignment) noexcept;
// Like calloc: overflow of count * size gives nullptr and ENOMEM.
void* allocate_zeroed(std::size_t count, std::size_t size) noexcept;
// Like glibc realloc: nullptr `ptr` allocates; size 0 frees and returns nullptr.
void* reallocate(void* ptr, std::size_t size) noexcept;
void deallocate(void* ptr) noexcept;
// Sized free: `size` is the size that was requested (checked in LIVEALLOC_CHECKED builds).
void deallocate(void* ptr, std::size_t size) noexcept;
// The bytes `ptr` may use (its block's size; 0 for nullptr), like malloc_usable_size. A pointer
// into a block aborts, as free's does.
std::size_t usable_size(const void* ptr) noexcept;
// Returns cached free memory to the OS now (this thread, exited threads, the caches) and asks
// every other thread to do the same at its next slow path. True when anything was released.
bool trim() noexcept;
// Gives what the calling thread keeps for its own reuse (its recent-free lists, its empty pages,
// its pending remote frees) back to the shared page heap, which returns it to the OS after
// `purge_delay` like any released memory. For a thread that goes idle after a burst, such as a
// server's worker after a large answer; cheap when it holds nothing. True when a page went back.
bool trim_thread() noexcept;

enum class option_status { ok, unknown_name, out_of_range, not_live };
// Changes a threshold while the program runs; each thread applies it at its next slow path.
option_status set_option(const char* name, long long value) noexcept;
// False for an unknown name.
bool get_option(const char* name, long long* value) noexcept;
// Generation of the options: bumped by every accepted set_option.
std::uint64_t options_generation() noexcept;

// Process-wide figures (the basis of mallinfo2).
struct stats {
  std::size_t live_bytes;        // bytes in blocks handed out and not yet freed (block sizes)
  std::size_t requested_bytes;   // bytes requested in total, ever (internal waste shows against
                                 // allocated_bytes)
  std::size_t allocated_bytes;   // block bytes handed out in total, ever
  std::size_t segment_bytes;     // bytes of 4 MiB segments mapped (virtual)
  std::size_t large_bytes;       // bytes of large mappings in use
  std::size_t large_count;       // large mappings in use
  std::size_t cached_bytes;      // large mappings and empty segments kept for reuse
  std::size_t heaps;             // thread heaps ever created (reused after threads exit)
  std::size_t heaps_in_use;      // heaps owned by a live thread
  std::size_t mmap_calls, munmap_calls, madvise_calls;
};
stats get_stats() noexcept;

namespace detail {
// The T that the layout places at byte address `p`, aligned for T by construction. Cast through
// void*: gcc's -Wcast-align=strict would otherwise see only a byte pointer.
template <class T>
inline T* object_at(void* p) noexcept { return static_cast<T*>(p); }
template <class T>
inline const T* object_at(const void* p) noexcept { return static_cast<const T*>(p); }
}  // namespace detail

// ------------------------------------------------------------------------------------------------
// Telemetry: the layout of the shared-memory segment, the contract between the allocator and any
// reader (memlive, livealloc_reader.h, third parties). allocator/TELEMETRY.md describes it in
// prose. All integers are little-endian, naturally aligned; every counter is a uint64_t written
// with relaxed atomic stores. Offsets are from the start of the segment.
// ------------------------------------------------------------------------------------------------
namespace telemetry {

inline constexpr char kMagic[8] = {'L', 'I', 'V', 'E', 'A', 'L', 'L', 'C'};
constexpr std::uint32_t kVersion = 1;
constexpr std::uint32_t kClassCount = 53;  // class 0: large blocks (own mapping); 1..52: sizes
constexpr std::uint32_t kNameSize = 16;    // thread names (Linux: 15 characters and a NUL)
constexpr std::uint32_t kProgramSize = 64;

// Per thread and size class. Cumulative counters only grow; gauges go up and down.
enum counter : std::uint32_t {
  c_allocs,           // blocks handed out (realloc counts a free and an allocation)
  c_frees,            // blocks returned to this thread's heap (local frees + remote received)
  c_requested_bytes,  // bytes asked for by those allocations (internal waste = allocs*size - this)
  c_refills,          // allocations that missed the thread cache and took the slow path
  c_remote_sent,      // blocks this thread freed that another thread's heap owns
  c_remote_received,  // blocks other threads freed into this heap (also counted in c_frees)
  c_adopted,          // live blocks inherited with the heap of an exited thread
  c_pages_taken,      // spans taken from segments for this class
  c_pages_released,   // spans given back (to the segment, then to the OS after purge_delay)
  c_pages_in_use,     // gauge: spans of this class the heap holds
  c_pages_kept,       // gauge: of those, empty spans kept under the page_recycle threshold
  c_reserved_blocks,  // gauge: blocks carved in those spans; cached free = reserved - live
  c_large_freed_by_others,  // class 0: this thread's large blocks that other threads freed
                            // (the one counter others write, with atomic adds)
  c_handed_over,      // exited totals only: live blocks passed on to a thread adopting a heap
  c_peak_live,        // gauge: the most live blocks this thread held, as seen at its slow paths
  c_foreign_allocs,   // allocations served with a block another heap owns: one a remote free
                      // left on this thread's recent-free list (the owner's live count keeps it)
  kCounterCount
};
// Cross-thread free matrix: entry [f][o] (at matrix_offset + (f * slot_count + o) * 8) counts the
// blocks the thread in slot f freed that the heap in slot o owned; row f is written only by slot
// f's thread (the overflow row with atomic adds). Rows and columns accumulate over the slot's
// incarnations.
// Live blocks = allocs + adopted - frees - large_freed_by_others - handed_over - foreign_allocs.
// Read the subtracted counters before the added ones: then live is never negative in a snapshot.

enum slot_state : std::uint32_t { slot_unused = 0, slot_alive = 1, slot_exited = 2,
                                  slot_overflow = 3 };

// The first 128 bytes of every slot. Written only by the slot's thread (state and the exit time
// also by the thread that reclaims it).
struct slot_header {
  std::atomic<std::uint32_t> state;        // slot_state
  std::atomic<std::uint32_t> incarnation;  // bumped each time a new thread takes the slot
  std::atomic<std::int32_t> tid;           // kernel thread id
  std::uint32_t reserved0;
  char name[kNameSize];                    // NUL-terminated; refreshed at slow paths
  std::atomic<std::uint64_t> start_ns;     // CLOCK_REALTIME when the thread took the slot
  std::atomic<std::uint64_t> exit_ns;      // CLOCK_REALTIME at exit, 0 while alive
  std::atomic<std::uint64_t> applied_generation;  // options generation this thread applied
  std::atomic<std::uint64_t> mmap_calls, munmap_calls, madvise_calls;  // by this thread
  std::atomic<std::uint64_t> slow_paths;     // allocations that took the slow path
  std::atomic<std::uint64_t> flushes;        // batches of remote frees handed back
  std::uint64_t reserved1[4];
};
static_assert(sizeof(slot_header) == 128, "slot_header is part of the segment layout");

// One per size class, right after the slot header: counters[kClassCount].
struct class_counters {
  std::atomic<std::uint64_t> v[kCounterCount] = {};
};
static_assert(sizeof(class_counters) == 128, "class_counters is part of the segment layout");

// A threshold as seen through the control block. Writers (memlive, set_option) store `requested`
// and then increment control_block::generation; the allocator validates at its next slow path:
// a valid value becomes `effective`, an invalid one is counted in `rejected` and `requested` is
// set back to `effective`.
struct option_entry {
  char name[32];                          // NUL-terminated, lower case (env: LIVEALLOC_<NAME>)
  std::atomic<std::int64_t> requested;
  std::atomic<std::int64_t> effective;
  std::int64_t min, max, default_value;
  std::uint32_t live;                     // 1: may change while running
  std::uint32_t is_bool;
  std::uint64_t reserved[2];
};
static_assert(sizeof(option_entry) == 96, "option_entry is part of the segment layout");

struct control_block {
  std::atomic<std::uint64_t> generation;           // bumped by writers after a change
  std::atomic<std::uint64_t> validated_generation;  // the last generation the allocator checked
  std::atomic<std::uint64_t> rejected;             // invalid values seen (and undone)
  std::uint32_t option_count;
  std::uint32_t option_size;                       // sizeof(option_entry)
  option_entry options[1];                         // option_count entries: use option_at()
};
static_assert(sizeof(control_block) == 128, "control_block is part of the segment layout");
// Entry i of the control block's options (the array runs past its declared length).
inline option_entry* option_at(control_block* c, unsigned i) noexcept {
  return detail::object_at<option_entry>(reinterpret_cast<unsigned char*>(c) +
                                         offsetof(control_block, options)) + i;
}

// At offset 0.
struct segment_header {
  char magic[8];                  // kMagic
  std::uint32_t version;          // kVersion
  std::uint32_t header_size;      // sizeof(segment_header)
  std::uint64_t segment_size;     // bytes of the whole segment (the file size)
  std::int32_t pid;
  std::uint32_t class_count;      // kClassCount
  std::uint32_t counter_count;    // kCounterCount
  std::uint32_t slot_count;       // slots, the last of which is the overflow slot
  std::uint32_t slot_size;        // bytes per slot (slot_header, counters, then private data)
  std::uint32_t reserved0;
  std::uint64_t class_sizes_offset;  // uint64_t[class_count]: block size (0 for class 0)
  std::uint64_t control_offset;      // control_block
  std::uint64_t exited_offset;       // class_counters[class_count]: counts of exited threads,
                                     // folded in when a new thread takes over the slot
  std::uint64_t slots_offset;        // slot i at slots_offset + i * slot_size
  std::uint64_t start_ns;            // CLOCK_REALTIME at process start
  char program[kProgramSize];        // NUL-terminated
  // Process-wide, updated with atomic adds by any thread.
  std::atomic<std::uint64_t> segment_bytes;   // 4 MiB segments mapped
  std::atomic<std::uint64_t> large_bytes;     // large mappings in use
  std::atomic<std::uint64_t> cached_bytes;    // kept for reuse (large cache, segment cache)
  std::atomic<std::uint64_t> committed_bytes; // small-block spans in use or not yet purged
                                              // (add large_bytes and cached_bytes for all)
  std::atomic<std::uint64_t> mmap_calls, munmap_calls, madvise_calls;
  std::atomic<std::uint64_t> purges;          // purge passes that returned memory to the OS
  std::atomic<std::uint64_t> slots_used;      // slots ever taken (high-water mark)
  std::atomic<std::uint64_t> overflow_threads;  // threads that found no free slot
  std::uint64_t matrix_offset;  // uint64_t[slot_count][slot_count]: the cross-thread free matrix
  std::uint64_t class_units_offset;  // uint64_t[class_count]: 64 KiB units of a span of each
                                     // class (0 for class 0); 0 if a writer does not publish them
  // A new thread taking an exited thread's slot moves the slot's counts into the exited totals:
  // folds_started is bumped before the slot changes hands, folds_done once the counts are moved.
  // A reader that saw them equal before its copy and folds_started unchanged after it read every
  // total whole (0 and 0 from writers before these fields).
  std::atomic<std::uint64_t> folds_started;
  std::atomic<std::uint64_t> folds_done;
  std::uint64_t reserved1[2];
};
static_assert(sizeof(segment_header) == 280, "segment_header is part of the segment layout");

}  // namespace telemetry

namespace detail {

// ------------------------------------------------------------------------------------------------
// Platform: constants, OS memory, locks, diagnostics on fd 2 (no stdio: malloc must not recurse).
// ------------------------------------------------------------------------------------------------

// A segment is 4 MiB, aligned to 4 MiB, so the metadata of any small block is one mask away.
// Its first 64 KiB unit holds the segment header and the page descriptors; the other 63 units
// are handed out as spans of one or more units, each span serving one size class.
constexpr std::size_t kSegmentShift = 22;
constexpr std::size_t kSegmentSize = std::size_t(1) << kSegmentShift;
constexpr std::uintptr_t kSegmentMask = kSegmentSize - 1;
constexpr std::size_t kUnitShift = 16;
constexpr std::size_t kUnitSize = std::size_t(1) << kUnitShift;
constexpr unsigned kUnits = kSegmentSize / kUnitSize;  // 64: one bit each in a uint64_t
constexpr std::size_t kOsPage = 4096;
constexpr std::size_t kMaxSmall = 256 * 1024;  // larger requests get their own mapping
constexpr unsigned kClasses = 53;              // class 0 is unused; 1..52 cover 16 B..256 KiB
constexpr std::size_t kMinBlocksPerSpan = 2;
constexpr std::size_t kExtendBytes = 16 * 1024;  // lazily carve at most this much of a span at a time
constexpr std::size_t kRecentBytes = 64 * 1024;  // per class: a heap's list of recent frees
constexpr std::size_t kRecentMin = 4, kRecentMax = 128;  // ... but this many blocks at least/most
constexpr std::size_t kRecentMaxSize = 64 * 1024;  // larger classes have no recent-free list
constexpr std::size_t kLargeHeader = 64;         // header in front of every large mapping
constexpr std::uint32_t kMagic = 0x6c69766cu;    // "lvil"
constexpr std::uint32_t kKindSegment = 1, kKindLarge = 2;
constexpr std::uint32_t kKindLargeFreed = 3;  // a large block's header from its free to its reuse
constexpr unsigned kOutboxSlots = 8;
constexpr unsigned kLargeCacheSlots = 32;

struct spinlock {
  std::atomic<int> word{0};
  void lock() noexcept {
    while (word.exchange(1, std::memory_order_acquire) != 0) {
      while (word.load(std::memory_order_relaxed) != 0) sched_yield();
    }
  }
  bool try_lock() noexcept {
    return word.load(std::memory_order_relaxed) == 0 &&
           word.exchange(1, std::memory_order_acquire) == 0;
  }
  void unlock() noexcept { word.store(0, std::memory_order_release); }
};

struct lock_guard {
  spinlock& l;
  explicit lock_guard(spinlock& s) noexcept : l(s) { l.lock(); }
  ~lock_guard() { l.unlock(); }
  lock_guard(const lock_guard&) = delete;
  lock_guard& operator=(const lock_guard&) = delete;
};

// Counters written by one thread and read by others: never a locked read-modify-write on the fast
// path. One unlocked `add` to memory: a load and an aligned 8-byte store, as a relaxed load and
// store would be, which readers see whole. Compilers do not fuse an atomic load and store into it
// (a load, an add and a store through a register, and a lea for the address); the fast path at
// 64 B to 1 KiB ran 1.014-1.031x faster in a full run. Under TSan the C++ atomics, which it sees.
LIVEALLOC_ALWAYS_INLINE void bump(std::atomic<std::uint64_t>& c, std::uint64_t d = 1) noexcept {
#ifndef LIVEALLOC_TSAN
  asm("addq %1, %0" : "+m"(c) : "er"(d));
#else
  c.store(c.load(std::memory_order_relaxed) + d, std::memory_order_relaxed);
#endif
}
LIVEALLOC_ALWAYS_INLINE void unbump(std::atomic<std::uint64_t>& c, std::uint64_t d = 1) noexcept {
#ifndef LIVEALLOC_TSAN
  asm("subq %1, %0" : "+m"(c) : "er"(d));
#else
  c.store(c.load(std::memory_order_relaxed) - d, std::memory_order_relaxed);
#endif
}
LIVEALLOC_ALWAYS_INLINE void add(std::atomic<std::size_t>& c, std::size_t d) noexcept {
  c.fetch_add(d, std::memory_order_relaxed);
}
LIVEALLOC_ALWAYS_INLINE void sub(std::atomic<std::size_t>& c, std::size_t d) noexcept {
  c.fetch_sub(d, std::memory_order_relaxed);
}

// A message on stderr built without stdio or malloc.
struct message {
  char buf[512];
  std::size_t len = 0;
  message& put(char c) noexcept {
    if (len < sizeof(buf) - 1) buf[len++] = c;
    return *this;
  }
  message& operator<<(const char* s) noexcept {
    while (*s) put(*s++);
    return *this;
  }
  // The environment variable of an option: LIVEALLOC_ and the name in upper case.
  message& env_name(const char* option_name) noexcept {
    *this << "LIVEALLOC_";
    for (; *option_name; ++option_name)
      put(*option_name >= 'a' && *option_name <= 'z' ? static_cast<char>(*option_name - 'a' + 'A')
                                                     : *option_name);
    return *this;
  }
  message& operator<<(long long v) noexcept {
    char tmp[24];
    int n = 0;
    const unsigned long long m = static_cast<unsigned long long>(v);  // two's complement
    unsigned long long u = v < 0 ? 0ull - m : m;
    do tmp[n++] = static_cast<char>('0' + u % 10); while ((u /= 10) != 0);
    if (v < 0 && len < sizeof(buf) - 1) buf[len++] = '-';
    while (n > 0 && len < sizeof(buf) - 1) buf[len++] = tmp[--n];
    return *this;
  }
  message& hex(std::uintptr_t v) noexcept {
    *this << "0x";
    char tmp[16];
    int n = 0;
    do tmp[n++] = "0123456789abcdef"[v & 15]; while ((v >>= 4) != 0);
    while (n > 0 && len < sizeof(buf) - 1) buf[len++] = tmp[--n];
    return *this;
  }
  void print() noexcept {
    if (len == 0 || buf[len - 1] != '\n') buf[len++] = '\n';
    std::size_t off = 0;
    while (off < len) {
      ssize_t w = ::write(2, buf + off, len - off);
      if (w <= 0) break;
      off += static_cast<std::size_t>(w);
    }
  }
};

[[noreturn]] LIVEALLOC_NOINLINE inline void fatal(const char* what, const void* p) noexcept {
  message m;
  m << "livealloc: " << what;
  if (p) m << " ";
  if (p) m.hex(reinterpret_cast<std::uintptr_t>(p));
  m.print();
  abort();
}

// What a pointer is passed to, for the message that names it when it is not a live block of ours.
enum class pointer_use : unsigned char { free, realloc, usable_size };
inline const char* never_returned(pointer_use u) noexcept {
  return u == pointer_use::free      ? "free of a pointer livealloc never returned:"
         : u == pointer_use::realloc ? "realloc of a pointer livealloc never returned:"
                                     : "malloc_usable_size of a pointer livealloc never returned:";
}
inline const char* already_freed(pointer_use u) noexcept {
  return u == pointer_use::free      ? "double free of"
         : u == pointer_use::realloc ? "realloc of a freed block:"
                                     : "malloc_usable_size of a freed block:";
}

// Every small block's address is a multiple of 16 (every class is, from a 64 KiB-aligned start):
// a pointer that is not was never returned (glibc rejects a misaligned pointer too).
LIVEALLOC_ALWAYS_INLINE bool misaligned(const void* p) noexcept {
  return (reinterpret_cast<std::uintptr_t>(p) & 15) != 0;
}

// A block a list is about to hand out or link that it must not: one linked to itself (`link`,
// the block it links to or the list head it goes on, is the block) was freed twice, a misaligned
// one was never returned. Aborts, yet is not declared [[noreturn]], and GCC may not find out
// (noipa): a fast path that calls a noreturn function aligns the stack for the call on every
// entry, where a tail call to this costs it nothing. (It returns what a malloc would, for the
// tail call.)
#if defined(__clang__)
LIVEALLOC_NOINLINE
#else
__attribute__((noipa))
#endif
inline void* bad_block(const void* b, const void* link) noexcept {
  fatal(b == link ? already_freed(pointer_use::free) : never_returned(pointer_use::free), b);
}
LIVEALLOC_ALWAYS_INLINE bool bad_link(const void* b, const void* link) noexcept {
  return b == link || misaligned(b);
}

// Process-wide counters live in the telemetry segment's header; until the segment exists (or
// when it cannot be created) they live here.
inline telemetry::segment_header g_fallback_header{};
inline telemetry::segment_header* g_proc = &g_fallback_header;

struct heap;
inline void count_os_call(int which) noexcept;  // per-thread counts, defined with the heaps

constexpr bool is_pow2(std::size_t x) { return x != 0 && (x & (x - 1)) == 0; }
constexpr std::size_t round_up(std::size_t x, std::size_t a) { return (x + a - 1) & ~(a - 1); }

// Without MAP_NORESERVE: under the kernel's default overcommit heuristic a request for more than
// the machine could ever give (malloc of 64 TiB) then fails at once with ENOMEM, as with glibc,
// instead of succeeding and taking the process down when it is touched.
// `at` and `flags` (added to MAP_PRIVATE | MAP_ANONYMOUS): for os_map_hinted.
inline void* os_map(std::size_t size, void* at = nullptr, int flags = 0) noexcept {
  add(g_proc->mmap_calls, 1);
  count_os_call(0);
  void* p = mmap(at, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | flags, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}
// Returns physical pages to the OS; the range stays mapped and reads back as zeros.
inline void os_decommit(void* p, std::size_t size) noexcept {
  add(g_proc->madvise_calls, 1);
  count_os_call(2);
  madvise(p, size, MADV_DONTNEED);
}

// Address ranges still mapped that the allocator meant to unmap. The kernel merges adjacent
// mappings, so an unmap that takes part of one splits it, and a split past vm.max_map_count
// (65,530 mappings by default: a process with that many live large blocks, each its own mapping)
// fails with ENOMEM. Such a range gives its memory back (madvise) and is kept here: mapped, owned,
// reading as zeros, for the next mapping the allocator needs (which the OS would refuse just as
// well there), and unmapped again at a trim. A full table keeps nothing more (the range then is
// address space only, no memory).
struct mapped_range {
  std::uint8_t* base;
  std::size_t size;
};
constexpr unsigned kStrandedSlots = 4096;
// A pass of stranded_release stops after this many failed unmaps (where each failing mapping
// tried all 4,096: 0.7 to 2 ms a call at the limit); the next pass goes on from there.
constexpr unsigned kStrandedTries = 64;
struct stranded_ranges {
  spinlock lock;  // a leaf: nothing is taken under it
  std::atomic<unsigned> count{0};
  unsigned cursor = 0;  // where the next stranded_release starts
  mapped_range r[kStrandedSlots] = {};  // (without `= {}` C++17 gives it a startup constructor)
};
inline stranded_ranges g_stranded;

// Joined with the ranges it touches: the ends a mapping's alignment left (os_map_aligned) are
// pieces of less than 4 MiB, which together with their neighbours make ranges a mapping can use.
inline void stranded_put(std::uint8_t* base, std::size_t size) noexcept {
  if (size == 0) return;
  lock_guard guard(g_stranded.lock);
  unsigned n = g_stranded.count.load(std::memory_order_relaxed);
  for (unsigned i = 0; i < n;) {
    const mapped_range m = g_stranded.r[i];
    if (m.base + m.size == base || base + size == m.base) {
      if (m.base < base) base = m.base;
      size += m.size;
      g_stranded.r[i] = g_stranded.r[--n];
    } else {
      ++i;
    }
  }
  if (n < kStrandedSlots) g_stranded.r[n++] = {base, size};
  g_stranded.count.store(n, std::memory_order_relaxed);
}

inline void os_unmap(void* p, std::size_t size) noexcept {
  add(g_proc->munmap_calls, 1);
  count_os_call(1);
  const int saved = errno;  // (free leaves errno alone, as POSIX asks)
  if (LIVEALLOC_LIKELY(munmap(p, size) == 0)) return;
  if (errno == ENOMEM) {
    os_decommit(p, size);
    stranded_put(static_cast<std::uint8_t*>(p), size);
  }
  errno = saved;
}

// A stranded range's part of `size` bytes at a multiple of `align`, or nullptr; what is left of
// the range on either side stays stranded.
inline void* stranded_take(std::size_t size, std::size_t align) noexcept {
  if (g_stranded.count.load(std::memory_order_relaxed) == 0) return nullptr;
  lock_guard guard(g_stranded.lock);
  const unsigned n = g_stranded.count.load(std::memory_order_relaxed);
  for (unsigned i = 0; i < n; ++i) {
    const mapped_range m = g_stranded.r[i];
    const std::uintptr_t b = reinterpret_cast<std::uintptr_t>(m.base);
    const std::uintptr_t a = round_up(b, align);
    if (a - b > m.size || m.size - (a - b) < size) continue;
    const std::size_t back = m.size - (a - b) - size;
    g_stranded.r[i] = g_stranded.r[n - 1];  // (its place, then the two sides: room for both)
    unsigned k = n - 1;
    if (a != b) g_stranded.r[k++] = {m.base, a - b};
    if (back && k < kStrandedSlots) g_stranded.r[k++] = {m.base + (a - b) + size, back};
    g_stranded.count.store(k, std::memory_order_relaxed);
    return reinterpret_cast<void*>(a);
  }
  return nullptr;
}

// Unmaps what the OS lets go now (a trim, or before mapping again), up to kStrandedTries failures
// from where the last pass stopped. True if any did.
inline bool stranded_release() noexcept {
  if (g_stranded.count.load(std::memory_order_relaxed) == 0) return false;
  lock_guard guard(g_stranded.lock);
  unsigned n = g_stranded.count.load(std::memory_order_relaxed);
  const unsigned ranges = n;
  unsigned i = g_stranded.cursor, failed = 0;
  bool any = false;
  for (unsigned tried = 0; tried < ranges && failed < kStrandedTries && n; ++tried) {
    if (i >= n) i = 0;
    if (munmap(g_stranded.r[i].base, g_stranded.r[i].size) == 0) {
      any = true;
      g_stranded.r[i] = g_stranded.r[--n];  // (the last: tried next, at i)
    } else {
      ++failed;
      ++i;
    }
  }
  g_stranded.cursor = i;
  g_stranded.count.store(n, std::memory_order_relaxed);
  return any;
}
inline void os_hugepages(void* p, std::size_t size) noexcept {
  add(g_proc->madvise_calls, 1);
  count_os_call(2);
  madvise(p, size, MADV_HUGEPAGE);
}
// Segments (and other mappings of whole 4 MiB at 4 MiB) are asked for at the next address of a
// region the kernel does not place mappings in by itself (it maps top-down from below the stack,
// near 128 TiB; a program's binary and brk heap sit near 85 TiB), going up: one mmap, where
// mapping size + align and trimming both ends takes three system calls, and consecutive segments
// join into one mapping where each was one of its own (fewer mappings towards vm.max_map_count).
// Not other sizes: each would be a mapping of its own there, where near the limit the old way
// joins it to the last (whose ends then stay: the stranded list). The region's start is random
// (18 bits of 4 MiB steps over its first TiB), as the kernel's own placement is.
// MAP_FIXED_NOREPLACE fails rather than map over anything there (a sanitizer's shadow, the
// program's own fixed mappings): then that call maps the old way, and after 16 such failures in
// a row every call does.
constexpr std::uintptr_t kHintLow = std::uintptr_t(2) << 40;   // 2 TiB
constexpr std::uintptr_t kHintHigh = std::uintptr_t(40) << 40;  // (then around again; below the
// 42.7 TiB where a process with an unlimited stack has the kernel map bottom-up)
constexpr std::size_t kHintMaxSize = std::size_t(1) << 30;  // (larger: the old way)
struct map_hint {
  std::atomic<std::uintptr_t> next{0};  // 0: not chosen yet; not a multiple of 4 MiB: given up
  std::atomic<unsigned> misses{0};
};
inline map_hint g_hint;

inline std::uintptr_t hint_start() noexcept {
  std::uint64_t x = __builtin_ia32_rdtsc() ^ reinterpret_cast<std::uintptr_t>(&x);
  x *= 0x9e3779b97f4a7c15ull;  // (mixes the low bits up to the high ones, taken below)
  return kHintLow + ((x >> 46) << kSegmentShift);
}

#if defined(LIVEALLOC_NO_MAP_HINT)
inline void* os_map_hinted(std::size_t, std::size_t) noexcept { return nullptr; }
#else
inline void* os_map_hinted(std::size_t size, std::size_t align) noexcept {
  std::uintptr_t at = g_hint.next.load(std::memory_order_relaxed);
  if (at % kSegmentSize != 0 || size % kSegmentSize != 0 || size > kHintMaxSize ||
      align != kSegmentSize)
    return nullptr;
  if (at == 0) g_hint.next.compare_exchange_strong(at, hint_start(), std::memory_order_relaxed);
  at = g_hint.next.fetch_add(size, std::memory_order_relaxed);  // each thread its own range
  if (at % kSegmentSize != 0) return nullptr;  // given up meanwhile
  if (at + size > kHintHigh) {
    std::uintptr_t seen = at + size;
    g_hint.next.compare_exchange_strong(seen, hint_start(), std::memory_order_relaxed);
    return nullptr;
  }
  void* p = os_map(size, reinterpret_cast<void*>(at), MAP_FIXED_NOREPLACE);
  if (p == reinterpret_cast<void*>(at)) {
    g_hint.misses.store(0, std::memory_order_relaxed);
    return p;
  }
  if (p) os_unmap(p, size);  // an old kernel's other place (counted, as its mmap was)
  if ((p || errno == EEXIST) &&
      g_hint.misses.fetch_add(1, std::memory_order_relaxed) + 1 >= 16)
    g_hint.next.store(1, std::memory_order_relaxed);  // given up
  return nullptr;
}
#endif

// `size` and `align` are multiples of the OS page; align is a power of two. At the hint, or maps
// size + align and trims both ends: only virtual space is spent, nothing becomes resident.
inline void* os_map_aligned(std::size_t size, std::size_t align) noexcept {
  if (void* p = os_map_hinted(size, align)) return p;
  std::size_t total;
  if (__builtin_add_overflow(size, align, &total)) return nullptr;
  auto* p = static_cast<std::uint8_t*>(os_map(total));
  if (!p) return nullptr;
  std::uintptr_t a = round_up(reinterpret_cast<std::uintptr_t>(p), align);
  std::size_t front = a - reinterpret_cast<std::uintptr_t>(p);
  if (front) os_unmap(p, front);
  std::size_t back = total - front - size;
  if (back) os_unmap(reinterpret_cast<std::uint8_t*>(a) + size, back);
  return reinterpret_cast<void*>(a);
}

// ------------------------------------------------------------------------------------------------
// Options: the table above, its values, and the environment.
// ------------------------------------------------------------------------------------------------

enum option_id : int {
#define LIVEALLOC_X(name, type, def, lo, hi, live, doc) opt_##name,
  LIVEALLOC_OPTIONS(LIVEALLOC_X)
#undef LIVEALLOC_X
      kOptionCount
};

struct option_info {
  const char* name;
  const char* type;
  long long def, lo, hi;
  bool live;
  const char* doc;
};
inline constexpr option_info kOptionTable[kOptionCount] = {
#define LIVEALLOC_X(name, type, def, lo, hi, live, doc) {#name, #type, def, lo, hi, live, doc},
    LIVEALLOC_OPTIONS(LIVEALLOC_X)
#undef LIVEALLOC_X
};

struct option_values {
  std::atomic<long long> v[kOptionCount] = {
#define LIVEALLOC_X(name, type, def, lo, hi, live, doc) def,
      LIVEALLOC_OPTIONS(LIVEALLOC_X)
#undef LIVEALLOC_X
  };
  bool from_env[kOptionCount] = {};
  std::atomic<std::uint64_t> generation{1};
  std::atomic<std::uint64_t> trim_request{0};
};
inline option_values g_options;

inline long long option(option_id id) noexcept {
  return g_options.v[id].load(std::memory_order_relaxed);
}

inline int find_option(const char* name, std::size_t len) noexcept {
  for (int i = 0; i < kOptionCount; ++i) {
    const char* o = kOptionTable[i].name;
    std::size_t j = 0;
    for (; j < len && o[j]; ++j) {
      char c = name[j];
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      if (c != o[j]) break;
    }
    if (j == len && o[j] == 0) return i;
  }
  return -1;
}

// A whole number, as `memlive tune` and POST /api/options take it: an optional sign, then digits
// ("8", "08", "+8", "-3"), optionally with a fraction and an exponent that leave it whole ("8.0",
// "1e3", "2.5E2"), decided on the digits, never through a double. At most 32 characters.
// 1: *out holds it; 0: not a number; -1: a whole number outside [-2^62, 2^62]; -2: not whole.
inline int parse_number(const char* s, long long* out) noexcept {
  if (strlen(s) > 32) return 0;
  const bool neg = *s == '-';
  if (*s == '-' || *s == '+') ++s;
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  if (!digit(*s)) return 0;
  char d[32];  // the significant digits, no leading zeros: the value is d x 10^exp
  int nd = 0;
  long long exp = 0;
  for (; digit(*s); ++s)
    if (nd || *s != '0') d[nd++] = *s;
  if (*s == '.') {
    if (!digit(*++s)) return 0;  // "8." and "8.e3"
    for (; digit(*s); ++s, --exp)
      if (nd || *s != '0') d[nd++] = *s;
  }
  if (*s == 'e' || *s == 'E') {
    const bool down = *++s == '-';
    if (*s == '-' || *s == '+') ++s;
    if (!digit(*s)) return 0;
    long long e = 0;
    for (; digit(*s); ++s)  // past 100000: beyond any number of digits 32 characters hold
      if (e < 100000) e = e * 10 + (*s - '0');
    exp += down ? -e : e;
  }
  if (*s) return 0;
  for (; nd && d[nd - 1] == '0'; --nd) ++exp;  // "8.0" is 8, "80" is 8 x 10^1
  if (nd == 0) {
    *out = 0;
    return 1;
  }
  if (exp < 0) return -2;
  if (nd + exp > 19) return -1;
  unsigned long long v = 0;
  for (long long i = 0; i < nd + exp; ++i) {
    if (v > (1ull << 62) / 10) return -1;
    v = v * 10 + static_cast<unsigned>(i < nd ? d[i] - '0' : 0);
  }
  if (v > (1ull << 62)) return -1;
  *out = neg ? -static_cast<long long>(v) : static_cast<long long>(v);
  return 1;
}

// A whole number as parse_number takes it, or for bool options also true/false/yes/no/on/off.
// False on any other text.
inline bool parse_value(const char* s, bool is_bool, long long* out) noexcept {
  if (is_bool) {
    const char* yes[] = {"true", "yes", "on"};
    const char* no[] = {"false", "no", "off"};
    for (const char* w : yes)
      if (strcasecmp(s, w) == 0) {
        *out = 1;
        return true;
      }
    for (const char* w : no)
      if (strcasecmp(s, w) == 0) {
        *out = 0;
        return true;
      }
  }
  return parse_number(s, out) == 1;
}

// The option whose name is within two edits of `name` (a letter added, dropped, changed, or two
// swapped; any case), the closest; -1 when none is.
inline int near_option(const char* name, std::size_t len) noexcept {
  if (len > 40) return -1;
  auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
  int best = -1, best_d = 3;
  for (int k = 0; k < kOptionCount; ++k) {
    const char* o = kOptionTable[k].name;
    const std::size_t m = strlen(o);
    if (m > 40) continue;
    int row[3][41];  // rows i-2, i-1 and i of the distance table, by i % 3
    for (std::size_t j = 0; j <= m; ++j) row[0][j] = static_cast<int>(j);
    for (std::size_t i = 1; i <= len; ++i) {
      int* cur = row[i % 3];
      const int* up = row[(i - 1) % 3];
      const int* up2 = row[(i + 1) % 3];
      cur[0] = static_cast<int>(i);
      for (std::size_t j = 1; j <= m; ++j) {
        const bool same = lower(name[i - 1]) == o[j - 1];
        int d = std::min(std::min(up[j], cur[j - 1]) + 1, up[j - 1] + (same ? 0 : 1));
        if (i > 1 && j > 1 && lower(name[i - 1]) == o[j - 2] && lower(name[i - 2]) == o[j - 1])
          d = std::min(d, up2[j - 2] + 1);
        cur[j] = d;
      }
    }
    if (row[len % 3][m] < best_d) {
      best_d = row[len % 3][m];
      best = k;
    }
  }
  return best;
}

// Handles one "LIVEALLOC_NAME=value" entry of the environment.
inline void apply_env_entry(const char* entry) noexcept {
  const char* name = entry + 10;  // past "LIVEALLOC_"
  const char* eq = strchr(name, '=');
  if (!eq) return;
  int id = find_option(name, static_cast<std::size_t>(eq - name));
  if (id < 0) {
    message m;
    std::size_t n = static_cast<std::size_t>(eq - entry);
    m << "livealloc: unknown variable ";
    for (std::size_t i = 0; i < n && i < 64; ++i) m.put(entry[i]);
    m << " ignored";
    const int near = near_option(name, static_cast<std::size_t>(eq - name));
    if (near >= 0) {
      m << "; did you mean ";
      m.env_name(kOptionTable[near].name) << "?";
    }
    m.print();
    return;
  }
  const option_info& o = kOptionTable[id];
  const char* value = eq + 1;
  long long v = 0;
  const char* problem = nullptr;
  if (strlen(value) > 32)
    problem = "is too long";
  else if (!parse_value(value, o.type[0] == 'b', &v)) {
    const int n = parse_number(value, &v);
    problem = n == -1                ? "is out of range"  // a number too long for 64 bits
              : n == -2              ? "is not a whole number"
              : o.type[0] == 'b' ? "is not 0/1, true/false, yes/no or on/off"
                                 : "is not a number";
  } else if (v < o.lo || v > o.hi)
    problem = "is out of range";
  message m;
  if (problem) {
    m << "livealloc: ";
    m.env_name(o.name) << "='";
    for (int i = 0; value[i] && i < 32; ++i) m.put(value[i]);
    if (strlen(value) > 32) m << "...";
    m << "' " << problem << " [" << o.lo << ", " << o.hi << "]; using " << o.def;
    m.print();
    return;
  }
  g_options.v[id].store(v, std::memory_order_relaxed);
  g_options.from_env[id] = true;
}

// Reads LIVEALLOC_* from the environment. `environ` is set before the first malloc of a program;
// /proc/self/environ is the fallback should a loader ever call us earlier.
inline void read_environment() noexcept {
  if (::environ) {  // declared by <unistd.h> under _GNU_SOURCE
    for (char** e = ::environ; *e; ++e)
      if (strncmp(*e, "LIVEALLOC_", 10) == 0) apply_env_entry(*e);
    return;
  }
  static char buf[32768];
  int fd = open("/proc/self/environ", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  std::size_t len = 0;
  ssize_t r;
  while (len < sizeof(buf) - 1 && (r = read(fd, buf + len, sizeof(buf) - 1 - len)) > 0)
    len += static_cast<std::size_t>(r);
  close(fd);
  buf[len] = 0;
  for (std::size_t i = 0; i < len; i += strlen(buf + i) + 1)
    if (strncmp(buf + i, "LIVEALLOC_", 10) == 0) apply_env_entry(buf + i);
}

inline void print_options() noexcept {
  for (int i = 0; i < kOptionCount; ++i) {
    message m;
    m << "livealloc: " << kOptionTable[i].name << " = " << option(static_cast<option_id>(i))
      << (g_options.from_env[i] ? " (from " : "");
    if (g_options.from_env[i])
      m.env_name(kOptionTable[i].name) << ")";
    else
      m << " (default)";
    m.print();
  }
}

// ------------------------------------------------------------------------------------------------
// Core: size classes. About four classes per doubling: 16..128 in steps of 16, then 160, 192,
// 224, 256, 320, ... up to 256 KiB. Rounding wastes at most 25% (20% above 128 bytes).
// ------------------------------------------------------------------------------------------------

constexpr unsigned class_of(std::size_t size) {
  if (size <= 128) return size <= 16 ? 1u : static_cast<unsigned>((size + 15) >> 4);
  std::size_t s = size - 1;
  unsigned w = 63u - static_cast<unsigned>(__builtin_clzll(s));
  return 9u + (w - 7u) * 4u + static_cast<unsigned>((s >> (w - 2)) & 3u);
}
constexpr std::size_t class_size(unsigned c) {
  if (c <= 8) return c * 16u;
  unsigned k = c - 9u, w = 7u + k / 4u;
  return std::size_t(5u + k % 4u) << (w - 2u);
}
// Units per span: at least kMinBlocksPerSpan blocks (classes above 16 KiB hold 2 or 3). Two: a
// thread holds a span while one block of it is in use or on its recent-free list, so 16 workers
// that built and freed 8 MiB each (benchmarks/ pool_idle) held 158 MiB after their burst with 8
// blocks to a span, 127 MiB with 4, 106 MiB with 2. With 2, mixed sizes ran 4-5% slower until
// the recent-free lists grew where frees overflow them (recent_grow); now level.
constexpr unsigned class_units(unsigned c) {
  std::size_t u = (kMinBlocksPerSpan * class_size(c) + kUnitSize - 1) / kUnitSize;
  return u == 0 ? 1u : static_cast<unsigned>(u);
}
static_assert(class_of(kMaxSmall) == kClasses - 1 && class_size(kClasses - 1) == kMaxSmall);
static_assert(class_units(kClasses - 1) < kUnits);
// The most blocks one span holds (the 16-byte class); bounds the checked-mode bitmaps.
constexpr std::size_t kMaxCapacity = kUnitSize / 16;
constexpr bool capacities_bounded() {
  for (unsigned c = 1; c < kClasses; ++c)
    if ((std::size_t(class_units(c)) << kUnitShift) / class_size(c) > kMaxCapacity) return false;
  return true;
}
static_assert(capacities_bounded());
// Blocks a heap's recent-free list of class `c` may hold: kRecentBytes of them, within
// kRecentMin..kRecentMax; none above kRecentMaxSize, where touching the block costs far more
// than a trip through its page and four blocks would pin a megabyte.
constexpr std::uint16_t recent_limit(unsigned c) {
  if (class_size(c) > kRecentMaxSize) return 0;
  std::size_t n = kRecentBytes / class_size(c);
  return static_cast<std::uint16_t>(n < kRecentMin ? kRecentMin : n > kRecentMax ? kRecentMax : n);
}
// The most a class's limit grows to (recent_grow): 8 times the start, within kRecentGrowMax
// blocks. Classes that start at kRecentGrowMax or more (up to 2 KiB) do not grow: they were
// rarely refilled, and all-to-all frees, which refill them often, ran 3% slower when they did.
constexpr std::size_t kRecentGrowMax = 32;
constexpr std::uint16_t recent_cap(unsigned c) {
  const std::size_t start = recent_limit(c), n = start * 8;
  return static_cast<std::uint16_t>(start >= kRecentGrowMax ? start
                                    : n > kRecentGrowMax    ? kRecentGrowMax
                                                            : n);
}

// Remote frees of classes up to 4 KiB stay on the freeing thread's foreign list (see
// free_remote); larger blocks go home, where they do not pin their owner's pages.
constexpr unsigned kForeignMaxClass = class_of(4096);

// The class of any small size is one table load, as in tcmalloc: one entry per 16 bytes up to
// 1 KiB (entries 0..64), then one per 128 bytes (every class boundary above 1 KiB is a multiple
// of 128): 1025..1152 bytes is step 9 and takes entry 65. Computing the class instead (bsr and
// shifts) on the way to the list cost the 16 KiB fast path 1.10x and mixed sizes 1.04x.
constexpr std::size_t class_index_above_1k(std::size_t size) {
  return ((size + 127) >> 7) + (65 - 9);
}
constexpr std::size_t class_index(std::size_t size) {
  return size <= 1024 ? (size + 15) >> 4 : class_index_above_1k(size);
}
// The table sits in a 4 KiB page of its own, 1 KiB from either end. A load can wait for an
// earlier store whose address has the same low 12 bits (4K aliasing), and a free writes the first
// word of its block, which for classes from 4 KiB up is the start of a page: with the 64 KiB entry
// at page offset 0x000, 0x008 or 0x018, `fastpath size=65536` took 1.12-1.16x the time it took
// with it at 0x040, 0x238, 0x800 or 0xff8 (9 runs each). Where the linker put the table moved
// with unrelated read-only data: a string added elsewhere (`661553b`) put it at 0x018.
struct alignas(4096) class_table {
  std::uint8_t pad[1024] = {};
  std::uint8_t v[class_index(kMaxSmall) + 1] = {};
  constexpr class_table() {
    for (std::size_t i = 0; i <= 64; ++i) v[i] = static_cast<std::uint8_t>(class_of(i * 16));
    for (std::size_t j = 9; j <= kMaxSmall / 128; ++j)
      v[class_index(j * 128)] = static_cast<std::uint8_t>(class_of(j * 128));
  }
};
inline constexpr class_table kClassTable{};
static_assert(class_index(1025) == 65 && class_index(1024) == 64);
static_assert(offsetof(class_table, v) == 1024 && sizeof(class_table) == 4096);

LIVEALLOC_ALWAYS_INLINE unsigned size_class(std::size_t size) noexcept {
  return kClassTable.v[class_index(size)];
}

// ------------------------------------------------------------------------------------------------
// Core: pages, segments, heaps.
// ------------------------------------------------------------------------------------------------

struct heap;
struct block {
  block* next;
  block* ahead;  // in chains of remote frees only: the block kPrefetchAhead further on (or null)
};
static_assert(sizeof(block) <= 16, "the smallest class must hold a block");
// Draining remote frees is a pointer chase over lines another core just wrote; each block also
// names the one this far ahead, so the owner keeps that many misses in flight.
constexpr unsigned kPrefetchAhead = 4;

// A page describes a span: one or more 64 KiB units of a segment that serve one size class.
// Invariant (owner thread, outside a call): used + length(free) + length(local_free) == reserved,
// where blocks freed by other threads count as used until the owner drains its inbox, and so do
// blocks in the owner's recent-free list (heap::recent).
// The owner allocates from `free` and frees into `local_free` (once its recent-free list of the
// class is full); the lists swap in the slow path. The fast paths touch the first 48 bytes; the
// descriptor is one cache line.
struct alignas(64) page {
  block* free = nullptr;        // blocks the fast path hands out
  block* local_free = nullptr;  // blocks the owner freed since the last swap
  std::uint16_t used = 0;       // blocks handed out and not yet returned to this page
  std::uint16_t reserved = 0;   // blocks carved so far (spans are carved lazily: pay as you go)
  std::uint16_t capacity = 0;   // blocks that fit in the span (at most kMaxCapacity)
  std::uint8_t cls = 0;
  std::uint8_t in_full = 0;     // unlinked from its class queue: no free block was left
  std::uint32_t block_size = 0;
  std::uint8_t kept_empty = 0;  // used == 0, counted in heap::kept_empty, kept for reuse
  std::uint8_t units = 0;       // span length in units; 0 on a free unit or a continuation
  std::uint16_t unused = 0;
  heap* owner = nullptr;
  page* span = nullptr;         // the span's first descriptor (itself for the first)
  page* next = nullptr;         // class queue (pages with free blocks, current page first)
  page* prev = nullptr;
#if LIVEALLOC_CHECKED
  std::atomic<std::uint64_t>* live_bits = nullptr;  // one bit per block: handed out
#endif
};
#if !LIVEALLOC_CHECKED
static_assert(sizeof(page) == 64, "a page descriptor is one cache line");
#endif

// The entries a free reads from a segment header (unit_info) start kFreeLineOffset bytes in,
// not at offset 0: blocks whose size is a multiple of 4 KiB all start at offsets that share the
// L1 and L2 cache set of offset 0, so a ring of 16 KiB blocks kept evicting a header line there
// and every free missed on it (16 and 64 KiB ring frees ran 1.25x and 1.23x faster once it
// moved).
constexpr std::size_t kFreeLineOffset = 29 * 64;

// What a free reads of a block's 64 KiB unit: the heap whose span covers it and the span's class
// (nullptr and 0 on a free unit), from a line that changes only when spans come and go, never
// from the page descriptor its owner writes on every allocation, so a cross-thread free does not
// pull the owner's hot line over. Spans of different heaps share segments: the page heap is one
// for the process (see page_heap), so a span one thread released serves the next that needs one.
struct unit_info {
  heap* owner;
  std::uint32_t cls;
  std::uint32_t unused;
};

struct segment {
  std::uint32_t magic;
  std::uint32_t kind;            // kKindSegment
  segment* next;
  segment* prev;
  std::uint64_t free_units;      // bit i set: unit i is free (unit 0 holds this header)
  std::uint64_t dirty_units;     // free units whose memory has not gone back to the OS yet
  std::uint64_t dirty_old;       // of those, the ones already dirty at the last purge check
  std::uint32_t used_units;
  std::uint8_t unused[kFreeLineOffset - 52];
  unit_info units[kUnits];       // at kFreeLineOffset
  page pages[kUnits];
};
static_assert(offsetof(segment, unused) == 52 && offsetof(segment, units) == kFreeLineOffset);
static_assert(sizeof(unit_info) == 16, "four units' entries to a cache line; indexing is a shift");
static_assert(sizeof(segment) <= kUnitSize, "the segment header must fit its first unit");
constexpr std::uint64_t kAllDataUnits = ~std::uint64_t(1);

inline std::uint8_t* page_start(const page* pg) noexcept {
  auto base = reinterpret_cast<std::uintptr_t>(pg) & ~kSegmentMask;
  auto idx = static_cast<std::size_t>(pg - reinterpret_cast<const segment*>(base)->pages);
  return reinterpret_cast<std::uint8_t*>(base + (idx << kUnitShift));
}
inline std::uint64_t unit_mask(unsigned idx, unsigned n) noexcept {
  return ((n == 64 ? 0 : (std::uint64_t(1) << n)) - 1) << idx;
}

// Milliseconds from a coarse monotonic clock (vDSO, a few ns): good enough for purge delays.
inline std::uint64_t now_ms() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000u + static_cast<std::uint64_t>(ts.tv_nsec) / 1000000u;
}

// In front of every large mapping, at its 4 MiB-aligned base; for alignments of 4 MiB and more
// the user pointer is itself 4 MiB-aligned and the header sits right before it.
struct large_header {
  std::uint32_t magic;
  std::uint32_t kind;  // kKindLarge; kKindLargeFreed once freed (the mapping may stay, cached)
  std::uint8_t* base;  // the mapping
  std::size_t map_size;
  std::size_t usable;  // bytes from the user pointer to the end of the mapping
  std::size_t requested;  // the largest size asked for since the mapping last changed
  heap* owner;         // the heap that counted the allocation (telemetry, class 0)
  std::uint64_t area;  // the kernel mapping it lies in (large_cache_entry::area)
#if LIVEALLOC_CHECKED
  std::atomic<std::uint32_t> live;
#endif
};
static_assert(sizeof(large_header) <= kLargeHeader);

using telemetry::class_counters;
using namespace telemetry;  // the counter names: c_allocs, c_frees, ...

struct page_queue {
  page* first = nullptr;
  page* last = nullptr;
};

// A heap's recent-free lists of one class (see heap::recent): blocks of its own pages, and
// blocks of other heaps' pages that this thread freed and keeps to reuse (free_remote).
struct alignas(32) recent_list {  // (32 bytes: indexing is a shift)
  block* head = nullptr;
  block* foreign = nullptr;
  std::uint32_t room = 0;  // blocks the two lists may still take (always 0 in the empty heap)
  // room + blocks held: 0 (closed) until the class's first slow path in this heap, then
  // recent_limit(class), grown by recent_grow. A thread that only frees a class (a consumer)
  // keeps none of the blocks it frees for other heaps: they go home at once, in batches.
  std::uint16_t limit = 0;
  bool overflowed = false;  // a free found no room since the class's last refill
  std::uint8_t streak = 0;  // refills in a row that found `overflowed`
};

// Blocks this thread freed for one other heap, waiting to go back in one atomic push.
struct outbox_slot {
  heap* dest = nullptr;
  block* head = nullptr;
  block* tail = nullptr;
  std::uint32_t count = 0;
  block* recent[kPrefetchAhead] = {};  // the last blocks pushed, for block::ahead
};

// kHeapForeign: in a fork child, the heaps of the parent's other threads; never adopted or
// collected, since the child's copy of them may be torn.
enum heap_state : int { kHeapNew = 0, kHeapOwned = 1, kHeapAbandoned = 2, kHeapClaimed = 3,
                        kHeapForeign = 4 };

// One per thread. Everything but `inbox` and `state` is touched only by the owning thread (or
// by whoever holds kHeapClaimed on an abandoned heap). Its pages are spans of the process's
// segments (page_heap). Heaps are never unmapped: the heap of an exited thread goes to a pool and
// the next new thread adopts it with its pages.
struct heap {
  // The public part, at the start of the heap's telemetry slot (see telemetry::slot_header).
  telemetry::slot_header pub = {};
  class_counters stats[kClasses] = {};
  // Private from here on.
  page* direct[kClasses] = {};  // the page the fast path allocates from; never null
  // Blocks of this heap's pages that the owner freed lately, most recent first, up to
  // recent_limit(class): free pushes, malloc pops before it looks at the current page. The next
  // malloc reuses a block while it is hot in cache, whatever page it is from, so a thread that
  // frees in another order than it allocated (queues, rings, mixed sizes) stays on the fast path
  // and off its pages. Their pages still count them used; the heap's counters count them freed.
  recent_list recent[kClasses] = {};
  page_queue queues[kClasses] = {};
  std::uint32_t kept_empty[kClasses] = {};
  std::uint64_t last_maintain = 0;  // now_ms() at this thread's previous slow path (purge_step)
  outbox_slot outbox[kOutboxSlots] = {};
  // Blocks of other heaps taken from an idle owner's inbox (take_idle_frees), by class; reused
  // through the foreign lists as their room allows.
  block* reclaimed[kClasses] = {};
  // Taken inboxes not yet sorted into `reclaimed`: the one being sorted, and the others, linked
  // through their first blocks' `ahead` (reclaim_sort).
  block* reclaim_pending = nullptr;
  block* reclaim_chains = nullptr;
  std::uint64_t last_reclaim = 0;  // now_ms() at this thread's last look at the inboxes
  heap* reclaim_next = nullptr;    // where that look stopped (see reclaim_idle_inboxes)
  // MPSC stack of blocks other threads freed into our pages; alone on its line, which their
  // pushes take over.
  alignas(64) std::atomic<block*> inbox{nullptr};
  // now_ms() at the owner's last slow path, beside the inbox it drains there: a heap whose owner
  // has had none for idle_reclaim ms lends its inbox to others (take_idle_frees).
  std::atomic<std::uint64_t> active_ms{0};
  // Read by every thread that keeps a block of ours (free_remote); changes only at exit.
  alignas(64) std::atomic<int> state{kHeapNew};
  bool in_pool = false;
  heap* next_all = nullptr;
  heap* next_pool = nullptr;
  std::uint64_t options_seen = 0;
  std::uint64_t trim_seen = 0;
  std::uint32_t recycle = 2;  // copies of live options, applied in the slow path
  std::uint32_t batch = 32;
  std::uint32_t slot = 0;             // index in the telemetry segment
  // This slot's row of the free matrix (set once, in heap_new), or nullptr: no matrix, or an
  // overflow heap, whose row is shared (see matrix_count).
  std::atomic<std::uint64_t>* matrix_row = nullptr;
  std::uint32_t name_tick = 0;        // slow paths until the thread name is read again
  class_counters* published = nullptr;  // overflow heaps: counts already added to the slot
  constexpr explicit heap(page* empty) noexcept {
    for (auto& d : direct) d = empty;
  }
};

// The state every thread starts in: each class points to an empty page, so the fast path needs
// no null check; the slow path sees this heap and creates (or adopts) a real one. Never written.
inline page g_empty_page{};
inline heap g_empty_heap{&g_empty_page};

// The one initial-exec TLS pointer. Trivial type and constant initializer: no TLS wrapper, no
// __cxa_thread_atexit (which would call calloc).
inline thread_local heap* tls_heap __attribute__((tls_model("initial-exec"))) = &g_empty_heap;
// Set once the thread's key destructor has given its heap up. Other keys' destructors may still
// allocate and free, in the same round or the last one, and glibc frees after the last round (the
// second-level array of a thread that set a key past the first 32, resolver state), when no
// destructor runs again: neither may take a heap for good, which would stay owned by a thread
// that is gone (see allocate_exiting).
inline thread_local bool tls_exited __attribute__((tls_model("initial-exec"))) = false;

inline void count_os_call(int which) noexcept {
  heap* h = tls_heap;
  if (h == &g_empty_heap) return;
  bump(which == 0 ? h->pub.mmap_calls : which == 1 ? h->pub.munmap_calls : h->pub.madvise_calls);
}

// --- the telemetry segment ------------------------------------------------------------------
// Always created at start, as an unnamed file in /dev/shm (O_TMPFILE, 0600): heaps live in its
// slots, so the fast path writes the public counters directly. Enabling profiling only gives the
// file its name; without /dev/shm it is anonymous memory and profiling cannot be enabled.
constexpr std::size_t kClassSizesOffset = 512;
constexpr std::size_t kControlOffset = 1024;
constexpr std::size_t kClassUnitsOffset = 3072;
constexpr std::size_t kExitedOffset = 4096;
constexpr std::size_t kSlotsOffset = 16384;
constexpr std::size_t kSlotBytes = (sizeof(heap) + kOsPage - 1) & ~(kOsPage - 1);
static_assert(kClassSizesOffset + kClasses * sizeof(std::uint64_t) <= kControlOffset);
static_assert(kControlOffset + sizeof(telemetry::control_block) +
                  kOptionCount * sizeof(telemetry::option_entry) <= kClassUnitsOffset);
static_assert(kClassUnitsOffset + kClasses * sizeof(std::uint64_t) <= kExitedOffset);
static_assert(kExitedOffset + kClasses * sizeof(class_counters) <= kSlotsOffset);
constexpr std::size_t kMaxSlots = static_cast<std::size_t>(kOptionTable[opt_telemetry_slots].hi);

struct table_state {
  std::uint8_t* base = nullptr;
  std::size_t size = 0;
  int fd = -1;       // the segment's file while it may still need a name (see table_create)
  dev_t dev = 0;     // that file's identity: a program may close a descriptor it did not open,
  ino_t ino = 0;     // and the number then names one of its own files (see table_fd_ours); kept
                     // once the descriptor is closed, for table_reserve to open it by name
  bool file = false;  // the segment is a file in /dev/shm (else anonymous memory)
  int file_error = 0;  // why it is not (errno of the open, ftruncate, fallocate or mmap)
  std::atomic<bool> slot_warned{false};  // a slot could not be reserved, and we said so
  int fork_fd = -1;  // between fork_prepare and the fork's end: the child's copy of the segment
  void* fork_copy = nullptr;  // the same copy in anonymous memory, when the file could not be made
  std::uint32_t slots = 0;
  std::atomic<std::uint32_t> next_slot{0};
  // The process the segment belongs to. Kept here, not only in the segment's header: a child
  // made without the atfork handlers maps no segment at all (see table_map_shared), and its
  // _exit must still tell that the name is not its own.
  pid_t pid = 0;
  bool lost = false;         // a fork child that got no copy: its heaps at base are gone
  std::uint64_t fork_slots[(kMaxSlots + 63) / 64] = {};  // fork_prepare's scratch: the slots it copies
  // Has its /dev/shm name. Written under `lock`, read by enabled() without it: path is written
  // before it is set (release), and read after it is seen (acquire).
  std::atomic<bool> linked{false};
  dev_t name_dev = 0;        // the file that name was given to: it is removed only while it
  ino_t name_ino = 0;        // still holds that file (see table_unlink_name)
  bool want_linked = false;  // profiling was enabled (a fork child links its own)
  bool atexit_registered = false;
  char path[64] = {};
  telemetry::control_block* control = nullptr;
  std::atomic<std::uint64_t>* matrix = nullptr;  // [freeing slot][owning slot]
  spinlock lock;  // enable/disable and control-block validation
  // The exit removed the name (table_unlink_at_exit): enable() refuses from then on, and a fork
  // child of an exit handler (which inherits the exit, whose unlink has run) names no file.
  std::atomic<bool> exit_unlinked{false};
};

// One more block that heap `from` freed for heap `to` (from is the calling thread's heap).
inline void matrix_count(heap* from, heap* to) noexcept;
inline table_state g_table;
// Folded counters of exited threads; in the segment once it exists.
inline class_counters g_exited_fallback[kClasses] = {};
inline class_counters* g_exited = g_exited_fallback;

inline heap* slot_heap(std::uint32_t i) noexcept {
  return object_at<heap>(g_table.base + kSlotsOffset + std::size_t(i) * kSlotBytes);
}
LIVEALLOC_NOINLINE inline void matrix_count_shared(heap* from, heap* to) noexcept {
  if (!g_table.matrix || !to || !from->published) return;
  g_table.matrix[std::size_t(from->slot) * g_table.slots + to->slot].fetch_add(
      1, std::memory_order_relaxed);  // the overflow row, which every overflow heap writes
}
// The row's address is kept in the heap rather than computed from the slot at every remote free
// (a global's two loads and a multiply in a call of its own): crossthread a2a 0.99x the time.
LIVEALLOC_ALWAYS_INLINE void matrix_count(heap* from, heap* to) noexcept {
  if (LIVEALLOC_LIKELY(from->matrix_row != nullptr && to != nullptr))
    return bump(from->matrix_row[to->slot]);
  matrix_count_shared(from, to);
}

inline std::uint64_t realtime_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000u + static_cast<std::uint64_t>(ts.tv_nsec);
}

struct large_cache_entry {
  std::uint8_t* base;
  std::size_t size;
  std::uint64_t expires;  // now_ms() after which it is unmapped
  // Which kernel mapping (one mmap, or one mremap that moved pages) the bytes lie in. Pieces of
  // one are merged again when they meet in the cache; pieces of two neighbouring mappings are
  // not, because mremap cannot grow or move a range that spans two kernel areas.
  std::uint64_t area;
};

// The process's 4 MiB segments and their units. Every heap takes its spans here and gives them
// back here, so the memory one thread released (a pool worker after its burst) serves the next
// thread that needs a span while it is still resident, as tcmalloc's page heap does. Taken only
// in slow paths that take or release a span, or purge.
struct page_heap {
  alignas(64) spinlock lock;
  segment* segments = nullptr;  // those with a free unit first (see segment_unlink)
  segment* segments_tail = nullptr;
  std::uint64_t last_release = 0;  // now_ms() of the latest span released dirty
  // A purge from a slow path gives back at most purge_step() units, so no malloc waits for more
  // than that much madvise; the pass goes on at the next slow path, from the segment it stopped at.
  segment* purge_cursor = nullptr;  // where the pass in progress stopped (nullptr: none)
  bool purge_all = false;           // that pass purges every dirty unit (a trim asked for it)
  bool purge_left = false;          // it left a dirty unit behind in a segment it passed
  std::uint64_t dirty_units = 0;    // dirty free units, in every segment
  // now_ms() after which dirty free units go back to the OS (0: none dirty); read without the
  // lock by every slow path.
  alignas(64) std::atomic<std::uint64_t> purge_deadline{0};
};

struct global_state {
  std::atomic<int> init{0};  // 0 not started, 1 in progress, 2 done
  pthread_key_t key = 0;
  spinlock meta_lock;  // metadata arena and the list of all heaps
  std::uint8_t* meta_cur = nullptr;
  std::uint8_t* meta_end = nullptr;
  std::atomic<heap*> all_heaps{nullptr};
  std::atomic<std::size_t> heap_count{0};
  std::atomic<std::size_t> heaps_owned{0};
  spinlock pool_lock;
  heap* pool = nullptr;
  spinlock segment_lock;
  segment* segment_cache = nullptr;
  std::size_t segment_cache_count = 0;
  spinlock large_lock;
  large_cache_entry large_cache[kLargeCacheSlots] = {};
  unsigned large_cache_count = 0;
  std::atomic<std::uint64_t> large_cache_deadline{0};  // earliest expiry; 0 when empty
  std::atomic<std::uint64_t> caches_generation{0};     // options generation caches_apply_options saw
  std::atomic<std::size_t> large_count{0};
  // Usable bytes of every large block handed out, ever (get_stats' allocated_bytes for class 0,
  // whose blocks have no one size: the counters in the segment keep only their number).
  std::atomic<std::size_t> large_allocated_bytes{0};
  std::atomic<std::uint64_t> large_areas{0};  // the last large_cache_entry::area handed out
  page_heap pages;
  // The background purge thread (option background_purge): kBgNone, kBgStarting or kBgRunning.
  std::atomic<int> bg_state{0};
  std::atomic<bool> bg_allowed{false};     // the program's constructors have begun (bg_allow)
  std::atomic<std::uint64_t> bg_retry{0};  // now_ms() before which a failed start is not retried
  std::atomic<std::uint32_t> bg_wake{0};   // its futex word: bumped when a deadline appears
  // Counts folded in from heaps are read from the heaps themselves; these are the rest.
#if LIVEALLOC_CHECKED
  std::atomic<std::atomic<std::uint8_t>*> chunk_map{nullptr};  // per 4 MiB chunk: 1 segment, 2 large
  // Page bitmaps of unmapped segments, each linked to the next by its first word (meta_lock).
  std::atomic<std::uint64_t>* free_bitmaps = nullptr;
#endif
};
inline global_state g;

// Metadata (heaps, checked-mode bitmaps) comes from a bump arena that is never returned: heaps
// are reused, so it only grows with the peak number of threads, and the bitmaps of an unmapped
// segment's pages serve the next segment's (bitmap_take), so they grow with the peak number of
// segments.
inline void* meta_alloc(std::size_t size) noexcept {
  size = round_up(size, 64);
  lock_guard guard(g.meta_lock);
  if (static_cast<std::size_t>(g.meta_end - g.meta_cur) < size) {
    std::size_t chunk = size > 256 * 1024 ? round_up(size, kOsPage) : 256 * 1024;
    auto* p = static_cast<std::uint8_t*>(os_map(chunk));
    if (!p) return nullptr;
    g.meta_cur = p;
    g.meta_end = p + chunk;
  }
  void* r = g.meta_cur;
  g.meta_cur += size;
  return r;
}

#if LIVEALLOC_CHECKED
inline std::atomic<std::uint8_t>* chunk_map() noexcept {
  // 2^47 bytes of user address space / 4 MiB = 2^25 chunks; mapped lazily, touched sparsely.
  std::atomic<std::uint8_t>* m = g.chunk_map.load(std::memory_order_acquire);
  if (!m) {
    lock_guard guard(g.meta_lock);
    m = g.chunk_map.load(std::memory_order_relaxed);
    if (!m) {
      m = static_cast<std::atomic<std::uint8_t>*>(os_map(1u << 25));
      if (!m) fatal("cannot map the checked-mode chunk map", nullptr);
      g.chunk_map.store(m, std::memory_order_release);
    }
  }
  return m;
}
inline void chunk_mark(const void* p, std::size_t size, std::uint8_t kind) noexcept {
  auto a = reinterpret_cast<std::uintptr_t>(p) >> kSegmentShift;
  auto e = (reinterpret_cast<std::uintptr_t>(p) + size - 1) >> kSegmentShift;
  for (; a <= e; ++a) chunk_map()[a].store(kind, std::memory_order_relaxed);
}
inline std::uint8_t chunk_kind(const void* p) noexcept {
  auto a = reinterpret_cast<std::uintptr_t>(p) >> kSegmentShift;
  if (a >= (1u << 25)) return 0;
  return chunk_map()[a].load(std::memory_order_relaxed);
}
#endif

// --- page queues ----------------------------------------------------------------------------

inline void queue_set_direct(heap* h, unsigned cls) noexcept {
  page* f = h->queues[cls].first;
  h->direct[cls] = f ? f : &g_empty_page;
}
inline void queue_remove(heap* h, page* pg) noexcept {
  page_queue& q = h->queues[pg->cls];
  (pg->prev ? pg->prev->next : q.first) = pg->next;
  (pg->next ? pg->next->prev : q.last) = pg->prev;
  pg->next = pg->prev = nullptr;
  queue_set_direct(h, pg->cls);
}
inline void queue_push_front(heap* h, page* pg) noexcept {
  page_queue& q = h->queues[pg->cls];
  pg->prev = nullptr;
  pg->next = q.first;
  (q.first ? q.first->prev : q.last) = pg;
  q.first = pg;
  h->direct[pg->cls] = pg;
}
inline void queue_push_back(heap* h, page* pg) noexcept {
  page_queue& q = h->queues[pg->cls];
  pg->next = nullptr;
  pg->prev = q.last;
  (q.last ? q.last->next : q.first) = pg;
  q.last = pg;
  queue_set_direct(h, pg->cls);
}

// --- segments and spans -----------------------------------------------------------------------

// First index of `n` consecutive set bits in `bits`, or -1.
inline int find_run(std::uint64_t bits, unsigned n) noexcept {
  std::uint64_t m = bits;
  for (unsigned k = 1; k < n && m; ++k) m &= bits >> k;
  return m ? __builtin_ctzll(m) : -1;
}

// The page heap keeps its segments with a free unit ahead of its full ones, so page_alloc stops at
// the first full segment: walking them all, a cache miss on each header (4 MiB apart, the headers
// share one cache set), took 6% of the fragmentation workload, which fills 70 segments. Everything
// from here to page_release that touches the list or a segment's units runs under g.pages.lock.
inline void segment_unlink(segment* s) noexcept {
  page_heap& ph = g.pages;
  if (ph.purge_cursor == s) ph.purge_cursor = s->next;
  (s->prev ? s->prev->next : ph.segments) = s->next;
  (s->next ? s->next->prev : ph.segments_tail) = s->prev;
}
inline void segment_push_front(segment* s) noexcept {
  page_heap& ph = g.pages;
  s->prev = nullptr;
  s->next = ph.segments;
  (ph.segments ? ph.segments->prev : ph.segments_tail) = s;
  ph.segments = s;
}
inline void segment_push_back(segment* s) noexcept {
  page_heap& ph = g.pages;
  s->next = nullptr;
  s->prev = ph.segments_tail;
  (ph.segments_tail ? ph.segments_tail->next : ph.segments) = s;
  ph.segments_tail = s;
}

inline bool release_caches() noexcept;

// errno as it was when this goes out of scope. For the large paths' attempts that may fail on
// the way to a success (an mremap in place, a first mmap before the caches are released): a
// malloc that succeeds leaves errno alone, as glibc's does, and programs test errno after loops
// of calls (getline, readdir). A path that fails sets ENOMEM itself, after its keeper is gone.
struct errno_keeper {
  int saved = errno;
  ~errno_keeper() { errno = saved; }
};

// os_map_aligned, and when the OS refuses (RLIMIT_AS, a strict overcommit limit), once more after
// unmapping what the caches hold: a request fails only when there is nothing left to give back.
inline void* map_reclaiming(std::size_t size, std::size_t align) noexcept {
  errno_keeper errno_kept;  // (a caller whose request fails sets ENOMEM)
  if (void* p = stranded_take(size, align)) return p;  // (none but near vm.max_map_count)
  if (void* p = os_map_aligned(size, align)) return p;
  if (!release_caches()) return nullptr;
  if (void* p = os_map_aligned(size, align)) return p;
  return stranded_take(size, align);
}

// An empty segment from the cache or the OS; nullptr when the OS gives no memory. Not under the
// page heap's lock: mapping may reclaim first (release_caches), which takes it.
inline segment* segment_alloc() noexcept {
  segment* s = nullptr;
  {
    lock_guard guard(g.segment_lock);
    if ((s = g.segment_cache) != nullptr) {
      g.segment_cache = s->next;
      --g.segment_cache_count;
      sub(g_proc->cached_bytes, kSegmentSize);
    }
  }
  if (!s) {
    s = static_cast<segment*>(map_reclaiming(kSegmentSize, kSegmentSize));
    if (!s) return nullptr;
    add(g_proc->segment_bytes, kSegmentSize);
    if (option(opt_hugepages)) os_hugepages(s, kSegmentSize);
#if LIVEALLOC_CHECKED
    chunk_mark(s, kSegmentSize, 1);
#endif
  }
  s->magic = kMagic;
  s->kind = kKindSegment;
  s->free_units = kAllDataUnits;
  s->dirty_units = 0;
  s->dirty_old = 0;
  s->used_units = 0;
  return s;
}

#if LIVEALLOC_CHECKED
// A page's checked-mode bitmap: one an unmapped segment gave back, or a new one. Sized for the
// largest capacity, so that it fits any class the page serves later.
inline std::atomic<std::uint64_t>* bitmap_take() noexcept {
  {
    lock_guard guard(g.meta_lock);
    if (std::atomic<std::uint64_t>* b = g.free_bitmaps) {
      g.free_bitmaps =
          reinterpret_cast<std::atomic<std::uint64_t>*>(b[0].load(std::memory_order_relaxed));
      return b;
    }
  }
  return static_cast<std::atomic<std::uint64_t>*>(meta_alloc(kMaxCapacity / 8));
}
#endif

// Gives an empty segment back to the OS (its pages' checked-mode bitmaps to bitmap_take: a new
// segment's descriptors start without one, and each took a new one from the arena for good).
inline void segment_unmap(segment* s) noexcept {
#if LIVEALLOC_CHECKED
  chunk_mark(s, kSegmentSize, 0);
  {
    lock_guard guard(g.meta_lock);
    for (page& pg : s->pages) {
      if (!pg.live_bits) continue;
      pg.live_bits[0].store(reinterpret_cast<std::uintptr_t>(g.free_bitmaps),
                            std::memory_order_relaxed);
      g.free_bitmaps = pg.live_bits;
    }
  }
#endif
  sub(g_proc->segment_bytes, kSegmentSize);
  os_unmap(s, kSegmentSize);
}

// Unmaps a list of empty segments taken out of the cache.
inline void segments_unmap(segment* list) noexcept {
  while (list) {
    segment* next = list->next;
    segment_unmap(list);
    list = next;
  }
}

// A segment left without a used or dirty unit goes to the cache, or back to the OS.
inline void segment_release(segment* s) noexcept {
  segment_unlink(s);
  {
    lock_guard guard(g.segment_lock);
    if (g.segment_cache_count < static_cast<std::size_t>(option(opt_segment_cache))) {
      s->next = g.segment_cache;
      g.segment_cache = s;
      ++g.segment_cache_count;
      add(g_proc->cached_bytes, kSegmentSize);
      return;
    }
  }
  segment_unmap(s);
}

// A run of n free units for a new span, or nullptr. Units released lately are still resident:
// reusing them, whichever thread released them, costs no page faults.
inline segment* units_find(unsigned n, int& idx) noexcept {
  segment* s;
  for (s = g.pages.segments; s && s->free_units; s = s->next)
    if ((idx = find_run(s->free_units & s->dirty_units, n)) >= 0) return s;
  for (s = g.pages.segments; s && s->free_units; s = s->next)
    if ((idx = find_run(s->free_units, n)) >= 0) return s;
  return nullptr;
}

// Gives the run at `idx` to a span of class `cls` of heap `h`.
inline void units_take(segment* s, unsigned idx, unsigned n, heap* h, unsigned cls) noexcept {
  const std::uint64_t mask = unit_mask(idx, n);
  // Committed: the span's units, except those still resident from a recent release.
  add(g_proc->committed_bytes,
      std::size_t(n - static_cast<unsigned>(__builtin_popcountll(s->dirty_units & mask)))
          << kUnitShift);
  s->free_units &= ~mask;
  if (s->free_units == 0 && s != g.pages.segments_tail) {
    segment_unlink(s);
    segment_push_back(s);
  }
  g.pages.dirty_units -= static_cast<unsigned>(__builtin_popcountll(s->dirty_units & mask));
  s->dirty_units &= ~mask;
  s->dirty_old &= s->dirty_units;
  s->used_units += n;
  for (unsigned i = 0; i < n; ++i) {
    s->pages[idx + i].span = &s->pages[idx];
    s->units[idx + i] = unit_info{h, cls, 0};
  }
}

inline page* page_alloc(heap* h, unsigned cls) noexcept {
  const unsigned n = class_units(cls);
  int idx = -1;
  segment* s;
  g.pages.lock.lock();
  while (!(s = units_find(n, idx))) {
    g.pages.lock.unlock();
    segment* fresh = segment_alloc();
    if (!fresh) return nullptr;
    g.pages.lock.lock();
    segment_push_front(fresh);
  }
  units_take(s, static_cast<unsigned>(idx), n, h, cls);
  g.pages.lock.unlock();
  page* pg = &s->pages[idx];
  pg->units = static_cast<std::uint8_t>(n);
  pg->cls = static_cast<std::uint8_t>(cls);
  pg->block_size = static_cast<std::uint32_t>(class_size(cls));
  pg->capacity = static_cast<std::uint16_t>((std::size_t(n) << kUnitShift) / pg->block_size);
  pg->reserved = pg->used = 0;
  pg->free = pg->local_free = nullptr;
  pg->in_full = pg->kept_empty = 0;
  pg->owner = h;
  pg->next = pg->prev = nullptr;
#if LIVEALLOC_CHECKED
  if (!pg->live_bits && !(pg->live_bits = bitmap_take()))
    fatal("out of memory for checked-mode metadata", nullptr);
  for (unsigned i = 0; i < (pg->capacity + 63u) / 64u; ++i)
    pg->live_bits[i].store(0, std::memory_order_relaxed);
#endif
  bump(h->stats[cls].v[c_pages_taken]);
  bump(h->stats[cls].v[c_pages_in_use]);
  return pg;
}

inline void background_wake() noexcept;

// Gives a page's span back to the page heap, where any thread may take it again; its memory goes
// back to the OS now (purge_delay 0) or at the first slow path of any thread after the delay.
inline void page_release(heap* h, page* pg) noexcept {
  if (pg->kept_empty) {
    --h->kept_empty[pg->cls];
    unbump(h->stats[pg->cls].v[c_pages_kept]);
  }
  if (!pg->in_full) queue_remove(h, pg);
  bump(h->stats[pg->cls].v[c_pages_released]);
  unbump(h->stats[pg->cls].v[c_pages_in_use]);
  unbump(h->stats[pg->cls].v[c_reserved_blocks], pg->reserved);
  auto* s = reinterpret_cast<segment*>(reinterpret_cast<std::uintptr_t>(pg) & ~kSegmentMask);
  const unsigned n = pg->units;
  const unsigned idx = static_cast<unsigned>(pg - s->pages);
  const std::uint64_t delay = static_cast<std::uint64_t>(option(opt_purge_delay));
  if (delay == 0) {
    // Only the carved part was ever touched.
    std::size_t touched = round_up(std::size_t(pg->reserved) * pg->block_size, kOsPage);
    if (touched) os_decommit(page_start(pg), touched);
    sub(g_proc->committed_bytes, std::size_t(n) << kUnitShift);
    add(g_proc->purges, 1);
  }
  pg->owner = nullptr;
  pg->free = pg->local_free = nullptr;
  pg->used = pg->reserved = pg->capacity = 0;
  pg->in_full = pg->kept_empty = 0;
  page_heap& ph = g.pages;
  bool first_dirty = false;  // a deadline where there was none: a sleeping purge thread wakes
  {
    lock_guard guard(ph.lock);
    for (unsigned i = 0; i < n; ++i) {
      s->pages[idx + i].span = nullptr;
      s->pages[idx + i].units = 0;
      s->units[idx + i] = unit_info{};
    }
    if (delay != 0) {
      s->dirty_units |= unit_mask(idx, n);
      ph.dirty_units += n;
      ph.purge_left = true;  // a pass under way may have passed this segment: it goes on after it
      ph.last_release = now_ms();
      first_dirty = ph.purge_deadline.load(std::memory_order_relaxed) == 0;
      if (first_dirty)
        ph.purge_deadline.store(ph.last_release + delay, std::memory_order_relaxed);
    }
    if (s->free_units == 0 && s != ph.segments) {
      segment_unlink(s);
      segment_push_front(s);
    }
    s->free_units |= unit_mask(idx, n);
    s->used_units -= n;
    if (s->used_units == 0 && s->dirty_units == 0) segment_release(s);
  }
  if (first_dirty) background_wake();
}

// Returns dirty free units to the OS and releases segments left empty. With `all` every dirty
// unit goes (trim), and so it does when nothing was released for a whole delay; while releases go
// on, only the units already dirty at the previous check go, so none goes back right after its
// release (a program that frees and reallocates in bursts would fault it straight back in).
// A pass with a `budget` (in units) stops when it is spent and makes the purge due at once, so the
// next slow path, whichever thread's, goes on from there: a thread that frees a gigabyte then
// sleeps makes no malloc elsewhere wait 60 ms for madvise. kPurgeAll runs the whole pass now.
// Under g.pages.lock.
constexpr unsigned kPurgeAll = ~0u;
constexpr unsigned kPurgeStepMax = 16;  // 1 MiB: about 80 us of madvise here when resident

// How many units a slow path purges: one for every millisecond since the thread's previous slow
// path, at least one (64 KiB, about 8 us of madvise) and at most kPurgeStepMax. A thread that
// comes here often, a request loop, pays a unit at a time, and a purge it meets stays out of its
// slowest requests; one that comes seldom, an event loop after a burst, takes larger steps, so
// the memory still goes back at about the pace it did with fixed steps of 8.
inline unsigned purge_step(std::uint64_t since_ms) noexcept {
  return since_ms < 1 ? 1u : since_ms > kPurgeStepMax ? kPurgeStepMax : unsigned(since_ms);
}

inline void pages_purge_locked(bool all, unsigned budget) noexcept {
  page_heap& ph = g.pages;
  const std::uint64_t delay = static_cast<std::uint64_t>(option(opt_purge_delay));
  const std::uint64_t now = now_ms();
  segment* s = ph.segments;
  if (budget == kPurgeAll || !ph.purge_cursor)
    ph.purge_left = false;  // a new pass, from the first segment
  else
    s = ph.purge_cursor;
  ph.purge_cursor = nullptr;
  all = all || ph.purge_all || now >= ph.last_release + delay;
  bool purged = false;
  while (s) {
    segment* next = s->next;
    std::uint64_t d = all ? s->dirty_units : (s->dirty_units & s->dirty_old);
    const bool cut = static_cast<unsigned>(__builtin_popcountll(d)) > budget;
    if (cut) {  // keep the lowest `budget` units of d
      std::uint64_t keep = 0;
      for (unsigned i = 0; i < budget; ++i, d &= d - 1) keep |= d & (~d + 1);
      d = keep;
    }
    if (d) {
      budget -= static_cast<unsigned>(__builtin_popcountll(d));
      sub(g_proc->committed_bytes, std::size_t(__builtin_popcountll(d)) << kUnitShift);
      purged = true;
      ph.dirty_units -= static_cast<unsigned>(__builtin_popcountll(d));
      s->dirty_units &= ~d;
    }
    while (d) {
      unsigned first = static_cast<unsigned>(__builtin_ctzll(d));
      unsigned len = static_cast<unsigned>(__builtin_ctzll(~(d >> first)));
      if (first + len > 64) len = 64 - first;
      os_decommit(reinterpret_cast<std::uint8_t*>(s) + (std::size_t(first) << kUnitShift),
                  std::size_t(len) << kUnitShift);
      d &= ~unit_mask(first, len);
    }
    if (cut) {  // the rest of this segment's old units first, at the next slow path
      s->dirty_old &= s->dirty_units;
      ph.purge_cursor = s;
      break;
    }
    s->dirty_old = s->dirty_units;
    ph.purge_left |= s->dirty_units != 0;
    if (s->used_units == 0 && s->dirty_units == 0) segment_release(s);
    s = next;
  }
  if (purged) add(g_proc->purges, 1);
  if (ph.purge_cursor) {
    ph.purge_deadline.store(now, std::memory_order_relaxed);
  } else {
    ph.purge_all = false;
    ph.purge_deadline.store(ph.purge_left ? now + delay : 0, std::memory_order_relaxed);
  }
}
inline void pages_purge(bool all) noexcept {
  lock_guard guard(g.pages.lock);
  pages_purge_locked(all, kPurgeAll);
}
// At a slow path, whichever thread's, once the deadline has passed: the threads that released the
// units may never have another (pool workers after a burst, threads blocked on I/O). A thread that
// finds another in the page heap does not wait for it.
inline void pages_purge_due(std::uint64_t now, unsigned step) noexcept {
  if (!g.pages.lock.try_lock()) return;
  const std::uint64_t due = g.pages.purge_deadline.load(std::memory_order_relaxed);
  if (due != 0 && now >= due) pages_purge_locked(false, step);
  g.pages.lock.unlock();
}
// When a thread exits (or the heap of an exited one is collected), the page heap keeps at most
// segment_cache segments' worth of dirty units resident for the next thread: the rest goes back
// at once. A timed purge needs some thread's slow path after the delay, and a process whose pool
// just shrank may have none for a long time. (A pass with a budget goes on from where the last
// one stopped, to the end of the list: a second one starts from the first segment.)
inline void pages_purge_excess() noexcept {
  const std::uint64_t keep = std::uint64_t(option(opt_segment_cache)) * kUnits;
  lock_guard guard(g.pages.lock);
  for (int pass = 0; pass < 2 && g.pages.dirty_units > keep; ++pass) {
    const std::uint64_t excess = g.pages.dirty_units - keep;
    pages_purge_locked(true, excess < kPurgeAll ? static_cast<unsigned>(excess) : kPurgeAll - 1);
  }
}
// A trim answered at a thread's slow path: a new pass that purges every dirty unit, a step at a
// time, from the purge check later in this same slow path on.
inline void pages_purge_soon() noexcept {
  lock_guard guard(g.pages.lock);
  g.pages.purge_cursor = nullptr;
  g.pages.purge_all = true;
  g.pages.purge_deadline.store(now_ms(), std::memory_order_relaxed);
}

// Carves the next blocks of a span into its free list: as many bytes as are carved already, one OS
// page at first and kExtendBytes at most, so a class that a process uses for a few blocks touches
// one page of its span, not four.
inline void page_extend(page* pg) noexcept {
  const std::size_t carved = std::size_t(pg->reserved) * pg->block_size;
  const std::size_t bytes = carved < kOsPage ? kOsPage : carved < kExtendBytes ? carved : kExtendBytes;
  std::uint32_t n = static_cast<std::uint32_t>(bytes / pg->block_size);
  if (n == 0) n = 1;
  if (n > std::uint32_t(pg->capacity - pg->reserved)) n = std::uint32_t(pg->capacity - pg->reserved);
  if (n == 0) return;
  const std::size_t bs = pg->block_size;
  std::uint8_t* p = page_start(pg) + std::size_t(pg->reserved) * bs;
  block* first = object_at<block>(p);
  for (std::uint32_t i = 1; i < n; ++i, p += bs)
    object_at<block>(p)->next = object_at<block>(p + bs);
  object_at<block>(p)->next = pg->free;
  pg->free = first;
  pg->reserved = static_cast<std::uint16_t>(pg->reserved + n);
  bump(pg->owner->stats[pg->cls].v[c_reserved_blocks], n);
}

// Empty pages a heap keeps of class `cls` under the recycling threshold `recycle`, which counts
// 64 KiB units: a class whose span is several units keeps as many spans as fit, but one at least
// (recycle 0 keeps none). By default (2) a class of one-unit spans keeps two pages, 128 KiB, and
// a bigger class one span, where counting pages kept two: 1 MiB of the biggest class, whose span
// holds 2 blocks of 256 KiB.
inline std::uint32_t kept_limit(std::uint32_t recycle, unsigned cls) noexcept {
  const std::uint32_t spans = recycle / class_units(cls);
  return spans != 0 ? spans : (recycle != 0 ? 1u : 0u);
}

// A page's used count reached zero: the current page of its class stays; others are kept up to
// the recycling threshold, then released.
inline void page_retire(heap* h, page* pg) noexcept {
  if (pg == h->queues[pg->cls].first || pg->kept_empty) return;
  if (h->kept_empty[pg->cls] < kept_limit(h->recycle, pg->cls)) {
    pg->kept_empty = 1;
    ++h->kept_empty[pg->cls];
    bump(h->stats[pg->cls].v[c_pages_kept]);
    return;
  }
  page_release(h, pg);
}

// After a block went back to a page that was full or is now empty.
LIVEALLOC_NOINLINE inline void page_after_free(heap* h, page* pg) noexcept {
  if (pg->in_full) {
    pg->in_full = 0;
    queue_push_back(h, pg);
  }
  if (pg->used == 0) page_retire(h, pg);
}

// Puts a block back in its page of heap `h`, in the owner's (or claimer's) context; counts nothing.
LIVEALLOC_ALWAYS_INLINE void page_return_block(heap* h, page* pg, block* b) noexcept {
  if (LIVEALLOC_UNLIKELY(bad_link(b, pg->local_free))) return (void)bad_block(b, pg->local_free);
  b->next = pg->local_free;
  pg->local_free = b;
  if (LIVEALLOC_UNLIKELY(--pg->used == 0 || pg->in_full)) page_after_free(h, pg);
}

// Frees a block into a page of heap `h`, in the owner's (or claimer's) context.
LIVEALLOC_ALWAYS_INLINE void page_free_block(heap* h, page* pg, block* b) noexcept {
  bump(h->stats[pg->cls].v[c_frees]);
  page_return_block(h, pg, b);
}

inline segment* segment_of(const void* p) noexcept {
  return reinterpret_cast<segment*>(reinterpret_cast<std::uintptr_t>(p) & ~kSegmentMask);
}
inline unsigned unit_of(const void* p) noexcept {
  return static_cast<unsigned>((reinterpret_cast<std::uintptr_t>(p) & kSegmentMask) >> kUnitShift);
}
inline page* page_of(const void* p) noexcept { return segment_of(p)->pages[unit_of(p)].span; }
// The entry of a small block's unit: the unit's index times 16 is one shift and one mask of the
// address, so both loads of `free` take it as a base plus an index, as they did from the fixed
// owner line and a byte per unit. Indexing units[] instead put a shift and an add in front of
// them (the fast path at 64 and 256 bytes ran 0.97x pinned).
LIVEALLOC_ALWAYS_INLINE const unit_info& unit_of_block(const void* p) noexcept {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t off = (a >> (kUnitShift - 4)) & (std::uintptr_t(kUnits - 1) << 4);
  const auto* base = reinterpret_cast<const std::uint8_t*>(a & ~kSegmentMask);
  return *object_at<const unit_info>(base + offsetof(segment, units) + off);
}
// The class of a small block, without touching its page descriptor.
inline unsigned class_of_block(const void* p) noexcept { return unit_of_block(p).cls; }
// The heap whose page holds a small block, without touching the page descriptor.
inline heap* owner_of_block(const void* p) noexcept { return unit_of_block(p).owner; }

// Frees a block of class `cls` of heap `h` in its owner's context: onto the recent-free list of
// its class while that has room, else into its page.
LIVEALLOC_ALWAYS_INLINE void heap_free_block(heap* h, unsigned cls, block* b) noexcept {
  recent_list& r = h->recent[cls];
  if (LIVEALLOC_LIKELY(r.room != 0)) {
    --r.room;
    b->next = r.head;
    r.head = b;
    bump(h->stats[cls].v[c_frees]);
    return;
  }
  r.overflowed = true;
  page_free_block(h, page_of(b), b);
}

// Releases kept empty pages (and the current page of a class if it is empty and `all`).
inline bool heap_release_empty(heap* h, std::uint32_t keep, bool all) noexcept {
  bool released = false;
  for (unsigned c = 1; c < kClasses; ++c) {
    for (page* pg = h->queues[c].first; pg;) {
      page* next = pg->next;
      bool excess_kept = pg->kept_empty && h->kept_empty[c] > kept_limit(keep, c);
      bool idle_current = all && !pg->kept_empty && pg->used == 0;
      if (excess_kept || idle_current) {
        page_release(h, pg);
        released = true;
      }
      pg = next;
    }
  }
  return released;
}

// --- cross-thread frees -----------------------------------------------------------------------

// Takes every block other threads freed into `h` and returns each to its page.
inline void heap_drain_inbox(heap* h) noexcept {
  if (!h->inbox.load(std::memory_order_relaxed)) return;
  block* b = h->inbox.exchange(nullptr, std::memory_order_acquire);
  while (b) {
    block* next = b->next;
    __builtin_prefetch(b->ahead, 1, 3);
    const unsigned cls = class_of_block(b);
    heap_free_block(h, cls, b);  // counts the free first: remote_received <= frees at all times
    bump(h->stats[cls].v[c_remote_received]);
    b = next;
  }
}

inline void heap_try_collect_abandoned(heap* h) noexcept;

// Pushes a chain of blocks onto `dest`'s inbox in one atomic operation.
inline void inbox_push(heap* dest, block* head, block* tail) noexcept {
  block* old = dest->inbox.load(std::memory_order_relaxed);
  do tail->next = old;
  while (!dest->inbox.compare_exchange_weak(old, head, std::memory_order_seq_cst,
                                            std::memory_order_relaxed));
  // Nobody will drain an exited thread's heap: collect it here so the memory comes back (see
  // heap_try_collect_abandoned for a heap being collected right now).
  if (dest->state.load(std::memory_order_seq_cst) == kHeapAbandoned) heap_try_collect_abandoned(dest);
}

inline void outbox_flush(heap* h) noexcept {
  for (auto& slot : h->outbox) {
    if (slot.count == 0) continue;
    bump(h->pub.flushes);
    block* head = slot.head;
    block* tail = slot.tail;
    heap* dest = slot.dest;
    slot = outbox_slot{};
    inbox_push(dest, head, tail);
  }
}

// A block of another heap: gather it in the outbox slot for its owner; hand the batch back when
// it is full, when the slot is needed for another owner, and at every slow path of this thread.
inline void outbox_add(heap* h, heap* owner, block* b) noexcept {
  outbox_slot& slot = h->outbox[(reinterpret_cast<std::uintptr_t>(owner) >> 6) % kOutboxSlots];
  if (slot.dest != owner) {
    if (slot.count) {
      bump(h->pub.flushes);
      inbox_push(slot.dest, slot.head, slot.tail);
    }
    slot = outbox_slot{owner, nullptr, nullptr, 0, {}};
  }
  if (LIVEALLOC_UNLIKELY(bad_link(b, slot.head))) return (void)bad_block(b, slot.head);
  b->next = slot.head;
  b->ahead = slot.recent[slot.count % kPrefetchAhead];  // pushed kPrefetchAhead blocks ago
  slot.recent[slot.count % kPrefetchAhead] = b;
  slot.head = b;
  if (!slot.tail) slot.tail = b;
  if (++slot.count >= h->batch) {
    bump(h->pub.flushes);
    block* head = slot.head;
    block* tail = slot.tail;
    slot = outbox_slot{};
    inbox_push(owner, head, tail);
  }
}

// Other heaps' blocks, each to its owner's outbox slot.
inline void send_home(heap* h, block* list) noexcept {
  for (block* next; list; list = next) {
    next = list->next;
    outbox_add(h, owner_of_block(list), list);
  }
}

// Gives every block of the recent-free lists back to its page (already counted as freed), and
// the other heaps' blocks (kept or reclaimed) back to their owners. The lists start again as they
// opened, or closed (`close`: a heap being collected, which the next thread to adopt it opens
// class by class).
inline void heap_flush_recent(heap* h, bool close) noexcept {
  for (unsigned c = 1; c < kClasses; ++c) {
    block* b = h->recent[c].head;
    block* f = h->recent[c].foreign;
    const std::uint16_t limit = close || h->recent[c].limit == 0 ? 0 : recent_limit(c);
    h->recent[c] = recent_list{nullptr, nullptr, limit, limit};
    for (block* next; b; b = next) {
      next = b->next;
      page_return_block(h, page_of(b), b);
    }
    send_home(h, f);
    send_home(h, h->reclaimed[c]);
    h->reclaimed[c] = nullptr;
  }
  send_home(h, h->reclaim_pending);
  for (block *chain = h->reclaim_chains, *next; chain; chain = next) {
    next = chain->ahead;  // (before send_home links the chain's blocks anew)
    send_home(h, chain);
  }
  h->reclaim_pending = h->reclaim_chains = nullptr;
  outbox_flush(h);
}

// --- heap life cycle ---------------------------------------------------------------------------

// The options generation: the control block's once the segment exists.
inline std::uint64_t options_gen() noexcept {
  telemetry::control_block* c = g_table.control;
  return c ? c->generation.load(std::memory_order_acquire)
           : g_options.generation.load(std::memory_order_acquire);
}

// A writer (memlive, or anyone with the segment) changed the control block: accept valid values,
// undo and count invalid ones. One thread does it per generation. The block is shared memory that
// anyone with the file can write: a validated_generation ahead of the generation (garbage, or a
// generation that wrapped) is validated again rather than trusted, and every `effective` is
// rewritten from the values in force.
inline void control_validate(std::uint64_t gen) noexcept {
  telemetry::control_block* c = g_table.control;
  if (c->validated_generation.load(std::memory_order_acquire) == gen) return;
  lock_guard guard(g_table.lock);
  gen = c->generation.load(std::memory_order_acquire);  // the latest, before its values
  if (c->validated_generation.load(std::memory_order_acquire) == gen) return;
  for (int i = 0; i < kOptionCount; ++i) {
    telemetry::option_entry& e = *telemetry::option_at(c, static_cast<unsigned>(i));
    long long want = e.requested.load(std::memory_order_relaxed);
    long long have = g_options.v[i].load(std::memory_order_relaxed);
    if (want != have) {
      const option_info& o = kOptionTable[i];
      if (o.live && want >= o.lo && want <= o.hi) {
        g_options.v[i].store(want, std::memory_order_relaxed);
        have = want;
      } else {
        c->rejected.fetch_add(1, std::memory_order_relaxed);
        e.requested.store(have, std::memory_order_relaxed);
      }
    }
    e.effective.store(have, std::memory_order_relaxed);
  }
  c->validated_generation.store(gen, std::memory_order_release);
}

// The large cache's deadline: its earliest expiry, 0 when empty. With large_lock held.
inline void large_cache_set_deadline() noexcept {
  std::uint64_t earliest = 0;
  for (unsigned i = 0; i < g.large_cache_count; ++i)
    if (earliest == 0 || g.large_cache[i].expires < earliest) earliest = g.large_cache[i].expires;
  g.large_cache_deadline.store(earliest, std::memory_order_relaxed);
}

// New values of large_cache, purge_delay and segment_cache hold for what is cached already: a
// lowered purge_delay brings the deadlines of the page heap and of the cached large mappings
// forward, a lowered large_cache makes the oldest mappings over it expire now (unmapped a step
// at a time at slow paths, as expired ones are), a lowered segment_cache unmaps the segments
// over it. Once per options generation, by the first thread to apply it.
inline void caches_apply_options(std::uint64_t gen) noexcept {
  if (g.caches_generation.load(std::memory_order_relaxed) == gen ||
      g.caches_generation.exchange(gen, std::memory_order_relaxed) == gen)
    return;
  const std::uint64_t now = now_ms();
  const std::uint64_t due = now + static_cast<std::uint64_t>(option(opt_purge_delay));
  {
    lock_guard guard(g.pages.lock);
    const std::uint64_t d = g.pages.purge_deadline.load(std::memory_order_relaxed);
    if (d > due) g.pages.purge_deadline.store(due, std::memory_order_relaxed);
  }
  {
    lock_guard guard(g.large_lock);
    std::size_t bytes = 0;
    for (unsigned i = 0; i < g.large_cache_count; ++i) {
      large_cache_entry& e = g.large_cache[i];
      if (e.expires > due) e.expires = due;
      bytes += e.size;
    }
    const std::size_t limit = static_cast<std::size_t>(option(opt_large_cache)) << 20;
    while (bytes > limit) {
      int oldest = -1;
      for (unsigned i = 0; i < g.large_cache_count; ++i)
        if (g.large_cache[i].expires > now &&
            (oldest < 0 || g.large_cache[i].expires < g.large_cache[oldest].expires))
          oldest = static_cast<int>(i);
      if (oldest < 0) break;
      g.large_cache[oldest].expires = now;
      bytes -= g.large_cache[oldest].size;
    }
    large_cache_set_deadline();
  }
  segment* over = nullptr;
  {
    lock_guard guard(g.segment_lock);
    const auto keep = static_cast<std::size_t>(option(opt_segment_cache));
    while (g.segment_cache_count > keep) {
      segment* s = g.segment_cache;
      g.segment_cache = s->next;
      --g.segment_cache_count;
      sub(g_proc->cached_bytes, kSegmentSize);
      s->next = over;
      over = s;
    }
  }
  segments_unmap(over);
}

inline void heap_apply_options(heap* h) noexcept {
  std::uint64_t gen = options_gen();
  if (h->options_seen != gen) {
    if (g_table.control) control_validate(gen);
    caches_apply_options(gen);
    h->options_seen = gen;
    h->recycle = static_cast<std::uint32_t>(option(opt_page_recycle));
    h->batch = static_cast<std::uint32_t>(option(opt_remote_batch));
    heap_release_empty(h, h->recycle, false);
    h->pub.applied_generation.store(gen, std::memory_order_relaxed);
  }
  std::uint64_t trim = g_options.trim_request.load(std::memory_order_relaxed);
  if (h->trim_seen != trim) {
    h->trim_seen = trim;
    heap_flush_recent(h, false);
    heap_release_empty(h, 0, true);
    pages_purge_soon();
  }
}

// --- thread slots ------------------------------------------------------------------------------

inline void slot_read_name(heap* h) noexcept {
  char name[16] = {};
  prctl(PR_GET_NAME, name, 0, 0, 0);
  for (unsigned i = 0; i < telemetry::kNameSize; ++i) h->pub.name[i] = i < 15 ? name[i] : 0;
}

inline void slot_begin(heap* h) noexcept {
  h->pub.tid.store(static_cast<std::int32_t>(syscall(SYS_gettid)), std::memory_order_relaxed);
  slot_read_name(h);
  h->pub.start_ns.store(realtime_ns(), std::memory_order_relaxed);
  h->pub.exit_ns.store(0, std::memory_order_relaxed);
  if (!h->published) h->pub.state.store(telemetry::slot_alive, std::memory_order_release);
}

// A new thread adopts the heap of an exited one: the cumulative counts go to the exited totals
// (nothing is lost) and the live blocks it inherits count as adopted, so live stays >= 0.
// Order matters to a concurrent reader, which reads the subtracted counters (exited totals, then
// slots) before the added ones (slots, then exited totals): subtracted counters leave the slot
// before they reach the totals, added ones reach the totals before they leave the slot, and
// handed_over comes last. A reader may then see live too high for a moment, never too low.
// The caller bumped the incarnation first, so readers that notice it skip this slot.
inline void slot_fold(heap* h) noexcept {
  static constexpr counter kSubtracted[] = {c_frees, c_foreign_allocs};
  static constexpr counter kOther[] = {c_requested_bytes, c_refills, c_remote_sent,
                                       c_remote_received, c_pages_taken, c_pages_released};
  constexpr auto rlx = std::memory_order_relaxed;
  for (unsigned cls = 0; cls < kClasses; ++cls) {
    auto& k = h->stats[cls].v;
    auto& x = g_exited[cls].v;
    std::uint64_t others = k[c_large_freed_by_others].exchange(0, rlx);
    std::uint64_t allocs = k[c_allocs].load(rlx), adopted = k[c_adopted].load(rlx);
    std::uint64_t frees = k[c_frees].load(rlx), foreign = k[c_foreign_allocs].load(rlx);
    // Never negative for livealloc's own counts. memlive's capture hooks count a free on the
    // freeing thread, so a slot may hold more frees than allocations: that deficit stays in the
    // exited totals and the next thread adopts nothing.
    std::uint64_t gone = frees + others + foreign;
    std::uint64_t live = allocs + adopted >= gone ? allocs + adopted - gone : 0;
    for (counter c : kSubtracted) k[c].store(0, rlx);
    x[c_frees].fetch_add(frees, rlx);
    x[c_foreign_allocs].fetch_add(foreign, rlx);
    x[c_large_freed_by_others].fetch_add(others, rlx);
    x[c_allocs].fetch_add(allocs, rlx);
    x[c_adopted].fetch_add(adopted, rlx);
    k[c_allocs].store(0, rlx);
    k[c_adopted].store(live, rlx);
    k[c_peak_live].store(live, rlx);  // the new thread's peak starts at what it inherits
    x[c_handed_over].fetch_add(live, rlx);
    for (counter c : kOther) {
      x[c].fetch_add(k[c].load(rlx), rlx);
      k[c].store(0, rlx);
    }
  }
  // The per-thread figures of the slot are the new thread's own from here.
  for (auto* f : {&h->pub.slow_paths, &h->pub.flushes, &h->pub.mmap_calls, &h->pub.munmap_calls,
                  &h->pub.madvise_calls})
    f->store(0, rlx);
}

// Heaps past the last slot keep private counters and add what changed to the shared overflow slot.
inline void overflow_publish(heap* h) noexcept {
  if (!h->published || !g_table.base) return;
  heap* ov = slot_heap(g_table.slots - 1);
  for (unsigned cls = 0; cls < kClasses; ++cls)
    for (unsigned c = 0; c < kCounterCount; ++c) {
      std::uint64_t now = h->stats[cls].v[c].load(std::memory_order_relaxed);
      std::uint64_t was = h->published[cls].v[c].load(std::memory_order_relaxed);
      if (now == was) continue;
      ov->stats[cls].v[c].fetch_add(now - was, std::memory_order_relaxed);  // wraps for gauges
      h->published[cls].v[c].store(now, std::memory_order_relaxed);
    }
}

inline void large_cache_sweep_step(std::uint64_t now, unsigned units) noexcept;

// The background purge thread. It does what a slow path does for the whole process, the page
// heap's purge and the large cache's sweep once their deadlines pass, and applies options tuned
// through the segment, so an idle process gives memory back and takes a lowered purge_delay. It
// owns no heap (nothing it calls allocates) and sleeps until the next deadline, a second at most.
enum : int { kBgNone = 0, kBgStarting = 1, kBgRunning = 2 };
constexpr std::uint64_t kBgSleepMaxMs = 1000;

// Whether a slow path of the program's threads purges what is due. While the background thread
// runs, purging is its work and theirs makes no madvise for it (as jemalloc's background thread
// takes decay off the application's threads), so their latency carries none of it; unless it has
// fallen a second behind (no CPU for it on a busy machine), when they help as without it.
LIVEALLOC_ALWAYS_INLINE bool is_due(std::uint64_t now, std::uint64_t due) noexcept {
  return due != 0 && now >= due;
}
LIVEALLOC_ALWAYS_INLINE bool purge_here(std::uint64_t now, std::uint64_t due) noexcept {
  return is_due(now, due) &&
         (g.bg_state.load(std::memory_order_relaxed) != kBgRunning || now - due >= kBgSleepMaxMs);
}

inline void* background_main(void*) noexcept {
  prctl(PR_SET_NAME, "livealloc-purge", 0, 0, 0);
  g.bg_state.store(kBgRunning, std::memory_order_release);
  std::uint64_t trim_seen = g_options.trim_request.load(std::memory_order_relaxed);
  for (;;) {
    // Read before the deadlines: a deadline set after this bumps it, and the wait returns at once.
    const std::uint32_t wake_seen = g.bg_wake.load(std::memory_order_acquire);
    const std::uint64_t gen = options_gen();
    if (g_table.control) control_validate(gen);
    caches_apply_options(gen);
    if (!option(opt_background_purge)) break;
    const std::uint64_t trim = g_options.trim_request.load(std::memory_order_relaxed);
    if (trim != trim_seen) {  // a trim (memlive's button, livealloc::trim) purges every page
      trim_seen = trim;
      pages_purge_soon();
    }
    std::uint64_t now = now_ms();
    if (is_due(now, g.pages.purge_deadline.load(std::memory_order_relaxed)))
      pages_purge_due(now, kPurgeStepMax);
    if (is_due(now, g.large_cache_deadline.load(std::memory_order_relaxed)))
      large_cache_sweep_step(now, kPurgeStepMax);
    // A step leaves the rest due at once: the next one after a millisecond, in which the slow
    // paths of other threads find the locks free.
    now = now_ms();
    std::uint64_t wait = kBgSleepMaxMs;
    for (std::uint64_t due : {g.pages.purge_deadline.load(std::memory_order_relaxed),
                              g.large_cache_deadline.load(std::memory_order_relaxed)})
      if (due != 0) wait = is_due(now, due) ? 1 : due - now < wait ? due - now : wait;
    timespec ts{static_cast<time_t>(wait / 1000), static_cast<long>(wait % 1000) * 1000000L};
    syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&g.bg_wake), FUTEX_WAIT_PRIVATE, wake_seen,
            &ts, nullptr, 0);  // (EINTR, EAGAIN: the loop looks again)
  }
  g.bg_state.store(kBgNone, std::memory_order_release);
  return nullptr;
}

// A release or a large block's caching set a deadline where there was none: the thread, asleep
// for up to a second, wakes now and sleeps until that deadline instead.
inline void background_wake() noexcept {
  if (g.bg_state.load(std::memory_order_relaxed) != kBgRunning) return;
  g.bg_wake.fetch_add(1, std::memory_order_release);
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&g.bg_wake), FUTEX_WAKE_PRIVATE, 1, nullptr,
          nullptr, 0);
}

// Starts the thread from a slow path, after the slow path's own work, with no lock held; the
// allocations pthread_create makes come back here and find it starting. At 1 only in a process
// that runs more than one thread already: a single-threaded one stays so (glibc's single-thread
// fast paths, unshare(CLONE_NEWUSER) and setuid with per-thread capabilities, as setpriv does,
// need it), and its one thread's slow paths purge; at 2 in any process. Its own attributes (a
// stack size of its own) keep glibc's default-attribute lock out of it, and it starts with every
// signal blocked, so no handler of the program runs on it. A failure (a sandbox that forbids
// clone, a thread limit) is retried a second later.
LIVEALLOC_NOINLINE inline void background_start() noexcept {
  const std::uint64_t now = now_ms();
  if (!g.bg_allowed.load(std::memory_order_relaxed) ||
      now < g.bg_retry.load(std::memory_order_relaxed) ||
      (option(opt_background_purge) < 2 && LIVEALLOC_SINGLE_THREADED()))
    return;
  int expected = kBgNone;
  if (!g.bg_state.compare_exchange_strong(expected, kBgStarting, std::memory_order_acq_rel))
    return;
  pthread_attr_t attr;
  int err = pthread_attr_init(&attr);
  if (err == 0) {
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    // The stack holds the static TLS of every loaded object too: a program with large
    // thread_local arrays needs more than 256 KiB (EINVAL), so 8 MiB then, glibc's usual size.
    for (std::size_t stack : {std::size_t(256) << 10, std::size_t(8) << 20}) {
      pthread_t t;
      err = pthread_attr_setstacksize(&attr, stack);
      if (err == 0) err = pthread_create(&t, &attr, background_main, nullptr);
      if (err != EINVAL) break;
    }
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    pthread_attr_destroy(&attr);
  }
  if (err != 0) {
    g.bg_retry.store(now + kBgSleepMaxMs, std::memory_order_relaxed);
    g.bg_state.store(kBgNone, std::memory_order_release);
  }
}

// No thread starts before the program's constructors do: an allocation before them may come from
// the dynamic loader, before the C library can start threads. (Once for every file that includes
// this header: a flag.)
__attribute__((constructor)) inline void bg_allow() noexcept {
  g.bg_allowed.store(true, std::memory_order_relaxed);
}

// At the end of a slow path's upkeep and at a large allocation, with no lock held.
LIVEALLOC_ALWAYS_INLINE void background_check() noexcept {
  if (LIVEALLOC_UNLIKELY(option(opt_background_purge) != 0) &&
      g.bg_state.load(std::memory_order_relaxed) == kBgNone)
    background_start();
}

// Everything the slow path does before looking for a page.
inline void heap_maintain(heap* h) noexcept {
  heap_apply_options(h);
  if (LIVEALLOC_UNLIKELY(++h->name_tick >= 256)) {  // a name set after start shows up
    h->name_tick = 0;
    slot_read_name(h);
    overflow_publish(h);
  }
  std::uint64_t large_deadline = g.large_cache_deadline.load(std::memory_order_relaxed);
  std::uint64_t purge_deadline = g.pages.purge_deadline.load(std::memory_order_relaxed);
  const std::uint64_t now = now_ms();
  const unsigned step = purge_step(now - h->last_maintain);
  h->last_maintain = now;
  h->active_ms.store(now, std::memory_order_relaxed);
  if (purge_here(now, purge_deadline)) pages_purge_due(now, step);
  if (purge_here(now, large_deadline)) large_cache_sweep_step(now, step);
  outbox_flush(h);
  heap_drain_inbox(h);
  background_check();
}

// Gives back everything the heap of an exited thread holds: its lists go back to their pages and
// empty pages to the page heap. Their memory goes back to the OS after purge_delay (or at once in
// release_caches, or here past segment_cache: pages_purge_excess), unless a thread takes the
// spans again first.
inline void heap_collect(heap* h) noexcept {
  outbox_flush(h);
  heap_drain_inbox(h);  // (onto the recent-free lists, which go back to their pages next)
  heap_flush_recent(h, true);
  heap_release_empty(h, 0, true);
  pages_purge_excess();
}

// A push that finds the heap claimed leaves its blocks to the collector, which looks at the inbox
// again after it lets go: the push's exchange then its state read, and this store then the inbox
// read, are all seq_cst, so one of the two sees the other.
inline void heap_try_collect_abandoned(heap* h) noexcept {
  for (;;) {
    int expected = kHeapAbandoned;
    if (!h->state.compare_exchange_strong(expected, kHeapClaimed, std::memory_order_acquire,
                                          std::memory_order_relaxed))
      return;
    heap_collect(h);
    overflow_publish(h);  // an overflow heap's last counts, while it is still ours
    h->state.store(kHeapAbandoned, std::memory_order_seq_cst);
    if (!h->inbox.load(std::memory_order_seq_cst)) return;
  }
}

inline void pool_push(heap* h) noexcept {
  lock_guard guard(g.pool_lock);
  if (h->in_pool) return;
  h->in_pool = true;
  h->next_pool = g.pool;
  g.pool = h;
}

inline heap* pool_take() noexcept {
  lock_guard guard(g.pool_lock);
  for (heap** link = &g.pool; *link; link = &(*link)->next_pool) {
    heap* h = *link;
    int expected = kHeapAbandoned;
    if (h->state.compare_exchange_strong(expected, kHeapOwned, std::memory_order_acquire,
                                         std::memory_order_relaxed)) {
      *link = h->next_pool;
      h->in_pool = false;
      h->next_pool = nullptr;
      return h;
    }
  }
  return nullptr;
}

// A thread exits: give back what can be given back, then put the heap in the pool for the next
// thread.
inline void heap_abandon(heap* h) noexcept {
  heap_collect(h);
  overflow_publish(h);
  h->pub.exit_ns.store(realtime_ns(), std::memory_order_relaxed);
  if (!h->published) h->pub.state.store(telemetry::slot_exited, std::memory_order_release);
  g.heaps_owned.fetch_sub(1, std::memory_order_relaxed);
  h->state.store(kHeapAbandoned, std::memory_order_release);
  pool_push(h);
  // A free that raced with the collection above may have landed in the inbox.
  heap_try_collect_abandoned(h);
}

inline void on_thread_exit(void* arg) noexcept {
  auto* h = static_cast<heap*>(arg);
  tls_exited = true;
  if (tls_heap == h) tls_heap = &g_empty_heap;
  heap_abandon(h);
}

// --- the telemetry segment: creation, name, fork ------------------------------------------------

// A new, sparse segment file (-1 with errno set if none can be made). Sparse: tmpfs supplies a
// page at its first store, and when it has none left (/dev/shm full, its size limit reached) that
// store raises SIGBUS. So every piece of it is reserved before it is written: at creation the
// header, tables, overflow slot and overflow row (table_create), a thread's slot and row when the
// thread takes it (heap_new), a fork child's pieces before they are copied (table_fork_prepare).
// Never descriptor 0, 1 or 2: a program started with them closed (by a daemon, or `2>&-`) would
// get the segment as its stdin or stdout, write its output into the counters, and close it
// (releasing its lock: the name then looks stale to every reader) when it reopens them.
inline int table_file(std::size_t size) noexcept {
  int fd = open("/dev/shm", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0 && fd <= 2) {
    const int high = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    close(fd);
    fd = high;
  }
  if (fd < 0) return -1;
  // 0600 whatever the umask.
  if (fchmod(fd, 0600) != 0 || ftruncate(fd, static_cast<off_t>(size)) != 0) {
    const int err = errno;
    close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

inline void table_program_name(char* out) noexcept {
  char buf[256];
  int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
  ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
  if (fd >= 0) close(fd);
  buf[n > 0 ? n : 0] = 0;
  const char* base = buf;
  for (const char* c = buf; *c; ++c)
    if (*c == '/') base = c + 1;
  std::size_t i = 0;
  for (; base[i] && i < telemetry::kProgramSize - 1; ++i) out[i] = base[i];
  out[i] = 0;
}

// Lays out a fresh segment at `base` (zero-filled) and makes it the process's.
inline void table_format(std::uint8_t* base) noexcept {
  auto* hdr = object_at<telemetry::segment_header>(base);
  memcpy(hdr->magic, telemetry::kMagic, sizeof(hdr->magic));
  hdr->version = telemetry::kVersion;
  hdr->header_size = sizeof(telemetry::segment_header);
  hdr->segment_size = g_table.size;
  hdr->pid = g_table.pid = getpid();
  hdr->class_count = telemetry::kClassCount;
  hdr->counter_count = telemetry::kCounterCount;
  hdr->slot_count = g_table.slots;
  hdr->slot_size = static_cast<std::uint32_t>(kSlotBytes);
  hdr->class_sizes_offset = kClassSizesOffset;
  hdr->class_units_offset = kClassUnitsOffset;
  hdr->control_offset = kControlOffset;
  hdr->exited_offset = kExitedOffset;
  hdr->slots_offset = kSlotsOffset;
  hdr->matrix_offset = kSlotsOffset + std::size_t(g_table.slots) * kSlotBytes;
  g_table.matrix = object_at<std::atomic<std::uint64_t>>(base + hdr->matrix_offset);
  hdr->start_ns = realtime_ns();
  table_program_name(hdr->program);
  auto* sizes = object_at<std::uint64_t>(base + kClassSizesOffset);
  auto* units = object_at<std::uint64_t>(base + kClassUnitsOffset);
  for (unsigned c = 1; c < kClasses; ++c) {
    sizes[c] = class_size(c);
    units[c] = class_units(c);
  }
  auto* control = object_at<telemetry::control_block>(base + kControlOffset);
  control->option_count = kOptionCount;
  control->option_size = sizeof(telemetry::option_entry);
  for (int i = 0; i < kOptionCount; ++i) {
    const option_info& o = kOptionTable[i];
    telemetry::option_entry& e = *telemetry::option_at(control, static_cast<unsigned>(i));
    for (unsigned j = 0; o.name[j] && j < sizeof(e.name) - 1; ++j) e.name[j] = o.name[j];
    long long v = option(static_cast<option_id>(i));
    e.requested.store(v, std::memory_order_relaxed);
    e.effective.store(v, std::memory_order_relaxed);
    e.min = o.lo;
    e.max = o.hi;
    e.default_value = o.def;
    e.live = o.live;
    e.is_bool = o.type[0] == 'b';
  }
  std::uint64_t gen = g_options.generation.load(std::memory_order_relaxed);
  control->generation.store(gen, std::memory_order_relaxed);
  control->validated_generation.store(gen, std::memory_order_relaxed);
  // The counters kept so far move into the segment.
  auto move = [](std::atomic<std::uint64_t>& to, std::atomic<std::uint64_t>& from) {
    to.store(from.load(std::memory_order_relaxed), std::memory_order_relaxed);
  };
  move(hdr->segment_bytes, g_fallback_header.segment_bytes);
  move(hdr->large_bytes, g_fallback_header.large_bytes);
  move(hdr->cached_bytes, g_fallback_header.cached_bytes);
  move(hdr->mmap_calls, g_fallback_header.mmap_calls);
  move(hdr->munmap_calls, g_fallback_header.munmap_calls);
  move(hdr->madvise_calls, g_fallback_header.madvise_calls);
  move(hdr->purges, g_fallback_header.purges);
  object_at<heap>(base + kSlotsOffset + std::size_t(g_table.slots - 1) * kSlotBytes)
      ->pub.state.store(telemetry::slot_overflow, std::memory_order_relaxed);
  g_table.control = control;
  g_exited = object_at<class_counters>(base + kExitedOffset);
  g_proc = hdr;
}

// Whether g_table.fd is still the segment's file. A program may close descriptors it did not open
// (closerange before an exec, bash's `exec 3>file`), and the number may then name one of its own
// files, which we must neither close nor map.
inline bool table_fd_ours() noexcept {
  struct stat st;
  return g_table.fd >= 0 && fstat(g_table.fd, &st) == 0 && st.st_dev == g_table.dev &&
         st.st_ino == g_table.ino;
}

// Makes `fd` (a segment file, or -1) the one g_table keeps. -1 leaves the identity of the file
// it closed: table_reserve finds that file again by its name.
inline void table_keep_fd(int fd) noexcept {
  struct stat st;
  g_table.fd = fd;
  if (fd < 0) return;
  const bool known = fstat(fd, &st) == 0;
  g_table.dev = known ? st.st_dev : 0;
  g_table.ino = known ? st.st_ino : 0;
}

// A shared view of a segment file, at `at` (which must be free) or where the kernel puts it;
// nullptr on failure. Every shared view is MADV_DONTFORK: a child made without the atfork
// handlers (syscall(SYS_fork), glibc's _Fork, clone without CLONE_VM) inherits the rest of the
// address space but not this range, so its allocator faults at its first touch of a heap instead
// of writing the parent's heaps, which live here. fork() runs fork_child, which maps the child's
// own copy into the hole. (A raw fork's child cannot be told apart sooner: malloc's fast path
// writes the heap before any check could run, and the fast path is not to pay for one.) A view
// the kernel will not mark is not used.
inline void* table_map_shared(int fd, void* at) noexcept {
  const int flags = MAP_SHARED | (at ? MAP_FIXED : 0);
  void* p = mmap(at, g_table.size, PROT_READ | PROT_WRITE, flags, fd, 0);
  if (p == MAP_FAILED) return nullptr;
  if (madvise(p, g_table.size, MADV_DONTFORK) == 0) return p;
  munmap(p, g_table.size);
  return nullptr;
}

// The whole pages that hold bytes [from, to) of the segment, within the file.
inline std::size_t table_page_down(std::size_t at) noexcept { return at & ~(kOsPage - 1); }
inline std::size_t table_page_up(std::size_t at) noexcept {
  const std::size_t up = (at + kOsPage - 1) & ~(kOsPage - 1);
  return up < g_table.size ? up : g_table.size;  // fallocate past the end would grow the file
}

// Allocates the pages of [from, to) in the file `fd`: no later store there can find tmpfs out of
// room. 0, or an errno value (ENOSPC when /dev/shm is full).
inline int table_reserve_fd(int fd, std::size_t from, std::size_t to) noexcept {
  from = table_page_down(from);
  to = table_page_up(to);
  if (from >= to) return 0;
  int r;
  do r = fallocate(fd, 0, static_cast<off_t>(from), static_cast<off_t>(to - from));
  while (r != 0 && errno == EINTR);
  return r == 0 ? 0 : errno;
}

// The same for the process's own segment, mapped at g_table.base. It needs no descriptor (the
// preloaded library has closed its own once the file is named): populating the mapping for
// writing (MADV_POPULATE_WRITE, Linux 5.14) allocates the pages, and fails rather than raise
// SIGBUS. Its failure says EFAULT for a page tmpfs could not supply (EINVAL before 5.14):
// fallocate, on our descriptor or on the file opened by its name, then reserves the pages on an
// old kernel, or names the real error (ENOSPC, EROFS...).
inline int table_reserve(std::size_t from, std::size_t to) noexcept {
  from = table_page_down(from);
  to = table_page_up(to);
  if (from >= to) return 0;
  int r;
  do r = madvise(g_table.base + from, to - from, MADV_POPULATE_WRITE);
  while (r != 0 && errno == EINTR);
  if (r == 0) return 0;
  int err = errno;
  lock_guard guard(g_table.lock);  // table_enable closes the descriptor and names the file under it
  if (table_fd_ours()) return table_reserve_fd(g_table.fd, from, to);
  const int fd = g_table.linked.load(std::memory_order_relaxed)
                     ? open(g_table.path, O_RDWR | O_CLOEXEC | O_NOFOLLOW)
                     : -1;
  if (fd < 0) return err;
  struct stat st;
  if (fstat(fd, &st) == 0 && st.st_dev == g_table.dev && st.st_ino == g_table.ino)
    err = table_reserve_fd(fd, from, to);
  close(fd);
  return err;
}

// strerror's text for the errors a reservation meets, without strerror: that translates its text
// and so may call malloc, here inside heap_new, before the thread has a heap.
inline const char* reserve_error_text(int err) noexcept {
  switch (err) {
    case ENOSPC: return "No space left on device";
    case EROFS: return "Read-only file system";
    case EFAULT: return "Bad address";
    case EINVAL: return "Invalid argument";
    case ENOMEM: return "Cannot allocate memory";
    case EACCES: return "Permission denied";
    case EPERM: return "Operation not permitted";
    case EIO: return "Input/output error";
    case EBADF: return "Bad file descriptor";
    case ENOENT: return "No such file or directory";
    case EOPNOTSUPP: return "Operation not supported";
    default: return "error";
  }
}

// Reserves slot `i` and its row of the free matrix (the cells its thread writes) for a new
// thread. On failure the thread shares the overflow slot, as when the slots run out, and so do
// later threads that find no exited thread's heap to adopt; the first failure is reported, once.
inline bool table_reserve_slot(std::uint32_t i) noexcept {
  if (!g_table.file) return true;  // anonymous memory: nothing to run out of but memory
  const std::size_t slot = kSlotsOffset + std::size_t(i) * kSlotBytes;
  const std::size_t row = std::size_t(g_table.slots) * sizeof(std::uint64_t);
  const std::size_t matrix = kSlotsOffset + std::size_t(g_table.slots) * kSlotBytes;
  int err = table_reserve(slot, slot + kSlotBytes);
  if (!err) err = table_reserve(matrix + i * row, matrix + (i + 1) * row);
  if (!err) return true;
  g_table.next_slot.store(g_table.slots, std::memory_order_relaxed);
  if (!g_table.slot_warned.exchange(true, std::memory_order_relaxed)) {
    message m;
    m << "livealloc: no room for a new thread's telemetry slot in /dev/shm: "
      << reserve_error_text(err) << " (errno " << static_cast<long long>(err)
      << "); from now on new threads without a heap to adopt share the overflow slot";
    m.print();
  }
  return false;
}

// At process start, before any heap exists. The segment is a file in /dev/shm that gets its name
// when profiling is enabled. The preloaded library cannot be enabled later (nothing calls
// telemetry::enable() in it), so without LIVEALLOC_PROFILE=1 it takes anonymous memory: no file,
// no descriptor the program would see, nothing copied at a fork.
inline void table_create() noexcept {
  g_table.slots = static_cast<std::uint32_t>(option(opt_telemetry_slots));
  g_table.size = kSlotsOffset + std::size_t(g_table.slots) * kSlotBytes +
                 std::size_t(g_table.slots) * g_table.slots * sizeof(std::uint64_t);
#ifdef LIVEALLOC_PRELOAD
  const bool want_file = option(opt_profile) != 0;
#else
  const bool want_file = true;
#endif
  table_keep_fd(want_file ? table_file(g_table.size) : -1);
  g_table.file_error = g_table.fd < 0 && want_file ? errno : 0;
  void* base = nullptr;
  if (g_table.fd >= 0) {
    // What is written from the start, and by any thread at any time: header and tables, the
    // overflow slot and the overflow row of the free matrix (threads' slots: table_reserve_slot).
    const std::size_t overflow = kSlotsOffset + std::size_t(g_table.slots - 1) * kSlotBytes;
    const std::size_t row = std::size_t(g_table.slots) * sizeof(std::uint64_t);
    const std::size_t last_row = overflow + kSlotBytes + std::size_t(g_table.slots - 1) * row;
    int err = table_reserve_fd(g_table.fd, 0, kSlotsOffset);
    if (!err) err = table_reserve_fd(g_table.fd, overflow, overflow + kSlotBytes);
    if (!err) err = table_reserve_fd(g_table.fd, last_row, last_row + row);
    if (!err) {
      add(g_fallback_header.mmap_calls, 1);  // (not madvise_calls: those advise heap memory)
      base = table_map_shared(g_table.fd, nullptr);
      if (!base) err = errno;
    }
    if (!base) {
      g_table.file_error = err;
      close(g_table.fd);
      table_keep_fd(-1);
    }
  }
  g_table.file = base != nullptr;
  if (!base) base = os_map(g_table.size);  // no /dev/shm: private memory, no profiling
  if (!base) return;                        // heaps then come from the metadata arena
  g_table.base = static_cast<std::uint8_t*>(base);
  table_format(g_table.base);
}

// Removes our name, if it still holds our file: two processes with the same pid in two pid
// namespaces that share /dev/shm (containers, `unshare --pid`) want the same name, and a writer
// that does not respect the other's lock (an older livealloc) may have taken it over. 0, or an
// errno value. Between the lstat and the unlink another process could still replace the name;
// one that follows table_enable's rule does not while we run (our lock is held until we end).
inline int table_unlink_name() noexcept {
  struct stat st;
  if (lstat(g_table.path, &st) != 0) return errno;
  if (st.st_dev != g_table.name_dev || st.st_ino != g_table.name_ino) return 0;  // not ours
  return unlink(g_table.path) == 0 ? 0 : errno;
}

// Only the process that named the segment removes the name: a vfork child shares our memory
// and a raw fork's child a copy of it, and both have another pid.
inline void table_unlink_at_exit() noexcept {
  if (!g_table.linked.load(std::memory_order_relaxed) || g_table.pid != getpid()) return;
  g_table.exit_unlinked.store(true, std::memory_order_relaxed);
  table_unlink_name();
}

// Whether a running process holds the segment file named `path`. Each process holds a lock
// (flock, exclusive) on its own from before it is named until it ends or execs: the lock belongs
// to the open file, which the segment's mapping keeps open after the descriptor is closed, so
// the holder needs no descriptor. Nobody holds a file left by a dead process, or by this
// process's image before an exec. An exec releases the lock when the old image's memory is
// freed, which someone reading that memory at the moment (/proc/PID/maps: memlive run polls it)
// delays a little: a held lock is tried again for about 100 ms before the name counts as another
// process's. Only a real collision pays that wait, once, at start.
inline bool table_name_held(const char* path) noexcept {
  const int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return false;  // gone, or not ours to open: linkat and unlink decide
  bool held = true;
  for (int i = 0; held && i < 100; ++i) {
    if (i) {
      const timespec ms{0, 1000000};
      nanosleep(&ms, nullptr);
    }
    held = flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  }
  close(fd);  // (and with it the shared lock a successful try took)
  return held;
}

// --- stale segments -----------------------------------------------------------------------------
// A profiled process that is killed (SIGKILL, a crash, the OOM killer) cannot remove its
// segment's name, and /dev/shm is memory: a service restarting in a crash loop left one file per
// pid it was given, 48 KiB or more each, until someone ran `memlive list --clean`. So a process
// that publishes its segment removes its user's stale ones past the newest `stale_segments` (by
// the start time in their headers), which stay for memlive to show how those processes ended.
// Stale: a regular file named livealloc.<digits>, of this user, with this version's header, that
// no process holds the lock of (table_name_held), in whichever pid namespace it ran. A file that
// is anything else is left to `memlive list`. Only system calls, no allocation: this runs in a
// fork child's atfork handler too.
constexpr int kMaxStaleKept = 64;  // the option's upper bound: the newest are kept on the stack

struct stale_segment {
  std::uint64_t start_ns;
  dev_t dev;
  ino_t ino;
  char name[24];  // "livealloc." and a pid
};

// Whether `name` in the directory `dir` is a stale segment; fills *s.
inline bool stale_segment_at(int dir, const char* name, stale_segment* s) noexcept {
  static constexpr char kPrefix[] = "livealloc.";
  const std::size_t prefix = sizeof kPrefix - 1, len = strlen(name);
  if (len <= prefix || len >= sizeof s->name || memcmp(name, kPrefix, prefix) != 0) return false;
  for (const char* c = name + prefix; *c; ++c)
    if (*c < '0' || *c > '9') return false;
  struct stat st;  // looked at before the open, which a FIFO or device must not see; again after
  if (fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) ||
      st.st_uid != geteuid())
    return false;
  const int fd = openat(dir, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return false;
  using telemetry::segment_header;
  constexpr std::size_t kRead = offsetof(segment_header, start_ns) + sizeof(std::uint64_t);
  unsigned char h[kRead];
  std::uint32_t version = 0;
  bool stale = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
               pread(fd, h, kRead, 0) == static_cast<ssize_t>(kRead) &&
               memcmp(h + offsetof(segment_header, magic), telemetry::kMagic, 8) == 0;
  if (stale) memcpy(&version, h + offsetof(segment_header, version), sizeof version);
  stale = stale && version == telemetry::kVersion && flock(fd, LOCK_SH | LOCK_NB) == 0;
  close(fd);
  if (!stale) return false;
  memcpy(&s->start_ns, h + offsetof(segment_header, start_ns), sizeof s->start_ns);
  s->dev = st.st_dev;
  s->ino = st.st_ino;
  memcpy(s->name, name, len + 1);
  return true;
}

// Removes the name if it still holds the stale file: a process given that pid since may have
// replaced it (between the check and the unlink it still could: it would run on unnamed).
inline bool stale_segment_remove(int dir, const stale_segment& s) noexcept {
  struct stat st;
  return fstatat(dir, s.name, &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_dev == s.dev &&
         st.st_ino == s.ino && unlinkat(dir, s.name, 0) == 0;
}

// One pass over the directory `dir` (/dev/shm): keeps the `keep` newest stale segments (at most
// kMaxStaleKept) and removes the others as they are found older; never the file (dev, ino), the
// caller's own (which its lock keeps anyway, unless flock failed). Returns how many it removed.
inline int sweep_stale_segments(int dir, int keep, dev_t dev, ino_t ino) noexcept {
  keep = keep < 0 ? 0 : keep > kMaxStaleKept ? kMaxStaleKept : keep;
  stale_segment kept[kMaxStaleKept];
  int count = 0, removed = 0;
  alignas(8) char buf[4096];
  for (;;) {
    const long n = syscall(SYS_getdents64, dir, buf, sizeof buf);
    if (n <= 0) break;
    for (long at = 0; at < n;) {
      // struct linux_dirent64: ino (8 bytes), offset (8), record length (2), type (1), name
      std::uint16_t reclen;
      memcpy(&reclen, buf + at + 16, sizeof reclen);
      const char* name = buf + at + 19;
      at += reclen;
      stale_segment s;
      if (!stale_segment_at(dir, name, &s) || (s.dev == dev && s.ino == ino)) continue;
      if (count < keep) {
        kept[count++] = s;
        continue;
      }
      int oldest = -1;  // the oldest kept, if older than s
      for (int i = 0; i < count; ++i)
        if (kept[i].start_ns < (oldest < 0 ? s.start_ns : kept[oldest].start_ns)) oldest = i;
      removed += stale_segment_remove(dir, oldest < 0 ? s : kept[oldest]);
      if (oldest >= 0) kept[oldest] = s;
    }
  }
  return removed;
}

// Reads the number in `base` (16 or 10) at *s and moves *s past it; false when no digit is there.
inline bool maps_number(const char** s, unsigned base, std::uint64_t* v) noexcept {
  const char* p = *s;
  std::uint64_t n = 0;
  for (;; ++p) {
    unsigned d;
    if (*p >= '0' && *p <= '9') d = static_cast<unsigned>(*p - '0');
    else if (base == 16 && *p >= 'a' && *p <= 'f') d = static_cast<unsigned>(*p - 'a' + 10);
    else break;
    n = n * base + d;
  }
  if (p == *s) return false;
  *s = p;
  *v = n;
  return true;
}

// Whether the line "address perms offset major:minor inode path" of a memory map (/proc/PID/maps)
// maps the file (dev, ino): 1 yes, 0 no, -1 not such a line.
inline int maps_line_maps(const char* line, dev_t dev, ino_t ino) noexcept {
  for (int field = 0; field < 3; ++field) {
    line = strchr(line, ' ');
    if (!line) return -1;
    ++line;
  }
  std::uint64_t maj = 0, min = 0, inode = 0;
  if (!maps_number(&line, 16, &maj) || *line++ != ':' || !maps_number(&line, 16, &min) ||
      *line++ != ' ' || !maps_number(&line, 10, &inode))
    return -1;
  return inode == ino && maj == major(dev) && min == minor(dev) ? 1 : 0;
}

// Whether the process whose memory map is the file `maps` (/proc/PID/maps, /proc/self/maps) maps
// the file (dev, ino): 1 yes, 0 no, -1 unknown (the map could not be read whole and names no such
// line: another user's process, or one that is ending). The allocator maps its segment for the
// life of the process image, before the file gets its name: a view made before the file had its
// name shows as "/dev/shm/#<inode> (deleted)", which the device and inode still match. Read with
// no allocation: the allocator asks too.
inline int maps_file(const char* maps, dev_t dev, ino_t ino) noexcept {
  const int fd = open(maps, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[4096];
  std::size_t have = 0;
  bool inside = false;  // in the rest of a line longer than the buffer, already decided
  int found = -1;
  auto decide = [&](const char* line) {
    const int r = maps_line_maps(line, dev, ino);
    if (r >= 0) found = r;
  };
  for (;;) {
    const ssize_t n = read(fd, buf + have, sizeof buf - have - 1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {  // part of the map unread: unknown unless found
      if (found == 0) found = -1;
      break;
    }
    if (n == 0) {
      buf[have] = 0;  // a last line without its newline
      if (have && !inside) decide(buf);
      break;
    }
    have += static_cast<std::size_t>(n);
    std::size_t start = 0;
    for (std::size_t i = 0; i < have && found != 1; ++i) {
      if (buf[i] != '\n') continue;
      buf[i] = 0;
      if (!inside) decide(buf + start);
      inside = false;
      start = i + 1;
    }
    if (found == 1) break;
    memmove(buf, buf + start, have - start);
    have -= start;
    if (have == sizeof buf - 1) {  // a line longer than the buffer: its start has every field
      buf[have] = 0;
      if (!inside) decide(buf);
      have = 0;
      inside = true;
    }
  }
  close(fd);
  return found;
}

// Whether this process maps the file named `path`: then the name is held by another copy of
// livealloc in this very process, such as the LD_PRELOAD library in a program built with
// livealloc.h or memlive.h, not by a process elsewhere. For the message of an EBUSY.
inline bool table_name_mapped_here(const char* path) noexcept {
  struct stat st;
  return stat(path, &st) == 0 && maps_file("/proc/self/maps", st.st_dev, st.st_ino) == 1;
}

inline bool process_init() noexcept;

// `profile` tells whether the segment has its name, however it got it (LIVEALLOC_PROFILE=1 or
// telemetry::enable()), in get_option() and in the control block memlive shows. With
// g_table.lock held.
inline void table_note_profile(long long on) noexcept {
  g_options.v[opt_profile].store(on, std::memory_order_relaxed);
  if (telemetry::control_block* c = g_table.control) {
    telemetry::option_entry& e = *telemetry::option_at(c, static_cast<unsigned>(opt_profile));
    e.requested.store(on, std::memory_order_relaxed);
    e.effective.store(on, std::memory_order_relaxed);
  }
}

// Gives the segment its name /dev/shm/livealloc.<pid>. 0, or an errno value: EBUSY when a running
// process holds a file under that name: one with our pid in another pid namespace, or (rarely) a
// descriptor or reader that kept a gone process's file open (see table_name_held); the name stays
// its own, and this process goes unpublished. ECANCELED once the exit removed the name: a name
// given then would outlive the process.
inline int table_enable() noexcept {
  if (!process_init()) return ENOMEM;
  if (!g_table.file) return g_table.base ? ENOTSUP : ENOMEM;
  bool register_atexit = false, sweep = false;
  int result = 0;
  {
    lock_guard guard(g_table.lock);
    if (g_table.exit_unlinked.load(std::memory_order_relaxed)) return ECANCELED;
    g_table.want_linked = true;
    if (g_table.linked.load(std::memory_order_relaxed)) return 0;
    message p;
    p << "/dev/shm/livealloc." << static_cast<long long>(getpid());
    p.buf[p.len] = 0;
    memcpy(g_table.path, p.buf, p.len + 1);
    message self;
    self << "/proc/self/fd/" << static_cast<long long>(g_table.fd);
    self.buf[self.len] = 0;
    int r = -1;
    errno = EBADF;  // the program closed our descriptor: the file can have no name any more
    if (table_fd_ours()) {
      (void)flock(g_table.fd, LOCK_EX | LOCK_NB);  // our mark of life (without it: as before)
      r = linkat(AT_FDCWD, self.buf, AT_FDCWD, g_table.path, AT_SYMLINK_FOLLOW);
      if (r != 0 && errno == EEXIST) {
        if (table_name_held(g_table.path)) {
          errno = EBUSY;
        } else {  // left by a dead process, or by our image before an exec
          unlink(g_table.path);
          r = linkat(AT_FDCWD, self.buf, AT_FDCWD, g_table.path, AT_SYMLINK_FOLLOW);
        }
      }
    }
    if (r != 0) {
      result = errno;
    } else {
      g_table.linked.store(true, std::memory_order_release);
      table_note_profile(1);
      g_table.name_dev = g_table.dev;
      g_table.name_ino = g_table.ino;
      sweep = true;
      register_atexit = !g_table.atexit_registered;
      g_table.atexit_registered = true;
#ifdef LIVEALLOC_PRELOAD
      // Named for good (nothing disables it in the preload): the descriptor is not needed.
      close(g_table.fd);
      table_keep_fd(-1);
#endif
    }
  }
  if (sweep) {  // outside the lock: a pass over /dev/shm
    const int dir = open("/dev/shm", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir >= 0) {
      const long long keep = option(opt_stale_segments);
      const int removed = sweep_stale_segments(dir, static_cast<int>(keep), g_table.name_dev,
                                               g_table.name_ino);
      close(dir);
      if (removed > 0 && option(opt_verbose)) {  // where a crashed process's segment went
        message m;
        m << "livealloc: removed " << static_cast<long long>(removed) << " stale segment"
          << (removed == 1 ? "" : "s") << " of processes that are gone from /dev/shm (the newest "
          << keep << " kept: LIVEALLOC_STALE_SEGMENTS)";
        m.print();
      }
    }
  }
  if (register_atexit) {  // may allocate: outside the lock
    atexit(table_unlink_at_exit);
    at_quick_exit(table_unlink_at_exit);  // quick_exit ends in glibc's own _exit, not ours
  }
  return result;
}

inline int table_disable() noexcept {
  lock_guard guard(g_table.lock);
  g_table.want_linked = false;
  if (!g_table.linked.load(std::memory_order_relaxed)) return 0;
  g_table.linked.store(false, std::memory_order_relaxed);
  table_note_profile(0);
  return table_unlink_name();
}

// A fork child must not write into its parent's segment (it does not even inherit the parent's
// view: see table_map_shared): it gets a file of its own, mapped at the same address so every
// heap pointer stays valid. The parent writes that copy just before the fork (fork_prepare),
// while its locks are held: the forking thread's heap lives in the segment, and once fork
// returns the parent changes it on every malloc and free, so a copy the child made for itself
// could mix the parent's later lists with the child's memory. (Atfork handlers registered before
// livealloc's, which is rare since livealloc registers at its first malloc, run their prepare
// part after this copy and their child part before the copy is mapped: if the first allocates,
// the child's copy of the forking thread's heap is stale; if the second does, the child dies;
// if the second is given memory where the heaps go, the copy does not replace it: the child has
// no heaps, says so, and must not allocate, as after _Fork: an allocation would write into that
// memory before it faults.)
// What is copied: the header and tables, the slots of the heaps that exist (every slot ever
// taken and reserved: heaps are never unlinked from all_heaps, and fork_prepare holds meta_lock,
// under which they are linked), the overflow slot (the last one), and the rows of the free matrix
// that those slots can have written; the rest of the file reads as zeros, as it would in a new
// segment. The pieces are reserved in the new file before anything is copied, and only reserved
// pieces of ours are read, so neither side can meet a page tmpfs cannot supply (SIGBUS). When that
// file cannot be made or reserved (no file descriptor left, /dev/shm full), the copy goes to
// anonymous memory, which the child moves over the segment: it then has no file (no profiling),
// but its heaps are those it forked with. When
// not even that was possible, the child has no heaps: nothing is mapped at the segment's address
// (the parent's file is never mapped instead, since what the parent writes after the fork would
// show through), and it says so on stderr. Like a raw fork's child it can exec or _exit, and
// faults as soon as an allocation touches its heap.
inline void table_fork_prepare() noexcept {
  g_table.fork_fd = -1;
  g_table.fork_copy = nullptr;
  if (!g_table.base || !g_table.file) return;
  int fd = table_file(g_table.size);
  const std::size_t slots = g_table.slots;
  const std::size_t matrix = kSlotsOffset + slots * kSlotBytes;
  const std::size_t row = slots * sizeof(std::uint64_t);
  std::uint64_t* in_use = g_table.fork_slots;
  for (std::size_t w = 0; w < (slots + 63) / 64; ++w) in_use[w] = 0;
  in_use[(slots - 1) / 64] |= std::uint64_t(1) << ((slots - 1) % 64);
  for (heap* h = g.all_heaps.load(std::memory_order_acquire); h; h = h->next_all)
    if (!h->published) in_use[h->slot / 64] |= std::uint64_t(1) << (h->slot % 64);
  // Each run of slots in use, and its rows of the matrix, in one piece.
  auto copy_to = [&](auto&& copy) {
    if (!copy(0, kSlotsOffset)) return false;
    for (std::size_t i = 0; i < slots;) {
      if (!((in_use[i / 64] >> (i % 64)) & 1)) {
        ++i;
        continue;
      }
      std::size_t end = i + 1;
      while (end < slots && ((in_use[end / 64] >> (end % 64)) & 1)) ++end;
      if (!copy(kSlotsOffset + i * kSlotBytes, kSlotsOffset + end * kSlotBytes) ||
          !copy(matrix + i * row, matrix + end * row))
        return false;
      i = end;
    }
    return true;
  };
  const bool copied =
      fd >= 0 &&
      copy_to([fd](std::size_t from, std::size_t to) {
        return table_reserve_fd(fd, from, to) == 0;
      }) &&
      copy_to([fd](std::size_t from, std::size_t to) {
        for (std::size_t off = from; off < to;) {
          ssize_t w = pwrite(fd, g_table.base + off, to - off, static_cast<off_t>(off));
          if (w <= 0) return false;
          off += static_cast<std::size_t>(w);
        }
        return true;
      });
  if (!copied && fd >= 0) {
    close(fd);
    fd = -1;
  }
  g_table.fork_fd = fd;
  if (copied) return;
  void* anon = os_map(g_table.size);
  if (!anon) return;
  copy_to([anon](std::size_t from, std::size_t to) {
    memcpy(static_cast<std::uint8_t*>(anon) + from, g_table.base + from, to - from);
    return true;
  });
  g_table.fork_copy = anon;
}
inline void table_fork_parent() noexcept {
  if (g_table.fork_fd >= 0) close(g_table.fork_fd);
  g_table.fork_fd = -1;
  if (g_table.fork_copy) os_unmap(g_table.fork_copy, g_table.size);
  g_table.fork_copy = nullptr;
}
// False when the child got no copy (nothing mapped at base: the heaps are gone).
inline bool table_fork_child() noexcept {
  if (g_table.lost) return false;
  if (!g_table.base || !g_table.file) return true;
  int fd = g_table.fork_fd;
  void* anon = g_table.fork_copy;
  g_table.fork_fd = -1;
  g_table.fork_copy = nullptr;
  // The child inherits nothing at base (MADV_DONTFORK), so an atfork child handler that ran
  // before this one may have been given memory there: claim the range first, and do not map
  // over theirs (MAP_FIXED would replace it silently), at the cost of our heaps.
  // (Another failure, ENOMEM say, tells nothing about the range: then map as before.)
  void* claim = mmap(g_table.base, g_table.size, PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
  const bool claimed = claim == g_table.base;
  const bool taken = claim == MAP_FAILED ? errno == EEXIST : !claimed;
  if (claim != MAP_FAILED && !claimed) munmap(claim, g_table.size);  // an old kernel's other place
  if (taken && fd >= 0) {
    close(fd);
    fd = -1;
  }
  if (taken && anon) {
    munmap(anon, g_table.size);
    anon = nullptr;
  }
  bool mapped = fd >= 0 && table_map_shared(fd, g_table.base);
  if (!mapped && fd >= 0) {
    close(fd);
    fd = -1;
  }
  if (!mapped && anon)
    mapped = mremap(anon, g_table.size, g_table.size, MREMAP_MAYMOVE | MREMAP_FIXED,
                    g_table.base) != MAP_FAILED;
  if (!mapped && anon) munmap(anon, g_table.size);  // (not os_unmap: it counts in the segment)
  if (!mapped && claimed) munmap(g_table.base, g_table.size);
  if (table_fd_ours()) close(g_table.fd);
  table_keep_fd(fd);
  g_table.file = fd >= 0;
  g_table.linked.store(false, std::memory_order_relaxed);
  g_table.lock.word.store(0, std::memory_order_relaxed);
  g_table.pid = getpid();
  if (!mapped) {
    g_table.lost = true;
    // The process-wide counters (header, exited totals, matrix, control block) lived at base:
    // they go back to private memory, so that what is mapped there now (when it was taken) is
    // not written by every large block or exit. The heaps lived there too: an allocation may
    // still write into that memory before it faults, as nothing can be done about that here.
    g_proc = &g_fallback_header;
    g_exited = g_exited_fallback;
    g_table.matrix = nullptr;
    g_table.control = nullptr;
    message m;
    m << "livealloc: fork child " << static_cast<long long>(g_table.pid)
      << (taken ? ": the address of the allocator's heaps was taken (by an atfork handler "
                  "registered before livealloc's)"
                : ": no memory for its copy of the allocator's heaps")
      << "; it can exec or _exit, and dies if it allocates";
    m.print();
    return false;
  }
  g_proc->pid = g_table.pid;
  g_proc->start_ns = realtime_ns();
  if (g_table.want_linked && fd >= 0) table_enable();
  return true;
}

inline void fork_prepare() noexcept {
  g.meta_lock.lock();
  g.pool_lock.lock();
  g.pages.lock.lock();
  g.segment_lock.lock();
  g.large_lock.lock();
  g_stranded.lock.lock();
  table_fork_prepare();
}
inline void fork_unlock() noexcept {
  g_stranded.lock.unlock();
  g.large_lock.unlock();
  g.segment_lock.unlock();
  g.pages.lock.unlock();
  g.pool_lock.unlock();
  g.meta_lock.unlock();
}
inline void fork_parent() noexcept {
  table_fork_parent();
  fork_unlock();
}
// In the child only the forking thread exists. The other heaps were copied while their threads
// ran on in the parent, so they may be torn: they become foreign, never adopted nor collected
// (blocks freed into them in the child stay there).
inline void fork_child() noexcept {
  fork_unlock();
  g.bg_state.store(kBgNone, std::memory_order_relaxed);  // not copied: the child starts its own
  if (!table_fork_child()) return;  // the heaps are not mapped: nothing to mark
  std::size_t owned = 0;
  for (heap* h = g.all_heaps.load(std::memory_order_acquire); h; h = h->next_all) {
    if (h == tls_heap) {
      ++owned;
      h->pub.tid.store(static_cast<std::int32_t>(syscall(SYS_gettid)), std::memory_order_relaxed);
      continue;
    }
    h->state.store(kHeapForeign, std::memory_order_relaxed);
    // (A slot still unused under an incarnation was changing hands in the parent: exited too.)
    const std::uint32_t st = h->pub.state.load(std::memory_order_relaxed);
    if (!h->published &&
        (st == telemetry::slot_alive ||
         (st == telemetry::slot_unused && h->pub.incarnation.load(std::memory_order_relaxed)))) {
      h->pub.exit_ns.store(realtime_ns(), std::memory_order_relaxed);
      h->pub.state.store(telemetry::slot_exited, std::memory_order_relaxed);
    }
  }
  g.pool = nullptr;
  g.heaps_owned.store(owned, std::memory_order_relaxed);
}

// A copy of the allocator in a shared library (a plugin that includes this header) must stay
// loaded once it has started: every thread that used it runs on_thread_exit when it ends, and the
// blocks and heaps it handed out are its code's. A g++ build with default visibility is kept
// loaded by its unique symbols (the inline variables), but one with -fvisibility=hidden, or built
// by clang, was unloaded by dlclose, and the next such thread to exit died calling the unmapped
// key destructor. RTLD_NODELETE on the object that holds the destructor keeps it, as those
// symbols do. (Only in code compiled for a shared library; it may allocate: after init.)
inline void keep_loaded() noexcept {
#if defined(__PIC__) && !defined(__PIE__) && !defined(LIVEALLOC_PRELOAD)
  Dl_info self{};
  if (dladdr(reinterpret_cast<void*>(&on_thread_exit), &self) != 0 && self.dli_fname)
    (void)dlopen(self.dli_fname, RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE);
#endif
}

// Once per process, on the first allocation. Nothing here may allocate.
inline bool process_init() noexcept {
  if (LIVEALLOC_LIKELY(g.init.load(std::memory_order_acquire) == 2)) return true;
  int expected = 0;
  if (g.init.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
    read_environment();
    table_create();
    if (pthread_key_create(&g.key, on_thread_exit) != 0) {
      g.init.store(0, std::memory_order_release);
      return false;
    }
    g.init.store(2, std::memory_order_release);
    // After init is marked done: these may call malloc.
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    keep_loaded();
    if (option(opt_verbose)) print_options();
    if (option(opt_profile)) {
      int err = table_enable();
      if (err) {
        message m;
        m << "livealloc: LIVEALLOC_PROFILE=1 but the telemetry segment cannot be published: ";
        if (err == ENOTSUP && g_table.file_error)  // the segment is no file: why (a full /dev/shm)
          m << "no file in /dev/shm: " << strerror(g_table.file_error);
        else
          m << strerror(err);
        struct stat st;
        if ((err == EEXIST || err == EPERM || err == EACCES) && lstat(g_table.path, &st) == 0 &&
            st.st_uid != geteuid())  // another user's file under our name: /dev/shm is sticky
          m << " (" << g_table.path << " belongs to uid " << static_cast<long long>(st.st_uid)
            << ", who must remove it)";
        if (err == EBUSY && table_name_mapped_here(g_table.path))
          m << " (" << g_table.path << " is the segment of another copy of livealloc in this "
            << "process, the LD_PRELOAD library or a program built with livealloc.h: only that "
            << "copy is profiled)";
        else if (err == EBUSY)
          m << " (" << g_table.path << " is the segment of another running process with pid "
            << static_cast<long long>(getpid())
            << ", in another pid namespace that shares /dev/shm: this process is not profiled)";
        m.print();
      }
    }
    return true;
  }
  while (g.init.load(std::memory_order_acquire) == 1) sched_yield();
  return g.init.load(std::memory_order_acquire) == 2;
}

// A heap for a new thread: in the next free slot of the segment, else (slots exhausted, no room
// for the slot in /dev/shm, or no segment) a private one that counts into the overflow slot.
inline heap* heap_new() noexcept {
  void* mem = nullptr;
  class_counters* published = nullptr;
  std::uint32_t idx = g_table.base ? g_table.next_slot.fetch_add(1, std::memory_order_relaxed)
                                   : ~0u;
  if (g_table.base && idx + 1 < g_table.slots && table_reserve_slot(idx)) {
    mem = slot_heap(idx);
    std::uint64_t used = g_proc->slots_used.load(std::memory_order_relaxed);
    while (used < idx + 1 && !g_proc->slots_used.compare_exchange_weak(used, idx + 1)) {
    }
  } else {
    if (g_table.base) g_table.next_slot.store(g_table.slots, std::memory_order_relaxed);
    mem = meta_alloc(sizeof(heap));
    published = static_cast<class_counters*>(meta_alloc(sizeof(class_counters) * kClasses));
    if (!mem || !published) return nullptr;
    add(g_proc->overflow_threads, 1);
    idx = g_table.slots ? g_table.slots - 1 : 0;
  }
  heap* h = new (mem) heap(&g_empty_page);  // (every recent_list closed)
  h->slot = idx;
  h->published = published;
  if (!published && g_table.matrix)
    h->matrix_row = g_table.matrix + std::size_t(idx) * g_table.slots;
  h->state.store(kHeapOwned, std::memory_order_relaxed);
  lock_guard guard(g.meta_lock);
  h->next_all = g.all_heaps.load(std::memory_order_relaxed);
  g.all_heaps.store(h, std::memory_order_release);
  g.heap_count.fetch_add(1, std::memory_order_relaxed);
  return h;
}

// The calling thread's heap: an exited thread's from the pool, else a new one. `arm` sets the key,
// so that the thread's exit gives the heap back (allocate_exiting borrows one without it).
// errno stays as it was: a thread's first call may be free(), which must not change it (POSIX),
// and reserving its slot in a full /dev/shm failed with ENOSPC (callers that fail set ENOMEM).
LIVEALLOC_NOINLINE inline heap* thread_init(bool arm = true) noexcept {
  errno_keeper errno_kept;
  if (!process_init()) return nullptr;
  // process_init's atfork and atexit registrations may allocate, and so give this thread a heap.
  if (tls_heap != &g_empty_heap) return tls_heap;
  heap* h = pool_take();
  if (h) {
    // A reader leaves out a slot that is neither alive nor exited, and one whose incarnation or
    // state changed while it copied the slot. So the slot is marked unused and gets its new
    // incarnation before the fold empties it, and slot_begin marks it alive once the new
    // thread's tid and name are in: no snapshot shows the old thread half-cleared.
    if (!h->published) {  // (an overflow heap's counts are in the overflow slot: no fold)
      g_proc->folds_started.fetch_add(1, std::memory_order_seq_cst);  // see segment_header
      h->pub.state.store(telemetry::slot_unused, std::memory_order_relaxed);
    }
    h->pub.incarnation.fetch_add(1, std::memory_order_relaxed);
    // Both before the fold's stores: x86-64 keeps stores in order, and this keeps the compiler
    // from moving them (a thread fence is what ThreadSanitizer cannot model).
    std::atomic_signal_fence(std::memory_order_release);
    if (!h->published) {
      slot_fold(h);
      g_proc->folds_done.fetch_add(1, std::memory_order_release);
    }
  } else if (!(h = heap_new())) {
    return nullptr;
  }
  if (h->pub.incarnation.load(std::memory_order_relaxed) == 0)
    h->pub.incarnation.store(1, std::memory_order_relaxed);
  g.heaps_owned.fetch_add(1, std::memory_order_relaxed);
  slot_begin(h);
  h->options_seen = 0;  // apply the current options at the first slow path
  // Not the trims before: they purged the page heap, and collected the heap if it was pooled.
  h->trim_seen = g_options.trim_request.load(std::memory_order_relaxed);
  heap_apply_options(h);
  h->active_ms.store(now_ms(), std::memory_order_relaxed);  // (adopted: not idle)
  tls_heap = h;
  // After tls_heap is set: pthread_setspecific may calloc for high key numbers.
  if (arm) pthread_setspecific(g.key, h);
  return h;
}

// The calling thread's heap, taken at its first use; nullptr when none can be had, and in a
// thread whose key destructor gave its heap up (see tls_exited): a free there takes no heap.
inline heap* caller_heap() noexcept {
  heap* h = tls_heap;
  return h != &g_empty_heap ? h : tls_exited ? nullptr : thread_init();
}

// --- small allocation -------------------------------------------------------------------------

// Finds a page of class `cls` with a free block and makes it the current page; nullptr if none.
inline page* find_page(heap* h, unsigned cls) noexcept {
  for (page* pg = h->queues[cls].first; pg;) {
    page* next = pg->next;
    if (!pg->free) {
      pg->free = pg->local_free;
      pg->local_free = nullptr;
    }
    if (!pg->free) page_extend(pg);
    if (pg->free) {
      if (pg != h->queues[cls].first) {
        queue_remove(h, pg);
        queue_push_front(h, pg);
      }
      if (pg->kept_empty) {
        pg->kept_empty = 0;
        --h->kept_empty[cls];
        unbump(h->stats[cls].v[c_pages_kept]);
      }
      return pg;
    }
    queue_remove(h, pg);
    pg->in_full = 1;
    pg = next;
  }
  return nullptr;
}

// A new span of class `cls`, the current page (nullptr when no memory is to be had).
inline page* page_new(heap* h, unsigned cls) noexcept {
  page* pg = page_alloc(h, cls);
  if (!pg) return nullptr;
  queue_push_front(h, pg);
  page_extend(pg);
  return pg;
}

// Blocks other threads freed for an idle thread wait in its inbox until it wakes: a producer that
// built a structure and sleeps while others free it would have them take new spans for all they
// build next. A thread about to take a new span looks at the inboxes at most once per idle_reclaim
// ms, kReclaimLook heaps at a time (on from where it stopped: a look costs the same with thousands
// of threads), and takes every one whose owner has had no slow path for that long, as a lock-free
// exchange (the owner's drain is one too). The blocks are then as those it kept from its own
// remote frees (keep_foreign), already counted sent by their freeing threads: reused through the
// foreign list of their class, with the room it has, and counted foreign allocations. Blocks of a
// class this thread has never allocated go back (they would only wait here instead).
constexpr std::size_t kReclaimLook = 64;
inline void reclaim_idle_inboxes(heap* h, std::uint64_t now, std::uint64_t idle) noexcept {
  std::size_t look = g.heap_count.load(std::memory_order_relaxed);
  if (look > kReclaimLook) look = kReclaimLook;
  heap* o = h->reclaim_next;  // (heaps are never unlinked from all_heaps)
  for (; look; --look, o = o->next_all) {
    if (!o) o = g.all_heaps.load(std::memory_order_acquire);
    if (o == h || !o->inbox.load(std::memory_order_relaxed) ||
        o->active_ms.load(std::memory_order_relaxed) + idle > now ||
        o->state.load(std::memory_order_relaxed) != kHeapOwned)
      continue;
    block* b = o->inbox.exchange(nullptr, std::memory_order_acquire);
    if (!b) continue;
    if (!h->reclaim_pending) {
      h->reclaim_pending = b;
    } else {
      b->ahead = h->reclaim_chains;
      h->reclaim_chains = b;
    }
  }
  h->reclaim_next = o;
}

// Sorts taken blocks into `reclaimed` by class, kReclaimStep at a time (up to kReclaimSearch
// while none of `cls` has come): an inbox can hold a whole structure's blocks, and sorting them at
// once made one malloc walk them all (128 MiB of blocks: 18-20 ms), each a cache miss, and each a
// miss again when it was reused. A few hundred at a time, they are reused while still in cache.
constexpr std::size_t kReclaimStep = 256;
constexpr std::size_t kReclaimSearch = 4096;
inline void reclaim_sort(heap* h, unsigned cls) noexcept {
  for (std::size_t n = 0; n < kReclaimSearch && (n < kReclaimStep || !h->reclaimed[cls]); ++n) {
    block* b = h->reclaim_pending;
    if (!b) {
      if (!(b = h->reclaim_chains)) break;
      h->reclaim_chains = b->ahead;
      b->ahead = nullptr;
    }
    h->reclaim_pending = b->next;
    __builtin_prefetch(b->ahead, 1, 3);
    const unsigned c = class_of_block(b);
    if (h->recent[c].limit == 0) {
      outbox_add(h, owner_of_block(b), b);
      continue;
    }
    b->next = h->reclaimed[c];
    h->reclaimed[c] = b;
  }
  outbox_flush(h);
}

// The taken inbox after `chain`, when walking them all: reclaim_pending first, then the others.
inline block* next_taken(const heap* h, const block* chain) noexcept {
  return chain == h->reclaim_pending ? h->reclaim_chains : chain->ahead;
}

// Moves reclaimed blocks of `cls` onto its foreign list, as far as the list has room, after
// sorting more taken blocks, or taking idle heaps' inboxes, if there are none: true if the foreign
// list has a block.
LIVEALLOC_NOINLINE inline bool take_idle_frees(heap* h, unsigned cls) noexcept {
  if (!h->reclaimed[cls]) {
    if (!h->reclaim_pending) {  // (and so no chains)
      const auto idle = static_cast<std::uint64_t>(option(opt_idle_reclaim));
      const std::uint64_t now = now_ms();
      if (idle == 0 || now < h->last_reclaim + idle) return false;
      h->last_reclaim = now;
      reclaim_idle_inboxes(h, now, idle);
    }
    reclaim_sort(h, cls);
  }
  recent_list& r = h->recent[cls];
  for (block* b; r.room != 0 && (b = h->reclaimed[cls]) != nullptr; --r.room) {
    h->reclaimed[cls] = b->next;
    b->next = r.foreign;
    r.foreign = b;
  }
  return r.foreign != nullptr;
}

#if LIVEALLOC_CHECKED
inline void checked_on_alloc(page* pg, block* b) noexcept {
  std::size_t i = static_cast<std::size_t>(reinterpret_cast<std::uint8_t*>(b) - page_start(pg)) /
                  pg->block_size;
  pg->live_bits[i / 64].fetch_or(std::uint64_t(1) << (i % 64), std::memory_order_relaxed);
}
#endif

LIVEALLOC_ALWAYS_INLINE void* take_block(heap* h, page* pg, unsigned cls,
                                         std::size_t size) noexcept {
  block* b = pg->free;
  pg->free = b->next;  // (never b itself: page_return_block checks what it links)
  ++pg->used;
  class_counters& c = h->stats[cls];
  bump(c.v[c_allocs]);
  bump(c.v[c_requested_bytes], size);
#if LIVEALLOC_CHECKED
  checked_on_alloc(pg, b);
#endif
  return b;
}

// Records the live blocks of a class if they are a new high (slow paths only).
inline void note_peak(heap* h, unsigned cls) noexcept {
  auto& k = h->stats[cls].v;
  std::uint64_t live = k[c_allocs].load(std::memory_order_relaxed) +
                       k[c_adopted].load(std::memory_order_relaxed) -
                       k[c_frees].load(std::memory_order_relaxed) -
                       k[c_large_freed_by_others].load(std::memory_order_relaxed) -
                       k[c_foreign_allocs].load(std::memory_order_relaxed);
  if (static_cast<std::int64_t>(live) > static_cast<std::int64_t>(k[c_peak_live].load(std::memory_order_relaxed)))
    k[c_peak_live].store(live, std::memory_order_relaxed);
}

// At a refill: a class whose frees overflowed its recent-free list between this refill and the
// last, twice in a row, keeps blocks it will need again soon (random sizes churning over more
// blocks than the list holds). Its limit grows by the start value, up to recent_cap. A thread
// that builds and then frees (one overflow, then refills without) never grows its lists.
inline void recent_grow(recent_list& r, unsigned cls) noexcept {
  if (!r.overflowed) {
    r.streak = 0;
    return;
  }
  r.overflowed = false;
  if (++r.streak < 2) return;
  r.streak = 0;
  const std::uint16_t cap = recent_cap(cls), step = recent_limit(cls);
  const std::uint16_t grow = static_cast<std::uint16_t>(cap - r.limit < step ? cap - r.limit : step);
  r.limit = static_cast<std::uint16_t>(r.limit + grow);
  r.room += grow;
}

LIVEALLOC_ALWAYS_INLINE void* allocate_from(heap* h, unsigned cls, std::size_t size) noexcept;

// A malloc in a thread whose key destructor already gave its heap up (tls_exited): another key's
// destructor allocates. The block comes from a heap borrowed from the pool and given back at once.
// A heap taken for good would stay owned when that was glibc's last destructor round, by a thread
// that is gone, with every block freed to it since.
LIVEALLOC_NOINLINE inline void* allocate_exiting(unsigned cls, std::size_t size) noexcept {
  heap* h = thread_init(false);
  if (!h) {
    errno = ENOMEM;
    return nullptr;
  }
  void* b = allocate_from(h, cls, size);
  tls_heap = &g_empty_heap;
  heap_abandon(h);
  return b;
}

LIVEALLOC_NOINLINE inline void* allocate_slow(unsigned cls, std::size_t size) noexcept {
  heap* h = tls_heap;
  if (LIVEALLOC_UNLIKELY(h == &g_empty_heap)) {
    if (tls_exited) return allocate_exiting(cls, size);
    if (!(h = thread_init())) {
      errno = ENOMEM;
      return nullptr;
    }
  }
  return allocate_from(h, cls, size);
}

// A thread whose frees and mallocs balance can live on its recent-free lists and never reach a
// slow path; every kMaintainEvery allocations of a class from that list it still does the slow
// path's upkeep: tuning requests apply, batches of remote frees go out and come in.
constexpr std::uint64_t kMaintainEvery = 4096;
// Returns b, so that the fast path calls it last (a tail call) and keeps nothing for after it.
__attribute__((returns_nonnull)) LIVEALLOC_NOINLINE inline void* recent_maintain(heap* h,
                                                                            block* b) noexcept {
  heap_maintain(h);
  return b;
}

// Counts an allocation served from a recent-free or foreign list, whose page already counts the
// block used. A foreign block is an allocation of this thread and once more a foreign one, since it
// stays in its owner's live count (c_allocs first, so that a reader never sees live too low).
LIVEALLOC_ALWAYS_INLINE void* take_listed(heap* h, block* b, unsigned cls, std::size_t size,
                                          bool foreign) noexcept {
  ++h->recent[cls].room;
  class_counters& c = h->stats[cls];
  const std::uint64_t allocs = c.v[c_allocs].load(std::memory_order_relaxed) + 1;
  c.v[c_allocs].store(allocs, std::memory_order_relaxed);
  bump(c.v[c_requested_bytes], size);
  if (foreign) {
    auto& f = c.v[c_foreign_allocs];
    f.store(f.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }
#if LIVEALLOC_CHECKED
  checked_on_alloc(page_of(b), b);
#endif
  if (LIVEALLOC_UNLIKELY(allocs % kMaintainEvery == 0)) return recent_maintain(h, b);
  return b;
}

// A block whose link points at itself was freed twice with no other free of its class by that
// thread between (`free(p); free(p);`, the double free glibc's fastbin check catches): the list
// would hand it out at every malloc from then on. Found where the block is taken, not where it is
// freed: the compare in the fast path of free took it into a third cache line (2.5% on the fast
// path at 64 B), and malloc's spans three with or without it. Pages and outboxes compare a block
// with their list's head as they link it. A misaligned pointer freed is found at the same places
// (bad_link). The checked mode (liblivealloc-checked.so) finds every double free, at the free.
LIVEALLOC_ALWAYS_INLINE void* take_recent(heap* h, block* b, unsigned cls,
                                          std::size_t size) noexcept {
  block* next = b->next;
  if (LIVEALLOC_UNLIKELY(bad_link(b, next))) return bad_block(b, next);
  h->recent[cls].head = next;
  return take_listed(h, b, cls, size, false);
}

LIVEALLOC_NOINLINE LIVEALLOC_HOT inline void* take_foreign(heap* h, block* b, unsigned cls,
                                                           std::size_t size) noexcept {
  block* next = b->next;
  if (LIVEALLOC_UNLIKELY(bad_link(b, next))) return bad_block(b, next);
  h->recent[cls].foreign = next;
  return take_listed(h, b, cls, size, true);
}

// The slow path's work once the thread has its heap (inline in both callers).
LIVEALLOC_ALWAYS_INLINE void* allocate_from(heap* h, unsigned cls, std::size_t size) noexcept {
  heap_maintain(h);
  bump(h->stats[cls].v[c_refills]);
  bump(h->pub.slow_paths);
  recent_list& r = h->recent[cls];
  if (LIVEALLOC_UNLIKELY(r.limit == 0))
    r.room = r.limit = recent_limit(cls);  // opens the class's lists (0 above kRecentMaxSize)
  else
    recent_grow(r, cls);
  // Reclaimed blocks first (they are resident and would only wait), then the pages, and a look at
  // idle threads' inboxes before a new span.
  page* pg = h->reclaimed[cls] ? nullptr : find_page(h, cls);
  if (!pg) {
    if (take_idle_frees(h, cls)) return take_foreign(h, r.foreign, cls, size);
    if (!(pg = find_page(h, cls)) && !(pg = page_new(h, cls))) {
      errno = ENOMEM;
      return nullptr;
    }
  }
  void* b = take_block(h, pg, cls, size);
  note_peak(h, cls);
  return b;
}

// What malloc does when the fast path cannot serve (new_slow_path is operator new's).
struct malloc_slow_path {
  static void* call(unsigned cls, std::size_t size) noexcept { return allocate_slow(cls, size); }
  static void* large(std::size_t size) noexcept;  // (below allocate_large)
};

// The fast path of malloc and of operator new, which differ in their slow path only. New's never
// returns nullptr (new_slow_path), so no path of new keeps the size for a check after a call, and
// neither saves a register: one call after another on the fast path cost a push and a pop.
template <class SlowPath>
LIVEALLOC_ALWAYS_INLINE void* allocate_class_as(unsigned cls, std::size_t size) noexcept(
    noexcept(SlowPath::call(0u, std::size_t(0)))) {
  heap* h = tls_heap;
  recent_list& r = h->recent[cls];
  if (LIVEALLOC_UNLIKELY(r.foreign != nullptr)) return take_foreign(h, r.foreign, cls, size);
  if (block* b = r.head) return take_recent(h, b, cls, size);
  page* pg = h->direct[cls];
  if (LIVEALLOC_LIKELY(pg->free != nullptr)) return take_block(h, pg, cls, size);
  return SlowPath::call(cls, size);
}
LIVEALLOC_ALWAYS_INLINE void* allocate_class(unsigned cls, std::size_t size) noexcept {
  return allocate_class_as<malloc_slow_path>(cls, size);
}

// --- large allocation ---------------------------------------------------------------------------

inline large_header* large_of(const void* p) noexcept {
  auto a = reinterpret_cast<std::uintptr_t>(p);
  if ((a & kSegmentMask) == 0) return reinterpret_cast<large_header*>(a - kLargeHeader);
  return reinterpret_cast<large_header*>(a & ~kSegmentMask);
}

// Unmaps every cached mapping (trim, or before retrying a failed mmap).
inline bool large_cache_clear() noexcept {
  large_cache_entry gone[kLargeCacheSlots];
  unsigned n;
  {
    lock_guard guard(g.large_lock);
    n = g.large_cache_count;
    for (unsigned i = 0; i < n; ++i) {
      gone[i] = g.large_cache[i];
      sub(g_proc->cached_bytes, gone[i].size);
    }
    g.large_cache_count = 0;
    g.large_cache_deadline.store(0, std::memory_order_relaxed);
  }
  for (unsigned i = 0; i < n; ++i) os_unmap(gone[i].base, gone[i].size);
  return n > 0;
}

inline void large_cache_put(std::uint8_t* base, std::size_t size, std::uint64_t area) noexcept;

// A new large_cache_entry::area, for a mapping the kernel just made.
inline std::uint64_t large_new_area() noexcept {
  return g.large_areas.fetch_add(1, std::memory_order_relaxed) + 1;
}

// Resizes a cached mapping (4 MiB-aligned base) for a request of `need` bytes and sets *out to
// its new size. One up to twice as large is kept whole. A larger one is split at the first
// 4 MiB boundary past `need`: the rest stays mapped (and resident) and goes back to the cache as
// an entry of its own, where the head joins it again once freed (large_cache_put), so a later,
// larger request can have the whole without faulting its pages in again. A smaller one grows in place or moves its pages (mremap, no
// copy) to a new aligned range, which is a new kernel area (*area). Its resident pages are what
// make the reuse worth it. nullptr (and the mapping unmapped) if the move fails.
inline std::uint8_t* large_fit(std::uint8_t* base, std::size_t size, std::size_t need,
                               std::size_t* out, std::uint64_t* area) noexcept {
  errno_keeper errno_kept;  // nullptr is not final: the caller maps anew, or sets ENOMEM
  *out = size;
  if (size >= need && size / 2 <= need) return base;  // close enough: keep it whole
  if (size > need) {
    const std::size_t keep = round_up(need, kSegmentSize);
    if (keep < size) {
      large_cache_put(base + keep, size - keep, *area);
      *out = keep;
    }
    return base;
  }
  *out = need;
  if (mremap(base, size, need, 0) != MAP_FAILED) return base;
  void* target = os_map_aligned(need, kSegmentSize);
  void* moved = target ? mremap(base, size, need, MREMAP_MAYMOVE | MREMAP_FIXED, target)
                       : MAP_FAILED;
  if (moved == MAP_FAILED) {
    if (target) os_unmap(target, need);
    os_unmap(base, size);
    return nullptr;
  }
  *area = large_new_area();
  return static_cast<std::uint8_t*>(moved);
}

// Removes cache entry `i` and returns it; call with large_lock held.
inline large_cache_entry large_cache_remove(unsigned i) noexcept {
  large_cache_entry e = g.large_cache[i];
  g.large_cache[i] = g.large_cache[--g.large_cache_count];
  sub(g_proc->cached_bytes, e.size);
  if (g.large_cache_count == 0) g.large_cache_deadline.store(0, std::memory_order_relaxed);
  return e;
}

// At a slow path, whichever thread's, once a cached mapping has expired: unmaps at most
// `units` of it (purge_step), the oldest first. Of a larger one only the tail goes, and the rest
// stays cached, expired, so the deadline stays due and the next slow path goes on: no malloc
// waits for the munmap of a 128 MiB block another thread freed (6 ms here).
inline void large_cache_sweep_step(std::uint64_t now, unsigned units) noexcept {
  const std::size_t step = std::size_t(units) << kUnitShift;
  large_cache_entry gone{nullptr, 0, 0, 0};
  {
    lock_guard guard(g.large_lock);
    int oldest = -1;
    for (unsigned i = 0; i < g.large_cache_count; ++i)
      if (now >= g.large_cache[i].expires &&
          (oldest < 0 || g.large_cache[i].expires < g.large_cache[oldest].expires))
        oldest = static_cast<int>(i);
    if (oldest >= 0) {
      large_cache_entry& e = g.large_cache[oldest];
      if (e.size > step) {
        e.size -= step;
        gone = {e.base + e.size, step, 0, e.area};
        sub(g_proc->cached_bytes, step);
      } else {
        gone = large_cache_remove(static_cast<unsigned>(oldest));
      }
    }
    large_cache_set_deadline();
  }
  if (gone.size) os_unmap(gone.base, gone.size);
}

// Extends the mapping [base, base + *size) by the cached entries right after it in the same
// kernel area (pieces split off it by large_fit) until it holds `need` bytes; call with
// large_lock held.
inline void large_cache_absorb(std::uint8_t* base, std::size_t* size, std::size_t need,
                               std::uint64_t area) noexcept {
  for (unsigned i = 0; *size < need && i < g.large_cache_count;) {
    if (g.large_cache[i].base != base + *size || g.large_cache[i].area != area) {
      ++i;
      continue;
    }
    *size += large_cache_remove(i).size;
    i = 0;  // the next piece may sit anywhere in the table
  }
}

// The cached mapping that shares the most resident bytes with a request of `need` bytes (the
// least waste among equals), resized to `need`; *area is set to its kernel area. A loop of large
// allocations of varying sizes then reuses the pages it touched last time instead of faulting in
// new ones.
inline std::uint8_t* large_cache_take(std::size_t need, std::size_t* size,
                                      std::uint64_t* area) noexcept {
  if (g.large_cache_deadline.load(std::memory_order_relaxed) == 0) return nullptr;  // empty
  large_cache_entry e;
  {
    lock_guard guard(g.large_lock);
    int best = -1;
    std::size_t best_shared = 0, best_waste = 0;
    for (unsigned i = 0; i < g.large_cache_count; ++i) {
      std::size_t s = g.large_cache[i].size;
      std::size_t shared = s < need ? s : need;
      std::size_t waste = s > need ? s - need : need - s;
      if (best < 0 || shared > best_shared || (shared == best_shared && waste < best_waste)) {
        best = static_cast<int>(i);
        best_shared = shared;
        best_waste = waste;
      }
    }
    if (best < 0) return nullptr;
    e = large_cache_remove(static_cast<unsigned>(best));
  }
#if LIVEALLOC_CHECKED
  chunk_mark(e.base, e.size, 0);
#endif
  *area = e.area;
  return large_fit(e.base, e.size, need, size, area);
}

// Grows the live mapping [base, base + *size) to `need` bytes with cached memory: the cached
// pieces right after it, or else the smallest cached mapping with room for `need` and half as
// much again as it holds now, into which it is copied (the copy reads and writes resident pages;
// the old mapping goes to the cache). A buffer that grows step by step (realloc) then writes into
// pages it touched before instead of faulting in fresh ones at every step; with the room, one
// copy serves several steps. Failing that, the largest cached mapping that is larger than the
// live one, grown to `need` first: the buffer faults in fewer fresh pages, and the cache gives
// up more resident memory than it takes back, where growing the live mapping in place would
// leave the cache untouched and the process larger by the whole step. (Moving the pages with
// mremap would leave the mapping in two kernel areas that a later mremap cannot grow or move as
// one.) Returns the mapping's base with *size and *area set, or nullptr when the cache has
// nothing to offer (*size may then have grown by the pieces taken back).
inline std::uint8_t* large_cache_grow(std::uint8_t* base, std::size_t* size, std::size_t need,
                                      std::uint64_t* area) noexcept {
  if (g.large_cache_deadline.load(std::memory_order_relaxed) == 0) return nullptr;  // empty
  const std::size_t live = *size;  // the bytes to copy if it moves
  large_cache_entry e{nullptr, 0, 0, 0};
  {
    lock_guard guard(g.large_lock);
    large_cache_absorb(base, size, need, *area);
    if (*size < need) {
      const std::size_t want = need > *size + *size / 2 ? need : *size + *size / 2;
      int best = -1, largest = -1;
      for (unsigned i = 0; i < g.large_cache_count; ++i) {
        std::size_t s = g.large_cache[i].size;
        if (s >= want && (best < 0 || s < g.large_cache[best].size)) best = static_cast<int>(i);
        if (s > *size && (largest < 0 || s > g.large_cache[largest].size)) largest = static_cast<int>(i);
      }
      if (best < 0) best = largest;
      if (best < 0) return nullptr;
      e = large_cache_remove(static_cast<unsigned>(best));
    }
  }
  if (e.base) {
#if LIVEALLOC_CHECKED
    chunk_mark(e.base, e.size, 0);
#endif
    if (e.size < need) {  // grown before the copy: if that fails, the live mapping is untouched
      std::size_t grown = 0;
      if (!(e.base = large_fit(e.base, e.size, need, &grown, &e.area))) return nullptr;  // (e unmapped)
      e.size = grown;
    }
#if LIVEALLOC_CHECKED
    chunk_mark(base, *size, 0);
#endif
    memcpy(e.base, base, live);
    large_cache_put(base, *size, *area);
    base = e.base;
    *size = e.size;
    *area = e.area;
  }
  return large_fit(base, *size, need, size, area);  // *size >= need: trims, never fails
}

// Keeps a freed mapping for reuse within the large_cache budget for purge_delay ms; a loop of
// large allocations then pays neither mmap nor page faults. It is merged with the cached pieces of
// its kernel area on either side (the rest of a mapping large_fit split), so a later request can
// have the whole again. The oldest entries make room, unmapped here (the price of caching this
// one); expired ones go a step at a time, at slow paths and here.
inline void large_cache_put(std::uint8_t* base, std::size_t size, std::uint64_t area) noexcept {
  const std::size_t limit = static_cast<std::size_t>(option(opt_large_cache)) << 20;
  const std::uint64_t delay = static_cast<std::uint64_t>(option(opt_purge_delay));
  const std::uint64_t now = now_ms();
  large_cache_entry gone[kLargeCacheSlots + 1];
  unsigned n = 0;
  bool first_cached = false;  // a deadline where there was none: a sleeping purge thread wakes
  if (size <= limit && delay > 0) {
    lock_guard guard(g.large_lock);
    for (unsigned i = 0; i < g.large_cache_count;) {
      const large_cache_entry& e = g.large_cache[i];
      if (e.area != area || e.size > limit - size ||
          (e.base + e.size != base && base + size != e.base)) {
        ++i;
        continue;
      }
      if (e.base < base) base = e.base;
      size += large_cache_remove(i).size;
      i = 0;
    }
    std::size_t bytes = 0;
    for (unsigned i = 0; i < g.large_cache_count; ++i) bytes += g.large_cache[i].size;
    while (g.large_cache_count > 0 &&
           (bytes + size > limit || g.large_cache_count == kLargeCacheSlots)) {
      unsigned oldest = 0;
      for (unsigned i = 1; i < g.large_cache_count; ++i)
        if (g.large_cache[i].expires < g.large_cache[oldest].expires) oldest = i;
      gone[n++] = g.large_cache[oldest];
      bytes -= g.large_cache[oldest].size;
      sub(g_proc->cached_bytes, g.large_cache[oldest].size);
      g.large_cache[oldest] = g.large_cache[--g.large_cache_count];
    }
    g.large_cache[g.large_cache_count++] = {base, size, now + delay, area};
    add(g_proc->cached_bytes, size);
    std::uint64_t d = g.large_cache_deadline.load(std::memory_order_relaxed);
    if (d == 0 || now + delay < d) g.large_cache_deadline.store(now + delay, std::memory_order_relaxed);
    first_cached = d == 0;
  } else {
    gone[n++] = {base, size, 0, area};
  }
  if (first_cached) background_wake();
  for (unsigned i = 0; i < n; ++i) os_unmap(gone[i].base, gone[i].size);
  const std::uint64_t due = g.large_cache_deadline.load(std::memory_order_relaxed);
  if (purge_here(now, due)) large_cache_sweep_step(now, kPurgeStepMax);
}

inline void large_init_header(large_header* hdr, std::uint8_t* base, std::size_t map_size,
                              std::size_t usable, std::size_t requested,
                              std::uint64_t area) noexcept {
  hdr->magic = kMagic;
  hdr->kind = kKindLarge;
  hdr->base = base;
  hdr->map_size = map_size;
  hdr->area = area;
  hdr->usable = usable;
  hdr->requested = requested;
#if LIVEALLOC_CHECKED
  hdr->live.store(1, std::memory_order_relaxed);
  chunk_mark(base, map_size, 2);
#endif
  add(g_proc->large_bytes, map_size);
  add(g.large_count, 1);
}

// Large blocks count in class 0 of the allocating thread. A free by another thread counts as
// remote_sent for it and as large_freed_by_others (an atomic add) for the allocating one.
inline void large_count_alloc(large_header* hdr, std::size_t size) noexcept {
  heap* h = caller_heap();
  hdr->owner = h;
  if (!h) return;
  bump(h->stats[0].v[c_allocs]);
  bump(h->stats[0].v[c_requested_bytes], size);
  add(g.large_allocated_bytes, hdr->usable);
  note_peak(h, 0);
}
inline void large_count_free(large_header* hdr) noexcept {
  heap* h = caller_heap();
  if (h && h == hdr->owner) {
    bump(h->stats[0].v[c_frees]);
    return;
  }
  if (h) {
    bump(h->stats[0].v[c_remote_sent]);
    matrix_count(h, hdr->owner);
  }
  if (hdr->owner)
    hdr->owner->stats[0].v[c_large_freed_by_others].fetch_add(1, std::memory_order_relaxed);
}

// `align` is a power of two >= 16. Sets *fresh when the memory comes straight from mmap (zeros).
LIVEALLOC_NOINLINE inline void* allocate_large(std::size_t size, std::size_t align,
                                               bool* fresh = nullptr) noexcept {
  if (!process_init()) {
    errno = ENOMEM;
    return nullptr;
  }
  background_check();
  std::size_t need;
  if (size > PTRDIFF_MAX || align > (std::size_t(1) << 40)) {
    errno = ENOMEM;
    return nullptr;
  }
  // The user pointer stays inside the first 64 KiB of the mapping, where no small block is: that
  // is how free tells the two apart (free_dispatch). Larger alignments take the path below.
  if (align < kUnitSize) {
    std::size_t off = align > kLargeHeader ? align : kLargeHeader;
    need = round_up(off + size, kOsPage);
    std::size_t map_size = 0;
    std::uint64_t area = 0;
    std::uint8_t* base = large_cache_take(need, &map_size, &area);
    if (fresh) *fresh = base == nullptr;
    if (!base) {
      base = static_cast<std::uint8_t*>(map_reclaiming(need, kSegmentSize));
      map_size = need;
      if (!base) {
        errno = ENOMEM;
        return nullptr;
      }
      if (option(opt_hugepages)) os_hugepages(base, map_size);
      area = large_new_area();
    }
    large_init_header(object_at<large_header>(base), base, map_size, map_size - off, size,
                      area);
    large_count_alloc(object_at<large_header>(base), size);
    return base + off;
  }
  // Alignment of 64 KiB or more: the user pointer is aligned to 4 MiB (at least), the header right
  // before it. The first 4 MiB are address space only: the header's page is all that is touched.
  if (align < kSegmentSize) align = kSegmentSize;
  need = round_up(size, kOsPage) + align;
  auto* base = static_cast<std::uint8_t*>(map_reclaiming(need, align));
  if (!base) {
    errno = ENOMEM;
    return nullptr;
  }
  if (fresh) *fresh = true;
  std::uint8_t* user = base + align;
  large_init_header(object_at<large_header>(user - kLargeHeader), base, need, need - align,
                    size, 0);  // never cached
  large_count_alloc(object_at<large_header>(user - kLargeHeader), size);
  return user;
}

inline void free_large(large_header* hdr) noexcept {
  hdr->kind = kKindLargeFreed;
  large_count_free(hdr);
  sub(g_proc->large_bytes, hdr->map_size);
  sub(g.large_count, 1);
  std::uint8_t* base = hdr->base;
  std::size_t size = hdr->map_size;
  if (reinterpret_cast<std::uint8_t*>(hdr) == base) {
    large_cache_put(base, size, hdr->area);
  } else {
#if LIVEALLOC_CHECKED
    chunk_mark(base, size, 0);
#endif
    os_unmap(base, size);
  }
}

// --- checked mode --------------------------------------------------------------------------------

#if LIVEALLOC_CHECKED
// Validates a pointer about to be freed and marks it free; aborts with the address otherwise.
// For realloc and malloc_usable_size (`use`), validates it and leaves it live (realloc_move
// frees it after the copy).
inline void checked_free(const void* p, std::size_t size, bool sized,
                         pointer_use use = pointer_use::free) noexcept {
  const bool keep_live = use != pointer_use::free;  // realloc, usable size: only validated
  const char* const never = never_returned(use);
  const char* const twice = already_freed(use);
  auto a = reinterpret_cast<std::uintptr_t>(p);
  std::uint8_t kind = chunk_kind(p);
  if ((a & kSegmentMask) == 0 && a >= kLargeHeader) kind = chunk_kind(reinterpret_cast<const void*>(a - kLargeHeader)) == 2 ? 2 : 0;
  if (kind == 1 && (a & kSegmentMask) != 0) {
    auto* s = reinterpret_cast<segment*>(a & ~kSegmentMask);
    page* pg = s->pages[(a & kSegmentMask) >> kUnitShift].span;
    if (s->magic != kMagic || s->kind != kKindSegment || !pg || !pg->owner ||
        a < reinterpret_cast<std::uintptr_t>(page_start(pg)))
      fatal(never, p);
    std::size_t off = a - reinterpret_cast<std::uintptr_t>(page_start(pg));
    std::size_t i = off / pg->block_size;
    if (off % pg->block_size != 0 || i >= pg->reserved)
      fatal(never, p);
    std::uint64_t bit = std::uint64_t(1) << (i % 64);
    if (sized && (size > pg->block_size))
      fatal("sized free with a size larger than the block:", p);
    std::atomic<std::uint64_t>& live = pg->live_bits[i / 64];
    if (!((keep_live ? live.load(std::memory_order_relaxed)
                     : live.fetch_and(~bit, std::memory_order_relaxed)) & bit))
      fatal(twice, p);
    return;
  }
  if (kind == 2) {
    large_header* hdr = large_of(p);
    if (hdr->magic != kMagic || (hdr->kind != kKindLarge && hdr->kind != kKindLargeFreed) ||
        a != reinterpret_cast<std::uintptr_t>(hdr->base) + hdr->map_size - hdr->usable)
      fatal(never, p);
    if (sized && size > hdr->usable) fatal("sized free with a size larger than the block:", p);
    if ((keep_live ? hdr->live.load(std::memory_order_relaxed)
                   : hdr->live.exchange(0, std::memory_order_relaxed)) != 1)
      fatal(twice, p);
    return;
  }
  fatal(never, p);
}
#endif

// --- free ------------------------------------------------------------------------------------

// Where a pointer sits in its 4 MiB chunk tells what it is, without a load: at offset 0, nullptr or
// a large block aligned to 4 MiB or more; elsewhere in the first 64 KiB unit, a large block after
// its header at the start of the mapping (a segment's first unit holds its header, never blocks);
// beyond, a small block.
LIVEALLOC_ALWAYS_INLINE bool is_large(const void* p) noexcept {
  return (reinterpret_cast<std::uintptr_t>(p) & kSegmentMask) < kUnitSize;
}

// A block of another heap, freed by `h`'s thread: kept on its foreign list of the class while the
// recent-free lists have room, so a malloc here reuses it while it is hot in this core's cache (its
// owner still counts it used; see take_foreign). Not above kForeignMaxClass, and never a block of
// an exited thread's heap: that goes home at once, where the heap can be collected. Counts the
// block sent when it keeps it.
LIVEALLOC_ALWAYS_INLINE bool keep_foreign(heap* h, heap* owner, unsigned cls, block* b) noexcept {
  recent_list& r = h->recent[cls];
  if (cls > kForeignMaxClass || r.room == 0 ||
      owner->state.load(std::memory_order_relaxed) != kHeapOwned)
    return false;
  --r.room;
  b->next = r.foreign;
  r.foreign = b;
  bump(h->stats[cls].v[c_remote_sent]);
  matrix_count(h, owner);
  return true;
}

// A remote free that keep_foreign did not keep (free_small tried it): a thread without a heap gets
// one first (and may keep the block then), unless it is exiting; else the block is gathered in
// the outbox for its owner.
LIVEALLOC_NOINLINE inline void free_remote(heap* owner, unsigned cls, block* b) noexcept {
  heap* h = tls_heap;
  if (h == &g_empty_heap) {
    h = caller_heap();
    if (LIVEALLOC_UNLIKELY(!h)) {  // no heap to be had: send it back alone
      b->next = nullptr;
      b->ahead = nullptr;
      inbox_push(owner, b, b);
      return;
    }
    if (owner == h) {  // the heap this thread adopted may own the page
      page_free_block(h, page_of(b), b);
      return;
    }
    if (keep_foreign(h, owner, cls, b)) return;
  }
  // A thread that only frees others' blocks (a consumer) has no allocation slow path: it applies
  // new options here, where remote_batch acts.
  if (LIVEALLOC_UNLIKELY(h->options_seen != options_gen())) heap_apply_options(h);
  bump(h->stats[cls].v[c_remote_sent]);
  matrix_count(h, owner);
  outbox_add(h, owner, b);
}

// The owner and class come from the segment header, never from the page descriptor. Keeping a
// remote free is inline: where threads free each other's blocks, the branch on the owner goes
// either way, and a call on top of it cost crossthread a2a 3-8%.
LIVEALLOC_ALWAYS_INLINE void free_small(void* p) noexcept {
  const unit_info& u = unit_of_block(p);
  const unsigned cls = u.cls;
  heap* h = tls_heap;
  heap* owner = u.owner;
  block* b = static_cast<block*>(p);
  if (LIVEALLOC_LIKELY(owner == h)) return heap_free_block(h, cls, b);
  if (LIVEALLOC_LIKELY(keep_foreign(h, owner, cls, b))) return;
  free_remote(owner, cls, b);
}

// The header of the large block that `p` (from is_large) must be, for free, realloc or its usable
// size (`use`): else aborts naming p. A block freed twice is found while its mapping is cached
// (the cache would hand it out twice; an unmapped one faults), and a pointer into a large block
// (the header says where the block starts) or into no block of ours, as glibc finds a misaligned
// chunk or a bad size.
inline large_header* large_block_of(const void* p, pointer_use use) noexcept {
  large_header* hdr = large_of(p);
  const bool start = static_cast<const std::uint8_t*>(p) == hdr->base + hdr->map_size - hdr->usable;
  if (LIVEALLOC_UNLIKELY(hdr->kind != kKindLarge || !start)) {
    if (hdr->kind == kKindLargeFreed && start) fatal(already_freed(use), p);
    fatal(never_returned(use), p);
  }
  return hdr;
}

// nullptr or a large block (see is_large).
LIVEALLOC_NOINLINE inline void free_not_small(void* p) noexcept {
  if (!p) return;
  free_large(large_block_of(p, pointer_use::free));
}

// Any pointer: nullptr, a large block or a small one.
LIVEALLOC_ALWAYS_INLINE void free_dispatch(void* p) noexcept {
  if (LIVEALLOC_UNLIKELY(is_large(p))) return free_not_small(p);
  free_small(p);
}

LIVEALLOC_ALWAYS_INLINE void free_impl(void* p) noexcept {
#if LIVEALLOC_CHECKED
  if (p) checked_free(p, 0, false);
#endif
  free_dispatch(p);
}

// The size makes nothing cheaper: the pointer alone tells small from large, and the class comes
// from the segment header either way. The checked mode verifies it.
LIVEALLOC_ALWAYS_INLINE void free_sized_impl(void* p, [[maybe_unused]] std::size_t size) noexcept {
#if LIVEALLOC_CHECKED
  if (p) checked_free(p, size, true);
#endif
  free_dispatch(p);
}

// --- the rest of the malloc family ---------------------------------------------------------------

inline void* malloc_slow_path::large(std::size_t size) noexcept { return allocate_large(size, 16); }

// A size above 1 KiB, one call away from malloc_as: its class from the table, or a large block.
template <class SlowPath>
LIVEALLOC_NOINLINE LIVEALLOC_HOT inline void* malloc_medium(std::size_t size) noexcept(
    noexcept(SlowPath::call(0u, std::size_t(0)))) {
  if (size <= kMaxSmall)
    return allocate_class_as<SlowPath>(kClassTable.v[class_index_above_1k(size)], size);
  return SlowPath::large(size);
}

// malloc, and with new_slow_path operator new: one dispatch on the size, their slow paths apart.
template <class SlowPath>
LIVEALLOC_ALWAYS_INLINE void* malloc_as(std::size_t size) noexcept(
    noexcept(SlowPath::call(0u, std::size_t(0)))) {
  if (LIVEALLOC_LIKELY(size <= 1024)) return allocate_class_as<SlowPath>(size_class(size), size);
  return malloc_medium<SlowPath>(size);
}
LIVEALLOC_ALWAYS_INLINE void* malloc_impl(std::size_t size) noexcept {
  return malloc_as<malloc_slow_path>(size);
}

// A pointer into a block would be told more bytes than it has after it: aborts naming it where
// free would (and for a freed large block whose mapping is cached); the checked mode checks it
// as it checks free's.
inline std::size_t usable_size_impl(const void* p) noexcept {
#if LIVEALLOC_CHECKED
  if (p) checked_free(p, 0, false, pointer_use::usable_size);
#endif
  if (!p) return 0;
  if (is_large(p)) return large_block_of(p, pointer_use::usable_size)->usable;
  if (LIVEALLOC_UNLIKELY(misaligned(p))) fatal(never_returned(pointer_use::usable_size), p);
  return class_size(class_of_block(p));
}

// `align` must be a power of two (callers check).
inline void* aligned_impl(std::size_t size, std::size_t align) noexcept {
  if (align <= 16) return malloc_impl(size);
  if (align <= kUnitSize && size <= kMaxSmall) {
    // Spans start 64 KiB-aligned, so every block of a class whose size is a multiple of `align`
    // is aligned: no interior pointers, and free needs no special case.
    for (unsigned c = class_of(size < align ? align : size); c < kClasses; ++c)
      if (class_size(c) % align == 0) return allocate_class(c, size);
  }
  return allocate_large(size, align);
}

inline void* calloc_impl(std::size_t n, std::size_t size) noexcept {
  std::size_t total;
  if (__builtin_mul_overflow(n, size, &total)) {
    errno = ENOMEM;
    return nullptr;
  }
  if (total <= kMaxSmall) {
    void* p = allocate_class(size_class(total), total);
    return p ? memset(p, 0, total) : nullptr;  // (a tail call: memset returns p)
  }
  bool fresh = false;
  void* p = allocate_large(total, 16, &fresh);
  if (p && !fresh) memset(p, 0, total);
  return p;
}

// Grows or shrinks a large mapping in place, or moves its pages without copying (mremap).
inline void* realloc_large(void* p, std::size_t size) noexcept {
  errno_keeper errno_kept;  // nullptr is not final: realloc then copies, or sets ENOMEM
  large_header* hdr = large_of(p);
  if (reinterpret_cast<std::uint8_t*>(hdr) != hdr->base || size <= kMaxSmall) return nullptr;
  std::uint8_t* base = hdr->base;
  std::size_t off = static_cast<std::size_t>(static_cast<std::uint8_t*>(p) - base);
  if (size > PTRDIFF_MAX - off - kOsPage) return nullptr;
  std::size_t need = round_up(off + size, kOsPage);
  std::size_t old = hdr->map_size;
  if (need <= old) {
    // Until the request falls below half the largest one since the mapping last changed, the
    // mapping stays whole. The request, not the mapping, is the measure: growth into a cached
    // mapping (large_cache_grow) leaves resident pages past the request for the next steps.
    if (size >= hdr->requested / 2) {
      if (size > hdr->requested) hdr->requested = size;
      large_count_free(hdr);
      large_count_alloc(hdr, size);
      return p;
    }
#if LIVEALLOC_CHECKED
    // The record goes first, while the range is still ours: once unmapped, another thread's
    // new mapping may take it and record itself, which a late clear would erase.
    chunk_mark(base + need, old - need, 0);
    chunk_mark(base, need, 2);
#endif
    os_unmap(base + need, old - need);
  } else {
    std::size_t have = old;
    std::uint64_t area = hdr->area;
    std::uint8_t* grown = large_cache_grow(base, &have, need, &area);
    if (!grown) {
      hdr->map_size = have;  // with the pieces taken back, if any
      add(g_proc->large_bytes, have - old);
      old = have;
      grown = mremap(base, old, need, 0) != MAP_FAILED ? base : nullptr;
      have = need;
    }
    if (!grown) {
      void* target = os_map_aligned(need, kSegmentSize);
      if (!target) return nullptr;
#if LIVEALLOC_CHECKED
      chunk_mark(base, old, 0);  // before the move frees the range (above), back if it fails
#endif
      void* moved = mremap(base, old, need, MREMAP_MAYMOVE | MREMAP_FIXED, target);
      if (moved == MAP_FAILED) {
#if LIVEALLOC_CHECKED
        chunk_mark(base, old, 2);
#endif
        os_unmap(target, need);
        return nullptr;
      }
      grown = static_cast<std::uint8_t*>(moved);
      area = large_new_area();
    }
    if (grown != base) {
      base = grown;
      hdr = object_at<large_header>(base);
      hdr->base = base;
    }
    hdr->area = area;
    need = have;
  }
  add(g_proc->large_bytes, need);
  sub(g_proc->large_bytes, old);
  hdr->map_size = need;
  hdr->usable = need - off;
  hdr->requested = size;
  large_count_free(hdr);
  large_count_alloc(hdr, size);
#if LIVEALLOC_CHECKED
  chunk_mark(base, need, 2);
#endif
  return base + off;
}

// A realloc that moves the block, or frees it, or allocates: everything but a small block kept
// in place.
LIVEALLOC_NOINLINE inline void* realloc_move(void* p, std::size_t size) noexcept {
  if (!p) return malloc_impl(size);
  if (size == 0) {
    free_impl(p);
    return nullptr;
  }
  std::size_t usable;
  if (is_large(p)) {
    usable = large_block_of(p, pointer_use::realloc)->usable;
    if (void* q = realloc_large(p, size)) return q;
  } else {
    // A misaligned pointer is inside a block: copying from it would read the next block's bytes.
    if (misaligned(p)) fatal(never_returned(pointer_use::realloc), p);
    usable = class_size(class_of_block(p));
  }
  void* q;
  if (size > usable && size <= kMaxSmall) {  // (a large block's usable size is above kMaxSmall)
    // Growing a small block: by at least a quarter, so a buffer grown by small appends moves
    // (and is copied) once per 25% of growth rather than at every size class.
    std::size_t want = usable + usable / 4;
    q = allocate_class(size_class(want > size && want <= kMaxSmall ? want : size), size);
  } else {
    q = malloc_impl(size);
  }
  if (!q) return nullptr;  // p is untouched, errno is ENOMEM
  memcpy(q, p, usable < size ? usable : size);
  free_impl(p);
  return q;
}

// A small block stays where it is while the new size keeps its class's block at least half used:
// the common step of a buffer grown by appends. That path saves no registers and calls nothing;
// the rest is realloc_move.
inline void* realloc_impl(void* p, std::size_t size) noexcept {
#if LIVEALLOC_CHECKED
  if (p) checked_free(p, 0, false, pointer_use::realloc);
#endif
  if (LIVEALLOC_LIKELY(!is_large(p))) {  // (nullptr reads as large: realloc_move takes it)
    // The class and owner from the segment header, as free reads them.
    const unit_info& u = unit_of_block(p);
    const unsigned cls = u.cls;
    const std::size_t usable = class_size(cls);
    // (usable / 2 is 8 or more: size is not 0; a misaligned p is realloc_move's to refuse)
    if (size <= usable && size >= usable / 2 && LIVEALLOC_LIKELY(!misaligned(p))) {
      // A free and an allocation of the same block, in the owner's counts.
      heap* h = tls_heap;
      if (u.owner == h) {
        class_counters& c = h->stats[cls];
        bump(c.v[c_frees]);
        bump(c.v[c_allocs]);
        bump(c.v[c_requested_bytes], size);
      }
      return p;
    }
  }
  return realloc_move(p, size);
}

// The calling thread's part of trim: its lists and empty pages to the page heap.
inline bool trim_thread_impl() noexcept {
  heap* h = tls_heap;
  if (h == &g_empty_heap) return false;
  outbox_flush(h);
  heap_drain_inbox(h);
  heap_flush_recent(h, false);
  return heap_release_empty(h, 0, true);
}

inline bool trim_impl() noexcept {
  g_options.trim_request.fetch_add(1, std::memory_order_relaxed);
  heap* h = tls_heap;
  if (h != &g_empty_heap) h->trim_seen = g_options.trim_request.load(std::memory_order_relaxed);
  const bool released = trim_thread_impl();
  // Other threads empty their lists at their next slow path; what they already released goes now
  // (release_caches purges the page heap).
  return release_caches() || released;
}

// What no thread holds: the memory of exited threads' heaps and every dirty unit of the page heap,
// purged; the cached large mappings and the cached segments, unmapped. True if anything went back
// to the OS.
inline bool release_caches() noexcept {
  const std::size_t before = g_proc->madvise_calls.load(std::memory_order_relaxed);
  for (heap* a = g.all_heaps.load(std::memory_order_acquire); a; a = a->next_all)
    if (a->state.load(std::memory_order_relaxed) == kHeapAbandoned) heap_try_collect_abandoned(a);
  pages_purge(true);
  bool released = g_proc->madvise_calls.load(std::memory_order_relaxed) != before;
  released |= large_cache_clear();
  segment* list;
  {
    lock_guard guard(g.segment_lock);
    list = g.segment_cache;
    g.segment_cache = nullptr;
    sub(g_proc->cached_bytes, g.segment_cache_count * kSegmentSize);
    g.segment_cache_count = 0;
  }
  released |= list != nullptr;
  segments_unmap(list);
  return stranded_release() || released;
}

// The totals ever (requested_bytes, allocated_bytes) are the heaps' counts plus the exited totals,
// where slot_fold moves a heap's counts when a new thread adopts it: without those they would
// drop at every adoption. Adopted blocks were handed out once, by the exited thread: they count
// as live, not as allocated again. Class 0 (large blocks) counts its requests with the rest and
// its usable bytes from large_allocated_bytes; its live bytes are large_bytes. The heaps are read
// before the exited totals, and slot_fold adds to the totals before it clears the slot: a call
// racing an adoption may count a slot twice for that moment, never miss it.
inline stats stats_impl() noexcept {
  constexpr auto rlx = std::memory_order_relaxed;
  stats s{};
  if (!process_init()) return s;  // g_proc and g_exited are set while the process starts
  for (heap* h = g.all_heaps.load(std::memory_order_acquire); h; h = h->next_all) {
    s.requested_bytes += h->stats[0].v[c_requested_bytes].load(rlx);
    for (unsigned c = 1; c < kClasses; ++c) {
      const class_counters& k = h->stats[c];
      std::uint64_t f = k.v[c_frees].load(rlx) + k.v[c_foreign_allocs].load(rlx);
      std::uint64_t allocs = k.v[c_allocs].load(rlx);
      std::uint64_t a = allocs + k.v[c_adopted].load(rlx);
      s.allocated_bytes += allocs * class_size(c);
      s.requested_bytes += k.v[c_requested_bytes].load(rlx);
      // Counters of one heap are read while its owner runs: clamp the transient.
      if (a > f) s.live_bytes += (a - f) * class_size(c);
    }
  }
  for (unsigned c = 0; c < kClasses; ++c) {
    s.requested_bytes += g_exited[c].v[c_requested_bytes].load(rlx);
    if (c) s.allocated_bytes += g_exited[c].v[c_allocs].load(rlx) * class_size(c);
  }
  s.allocated_bytes += g.large_allocated_bytes.load(rlx);
  s.segment_bytes = g_proc->segment_bytes.load(std::memory_order_relaxed);
  s.large_bytes = g_proc->large_bytes.load(std::memory_order_relaxed);
  s.large_count = g.large_count.load(std::memory_order_relaxed);
  s.live_bytes += s.large_bytes;
  s.cached_bytes = g_proc->cached_bytes.load(std::memory_order_relaxed);
  s.heaps = g.heap_count.load(std::memory_order_relaxed);
  s.heaps_in_use = g.heaps_owned.load(std::memory_order_relaxed);
  s.mmap_calls = g_proc->mmap_calls.load(std::memory_order_relaxed);
  s.munmap_calls = g_proc->munmap_calls.load(std::memory_order_relaxed);
  s.madvise_calls = g_proc->madvise_calls.load(std::memory_order_relaxed);
  return s;
}

// Walks the calling thread's heap and checks the invariants written next to the structures.
// For tests and debug builds; returns false (and says why on stderr) on the first violation.
inline bool heap_is_valid() noexcept {
  heap* h = tls_heap;
  if (h == &g_empty_heap) return true;
  auto fail = [](const char* why) {
    message m;
    m << "livealloc: heap invalid: " << why;
    m.print();
    return false;
  };
  for (unsigned c = 1; c < kClasses; ++c) {
    const page_queue& q = h->queues[c];
    if (h->direct[c] != (q.first ? q.first : &g_empty_page)) return fail("direct != queue head");
    std::uint32_t kept = 0;
    for (page* pg = q.first; pg; pg = pg->next) {
      if (pg->owner != h || pg->cls != c || pg->span != pg || pg->in_full)
        return fail("page in the wrong queue");
      if ((pg->next ? pg->next->prev : q.last) != pg) return fail("broken queue links");
      if (!(pg->used <= pg->reserved && pg->reserved <= pg->capacity))
        return fail("used <= reserved <= capacity");
      std::uint32_t n = 0;
      for (block* b = pg->free; b; b = b->next) ++n;
      for (block* b = pg->local_free; b; b = b->next) ++n;
      if (pg->used + n != pg->reserved) return fail("used + free blocks != reserved");
      kept += pg->kept_empty;
    }
    if (kept != h->kept_empty[c]) return fail("kept_empty count");
    std::uint32_t recent = 0;
    for (block* b = h->recent[c].head; b; b = b->next) {
      if (page_of(b)->owner != h || page_of(b)->cls != c || class_of_block(b) != c)
        return fail("recent block of another page");
      ++recent;
    }
    for (block* b = h->recent[c].foreign; b; b = b->next) {
      if (owner_of_block(b) == h || page_of(b)->owner != owner_of_block(b) ||
          page_of(b)->cls != c || class_of_block(b) != c)
        return fail("foreign block of this heap or of another class");
      ++recent;
    }
    if (recent + h->recent[c].room != h->recent[c].limit) return fail("recent room count");
    for (block* b = h->reclaimed[c]; b; b = b->next)
      if (owner_of_block(b) == h || class_of_block(b) != c || h->recent[c].limit == 0)
        return fail("reclaimed block of this heap, of another class or of a closed one");
    if ((h->recent[c].limit != 0 && h->recent[c].limit < recent_limit(c)) ||
        h->recent[c].limit > recent_cap(c))
      return fail("recent limit out of bounds");
  }
  if (!h->reclaim_pending && h->reclaim_chains) return fail("taken inboxes with none being sorted");
  for (block* chain = h->reclaim_pending; chain; chain = next_taken(h, chain))
    for (block* b = chain; b; b = b->next)
      if (owner_of_block(b) == h) return fail("taken inbox with a block of this heap");
  // The page heap: every segment, with the units of other threads' spans too (their descriptors
  // are theirs to write, so only this heap's are read).
  segment* last = nullptr;
  lock_guard guard(g.pages.lock);
  bool cursor_listed = g.pages.purge_cursor == nullptr;
  std::uint64_t dirty = 0;
  for (segment* s = g.pages.segments; s; last = s, s = s->next) {
    cursor_listed |= s == g.pages.purge_cursor;
    if (s->magic != kMagic || s->kind != kKindSegment) return fail("segment header");
    if (s->prev != last) return fail("segment list links");
    if (last && last->free_units == 0 && s->free_units != 0)
      return fail("a segment with free units after a full one");
    unsigned used = 0;
    for (unsigned i = 1; i < kUnits; ++i) {
      const bool is_free = (s->free_units >> i) & 1;
      const unit_info& u = s->units[i];
      if (is_free != (s->pages[i].span == nullptr) || is_free != (u.owner == nullptr))
        return fail("free unit bitmap");
      if (is_free ? u.cls != 0 : u.cls == 0 || u.cls >= kClasses) return fail("unit class");
      if (u.owner == h && (s->pages[i].span->owner != h || s->pages[i].span->cls != u.cls))
        return fail("unit owner or class against its page");
      used += !is_free;
    }
    if (used != s->used_units) return fail("used_units");
    if (s->dirty_units & ~s->free_units) return fail("a dirty unit is not free");
    if (s->dirty_old & ~s->dirty_units) return fail("dirty_old is not a subset of dirty_units");
    dirty += static_cast<unsigned>(__builtin_popcountll(s->dirty_units));
  }
  if (dirty != g.pages.dirty_units) return fail("the page heap's count of dirty units");
  if (last != g.pages.segments_tail) return fail("segment list tail");
  if (!cursor_listed) return fail("the purge cursor is not a listed segment");
  if (g.pages.purge_cursor && g.pages.purge_deadline.load(std::memory_order_relaxed) == 0)
    return fail("a purge pass stopped with no deadline to go on");
  return true;
}

// ------------------------------------------------------------------------------------------------
// Options API.
// ------------------------------------------------------------------------------------------------

inline option_status set_option_impl(const char* name, long long value) noexcept {
  int id = name ? find_option(name, strlen(name)) : -1;
  if (id < 0) return option_status::unknown_name;
  const option_info& o = kOptionTable[id];
  if (!o.live) return option_status::not_live;
  if (value < o.lo || value > o.hi) return option_status::out_of_range;
  // The process's start writes the control block and g_table.control: a call racing the first
  // allocation of another thread waits for it (else the value could miss the block), and one
  // before any allocation makes the segment, as that allocation would.
  telemetry::control_block* c = process_init() ? g_table.control : nullptr;
  if (c) {
    // The value too under the lock: control_validate, which holds it, would otherwise see it
    // differ from the block's `requested` and put that (the value before) back.
    lock_guard guard(g_table.lock);
    g_options.v[id].store(value, std::memory_order_relaxed);
    telemetry::option_at(c, static_cast<unsigned>(id))->requested.store(value, std::memory_order_relaxed);
    telemetry::option_at(c, static_cast<unsigned>(id))->effective.store(value, std::memory_order_relaxed);
    std::uint64_t gen = c->generation.fetch_add(1, std::memory_order_release) + 1;
    g_options.generation.store(gen, std::memory_order_release);
  } else {
    g_options.v[id].store(value, std::memory_order_relaxed);
    g_options.generation.fetch_add(1, std::memory_order_release);
  }
  return option_status::ok;
}

// ------------------------------------------------------------------------------------------------
// libstdc++ hooks. The preload library must not load libstdc++ into C programs (it costs 1.5 MB
// of RSS and over a millisecond at start), so there the two symbols are referenced weakly: a
// program that calls operator new has libstdc++ loaded anyway.
// ------------------------------------------------------------------------------------------------

#ifdef LIVEALLOC_PRELOAD
extern "C" std::new_handler livealloc_weak_get_new_handler() noexcept
    __asm__("_ZSt15get_new_handlerv") __attribute__((weak));
extern "C" [[noreturn]] void livealloc_weak_throw_bad_alloc()
    __asm__("_ZSt17__throw_bad_allocv") __attribute__((weak));
// Weak references are bound when the process starts. A C program that loads libstdc++ later,
// with a C++ plugin (python3's extension modules), leaves them null, although operator new is
// then called with libstdc++ loaded: find its symbols now, on this path that runs only when
// memory ran out. RTLD_NOLOAD finds the library also when it was loaded RTLD_LOCAL, and loads
// nothing; the reference it takes is given back at once (the plugin holds its own).
inline void* libstdcxx_symbol(const char* name) noexcept {
  void* lib = dlopen("libstdc++.so.6", RTLD_NOW | RTLD_NOLOAD);
  if (!lib) return nullptr;
  void* sym = dlsym(lib, name);
  dlclose(lib);
  return sym;
}
inline std::new_handler current_new_handler() noexcept {
  if (livealloc_weak_get_new_handler) return livealloc_weak_get_new_handler();
  auto get = reinterpret_cast<std::new_handler (*)()>(libstdcxx_symbol("_ZSt15get_new_handlerv"));
  return get ? get() : nullptr;
}
[[noreturn]] inline void throw_bad_alloc() {
  if (livealloc_weak_throw_bad_alloc) livealloc_weak_throw_bad_alloc();
  if (auto thrower = reinterpret_cast<void (*)()>(libstdcxx_symbol("_ZSt17__throw_bad_allocv")))
    thrower();  // it throws: it never returns
  fatal("operator new failed and libstdc++ is not loaded to throw std::bad_alloc", nullptr);
}
#else
inline std::new_handler current_new_handler() noexcept { return std::get_new_handler(); }
#ifdef __cpp_exceptions
[[noreturn]] inline void throw_bad_alloc() { throw std::bad_alloc(); }
#else
// -fno-exceptions: nothing can be thrown, so a failed operator new ends the process, as
// libstdc++'s does in such builds (with a line on stderr, where it says nothing).
[[noreturn]] inline void throw_bad_alloc() noexcept {
  fatal("operator new failed (out of memory or a bad alignment), and -fno-exceptions leaves no "
        "std::bad_alloc to throw", nullptr);
}
#endif
#endif

// operator new after a failed allocation: call the new-handler until it succeeds or there is none.
LIVEALLOC_NOINLINE inline void* new_retry(std::size_t size, std::size_t align, bool nothrow) {
  for (;;) {
    std::new_handler handler = current_new_handler();
    if (!handler) {
      if (nothrow) return nullptr;
      throw_bad_alloc();
    }
#ifdef __cpp_exceptions
    if (nothrow) {
      try {
        handler();
      } catch (...) {
        return nullptr;
      }
    } else {
      handler();
    }
#else
    handler();  // it cannot throw: it returns (try again) or ends the process
#endif
    void* p = align ? aligned_impl(size, align) : malloc_impl(size);
    if (p) return p;
  }
}

// operator new's slow paths never return nullptr: the new-handler, else std::bad_alloc.
struct new_slow_path {
  LIVEALLOC_NOINLINE static void* call(unsigned cls, std::size_t size) {
    if (void* p = allocate_slow(cls, size)) return p;
    return new_retry(size, 0, false);
  }
  static void* large(std::size_t size) {
    if (void* p = allocate_large(size, 16)) return p;
    return new_retry(size, 0, false);
  }
};
LIVEALLOC_ALWAYS_INLINE void* new_impl(std::size_t size) { return malloc_as<new_slow_path>(size); }
LIVEALLOC_ALWAYS_INLINE void* new_nothrow_impl(std::size_t size) noexcept {
  void* p = malloc_impl(size);
  if (LIVEALLOC_LIKELY(p != nullptr)) return p;
  return new_retry(size, 0, true);
}
inline void* new_aligned_impl(std::size_t size, std::size_t align) {
  if (!is_pow2(align)) throw_bad_alloc();
  void* p = aligned_impl(size, align);
  if (LIVEALLOC_LIKELY(p != nullptr)) return p;
  return new_retry(size, align, false);
}
inline void* new_aligned_nothrow_impl(std::size_t size, std::size_t align) noexcept {
  if (!is_pow2(align)) return nullptr;
  void* p = aligned_impl(size, align);
  if (LIVEALLOC_LIKELY(p != nullptr)) return p;
  return new_retry(size, align, true);
}

}  // namespace detail

// ------------------------------------------------------------------------------------------------
// Front: the C++ API.
// ------------------------------------------------------------------------------------------------

inline void* allocate(std::size_t size) noexcept { return detail::malloc_impl(size); }
inline void* allocate_aligned(std::size_t size, std::size_t alignment) noexcept {
  if (!detail::is_pow2(alignment)) {
    errno = EINVAL;
    return nullptr;
  }
  return detail::aligned_impl(size, alignment);
}
inline void* allocate_zeroed(std::size_t count, std::size_t size) noexcept {
  return detail::calloc_impl(count, size);
}
inline void* reallocate(void* ptr, std::size_t size) noexcept {
  return detail::realloc_impl(ptr, size);
}
inline void deallocate(void* ptr) noexcept { detail::free_impl(ptr); }
inline void deallocate(void* ptr, std::size_t size) noexcept {
  detail::free_sized_impl(ptr, size);
}
inline std::size_t usable_size(const void* ptr) noexcept { return detail::usable_size_impl(ptr); }
inline bool trim() noexcept { return detail::trim_impl(); }
inline bool trim_thread() noexcept { return detail::trim_thread_impl(); }
inline option_status set_option(const char* name, long long value) noexcept {
  return detail::set_option_impl(name, value);
}
inline bool get_option(const char* name, long long* value) noexcept {
  int id = name ? detail::find_option(name, strlen(name)) : -1;
  if (id < 0) return false;
  if (value) *value = detail::option(static_cast<detail::option_id>(id));
  return true;
}
inline std::uint64_t options_generation() noexcept {
  (void)detail::process_init();  // g_table.control is set while the process starts
  return detail::options_gen();
}
inline stats get_stats() noexcept { return detail::stats_impl(); }

namespace telemetry {
// Publishes this process's counters as /dev/shm/livealloc.<pid> (mode 0600, removed at normal
// exit) for memlive and other readers; LIVEALLOC_PROFILE=1 does it at start. 0 on success, else
// an errno value (ENOTSUP: /dev/shm was not usable when the process started; EBUSY: a running
// process with the same pid in another pid namespace that shares /dev/shm has the name;
// ECANCELED: the process is exiting and the name was removed already, by an exit handler that
// enable() registered).
inline int enable() noexcept { return detail::table_enable(); }
// Removes the name; readers that have the segment open keep reading it. For good: a later
// enable() fails with ENOENT, since Linux gives a file made unnamed (O_TMPFILE) a name only once,
// and a new file could not take over the heaps that live in this one while threads run.
inline int disable() noexcept { return detail::table_disable(); }
// Whether the segment has its name (not after the exit removed it).
inline bool enabled() noexcept {
  return detail::g_table.linked.load(std::memory_order_acquire) &&
         !detail::g_table.exit_unlinked.load(std::memory_order_relaxed);
}
// The segment's path while enabled, else "".
inline const char* path() noexcept { return enabled() ? detail::g_table.path : ""; }
}  // namespace telemetry

// A standard allocator over livealloc, for containers.
template <class T>
struct stl_allocator {
  using value_type = T;
  stl_allocator() noexcept = default;
  template <class U>
  stl_allocator(const stl_allocator<U>&) noexcept {}
  T* allocate(std::size_t n) {
    if (n > std::size_t(PTRDIFF_MAX) / sizeof(T)) detail::throw_bad_alloc();
    void* p = alignof(T) > 16 ? detail::new_aligned_impl(n * sizeof(T), alignof(T))
                              : detail::new_impl(n * sizeof(T));
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t n) noexcept { detail::free_sized_impl(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const stl_allocator<U>&) const noexcept {
    return true;
  }
  template <class U>
  bool operator!=(const stl_allocator<U>&) const noexcept {
    return false;
  }
};

// A std::pmr::memory_resource over livealloc; all instances are interchangeable.
class memory_resource final : public std::pmr::memory_resource {
  void* do_allocate(std::size_t bytes, std::size_t alignment) override {
    if (!detail::is_pow2(alignment)) detail::throw_bad_alloc();
    return alignment > 16 ? detail::new_aligned_impl(bytes, alignment) : detail::new_impl(bytes);
  }
  void do_deallocate(void* p, std::size_t bytes, std::size_t) noexcept override {
    detail::free_sized_impl(p, bytes);
  }
  bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override {
#ifdef __cpp_rtti
    return dynamic_cast<const livealloc::memory_resource*>(&other) != nullptr;
#else
    // -fno-rtti: the type of `other` cannot be asked, so identity, as the standard resources
    // compare. Everyone uses the one resource(); only a second instance made by hand is then
    // unequal, which costs containers a copy instead of a pointer swap, never correctness.
    return this == &other;
#endif
  }
};
// The process-wide instance. Never destroyed, so static destructors may still use it.
inline memory_resource* resource() noexcept {
  alignas(memory_resource) static unsigned char storage[sizeof(memory_resource)];
  static memory_resource* instance = new (storage) memory_resource();
  return instance;
}

}  // namespace v0
}  // namespace livealloc

// ------------------------------------------------------------------------------------------------
// Override: the C ABI and the replaceable C++ operators, in the one translation unit that asks.
// ------------------------------------------------------------------------------------------------

#ifdef LIVEALLOC_PRELOAD
namespace livealloc {
inline namespace v0 {
namespace detail {

// A program may replace operator new and delete ([replacement.functions]). Under LD_PRELOAD its
// definitions come before ours for the forms it defines, and ours serve the others, which must
// then do what the defaults do ([new.delete]): new[] and the nothrow forms call operator new,
// the sized, array and nothrow deletes call operator delete, each through the symbol, which is
// the program's. Otherwise a block from its operator new reaches our free. Decided at the first
// call of such a form, before any could be needed: 1 ours throughout, 2 some form is another's.
// The forms check `g_cxx_forward != 1` and leave everything else to a *_via function, so their
// fast path is one load and one branch more, with no stack frame.
inline std::atomic<int> g_cxx_forward{0};
LIVEALLOC_NOINLINE inline bool cxx_forward() noexcept {
  const int known = g_cxx_forward.load(std::memory_order_relaxed);
  if (known != 0) return known == 2;
  static const char* const kOperators[] = {
      "_Znwm", "_Znam", "_ZnwmRKSt9nothrow_t", "_ZnamRKSt9nothrow_t", "_ZnwmSt11align_val_t",
      "_ZnamSt11align_val_t", "_ZnwmSt11align_val_tRKSt9nothrow_t",
      "_ZnamSt11align_val_tRKSt9nothrow_t", "_ZdlPv", "_ZdaPv", "_ZdlPvm", "_ZdaPvm",
      "_ZdlPvRKSt9nothrow_t", "_ZdaPvRKSt9nothrow_t", "_ZdlPvSt11align_val_t",
      "_ZdaPvSt11align_val_t", "_ZdlPvmSt11align_val_t", "_ZdaPvmSt11align_val_t",
      "_ZdlPvSt11align_val_tRKSt9nothrow_t", "_ZdaPvSt11align_val_tRKSt9nothrow_t"};
  Dl_info self{};
  bool other = false;
  if (dladdr(reinterpret_cast<void*>(&cxx_forward), &self) != 0) {
    for (const char* name : kOperators) {
      Dl_info found{};
      void* sym = dlsym(RTLD_DEFAULT, name);
      if (sym && dladdr(sym, &found) != 0 && found.dli_fbase != self.dli_fbase) other = true;
    }
  }
  g_cxx_forward.store(other ? 2 : 1, std::memory_order_relaxed);
  return other;
}
LIVEALLOC_ALWAYS_INLINE bool cxx_maybe_forward() noexcept {
  return g_cxx_forward.load(std::memory_order_relaxed) != 1;
}
// `n` is the size a sized form was given, 0 from the others: the checked mode checks it on the
// first call too (0 never fails the check).
LIVEALLOC_NOINLINE inline void delete_via(void* p, std::size_t n) noexcept {
  if (cxx_forward()) return ::operator delete(p);
  free_sized_impl(p, n);
}
LIVEALLOC_NOINLINE inline void delete_array_via(void* p, std::size_t n) noexcept {
  if (cxx_forward()) return ::operator delete[](p);
  free_sized_impl(p, n);
}
LIVEALLOC_NOINLINE inline void delete_aligned_via(void* p, std::size_t n,
                                                  std::align_val_t a) noexcept {
  if (cxx_forward()) return ::operator delete(p, a);
  free_sized_impl(p, n);
}
LIVEALLOC_NOINLINE inline void delete_aligned_array_via(void* p, std::size_t n,
                                                        std::align_val_t a) noexcept {
  if (cxx_forward()) return ::operator delete[](p, a);
  free_sized_impl(p, n);
}
// new[](n) calls new(n); the nothrow forms call the throwing form of the same shape.
LIVEALLOC_NOINLINE inline void* new_via(std::size_t n, bool array, bool nothrow) {
  if (!cxx_forward()) return nothrow ? new_nothrow_impl(n) : new_impl(n);
  if (!nothrow) return ::operator new(n);
#ifdef __cpp_exceptions
  try {
    return array ? ::operator new[](n) : ::operator new(n);
  } catch (...) {
    return nullptr;
  }
#else
  return array ? ::operator new[](n) : ::operator new(n);  // libstdc++'s nothrow does the same
#endif
}
LIVEALLOC_NOINLINE inline void* new_aligned_via(std::size_t n, std::align_val_t a, bool array,
                                                bool nothrow) {
  const auto align = static_cast<std::size_t>(a);
  if (!cxx_forward())
    return nothrow ? new_aligned_nothrow_impl(n, align) : new_aligned_impl(n, align);
  if (!nothrow) return ::operator new(n, a);
#ifdef __cpp_exceptions
  try {
    return array ? ::operator new[](n, a) : ::operator new(n, a);
  } catch (...) {
    return nullptr;
  }
#else
  return array ? ::operator new[](n, a) : ::operator new(n, a);
#endif
}

}  // namespace detail
}  // namespace v0
}  // namespace livealloc
#endif  // LIVEALLOC_PRELOAD

#ifdef LIVEALLOC_OVERRIDE
// Seen by the check at the end of the file, outside the include guard.
#define LIVEALLOC_OVERRIDE_EMITTED 1
// Every entry point starts a 64-byte line. Where the linker happened to place them moved the
// fast path by 3% between two builds of identical instructions (RelWithDebInfo and Release:
// malloc's fast path spanned four lines in one, three in the other). Those of the fast paths are
// LIVEALLOC_HOT as well, together with the rest of the code they run (tests/preload checks it).
#define LIVEALLOC_EXPORT extern "C" __attribute__((visibility("default"), aligned(64)))
#define LIVEALLOC_HOT_EXPORT extern "C" __attribute__((visibility("default"))) LIVEALLOC_HOT
#define LIVEALLOC_CXX_EXPORT __attribute__((visibility("default"))) LIVEALLOC_HOT
namespace livealloc_abi = livealloc::detail;

LIVEALLOC_HOT_EXPORT void* malloc(size_t size) noexcept { return livealloc_abi::malloc_impl(size); }
LIVEALLOC_HOT_EXPORT void free(void* p) noexcept { livealloc_abi::free_impl(p); }
LIVEALLOC_HOT_EXPORT void* calloc(size_t n, size_t size) noexcept {
  return livealloc_abi::calloc_impl(n, size);
}
LIVEALLOC_HOT_EXPORT void* realloc(void* p, size_t size) noexcept {
  return livealloc_abi::realloc_impl(p, size);
}
LIVEALLOC_EXPORT void* reallocarray(void* p, size_t n, size_t size) noexcept {
  size_t total;
  if (__builtin_mul_overflow(n, size, &total)) {
    errno = ENOMEM;
    return nullptr;
  }
  return livealloc_abi::realloc_impl(p, total);
}
// C17 7.22.3.1: an alignment the implementation does not support gives NULL; glibc (and POSIX)
// report EINVAL for one that is not a power of two.
LIVEALLOC_EXPORT void* aligned_alloc(size_t align, size_t size) noexcept {
  if (!livealloc_abi::is_pow2(align)) {
    errno = EINVAL;
    return nullptr;
  }
  return livealloc_abi::aligned_impl(size, align);
}
// POSIX: EINVAL unless a power of two multiple of sizeof(void*); *memptr untouched on failure.
LIVEALLOC_EXPORT int posix_memalign(void** memptr, size_t align, size_t size) noexcept {
  if (!livealloc_abi::is_pow2(align) || align % sizeof(void*) != 0) return EINVAL;
  int saved = errno;
  void* p = livealloc_abi::aligned_impl(size, align);
  if (!p) {
    errno = saved;
    return ENOMEM;
  }
  *memptr = p;
  return 0;
}
// glibc rounds an alignment that is not a power of two up to the next one.
// As glibc's: EINVAL only for an alignment above SIZE_MAX / 2 + 1 (no power of two holds it);
// any other is rounded up to a power of two, and one past what can be mapped is ENOMEM.
LIVEALLOC_EXPORT void* memalign(size_t align, size_t size) noexcept {
  if (align > (size_t(1) << 40)) {
    errno = align > (SIZE_MAX >> 1) + 1 ? EINVAL : ENOMEM;
    return nullptr;
  }
  if (!livealloc_abi::is_pow2(align)) align = align <= 1 ? 1 : size_t(1) << (64 - __builtin_clzll(align - 1));
  return livealloc_abi::aligned_impl(size, align);
}
LIVEALLOC_EXPORT void* valloc(size_t size) noexcept {
  return livealloc_abi::aligned_impl(size, livealloc_abi::kOsPage);
}
LIVEALLOC_EXPORT void* pvalloc(size_t size) noexcept {
  if (size > PTRDIFF_MAX) {
    errno = ENOMEM;
    return nullptr;
  }
  size_t rounded = livealloc_abi::round_up(size ? size : 1, livealloc_abi::kOsPage);
  return livealloc_abi::aligned_impl(rounded, livealloc_abi::kOsPage);
}
LIVEALLOC_EXPORT size_t malloc_usable_size(void* p) noexcept {
  return livealloc_abi::usable_size_impl(p);
}
// C23's; glibc 2.36 declares neither, and -Wmissing-declarations wants a prior declaration.
LIVEALLOC_EXPORT void free_sized(void* p, size_t size) noexcept;
LIVEALLOC_EXPORT void free_aligned_sized(void* p, size_t align, size_t size) noexcept;
LIVEALLOC_EXPORT void free_sized(void* p, size_t size) noexcept {
  livealloc_abi::free_sized_impl(p, size);
}
LIVEALLOC_EXPORT void free_aligned_sized(void* p, size_t, size_t size) noexcept {
  livealloc_abi::free_sized_impl(p, size);
}
LIVEALLOC_EXPORT int malloc_trim(size_t) noexcept { return livealloc_abi::trim_impl() ? 1 : 0; }
// glibc exports its allocator under second names too, which some programs and libraries call
// directly: __libc_* (the functions behind malloc, ...), and cfree, kept for binaries built
// before glibc 2.26 removed it. Left to glibc, a block from one of them would be freed by ours or
// the reverse, which crashes. glibc's headers declare none of them, and -Wmissing-declarations
// wants a prior declaration.
LIVEALLOC_EXPORT void* __libc_malloc(size_t size) noexcept;
LIVEALLOC_EXPORT void __libc_free(void* p) noexcept;
LIVEALLOC_EXPORT void* __libc_calloc(size_t n, size_t size) noexcept;
LIVEALLOC_EXPORT void* __libc_realloc(void* p, size_t size) noexcept;
LIVEALLOC_EXPORT void* __libc_memalign(size_t align, size_t size) noexcept;
LIVEALLOC_EXPORT void* __libc_valloc(size_t size) noexcept;
LIVEALLOC_EXPORT void* __libc_pvalloc(size_t size) noexcept;
LIVEALLOC_EXPORT void cfree(void* p) noexcept;
LIVEALLOC_EXPORT void* __libc_malloc(size_t size) noexcept { return malloc(size); }
LIVEALLOC_EXPORT void __libc_free(void* p) noexcept { free(p); }
LIVEALLOC_EXPORT void* __libc_calloc(size_t n, size_t size) noexcept { return calloc(n, size); }
LIVEALLOC_EXPORT void* __libc_realloc(void* p, size_t size) noexcept { return realloc(p, size); }
LIVEALLOC_EXPORT void* __libc_memalign(size_t align, size_t size) noexcept {
  return memalign(align, size);
}
LIVEALLOC_EXPORT void* __libc_valloc(size_t size) noexcept { return valloc(size); }
LIVEALLOC_EXPORT void* __libc_pvalloc(size_t size) noexcept { return pvalloc(size); }
LIVEALLOC_EXPORT void cfree(void* p) noexcept { free(p); }
// mallinfo2 from livealloc's own counters: arena = segment space mapped; uordblks = bytes in live
// blocks; fordblks = segment space not in live blocks; hblks/hblkhd = large mappings in use;
// keepcost = bytes kept in caches for reuse; ordblks = thread heaps in use.
LIVEALLOC_EXPORT struct mallinfo2 mallinfo2(void) noexcept {
  livealloc::stats s = livealloc::get_stats();
  struct mallinfo2 m {};
  m.arena = s.segment_bytes;
  m.ordblks = s.heaps_in_use;
  m.hblks = s.large_count;
  m.hblkhd = s.large_bytes;
  m.uordblks = s.live_bytes - s.large_bytes;
  m.fordblks = s.segment_bytes > m.uordblks ? s.segment_bytes - m.uordblks : 0;
  m.keepcost = s.cached_bytes;
  return m;
}
// The same in int fields, for programs that still call the deprecated mallinfo (else they would
// read glibc's empty arena). Past the int range a field saturates, where glibc's wraps.
static struct mallinfo livealloc_mallinfo_narrow() noexcept {
  const struct mallinfo2 w = mallinfo2();
  constexpr std::size_t kIntMax = 2147483647;
  auto narrow = [](std::size_t v) { return static_cast<int>(v > kIntMax ? kIntMax : v); };
  struct mallinfo m {};
  m.arena = narrow(w.arena);
  m.ordblks = narrow(w.ordblks);
  m.hblks = narrow(w.hblks);
  m.hblkhd = narrow(w.hblkhd);
  m.uordblks = narrow(w.uordblks);
  m.fordblks = narrow(w.fordblks);
  m.keepcost = narrow(w.keepcost);
  return m;
}
LIVEALLOC_EXPORT struct mallinfo mallinfo(void) noexcept { return livealloc_mallinfo_narrow(); }
LIVEALLOC_EXPORT struct mallinfo __libc_mallinfo(void) noexcept;
LIVEALLOC_EXPORT struct mallinfo __libc_mallinfo(void) noexcept {
  return livealloc_mallinfo_narrow();
}
// malloc_stats and malloc_info, left to glibc, describe glibc's arena, which holds nothing here
// (gdb's `call malloc_stats()` on a preloaded process printed zeros). Ours give mallinfo2's
// figures in glibc's shapes: malloc_stats on stderr, without allocating (a debugger may call it
// anywhere), malloc_info as XML on `fp`.
LIVEALLOC_EXPORT void malloc_stats(void) noexcept {
  const struct mallinfo2 m = mallinfo2();
  livealloc_abi::message out;
  auto line = [&out](const char* label, std::size_t v) {
    int digits = 1;
    for (std::size_t rest = v; rest >= 10; rest /= 10) ++digits;
    out << label << " = ";
    for (; digits < 10; ++digits) out.put(' ');  // glibc's %10u
    out << static_cast<long long>(v) << "\n";
  };
  out << "livealloc (thread heaps: small and medium blocks):\n";
  line("system bytes    ", m.arena);
  line("in use bytes    ", m.uordblks);
  out << "Total (incl. mmap):\n";
  line("system bytes    ", m.arena + m.hblkhd);
  line("in use bytes    ", m.uordblks + m.hblkhd);
  line("mmap regions    ", m.hblks);
  line("mmap bytes      ", m.hblkhd);
  line("cached bytes    ", m.keepcost);
  line("heaps in use    ", m.ordblks);
  out.print();
}
// As glibc's: options must be 0, else EINVAL is returned (errno is left alone); so is a null fp,
// which glibc would crash on.
LIVEALLOC_EXPORT int malloc_info(int options, FILE* fp) noexcept {
  if (options != 0 || !fp) return EINVAL;
  const struct mallinfo2 m = mallinfo2();
  const livealloc::stats s = livealloc::get_stats();
  const auto u = [](std::size_t v) { return static_cast<unsigned long long>(v); };
  const int r = fprintf(
      fp,
      "<malloc version=\"1\" allocator=\"livealloc\">\n"
      "<total type=\"rest\" size=\"%llu\"/>\n"
      "<total type=\"mmap\" count=\"%llu\" size=\"%llu\"/>\n"
      "<system type=\"current\" size=\"%llu\"/>\n"
      "<aspace type=\"total\" size=\"%llu\"/>\n"
      "<cached size=\"%llu\"/>\n"
      "<heaps count=\"%llu\" in_use=\"%llu\"/>\n"
      "<calls mmap=\"%llu\" munmap=\"%llu\" madvise=\"%llu\"/>\n"
      "</malloc>\n",
      u(m.uordblks), u(m.hblks), u(m.hblkhd), u(m.arena + m.hblkhd), u(m.arena + m.hblkhd),
      u(m.keepcost), u(s.heaps), u(s.heaps_in_use), u(s.mmap_calls), u(s.munmap_calls),
      u(s.madvise_calls));
  return r < 0 ? -1 : 0;
}

// (In the preload library, and in a program that defines LIVEALLOC_OVERRIDE: its fork children
// publish segments of their own as well.)
// _exit and _Exit end the process without the atexit handler that removes the segment's name, so
// a fork child that ends with them would leave a stale /dev/shm/livealloc.<pid> behind. Ours remove
// the name first (only the process that made it: a vfork child has another pid) and then end the
// process as glibc's do. Both are async-signal-safe, as they must be.
// They are weak, and so is daemon: a program that defines its own (portability code often has a
// daemon()) keeps it, where a second definition would not link.
#define LIVEALLOC_EXPORT_WEAK extern "C" __attribute__((visibility("default"), weak))
LIVEALLOC_EXPORT_WEAK void _exit(int status) {
  livealloc_abi::table_unlink_at_exit();
  for (;;) syscall(SYS_exit_group, status);
}
LIVEALLOC_EXPORT_WEAK void _Exit(int status) noexcept { _exit(status); }

// glibc's daemon() ends the parent with glibc's internal _exit, which ours cannot replace, so the
// parent's segment would stay behind at every start of a daemon. The same steps as glibc's, with
// our _exit: fork, the parent ends, the child leads a new session in "/" with its standard streams
// on /dev/null (which must be the real one: ENODEV otherwise, as in glibc).
LIVEALLOC_EXPORT_WEAK int daemon(int nochdir, int noclose) noexcept {
  const pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid > 0) _exit(0);
  if (setsid() < 0) return -1;
  if (!nochdir) (void)!chdir("/");
  if (noclose) return 0;
  const int fd = open("/dev/null", O_RDWR);  // no O_CLOEXEC: it may become stream 0, 1 or 2
  if (fd < 0) return -1;
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISCHR(st.st_mode) || st.st_rdev != makedev(1, 3)) {
    close(fd);
    errno = ENODEV;
    return -1;
  }
  for (int i = 0; i < 3; ++i) (void)dup2(fd, i);
  if (fd > 2) close(fd);
  return 0;
}

#ifdef LIVEALLOC_PRELOAD

// An exec keeps the pid, and the old image's segment keeps its name until the new image publishes
// its own under it, which it did at its first malloc: an image that never allocates (`sh -c 'exec
// true'`, the forked shell of every pipeline stage) left the old one behind for good. So the
// preloaded allocator starts when the library loads if LIVEALLOC_PROFILE asks for a segment: the
// new image's replaces the old name at once and is removed at its exit. (Without it there is no
// name to replace, and a program that never allocates keeps the start-up it had.)
// LIVEALLOC_VERBOSE, unless false, starts it too, so that it prints the options in effect (and a
// bad value's warning) for every program: one that never allocates (`true`) printed nothing, as
// if the library were not loaded. Unset, it costs one more getenv.
__attribute__((constructor)) static void livealloc_preload_start() {
  const char* profile = getenv("LIVEALLOC_PROFILE");
  const char* verbose = getenv("LIVEALLOC_VERBOSE");
  long long v = 0;
  if ((profile && *profile && strcmp(profile, "0") != 0) ||
      (verbose && !(livealloc_abi::parse_value(verbose, true, &v) && v == 0)))
    livealloc_abi::process_init();
}
#endif

LIVEALLOC_CXX_EXPORT void* operator new(std::size_t n) { return livealloc_abi::new_impl(n); }
// The base forms are new(n), new(n, align), delete(p) and delete(p, align); in the preload
// library every other form goes through one of them when the program has replaced some (see
// livealloc_abi::cxx_forward). Linked into one program, nothing else can define them.
#ifdef LIVEALLOC_PRELOAD
#define LIVEALLOC_VIA(call) \
  if (LIVEALLOC_UNLIKELY(livealloc_abi::cxx_maybe_forward())) return livealloc_abi::call
#else
#define LIVEALLOC_VIA(call) (void)0
#endif
LIVEALLOC_CXX_EXPORT void* operator new[](std::size_t n) {
  LIVEALLOC_VIA(new_via(n, true, false));
  return livealloc_abi::new_impl(n);
}
LIVEALLOC_CXX_EXPORT void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  LIVEALLOC_VIA(new_via(n, false, true));
  return livealloc_abi::new_nothrow_impl(n);
}
LIVEALLOC_CXX_EXPORT void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  LIVEALLOC_VIA(new_via(n, true, true));
  return livealloc_abi::new_nothrow_impl(n);
}
LIVEALLOC_CXX_EXPORT void* operator new(std::size_t n, std::align_val_t a) {
  return livealloc_abi::new_aligned_impl(n, static_cast<std::size_t>(a));
}
LIVEALLOC_CXX_EXPORT void* operator new[](std::size_t n, std::align_val_t a) {
  LIVEALLOC_VIA(new_aligned_via(n, a, true, false));
  return livealloc_abi::new_aligned_impl(n, static_cast<std::size_t>(a));
}
LIVEALLOC_CXX_EXPORT void* operator new(std::size_t n, std::align_val_t a,
                                        const std::nothrow_t&) noexcept {
  LIVEALLOC_VIA(new_aligned_via(n, a, false, true));
  return livealloc_abi::new_aligned_nothrow_impl(n, static_cast<std::size_t>(a));
}
LIVEALLOC_CXX_EXPORT void* operator new[](std::size_t n, std::align_val_t a,
                                          const std::nothrow_t&) noexcept {
  LIVEALLOC_VIA(new_aligned_via(n, a, true, true));
  return livealloc_abi::new_aligned_nothrow_impl(n, static_cast<std::size_t>(a));
}
// <new> declares the sized forms only with sized deallocation on (clang before 19 has it off by
// default); declared here, a definition below does not lack a prototype (-Wmissing-prototypes).
#ifndef __cpp_sized_deallocation
void operator delete(void* p, std::size_t n) noexcept;
void operator delete[](void* p, std::size_t n) noexcept;
void operator delete(void* p, std::size_t n, std::align_val_t a) noexcept;
void operator delete[](void* p, std::size_t n, std::align_val_t a) noexcept;
#endif
LIVEALLOC_CXX_EXPORT void operator delete(void* p) noexcept { livealloc_abi::free_impl(p); }
LIVEALLOC_CXX_EXPORT void operator delete[](void* p) noexcept {
  LIVEALLOC_VIA(delete_via(p, 0));
  livealloc_abi::free_impl(p);
}
LIVEALLOC_CXX_EXPORT void operator delete(void* p, std::size_t n) noexcept {
  LIVEALLOC_VIA(delete_via(p, n));
  livealloc_abi::free_sized_impl(p, n);
}
LIVEALLOC_CXX_EXPORT void operator delete[](void* p, std::size_t n) noexcept {
  LIVEALLOC_VIA(delete_array_via(p, n));
  livealloc_abi::free_sized_impl(p, n);
}
LIVEALLOC_CXX_EXPORT void operator delete(void* p, const std::nothrow_t&) noexcept {
  LIVEALLOC_VIA(delete_via(p, 0));
  livealloc_abi::free_impl(p);
}
LIVEALLOC_CXX_EXPORT void operator delete[](void* p, const std::nothrow_t&) noexcept {
  LIVEALLOC_VIA(delete_array_via(p, 0));
  livealloc_abi::free_impl(p);
}
LIVEALLOC_CXX_EXPORT void operator delete(void* p, std::align_val_t) noexcept {
  livealloc_abi::free_impl(p);
}
LIVEALLOC_CXX_EXPORT void operator delete[](void* p, [[maybe_unused]] std::align_val_t a) noexcept {
  LIVEALLOC_VIA(delete_aligned_via(p, 0, a));
  livealloc_abi::free_impl(p);
}
LIVEALLOC_CXX_EXPORT void operator delete(void* p, std::size_t n,
                                          [[maybe_unused]] std::align_val_t a) noexcept {
  LIVEALLOC_VIA(delete_aligned_via(p, n, a));
  livealloc_abi::free_sized_impl(p, n);
}
LIVEALLOC_CXX_EXPORT void operator delete[](void* p, std::size_t n,
                                            [[maybe_unused]] std::align_val_t a) noexcept {
  LIVEALLOC_VIA(delete_aligned_array_via(p, n, a));
  livealloc_abi::free_sized_impl(p, n);
}
LIVEALLOC_CXX_EXPORT void operator delete(void* p, [[maybe_unused]] std::align_val_t a,
                                          const std::nothrow_t&) noexcept {
  LIVEALLOC_VIA(delete_aligned_via(p, 0, a));
  livealloc_abi::free_impl(p);
}
LIVEALLOC_CXX_EXPORT void operator delete[](void* p, [[maybe_unused]] std::align_val_t a,
                                            const std::nothrow_t&) noexcept {
  LIVEALLOC_VIA(delete_aligned_array_via(p, 0, a));
  livealloc_abi::free_impl(p);
}
#undef LIVEALLOC_VIA
#undef LIVEALLOC_EXPORT
#undef LIVEALLOC_HOT_EXPORT
#undef LIVEALLOC_EXPORT_WEAK
#undef LIVEALLOC_CXX_EXPORT
#endif  // LIVEALLOC_OVERRIDE

#undef LIVEALLOC_LIKELY
#undef LIVEALLOC_UNLIKELY
#undef LIVEALLOC_ALWAYS_INLINE
#undef LIVEALLOC_NOINLINE
#undef LIVEALLOC_TSAN

#endif  // LIVEALLOC_H

// Outside the guard, so every include checks it: LIVEALLOC_OVERRIDE defined after an earlier
// include (maybe through livealloc_reader.h or memlive.h) would be ignored, malloc not replaced.
#if defined(LIVEALLOC_OVERRIDE) && !defined(LIVEALLOC_OVERRIDE_EMITTED)
#error "LIVEALLOC_OVERRIDE was defined after livealloc.h was first included (directly or through livealloc_reader.h or memlive.h), so nothing was replaced: define it before the first #include"
#endif
