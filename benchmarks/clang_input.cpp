// clang_input: the translation unit the `clang` workload compiles (bench.py: clang++ -std=c++17 -O2
// -c). It is input, never built by CMake: a log summariser of the kind services carry, written to
// instantiate the usual standard-library templates (maps, variant, function, streams, algorithms), so
// the compiler builds, optimises and frees a realistic amount of AST and IR.
// Keep it as it is: a change to it changes the workload, and older runs no longer compare.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

namespace logsum {

using Value = std::variant<std::int64_t, double, std::string, bool>;

struct Record {
  std::string time;
  std::string level;
  std::string component;
  std::map<std::string, Value> fields;
  std::string message;
};

bool all_digits(const std::string& s, std::size_t from) {
  return from < s.size() && std::all_of(s.begin() + static_cast<std::ptrdiff_t>(from), s.end(),
                                        [](char c) { return c >= '0' && c <= '9'; });
}

std::optional<Value> parse_value(const std::string& text) {
  if (text.empty()) return std::nullopt;
  if (text == "true" || text == "false") return Value(text == "true");
  const std::size_t sign = text[0] == '-' ? 1 : 0;
  if (all_digits(text, sign)) return Value(static_cast<std::int64_t>(std::stoll(text)));
  const std::size_t dot = text.find('.');
  if (dot != std::string::npos && dot > sign && all_digits(text.substr(0, dot), sign) &&
      (dot + 1 == text.size() || all_digits(text, dot + 1)))
    return Value(std::stod(text));
  return Value(text);
}

// "TIME [LEVEL] component: words key=value key="quoted value" ..."
std::optional<Record> parse_line(const std::string& line) {
  std::istringstream in(line);
  Record r;
  std::string level, component;
  if (!(in >> r.time >> level >> component)) return std::nullopt;
  if (level.size() < 3 || level.front() != '[' || level.back() != ']') return std::nullopt;
  if (component.size() < 2 || component.back() != ':') return std::nullopt;
  r.level = level.substr(1, level.size() - 2);
  r.component = component.substr(0, component.size() - 1);
  std::vector<std::string> words;
  std::string word;
  while (in >> word) {
    if (std::count(word.begin(), word.end(), '"') == 1) {  // a quoted value with spaces
      std::string more;
      while (in >> more) {
        word += ' ' + more;
        if (more.find('"') != std::string::npos) break;
      }
    }
    const std::size_t eq = word.find('=');
    if (eq == std::string::npos || eq == 0) {
      words.push_back(word);
      continue;
    }
    std::string raw = word.substr(eq + 1);
    if (raw.size() >= 2 && raw.front() == '"' && raw.back() == '"') raw = raw.substr(1, raw.size() - 2);
    if (auto v = parse_value(raw)) r.fields.emplace(word.substr(0, eq), std::move(*v));
  }
  std::ostringstream message;
  for (std::size_t i = 0; i < words.size(); ++i) message << (i ? " " : "") << words[i];
  r.message = message.str();
  return r;
}

struct Stats {
  std::size_t count = 0;
  double sum = 0;
  double min = 0;
  double max = 0;
  std::vector<double> samples;

  void add(double v) {
    if (count == 0 || v < min) min = v;
    if (count == 0 || v > max) max = v;
    ++count;
    sum += v;
    samples.push_back(v);
  }
  double quantile(double q) {
    if (samples.empty()) return 0;
    std::sort(samples.begin(), samples.end());
    return samples[static_cast<std::size_t>(q * static_cast<double>(samples.size() - 1))];
  }
};

class Summary {
 public:
  using Filter = std::function<bool(const Record&)>;

  void add_filter(std::string name, Filter f) { filters_.emplace_back(std::move(name), std::move(f)); }

  void add(const Record& r) {
    ++levels_[r.level];
    components_.insert(r.component);
    for (const auto& field : r.fields) {
      const std::string& name = field.first;  // (a structured binding cannot be captured in C++17)
      std::visit(
          [&](const auto& v) {
            using T = std::decay_t<decltype(v)>;
            if constexpr (std::is_same_v<T, std::int64_t> || std::is_same_v<T, double>)
              numbers_[name].add(static_cast<double>(v));
            else if constexpr (std::is_same_v<T, std::string>)
              ++words_[name + "=" + v];
            else
              ++flags_[name][v];
          },
          field.second);
    }
    for (auto& [name, f] : filters_)
      if (f(r)) matches_[name].push_back(r.message);
  }

  std::string report() {
    std::ostringstream out;
    for (const auto& [level, n] : levels_) out << level << ' ' << n << '\n';
    out << components_.size() << " components\n";
    for (auto& [name, s] : numbers_)
      out << name << " n=" << s.count << " mean=" << (s.count ? s.sum / static_cast<double>(s.count) : 0)
          << " p50=" << s.quantile(0.5) << " p99=" << s.quantile(0.99) << " max=" << s.max << '\n';
    std::vector<std::pair<std::string, std::size_t>> top(words_.begin(), words_.end());
    std::partial_sort(top.begin(), top.begin() + std::min<std::size_t>(10, top.size()), top.end(),
                      [](const auto& a, const auto& b) { return a.second > b.second; });
    for (std::size_t i = 0; i < std::min<std::size_t>(10, top.size()); ++i)
      out << top[i].first << ' ' << top[i].second << '\n';
    for (const auto& [name, counts] : flags_)
      out << name << " true=" << (counts.count(true) ? counts.at(true) : 0) << '\n';
    for (const auto& [name, lines] : matches_) {
      std::size_t chars = std::accumulate(lines.begin(), lines.end(), std::size_t{0},
                                          [](std::size_t n, const std::string& s) { return n + s.size(); });
      out << name << ' ' << lines.size() << " lines, " << chars << " chars\n";
    }
    return out.str();
  }

 private:
  std::map<std::string, std::size_t> levels_;
  std::set<std::string> components_;
  std::unordered_map<std::string, Stats> numbers_;
  std::unordered_map<std::string, std::size_t> words_;
  std::map<std::string, std::map<bool, std::size_t>> flags_;
  std::vector<std::pair<std::string, Filter>> filters_;
  std::map<std::string, std::vector<std::string>> matches_;
};

}  // namespace logsum

int main() {
  logsum::Summary summary;
  summary.add_filter("errors", [](const logsum::Record& r) { return r.level == "ERROR"; });
  summary.add_filter("slow", [](const logsum::Record& r) {
    auto it = r.fields.find("ms");
    return it != r.fields.end() && std::holds_alternative<std::int64_t>(it->second) &&
           std::get<std::int64_t>(it->second) > 100;
  });
  std::string line;
  std::size_t bad = 0;
  while (std::getline(std::cin, line)) {
    if (auto r = logsum::parse_line(line))
      summary.add(*r);
    else
      ++bad;
  }
  std::cout << summary.report() << bad << " lines not understood\n";
  return 0;
}
