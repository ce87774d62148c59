// libFuzzer target: a sequence of allocator operations on a table of 64 slots, run single-threaded
// through livealloc's public API (allocate, allocate_zeroed, allocate_aligned, reallocate,
// deallocate plain and sized, usable_size, trim, trim_thread, set_option/get_option and the pmr
// resource), not through the malloc override, plus bursts of up to 256 blocks of one size. The
// input is a list of 6-byte records: an operation, a slot and a 32-bit argument (little-endian)
// that draws sizes so that every regime is reached: 0, tiny, each class size -1/0/+1, medium, the
// large threshold (256 KiB) -2..+2, large blocks around page and 4 MiB edges, up to 8 MiB.
//
// Properties, besides no crash or undefined behaviour:
//  - every block is non-null, aligned to 16 (to its alignment for the aligned and pmr forms), and
//    usable_size is at least the size requested and the same whenever it is asked until the
//    block is freed or reallocated; no two live blocks overlap over their usable sizes;
//  - every live block carries a pattern of (slot, generation) over its requested size and the
//    last bytes of its usable size; it is intact before every free and realloc, and at the end;
//    allocate_zeroed gives zeros over the whole request;
//  - reallocate keeps the first min(old, new) bytes; size 0 frees and returns nullptr; a null
//    pointer allocates; a request it cannot serve returns nullptr with ENOMEM and leaves the
//    block as it was;
//  - a successful allocation or reallocation leaves errno alone (the header's errno_keeper: "a
//    malloc that succeeds leaves errno alone, as glibc's does"), and so does every free;
//  - the requests that must fail do, with the documented errno: a size past PTRDIFF_MAX
//    (ENOMEM), count * size overflowing in allocate_zeroed (ENOMEM), an alignment that is not a
//    power of two (EINVAL) or past 2^40 (ENOMEM);
//  - set_option accepts exactly a live option of the table (any case) with a value in [min, max],
//    which get_option then returns and options_generation counts once; refusals
//    (unknown_name, not_live, out_of_range) change neither;
//  - get_stats: the live bytes outside large mappings equal the usable sizes of the live small
//    blocks, and large_count the live large blocks (this process has no other livealloc user);
//  - detail::heap_is_valid() holds when asked, after every trim and burst, and at the end of
//    every input, when nothing is live any more (live_bytes and large_count 0).
// Each input starts from the default options and ends with everything freed, trim() and the
// defaults again, so an input does not depend much on the ones before it (purge_delay and
// large_cache timing depend on the clock, though). Leak detection stays on: livealloc maps its
// memory itself and never calls malloc here, so LeakSanitizer sees neither its blocks nor its
// caches, only the target's own containers, which are freed.
#include <livealloc.h>

#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <vector>

#include "fuzz_common.h"

