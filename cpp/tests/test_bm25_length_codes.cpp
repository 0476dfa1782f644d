// Length codes and weight tables (ragfind/bm25/length_codes.hpp): which lengths get codes, and
// the table lookup against DocWeight computed from each document's own norm, bit for bit, for
// every variant, tf in and past the table, and escaped lengths.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "check.hpp"
#include "ragfind/bm25/length_codes.hpp"

using namespace ragfind::bm25;

namespace {
bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// Every document's norm and weights through the table against DocWeight on its own norm.
template <Method M>
void check_variant(const Params& p, double avgdl, const LengthCodes& c, const std::vector<std::uint32_t>& len,
                   const WeightTable& t) {
  const DocWeight<M> dw(p);
  const Weigher<M> wt(p, avgdl, c.code.data(), len.data(), &t);
  std::size_t escapes = 0;
  for (std::uint32_t d = 0; d < len.size(); ++d) {
    escapes += c.code[d] == kEscape;
    const float norm = doc_norm(p, len[d], avgdl);
    CHECK(same_bits(wt.norm(d), norm));
    for (std::uint32_t tf : {1u, 2u, 7u, 8u, 9u, 31u, 100000u})
      CHECK_MSG(same_bits(wt(d, tf), dw(tf, norm)), std::string(method_name(M)) + " tf=" + std::to_string(tf));
  }
  CHECK(escapes > 0);
}
}  // namespace

TEST(few_lengths_all_get_codes) {
  LengthCodes c;
  c.build(nullptr, 0);
  CHECK_EQ(c.code.size(), 0u);
  CHECK_EQ(c.length.size(), 0u);
  const std::vector<std::uint32_t> len = {5, 0, 7, 5, 1000, 7, 5};
  c.build(len.data(), len.size());
  CHECK_EQ(c.length.size(), 4u);
  for (std::size_t d = 0; d < len.size(); ++d) {
    CHECK(c.code[d] != kEscape);
    CHECK_EQ(c.length[c.code[d]], len[d]);
  }
  for (std::size_t i = 1; i < c.length.size(); ++i) CHECK(c.length[i - 1] < c.length[i]);
}

TEST(the_most_common_lengths_get_codes_the_rest_escape) {
  // Length l occurs (1000 - l) times for l < 600 (so the 255 most common are 0..254), and a
  // few documents are longer than any coded length.
  std::vector<std::uint32_t> len;
  for (std::uint32_t l = 0; l < 600; ++l)
    for (std::uint32_t r = 0; r < 1000 - l; ++r) len.push_back(l);
  for (std::uint32_t l : {65535u, 65536u, 70000u, 0xFFFFFFFFu}) len.push_back(l);
  std::shuffle(len.begin(), len.end(), std::mt19937(3));
  LengthCodes c;
  c.build(len.data(), len.size());
  CHECK_EQ(c.length.size(), static_cast<std::size_t>(kCodes));
  for (std::size_t d = 0; d < len.size(); ++d) {
    if (len[d] < kCodes) {
      CHECK_MSG(c.code[d] != kEscape && c.length[c.code[d]] == len[d], std::to_string(len[d]));
    } else {
      CHECK_MSG(c.code[d] == kEscape, std::to_string(len[d]));
    }
  }
  // Ties in frequency go to the shorter length.
  std::vector<std::uint32_t> t2;
  for (std::uint32_t l = 0; l < 300; ++l) t2.insert(t2.end(), {l, l});
  c.build(t2.data(), t2.size());
  CHECK_EQ(c.length.back(), static_cast<std::uint32_t>(kCodes - 1));
}

TEST(table_weights_equal_doc_weight_bit_for_bit) {
  std::mt19937 rng(7);
  std::vector<std::uint32_t> len(20000);
  for (auto& l : len) l = rng() % 3 == 0 ? rng() % 100000 : rng() % 400;
  LengthCodes c;
  c.build(len.data(), len.size());
  for (Method m : {Method::Lucene, Method::Robertson, Method::Atire, Method::BM25L, Method::BM25Plus}) {
    Params p;
    p.method = m;
    p.k1 = 1.3;
    p.b = 0.6;
    p.delta = 0.5;
    for (double avgdl : {120.0, 7.25}) {
      WeightTable t;
      build_weight_table(p, avgdl, c, t);
      switch (m) {
        case Method::Lucene: check_variant<Method::Lucene>(p, avgdl, c, len, t); break;
        case Method::Robertson: check_variant<Method::Robertson>(p, avgdl, c, len, t); break;
        case Method::Atire: check_variant<Method::Atire>(p, avgdl, c, len, t); break;
        case Method::BM25L: check_variant<Method::BM25L>(p, avgdl, c, len, t); break;
        case Method::BM25Plus: check_variant<Method::BM25Plus>(p, avgdl, c, len, t); break;
      }
    }
  }
}

RAGFIND_TEST_MAIN
