// Size classes: every size maps to the smallest class that holds it, classes are about four per
// doubling, and spans hold enough blocks.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <livealloc.h>

using namespace livealloc::detail;

TEST_CASE("every size maps to the smallest class that holds it") {
  for (std::size_t s = 0; s <= kMaxSmall; ++s) {
    unsigned c = size_class(s);
    REQUIRE(c >= 1);
    REQUIRE(c < kClasses);
    REQUIRE(class_size(c) >= s);
    if (c > 1) REQUIRE(class_size(c - 1) < s);
    REQUIRE(c == class_of(s));
  }
}

TEST_CASE("class sizes are increasing multiples of 16 and round trip") {
  for (unsigned c = 1; c < kClasses; ++c) {
    CHECK(class_size(c) % 16 == 0);
    CHECK(class_of(class_size(c)) == c);
    if (c > 1) CHECK(class_size(c) > class_size(c - 1));
  }
  CHECK(class_size(1) == 16);
  CHECK(class_size(kClasses - 1) == kMaxSmall);
}

TEST_CASE("four classes per doubling above 128 bytes, so rounding wastes at most 25%") {
  for (std::size_t p = 128; p < kMaxSmall; p *= 2) {
    unsigned n = class_of(2 * p) - class_of(p);
    CHECK(n == 4);
  }
  for (std::size_t s = 1; s <= kMaxSmall; ++s) {
    std::size_t got = class_size(class_of(s));
    REQUIRE(got - s <= (s < 16 ? 15 : s / 4 + 16));
  }
}

TEST_CASE("spans hold at least four blocks and fit a segment") {
  for (unsigned c = 1; c < kClasses; ++c) {
    std::size_t span = std::size_t(class_units(c)) << kUnitShift;
    CHECK(span / class_size(c) >= kMinBlocksPerSpan);
    CHECK(class_units(c) < kUnits);
    CHECK(span / class_size(c) <= kMaxCapacity);
  }
}

TEST_CASE("find_run finds the first run of free units") {
  CHECK(find_run(0, 1) == -1);
  CHECK(find_run(0b1000, 1) == 3);
  CHECK(find_run(0b1110110, 2) == 1);
  CHECK(find_run(0b1110110, 3) == 4);
  CHECK(find_run(0b1110110, 4) == -1);
  CHECK(find_run(kAllDataUnits, 63) == 1);
  CHECK(find_run(kAllDataUnits, 64) == -1);
}