namespace {

namespace la = livealloc;
namespace dt = livealloc::detail;

constexpr unsigned kSlots = 64;
constexpr std::size_t kMaxSize = std::size_t(8) << 20;        // largest request
constexpr std::size_t kLiveCap = std::size_t(32) << 20;       // requested bytes live at once
constexpr std::size_t kTouchBudget = std::size_t(128) << 20;  // bytes written/read per input
constexpr std::size_t kTailBytes = 64;  // pattern also over the last bytes of the usable size
// errno before every call that must leave it alone (a successful allocation, as glibc's; a free).
constexpr int kErrnoMark = 4242;

enum class kind : std::uint8_t { plain, pmr };

struct block {
  unsigned char* p = nullptr;
  std::size_t size = 0;    // requested
  std::size_t usable = 0;  // usable_size when it was handed out
  std::size_t align = 16;  // for the pmr resource's deallocate
  std::uint64_t seed = 0;
  kind how = kind::plain;
};

struct state {
  block slots[kSlots];
  std::map<std::uintptr_t, std::uintptr_t> live;  // start -> end of usable ranges
  std::uint64_t generation = 0;
  std::size_t live_bytes = 0;  // requested, for kLiveCap
  std::size_t touched = 0;     // for kTouchBudget
};

std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The loops over block bytes carry no coverage instrumentation (its comparison hooks took two
// thirds of the time and tell libFuzzer nothing about the allocator) and no ASan checks (the
// blocks are livealloc's own mappings, which ASan does not track: a stray access faults).
#define FUZZ_NO_COVERAGE __attribute__((no_sanitize("coverage", "address")))

// The pattern byte at offset i of a block with seed s: words of s + index * odd constant.
FUZZ_NO_COVERAGE unsigned char pattern_at(std::uint64_t seed, std::size_t i) {
  const std::uint64_t w = seed + (i / 8) * 0x9e3779b97f4a7c15ull;
  return static_cast<unsigned char>(w >> (8 * (i % 8)));
}

FUZZ_NO_COVERAGE void fill(unsigned char* p, std::size_t from, std::size_t to, std::uint64_t seed) {
  std::size_t i = from;
  for (; i < to && i % 8 != 0; ++i) p[i] = pattern_at(seed, i);
  for (; i + 8 <= to; i += 8) {
    const std::uint64_t w = seed + (i / 8) * 0x9e3779b97f4a7c15ull;
    std::memcpy(p + i, &w, 8);
  }
  for (; i < to; ++i) p[i] = pattern_at(seed, i);
}

// The first offset in [from, to) that does not hold the pattern, or `to`.
FUZZ_NO_COVERAGE std::size_t mismatch(const unsigned char* p, std::size_t from, std::size_t to,
                                      std::uint64_t seed) {
  std::size_t i = from;
  for (; i < to && i % 8 != 0; ++i)
    if (p[i] != pattern_at(seed, i)) return i;
  for (; i + 8 <= to; i += 8) {
    std::uint64_t w;
    std::memcpy(&w, p + i, 8);
    if (w != seed + (i / 8) * 0x9e3779b97f4a7c15ull) break;
  }
  for (; i < to; ++i)
    if (p[i] != pattern_at(seed, i)) return i;
  return to;
}

std::size_t tail_from(const block& b) {
  return b.usable - b.size > kTailBytes ? b.usable - kTailBytes : b.size;
}

// The first byte of p[0, n) that is not zero, or n.
FUZZ_NO_COVERAGE std::size_t first_nonzero(const unsigned char* p, std::size_t n) {
  std::size_t i = 0;
  for (std::uint64_t w = 0; i + 8 <= n; i += 8) {
    std::memcpy(&w, p + i, 8);
    if (w != 0) break;
  }
  while (i < n && p[i] == 0) ++i;
  return i;
}

void check_pattern(const block& b, unsigned slot, const char* when) {
  const std::size_t bad = mismatch(b.p, 0, b.size, b.seed);
  FUZZ_CHECK(bad == b.size, "slot %u (%p, %zu bytes) %s: byte %zu overwritten", slot,
             static_cast<void*>(b.p), b.size, when, bad);
  const std::size_t t = tail_from(b), bad_tail = mismatch(b.p, t, b.usable, b.seed);
  FUZZ_CHECK(bad_tail == b.usable, "slot %u (%p, usable %zu) %s: tail byte %zu overwritten", slot,
             static_cast<void*>(b.p), b.usable, when, bad_tail);
}

void fill_block(state& s, block& b, unsigned slot) {
  b.seed = mix((std::uint64_t(slot) << 32) ^ ++s.generation);
  fill(b.p, 0, b.size, b.seed);
  fill(b.p, tail_from(b), b.usable, b.seed);
  s.touched += b.size;
}

// Registers a block just handed out: alignment, usable size, no overlap, then the pattern.
// `slot` names the block in messages and its pattern: a slot of the table, or kSlots and above for
// the blocks of a burst.
void adopt_block(state& s, block& b, unsigned slot, void* p, std::size_t size, std::size_t align,
                 kind how, bool zeroed) {
  FUZZ_CHECK(p != nullptr, "slot %u: allocation of %zu bytes (alignment %zu) failed", slot, size,
             align);
  FUZZ_CHECK(errno == kErrnoMark, "slot %u: allocation of %zu bytes (alignment %zu) set errno %d",
             slot, size, align, errno);
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  const std::size_t want = align < 16 ? 16 : align;
  FUZZ_CHECK(a % want == 0, "slot %u: %p of %zu bytes is not aligned to %zu", slot, p, size, want);
  b.p = static_cast<unsigned char*>(p);
  b.size = size;
  b.usable = la::usable_size(p);
  b.align = align;
  b.how = how;
  FUZZ_CHECK(b.usable >= size, "slot %u: usable_size(%p) = %zu < %zu requested", slot, p, b.usable,
             size);
  const std::uintptr_t end = a + (b.usable ? b.usable : 1);
  auto next = s.live.lower_bound(a);
  FUZZ_CHECK(next == s.live.end() || next->first >= end,
             "slot %u: [%p, +%zu) overlaps a live block at %p", slot, p, b.usable,
             reinterpret_cast<void*>(next->first));
  if (next != s.live.begin()) {
    auto prev = std::prev(next);
    FUZZ_CHECK(prev->second <= a, "slot %u: [%p, +%zu) overlaps a live block at %p", slot, p,
               b.usable, reinterpret_cast<void*>(prev->first));
  }
  s.live.emplace(a, end);
  s.live_bytes += size;
  if (zeroed) {
    const std::size_t i = first_nonzero(b.p, size);
    FUZZ_CHECK(i == size, "slot %u: allocate_zeroed gave %zu bytes with byte %zu not zero", slot,
               size, i);
    s.touched += size;
  }
  fill_block(s, b, slot);
}

void adopt(state& s, unsigned slot, void* p, std::size_t size, std::size_t align, kind how,
           bool zeroed) {
  adopt_block(s, s.slots[slot], slot, p, size, align, how, zeroed);
}

// Checks a live block before it goes (free or realloc) and forgets it.
void release(state& s, block& b, unsigned slot, const char* when) {
  check_pattern(b, slot, when);
  s.touched += b.size;
  const std::size_t u = la::usable_size(b.p);
  FUZZ_CHECK(u == b.usable, "slot %u: usable_size(%p) changed from %zu to %zu", slot,
             static_cast<void*>(b.p), b.usable, u);
  s.live.erase(reinterpret_cast<std::uintptr_t>(b.p));
  s.live_bytes -= b.size;
}

void free_block(state& s, block& b, unsigned slot, unsigned how) {
  if (!b.p) return;
  release(s, b, slot, "before free");
  errno = kErrnoMark;
  if (b.how == kind::pmr && how % 3 == 2)
    la::resource()->deallocate(b.p, b.size, b.align);
  else if (how % 3 == 1)
    la::deallocate(b.p, b.size);
  else
    la::deallocate(b.p);
  FUZZ_CHECK(errno == kErrnoMark, "slot %u: freeing %p set errno %d", slot, static_cast<void*>(b.p),
             errno);
  b = block{};
}

void free_slot(state& s, unsigned slot, unsigned how) {
  free_block(s, s.slots[slot], slot, how);
}

// Sizes that reach every regime; `v` picks one from the argument.
std::size_t draw_size(const state& s, std::uint32_t v) {
  const std::uint32_t r = v & 7, x = v >> 3;
  std::size_t n = 0;
  switch (r) {
    case 0:
      n = 0;
      break;
    case 1:
      n = x % 129;
      break;
    case 2: {  // a class size -1, 0, +1
      const unsigned c = 1 + x % (dt::kClasses - 1);
      n = dt::class_size(c) + (x / (dt::kClasses - 1)) % 3 - 1;
      break;
    }
    case 3:
      n = 1025 + x % (dt::kMaxSmall - 1024);
      break;
    case 4:
      n = dt::kMaxSmall - 2 + x % 5;
      break;
    case 5:
      n = dt::kMaxSmall + 1 + x % (std::size_t(1) << 20);
      break;
    case 6: {  // page edges up to 2 MiB, or 4 and 8 MiB (a mapping has 64 bytes of header)
      const std::size_t edge = x & 4 ? (1 + (x >> 3) % 2) << 22 : (64 + (x >> 3) % 449) * 4096;
      n = edge - dt::kLargeHeader + (x & 3) - 2 + ((x >> 12) & 1) * dt::kLargeHeader;
      break;
    }
    default:  // log-uniform up to 8 MiB
      n = (x >> 5) & ((std::size_t(1) << (x & 31) % 24) - 1);
      break;
  }
  if (n > kMaxSize) n = kMaxSize;
  // Past the budgets, small sizes only: an input stays fast and within memory.
  if (s.touched > kTouchBudget || s.live_bytes + n > kLiveCap) n %= 4096;
  return n;
}

void check_stats(const state& s) {
  std::size_t small = 0, large = 0;
  for (const block& b : s.slots) {
    if (!b.p) continue;
    if (dt::is_large(b.p))
      ++large;
    else
      small += b.usable;
  }
  const la::stats st = la::get_stats();
  FUZZ_CHECK(st.live_bytes - st.large_bytes == small && st.large_count == large,
             "get_stats: live %zu - large %zu bytes, %zu large blocks; want %zu small bytes, %zu "
             "large blocks",
             st.live_bytes, st.large_bytes, st.large_count, small, large);
}

void check_heap(const char* when) {
  FUZZ_CHECK(dt::heap_is_valid(), "heap_is_valid() failed %s", when);
}

// The requests that must fail, with their errno; a live block given to them stays as it was.
void must_fail(state& s, unsigned slot, std::uint32_t x) {
  void* p = &s;  // anything but nullptr
  int want = ENOMEM;
  const char* what = "";
  errno = 0;
  switch (x % 9) {
    case 0:
      p = la::allocate(SIZE_MAX - x / 9 % 8192), what = "allocate(SIZE_MAX - k)";
      break;
    case 1:
      p = la::allocate(std::size_t(PTRDIFF_MAX) + 1), what = "allocate(PTRDIFF_MAX + 1)";
      break;
    case 2:
      p = la::allocate_zeroed(SIZE_MAX / 2 + 1 + x / 9 % 64, 2 + x / 9 / 64 % 16),
      what = "allocate_zeroed overflowing";
      break;
    case 3: {
      const std::size_t align = x / 9 % 4096;
      p = la::allocate_aligned(x / 9 / 4096 % 1024, dt::is_pow2(align) ? align * 3 : align);
      want = EINVAL, what = "allocate_aligned(n, not a power of two)";
      break;
    }
    case 4:
      p = la::allocate_aligned(64, std::size_t(1) << (41 + x / 9 % 22)),
      what = "allocate_aligned(64, 2^41 or more)";
      break;
    case 5:
      p = la::allocate_aligned(SIZE_MAX - 4095, 4096), what = "allocate_aligned(SIZE_MAX - 4095)";
      break;
    case 6:
      p = la::allocate(std::size_t(1) << 62), what = "allocate(2^62)";
      break;
    default: {  // realloc past PTRDIFF_MAX keeps the block
      block& b = s.slots[slot];
      if (b.p) check_pattern(b, slot, "before a failing realloc");
      p = la::reallocate(b.p, SIZE_MAX - x / 9 % 100000), what = "reallocate(p, SIZE_MAX - k)";
      if (b.p) {
        check_pattern(b, slot, "after a failing realloc");
        FUZZ_CHECK(la::usable_size(b.p) == b.usable, "a failing realloc changed usable_size");
      }
      break;
    }
  }
  FUZZ_CHECK(p == nullptr && errno == want, "%s (argument %u) = %p, errno %d; want nullptr, %d",
             what, x, p, errno, want);
}

void reallocate_slot(state& s, unsigned slot, std::uint32_t x) {
  block& b = s.slots[slot];
  std::size_t n = 0;
  switch (x & 3) {
    case 0:
      n = draw_size(s, x >> 2);
      break;
    case 1:  // the same size
      n = b.size;
      break;
    case 2: {  // a few bytes either way (0 frees)
      const std::size_t d = (x >> 2) % 65;
      n = d < 32 ? (b.size > 32 - d ? b.size - (32 - d) : 0) : b.size + (d - 32);
      break;
    }
    default:  // twice or half
      n = (x >> 2) & 1 ? 2 * b.size + 1 : b.size / 2;
      break;
  }
  if (n > kMaxSize) n = kMaxSize;
  if (s.live_bytes - b.size + n > kLiveCap || s.touched > kTouchBudget) n %= 4096;
  if (!b.p) {
    errno = kErrnoMark;
    void* q = la::reallocate(nullptr, n);  // allocates, also for 0
    adopt(s, slot, q, n, 16, kind::plain, false);
    return;
  }
  release(s, b, slot, "before realloc");
  const block old = b;
  b = block{};
  errno = kErrnoMark;
  void* q = la::reallocate(old.p, n);
  if (n == 0) {
    FUZZ_CHECK(q == nullptr && errno == kErrnoMark,
               "reallocate(%p, 0) = %p, errno %d; want nullptr (frees), errno unchanged",
               static_cast<void*>(old.p), q, errno);
    return;
  }
  FUZZ_CHECK(q != nullptr, "reallocate(%p of %zu, %zu) failed", static_cast<void*>(old.p), old.size,
             n);
  const int err = errno;
  const std::size_t keep = old.size < n ? old.size : n;
  const std::size_t bad = mismatch(static_cast<unsigned char*>(q), 0, keep, old.seed);
  FUZZ_CHECK(bad == keep, "reallocate(%p of %zu, %zu) = %p lost byte %zu of %zu kept",
             static_cast<void*>(old.p), old.size, n, q, bad, keep);
  s.touched += keep;
  errno = err;  // as reallocate left it, for adopt's check
  adopt(s, slot, q, n, 16, kind::plain, false);
}

// A burst: up to 256 blocks of one size (at most 4 MiB in all) besides the table, checked like
// the others, then freed forward, backward or odd ones first, plainly or sized. Enough blocks to
// fill pages, overflow the recent-free lists, retire and release spans and empty segments, which
// 64 slots seldom do.
void burst(state& s, std::uint32_t x) {
  const std::size_t count = 2 + (x >> 24) % 255;
  std::size_t n = draw_size(s, x & 0x3fffff);
  if (n * count > (std::size_t(4) << 20)) n = (std::size_t(4) << 20) / count;
  std::vector<block> blocks(count);
  for (std::size_t i = 0; i < count; ++i) {
    errno = kErrnoMark;
    adopt_block(s, blocks[i], kSlots + static_cast<unsigned>(i), la::allocate(n), n, 16,
                kind::plain, false);
  }
  const unsigned order = (x >> 22) & 3;
  for (std::size_t k = 0; k < count; ++k) {
    std::size_t i = order == 1 ? count - 1 - k : k;
    if (order >= 2) i = k < count / 2 ? 2 * k + 1 : 2 * (k - count / 2);
    free_block(s, blocks[i], kSlots + static_cast<unsigned>(i), order == 3);
  }
  check_heap("after a burst");
}

struct option_case {
  const char* name;
  long long lo, hi, def;
  bool live, known;
};

// Every option of the table, plus names that are not options.
std::vector<option_case> option_cases() {
  std::vector<option_case> v;
  for (const dt::option_info& o : dt::kOptionTable)
    v.push_back({o.name, o.lo, o.hi, o.def, o.live, true});
  v.push_back({"PURGE_Delay", 0, 60000, 250, true, true});  // names are folded to lower case
  v.push_back({"purge_delay_", 0, 60000, 250, true, false});
  v.push_back({"purge", 0, 60000, 250, true, false});
  v.push_back({"", 0, 1, 0, true, false});
  return v;
}

const std::vector<option_case>& options() {
  static const auto* v = new std::vector<option_case>(option_cases());
  return *v;
}

void set_option(std::uint32_t x) {
  const option_case& o = options()[x % options().size()];
  const std::uint32_t y = x / static_cast<std::uint32_t>(options().size());
  long long value = 0;
  switch (y % 8) {
    case 0:
      value = o.lo;
      break;
    case 1:
      value = o.lo + 1;
      break;
    case 2:
      value = o.def;
      break;
    case 3:
      value = o.hi - 1;
      break;
    case 4:
      value = o.hi;
      break;
    case 5:
      value = (y >> 3) & 1 ? o.lo - 1 : o.hi + 1;
      break;
    case 6:
      value = (y >> 3) & 1 ? LLONG_MIN : LLONG_MAX;
      break;
    default:
      value = o.lo + (y >> 3) % 8;
      break;
  }
  long long before = 0;
  const bool had = la::get_option(o.name, &before);
  FUZZ_CHECK(had == o.known, "get_option(\"%s\") = %d", o.name, had);
  const std::uint64_t gen = la::options_generation();
  const la::option_status st = la::set_option(o.name, value);
  const la::option_status want = !o.known                       ? la::option_status::unknown_name
                                 : !o.live                      ? la::option_status::not_live
                                 : value < o.lo || value > o.hi ? la::option_status::out_of_range
                                                                : la::option_status::ok;
  FUZZ_CHECK(st == want, "set_option(\"%s\", %lld) = %d, want %d", o.name, value,
             static_cast<int>(st), static_cast<int>(want));
  long long after = 0;
  FUZZ_CHECK(la::get_option(o.name, &after) == o.known, "get_option(\"%s\") changed", o.name);
  const std::uint64_t gen_after = la::options_generation();
  if (st == la::option_status::ok)
    FUZZ_CHECK(after == value && gen_after == gen + 1,
               "set_option(\"%s\", %lld): get_option %lld, generation %llu -> %llu", o.name, value,
               after, static_cast<unsigned long long>(gen),
               static_cast<unsigned long long>(gen_after));
  else
    FUZZ_CHECK(after == before && gen_after == gen,
               "refused set_option(\"%s\", %lld) changed the value (%lld -> %lld) or the "
               "generation",
               o.name, value, before, after);
}

// The live options back to their defaults (only those that differ: each change is a generation).
void default_options() {
  for (const dt::option_info& o : dt::kOptionTable) {
    long long v = 0;
    if (o.live && la::get_option(o.name, &v) && v != o.def)
      FUZZ_CHECK(la::set_option(o.name, o.def) == la::option_status::ok,
                 "set_option(\"%s\", default %lld) refused", o.name, o.def);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  default_options();
  state s;
  for (std::size_t at = 0; at + 6 <= size; at += 6) {
    const unsigned op = data[at] % 13, slot = data[at + 1] % kSlots;
    std::uint32_t x = 0;
    std::memcpy(&x, data + at + 2, 4);  // little-endian (x86-64 only, as livealloc)
    switch (op) {
      case 0:
      case 1: {  // allocate
        free_slot(s, slot, x);
        const std::size_t n = draw_size(s, x);
        errno = kErrnoMark;
        adopt(s, slot, la::allocate(n), n, 16, kind::plain, false);
        break;
      }
      case 2: {  // allocate_zeroed: count of 1, 2, 4 or 8 (0 when the size is 0)
        free_slot(s, slot, x);
        const unsigned shift = x & 3;
        const std::size_t total = draw_size(s, x >> 2);
        const std::size_t count = total == 0 && (x >> 31) ? 0 : std::size_t(1) << shift;
        const std::size_t each = count ? total >> shift : total;
        const std::size_t n = count ? count * each : 0;
        errno = kErrnoMark;
        adopt(s, slot, la::allocate_zeroed(count, each), n, 16, kind::plain, true);
        break;
      }
      case 3: {  // allocate_aligned: alignments 8 .. 1 MiB
        free_slot(s, slot, x);
        const std::size_t align = std::size_t(1) << (3 + (x & 31) % 18);
        const std::size_t n = draw_size(s, x >> 5);
        errno = kErrnoMark;
        adopt(s, slot, la::allocate_aligned(n, align), n, align, kind::plain, false);
        break;
      }
      case 4: {  // the pmr resource: alignments 1 .. 1 MiB
        free_slot(s, slot, x);
        const std::size_t align = std::size_t(1) << ((x & 31) % 21);
        const std::size_t n = draw_size(s, x >> 5);
        errno = kErrnoMark;
        adopt(s, slot, la::resource()->allocate(n, align), n, align, kind::pmr, false);
        break;
      }
      case 5:
      case 6:
        reallocate_slot(s, slot, x);
        break;
      case 7:
      case 8:  // free: plain, sized, or through the pmr resource
        free_slot(s, slot, x);
        break;
      case 9:  // check every live block now
        for (unsigned i = 0; i < kSlots; ++i)
          if (s.slots[i].p) {
            check_pattern(s.slots[i], i, "when checked");
            FUZZ_CHECK(la::usable_size(s.slots[i].p) == s.slots[i].usable,
                       "slot %u: usable_size changed", i);
          }
        check_heap("when checked");
        break;
      case 10:
        if (x & 1)
          la::trim();
        else
          la::trim_thread();
        check_heap(x & 1 ? "after trim()" : "after trim_thread()");
        break;
      case 12:
        burst(s, x);
        break;
      default:
        if (x & 1)
          set_option(x >> 1);
        else
          must_fail(s, slot, x >> 1);
        break;
    }
    check_stats(s);
  }
  for (unsigned i = 0; i < kSlots; ++i) free_slot(s, i, i);
  check_heap("at the end");
  const la::stats st = la::get_stats();
  FUZZ_CHECK(st.live_bytes == 0 && st.large_count == 0 && s.live.empty(),
             "everything freed, but live_bytes %zu, large_count %zu", st.live_bytes,
             st.large_count);
  la::trim();
  check_heap("after the final trim()");
  default_options();
  return 0;
}
