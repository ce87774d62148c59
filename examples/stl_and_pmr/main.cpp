// stl_and_pmr: livealloc as an allocator for chosen containers, without replacing malloc.
//
//   livealloc::stl_allocator<T>   a standard allocator (stateless, all instances equal)
//   livealloc::resource()         a std::pmr::memory_resource, usable as the upstream of the
//                                 standard pool and arena resources
//
//   stl_and_pmr [--smoke]   builds the containers, checks their contents and that livealloc's
//                           live bytes rise while they exist and fall back when they are gone
//                           (exit 0 only then); without --smoke it also prints the figures
#include <livealloc.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <memory_resource>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

template <class T>
using la_vector = std::vector<T, livealloc::stl_allocator<T>>;
using la_string = std::basic_string<char, std::char_traits<char>, livealloc::stl_allocator<char>>;
template <class K, class V>
using la_map = std::map<K, V, std::less<K>, livealloc::stl_allocator<std::pair<const K, V>>>;

int g_failures = 0;
bool g_verbose = true;
void expect(bool ok, const std::string& what) {
  if (!ok || g_verbose) std::printf("%s: %s\n", ok ? "ok" : "FAILED", what.c_str());
  g_failures += !ok;
}

std::size_t live() {
  return livealloc::get_stats().live_bytes;
}

void stl_containers() {
  const std::size_t before = live();
  {
    la_vector<int> v;
    for (int i = 0; i < 100000; ++i) v.push_back(i * 3);
    la_map<int, la_string> names;
    for (int i = 0; i < 2000; ++i) names.emplace(i, la_string(40 + i % 60, 'a' + i % 26));
    bool right = v.size() == 100000 && v[99999] == 299997;
    for (const auto& [k, s] : names) right = right && s.size() == 40u + k % 60;
    expect(right, "std::vector and std::map with livealloc::stl_allocator hold what was put in");
    expect(livealloc::usable_size(v.data()) >= v.capacity() * sizeof(int),
           "the vector's buffer is a livealloc block (usable_size covers its capacity)");
    const std::size_t during = live();
    expect(during >= before + 100000 * sizeof(int),
           "livealloc's live bytes grew by at least the vector's 400 KB (" +
               std::to_string(during - before) + " bytes)");
  }
  expect(live() <= before + 4096, "and fell back when the containers were destroyed");
}

void pmr_containers() {
  const std::size_t before = live();
  {
    // Directly on livealloc's resource: every element allocation is a livealloc block.
    std::pmr::vector<std::pmr::string> lines(livealloc::resource());
    for (int i = 0; i < 5000; ++i)
      lines.emplace_back("line " + std::to_string(i) + std::string(30, '.'));
    expect(lines.size() == 5000 && lines[4999].compare(0, 9, "line 4999") == 0,
           "std::pmr::vector<std::pmr::string> on livealloc::resource() holds its lines");
    expect(lines.get_allocator().resource() == livealloc::resource() &&
               lines[0].get_allocator().resource() == livealloc::resource(),
           "the strings inherit the resource from the vector");

    // An arena whose chunks come from livealloc: freed all at once when it goes away.
    std::pmr::monotonic_buffer_resource arena(64 * 1024, livealloc::resource());
    std::pmr::unordered_map<int, std::pmr::string> words(&arena);
    for (int i = 0; i < 20000; ++i) words.emplace(i, std::pmr::string(24, 'w'));
    expect(words.size() == 20000 && words.at(123).size() == 24,
           "a monotonic_buffer_resource with livealloc upstream serves an unordered_map");
    expect(live() >= before + 20000 * 24,
           "its chunks are live in livealloc (" + std::to_string(live() - before) + " bytes)");

    // A pool for many same-sized nodes, again over livealloc.
    std::pmr::unsynchronized_pool_resource pool(livealloc::resource());
    std::pmr::map<int, int> squares(&pool);
    for (int i = 0; i < 10000; ++i) squares[i] = i * i;
    expect(squares.at(9999) == 99980001, "an unsynchronized_pool_resource over livealloc");
    expect(livealloc::resource()->is_equal(*livealloc::resource()) &&
               !livealloc::resource()->is_equal(*std::pmr::new_delete_resource()),
           "livealloc::resource() compares equal only to itself");
  }
  expect(live() <= before + 4096, "everything went back when the resources were destroyed");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) {
    if (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
      std::printf("usage: stl_and_pmr [--smoke]\n");
      return 0;
    }
    if (std::strcmp(argv[1], "--smoke") != 0) {
      std::fprintf(stderr, "usage: stl_and_pmr [--smoke]\n");
      return 2;
    }
    g_verbose = false;  // the test prints only failures
  }
  stl_containers();
  pmr_containers();
  std::printf("stl_and_pmr: %s\n", g_failures ? "FAILED" : "all checks passed");
  return g_failures ? 1 : 0;
}
