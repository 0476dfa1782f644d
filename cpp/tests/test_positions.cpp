// The term-major position lists (ragfind/bm25/positions.hpp): the one-byte length codes round
// down and keep order (score bounds rely on both), and every entry reads back its slot,
// positions, count and length code, blocks their minima and maxima, whatever the block size.
#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "check.hpp"
#include "ragfind/bm25/positions.hpp"

using namespace ragfind::bm25;

TEST(length_codes_round_down_and_keep_order) {
  std::uint32_t prev_code = 0;
  for (std::uint64_t n = 0; n <= (1u << 21); ++n) {
    const std::uint32_t len = static_cast<std::uint32_t>(n);
    const std::uint8_t c = length_code(len);
    CHECK(code_length(c) <= len);
    CHECK(c >= prev_code);
    if (n < 32) CHECK_EQ(code_length(c), len);
    // within 1/16 of the length below the saturated range
    if (n >= 32 && n < 507904) CHECK(static_cast<double>(code_length(c)) * 17.0 / 16.0 > static_cast<double>(len));
    prev_code = c;
  }
  for (std::uint32_t len : {1u << 22, 1u << 30, 0xFFFFFFFFu}) {
    CHECK_EQ(static_cast<int>(length_code(len)), 255);
    CHECK(code_length(255) <= len);
  }
  for (int c = 0; c < 256; ++c) CHECK_EQ(static_cast<int>(length_code(code_length(static_cast<std::uint8_t>(c)))), c);
}

TEST(entries_read_back) {
  std::mt19937 rng(5);
  TermPositions t;
  struct Want {
    std::uint32_t slot, len;
    std::vector<std::int64_t> pos;
  };
  std::vector<Want> want;
  std::uint32_t slot = 0;
  for (int i = 0; i < 1000; ++i) {
    slot += 1 + rng() % 5;
    Want w{slot, 0, {}};
    const int n = 1 + (rng() % 7 == 0 ? static_cast<int>(rng() % 300) : static_cast<int>(rng() % 3));
    std::int64_t p = rng() % 4;
    for (int k = 0; k < n; ++k) {
      w.pos.push_back(p);
      p += 1 + rng() % (k % 5 == 0 ? 1000 : 3);
    }
    w.len = static_cast<std::uint32_t>(p + rng() % 100);
    t.push(w.slot, w.pos.data(), w.pos.size(), w.len);
    want.push_back(std::move(w));
  }
  CHECK_EQ(t.size(), want.size());
  std::vector<std::int64_t> got;
  for (std::size_t i = 0; i < want.size(); ++i) {
    CHECK_EQ(t.slots[i], want[i].slot);
    t.positions(i, got);
    CHECK(got == want[i].pos);
    CHECK_EQ(static_cast<int>(t.impact[i] >> 8), static_cast<int>(length_code(want[i].len)));
    CHECK(t.tf_bound(i) >= want[i].pos.size());
    if (want[i].pos.size() < 255) CHECK_EQ(t.tf_bound(i), want[i].pos.size());
  }
  for (std::size_t b = 0; b < t.blocks.size(); ++b) {
    std::uint8_t min_len = 255, min_multi = 255;
    std::uint32_t max_tf = 0;
    std::vector<std::uint8_t> multi;
    for (std::size_t i = b * TermPositions::kBlock; i < std::min(want.size(), (b + 1) * TermPositions::kBlock); ++i) {
      const std::uint8_t c = length_code(want[i].len);
      min_len = std::min(min_len, c);
      max_tf = std::max<std::uint32_t>(max_tf, static_cast<std::uint32_t>(want[i].pos.size()));
      if (want[i].pos.size() > 1) {
        min_multi = std::min(min_multi, c);
        multi.push_back(static_cast<std::uint8_t>(i % TermPositions::kBlock));
      }
    }
    CHECK_EQ(static_cast<int>(t.blocks[b].min_len), static_cast<int>(min_len));
    CHECK_EQ(static_cast<int>(t.blocks[b].min_len_multi), static_cast<int>(min_multi));
    CHECK_EQ(t.blocks[b].max_tf, max_tf);
    const std::uint8_t *m, *me;
    t.multi_range(b, m, me);
    CHECK(std::vector<std::uint8_t>(m, me) == multi);
  }
}

RAGFIND_TEST_MAIN
