// text_index: an ordinary C++ program that knows nothing of livealloc or memlive. Three threads
// named indexer-0..2 each build a word index (std::map of std::string to std::vector) over
// generated documents, again and again; the main thread merges them and checks the counts.
// run.sh starts it under `memlive run`, which preloads liblivealloc.so and serves its telemetry.
//
//   text_index [--rounds N] [--wait]
//     --rounds N  stop after N rounds (default: until SIGINT/SIGTERM)
//     --wait      after the last round, print "text_index: done" and wait for end of input
// Exit 0 when every round's counts were right, 1 otherwise.
#include <pthread.h>
#include <signal.h>

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace {

volatile sig_atomic_t g_stop = 0;
void on_signal(int) {
  g_stop = 1;
}

const char* const kWords[] = {"alloc", "free",   "thread", "cache", "page",   "segment",
                              "heap",  "remote", "class",  "size",  "memory", "profile"};
constexpr int kWordCount = 12;
constexpr int kDocs = 400, kWordsPerDoc = 300;

using index_type = std::map<std::string, std::vector<int>>;  // word -> documents it occurs in

// Document d of thread t: word w of it is kWords[(d * 7 + w * 3 + t) % 12], followed by a suffix
// so that the index holds many distinct keys, some longer than the small-string buffer.
std::string word(int t, int d, int w) {
  std::string s = kWords[(d * 7 + w * 3 + t) % kWordCount];
  s += '-';
  s += std::to_string((d + w) % 50);
  if (w % 5 == 0) s += "-with-a-longer-tail";
  return s;
}

void build(int t, index_type* out) {
  for (int d = 0; d < kDocs; ++d)
    for (int w = 0; w < kWordsPerDoc; ++w) (*out)[word(t, d, w)].push_back(d);
}

// A whole decimal number from lo to hi: `--rounds abc` is an error, not 0 rounds.
bool parse_number(const char* text, long lo, long hi, long* out) {
  const char* end = text + std::strlen(text);
  long v = 0;
  const std::from_chars_result r = std::from_chars(text, end, v);
  if (r.ec != std::errc() || r.ptr != end || v < lo || v > hi) return false;
  *out = v;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  long rounds = -1;
  bool wait = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
      if (!parse_number(argv[++i], 0, 1000000000, &rounds)) {
        std::fprintf(stderr, "text_index: --rounds %s: not a number from 0 to 1000000000\n", argv[i]);
        return 2;
      }
    } else if (std::strcmp(argv[i], "--wait") == 0) {
      wait = true;
    } else if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::printf("usage: text_index [--rounds N] [--wait]\n");
      return 0;
    } else {
      std::fprintf(stderr, "usage: text_index [--rounds N] [--wait]\n");
      return 2;
    }
  }
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  int bad = 0;
  long r = 0;
  for (; !g_stop && (rounds < 0 || r < rounds); ++r) {
    index_type parts[3];
    std::vector<std::thread> threads;
    for (int t = 0; t < 3; ++t)
      threads.emplace_back([t, &parts] {
        const std::string name = "indexer-" + std::to_string(t);
        pthread_setname_np(pthread_self(), name.c_str());
        build(t, &parts[t]);
      });
    for (auto& th : threads) th.join();
    // Merge: the main thread frees what the indexers allocated (cross-thread frees).
    std::size_t postings = 0;
    for (auto& part : parts) {
      for (const auto& [w, docs] : part) postings += docs.size();
      part.clear();
    }
    if (postings != 3u * kDocs * kWordsPerDoc) ++bad;
  }
  std::printf("text_index: %ld round%s, %s\n", r, r == 1 ? "" : "s",
              bad ? "WRONG COUNTS" : "all counts right");
  if (wait) {
    std::printf("text_index: done\n");
    std::fflush(stdout);
    std::string line;
    while (std::getline(std::cin, line) && line != "quit") {
    }
  }
  return bad ? 1 : 0;
}
