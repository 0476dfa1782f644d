// PagedBits (ragfind/common/paged_bits.hpp) against a flat vector of words: copies share pages
// and a write to one copy never shows in another; resizing keeps the bits past the end clear;
// count and same_words agree with a word-by-word reading.
#include <cstdint>
#include <random>
#include <vector>

#include "check.hpp"
#include "ragfind/common/paged_bits.hpp"

using ragfind::common::PagedBits;

namespace {

constexpr std::size_t kPage = PagedBits::kPageWords;

// A flat bitmap of n bits: the reference.
struct Flat {
  std::vector<std::uint64_t> words;
  std::size_t n = 0;
  void resize(std::size_t bits) {
    words.resize((bits + 63) / 64, 0);
    if (bits % 64 && !words.empty()) words.back() &= (std::uint64_t{1} << (bits % 64)) - 1;
    n = bits;
  }
  void assign(std::size_t i, bool on) {
    const std::uint64_t bit = std::uint64_t{1} << (i & 63);
    words[i >> 6] = on ? words[i >> 6] | bit : words[i >> 6] & ~bit;
  }
};

std::size_t popcount(const std::vector<std::uint64_t>& w, std::size_t first, std::size_t n) {
  std::size_t c = 0;
  for (std::size_t i = first; i < first + n; ++i) c += static_cast<std::size_t>(__builtin_popcountll(w[i]));
  return c;
}

void check_same(const PagedBits& p, const Flat& f) {
  CHECK_EQ(p.size(), f.n);
  CHECK_EQ(p.n_words(), f.words.size());
  CHECK(p.words() == f.words);
  CHECK_EQ(p.count(), popcount(f.words, 0, f.words.size()));
}

}  // namespace

TEST(copies_share_pages_and_never_see_each_others_writes) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    // A few versions, each a copy of another, changed in a few bits and sometimes resized.
    std::vector<PagedBits> paged(1);
    std::vector<Flat> flat(1);
    const std::size_t n0 = static_cast<std::size_t>(rng() % (5 * kPage * 64));
    paged[0].resize(n0);
    flat[0].resize(n0);
    for (int step = 0; step < 60; ++step) {
      const std::size_t from = static_cast<std::size_t>(rng() % paged.size());
      PagedBits p = paged[from];
      Flat f = flat[from];
      if (rng() % 4 == 0) {
        const std::size_t n = static_cast<std::size_t>(rng() % (5 * kPage * 64));
        p.resize(n);
        f.resize(n);
      }
      for (int w = static_cast<int>(rng() % 40); w > 0 && f.n; --w) {
        const std::size_t i = static_cast<std::size_t>(rng() % f.n);
        const bool on = rng() % 3 != 0;
        p.assign(i, on);
        f.assign(i, on);
        CHECK_EQ(p.test(i), on);
      }
      paged.push_back(p);
      flat.push_back(f);
      for (std::size_t v = 0; v < paged.size(); ++v) check_same(paged[v], flat[v]);
    }
    // same_words and count over ranges against the flat words.
    for (int q = 0; q < 200; ++q) {
      const std::size_t a = static_cast<std::size_t>(rng() % paged.size());
      const std::size_t b = static_cast<std::size_t>(rng() % paged.size());
      const std::size_t words = std::min(flat[a].words.size(), flat[b].words.size());
      if (!words) continue;
      const std::size_t first = static_cast<std::size_t>(rng() % words);
      const std::size_t n = static_cast<std::size_t>(rng() % (words - first + 1));
      bool want = true;
      for (std::size_t i = first; i < first + n; ++i) want &= flat[a].words[i] == flat[b].words[i];
      CHECK_EQ(paged[a].same_words(paged[b], first, n), want);
      CHECK_EQ(paged[a].count(first, n), popcount(flat[a].words, first, n));
    }
  }
}

TEST(from_words_drops_bits_past_the_end) {
  std::vector<std::uint64_t> words(kPage + 3, ~std::uint64_t{0});
  const std::size_t n = kPage * 64 + 70;  // one page and 70 bits: the rest of the words are junk
  PagedBits p(words.data(), words.size(), n);
  CHECK_EQ(p.size(), n);
  CHECK_EQ(p.n_words(), kPage + 2);
  CHECK_EQ(p.count(), n);
  CHECK_EQ(p[kPage + 1], std::uint64_t{63});  // bits 64..69 of the second page's words
  // Growing again shows clear bits, not the junk that lay past the end.
  p.resize(2 * kPage * 64);
  CHECK_EQ(p.count(), n);
  // A shrink clears what it drops, in this copy only.
  PagedBits q = p;
  q.resize(100);
  q.resize(n);
  CHECK_EQ(q.count(), std::size_t{100});
  CHECK_EQ(p.count(), n);
}

RAGFIND_TEST_MAIN
