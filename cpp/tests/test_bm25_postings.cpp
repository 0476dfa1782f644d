// The block codec of BM25 postings (ragfind/bm25/postings.hpp): bit packing round trips at
// every width, the unrolled full-block unpack against the one-value-at-a-time reference, and
// the writer + cursor against the flat lists they encode (next, next_geq against
// std::lower_bound, block skipping, doc ids up to the 2^32 - 2 edge, tfs up to 2^32 - 1;
// scan_until against the same lists). There is one (scalar) unpack level, so no SIMD level to
// compare; count_below's SSE2 form is checked against a plain count.
#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "check.hpp"
#include "ragfind/bm25/index.hpp"

using namespace ragfind::bm25;
using namespace ragfind::inverted;

TEST(pack_round_trip_at_every_width) {
  std::mt19937 rng(1);
  for (unsigned w = 0; w <= 32; ++w) {
    const std::uint32_t top = w == 32 ? 0xFFFFFFFFu : (1u << w) - 1;
    for (std::size_t n : {1, 2, 31, 32, 33, 64, 100, 127, 128}) {
      std::vector<std::uint32_t> in(n);
      for (std::size_t i = 0; i < n; ++i) in[i] = (i % 5 == 0) ? top : static_cast<std::uint32_t>(rng()) & top;
      std::vector<std::uint32_t> words(packed_words(n, w) + 1, 0xA5A5A5A5u);
      pack_bits(in.data(), n, w, words.data());
      CHECK_EQ(words.back(), 0xA5A5A5A5u);  // exactly packed_words(n, w) written
      std::vector<std::uint32_t> out(n, 7), ref(n, 7);
      unpack_bits(words.data(), n, w, out.data());
      unpack_bits_reference(words.data(), n, w, ref.data());
      CHECK_MSG(out == in, "w=" + std::to_string(w) + " n=" + std::to_string(n));
      CHECK_MSG(ref == in, "reference w=" + std::to_string(w) + " n=" + std::to_string(n));
    }
  }
  CHECK_EQ(bit_width(0), 0u);
  CHECK_EQ(bit_width(1), 1u);
  CHECK_EQ(bit_width(0x80000000u), 32u);
  CHECK_EQ(packed_words(128, 32), 128u);
  CHECK_EQ(packed_words(1, 1), 1u);
  CHECK_EQ(packed_words(0, 17), 0u);
}

TEST(full_block_unpack_equals_reference_on_random_words) {
  std::mt19937 rng(2);
  for (unsigned w = 0; w <= 32; ++w) {
    std::vector<std::uint32_t> words(packed_words(kPostingBlock, w));
    for (auto& x : words) x = static_cast<std::uint32_t>(rng());
    std::vector<std::uint32_t> a(kPostingBlock), b(kPostingBlock);
    unpack_bits(words.data(), kPostingBlock, w, a.data());
    unpack_bits_reference(words.data(), kPostingBlock, w, b.data());
    CHECK_MSG(a == b, "w=" + std::to_string(w));
  }
}

TEST(doc_unpack_is_unpack_plus_prefix_sum) {
  std::mt19937 rng(4);
  for (unsigned w = 0; w <= 32; ++w) {
    for (std::size_t n : {1, 77, 128}) {
      std::vector<std::uint32_t> words(packed_words(n, w));
      for (auto& x : words) x = static_cast<std::uint32_t>(rng());
      for (std::uint32_t prev : {0xFFFFFFFFu, 0u, 123456u, static_cast<std::uint32_t>(rng())}) {
        const std::uint32_t first_prev = prev;
        std::vector<std::uint32_t> got(n), want(n);
        unpack_docs(words.data(), n, w, prev, got.data());
        unpack_bits_reference(words.data(), n, w, want.data());
        for (auto& x : want) x = prev = prev + 1 + x;
        CHECK_MSG(got == want, "w=" + std::to_string(w) + " n=" + std::to_string(n));
        if (n == kPostingBlock) {  // the same, group by group
          std::vector<std::uint32_t> groups(n);
          std::uint32_t p = 0;
          for (std::size_t g = 0; g < n / 32; ++g) {
            p = g == 0 ? first_prev : groups[32 * g - 1];
            unpack_docs_group(words.data() + g * w, w, p, groups.data() + 32 * g);
          }
          CHECK_MSG(groups == want, "groups w=" + std::to_string(w));
        }
      }
    }
  }
}

TEST(count_below_equals_a_plain_count) {
  // Sorted values (near 0 and near 2^32, where a signed compare would go wrong), every limit,
  // every target around them; past the limit the values are garbage and must not count.
  std::mt19937 rng(5);
  for (int round = 0; round < 300; ++round) {
    std::uint32_t v[16];
    const std::uint32_t start = round % 3 == 0 ? 0u : round % 3 == 1 ? 0xFFFFFF00u : static_cast<std::uint32_t>(rng());
    std::uint64_t x = start;
    for (auto& e : v) {
      x += rng() % (round % 2 ? 2 : 40);
      e = static_cast<std::uint32_t>(std::min<std::uint64_t>(x, 0xFFFFFFFEu));
    }
    for (std::uint32_t lim = 1; lim <= 20; ++lim) {
      std::uint32_t p[16];
      for (std::uint32_t k = 0; k < 16; ++k) p[k] = k < lim ? v[k] : static_cast<std::uint32_t>(rng());
      for (int t = -1; t < 17; ++t) {
        const std::uint32_t tgt = t < 0 ? v[0] : t == 16 ? v[15] + (v[15] < 0xFFFFFFFEu) : v[t] + (t % 2);
        std::uint32_t want = 0;
        for (std::uint32_t k = 0; k < 16 && k < lim; ++k) want += p[k] < tgt;
        CHECK_MSG(count_below(p, tgt, lim) == want, "round " + std::to_string(round) + " lim " + std::to_string(lim));
      }
    }
  }
}

namespace {

struct Lists {
  std::vector<std::vector<std::uint32_t>> docs, tfs;
};

Segment encode(const Lists& l) {
  Segment seg;
  std::vector<std::uint64_t> off{0};
  PostingsWriter w;
  for (std::size_t t = 0; t < l.docs.size(); ++t) {
    for (std::size_t i = 0; i < l.docs[t].size(); ++i) w.add(l.docs[t][i], l.tfs[t][i]);
    w.end_list();
    off.push_back(off.back() + l.docs[t].size());
  }
  seg.offsets = Buffer<std::uint64_t>(std::move(off));
  w.finish(seg);
  return seg;
}

}  // namespace

TEST(cursor_reads_back_every_list) {
  std::mt19937 rng(3);
  Lists l;
  auto add = [&](std::vector<std::uint32_t> d, std::uint32_t max_tf) {
    std::vector<std::uint32_t> t(d.size());
    for (auto& x : t) x = 1 + static_cast<std::uint32_t>(rng() % max_tf);
    l.docs.push_back(std::move(d));
    l.tfs.push_back(std::move(t));
  };
  for (std::size_t len : {1, 2, 127, 128, 129, 255, 256, 257, 1000}) {
    // random sparse, and dense runs (gap width 0)
    std::vector<std::uint32_t> d;
    std::uint32_t x = static_cast<std::uint32_t>(rng() % 50);
    for (std::size_t i = 0; i < len; ++i) d.push_back(x += 1 + static_cast<std::uint32_t>(rng() % (i % 3 ? 3 : 900)));
    add(d, len % 2 ? 1 : 9);
    std::vector<std::uint32_t> run(len);
    for (std::size_t i = 0; i < len; ++i) run[i] = static_cast<std::uint32_t>(i);
    add(run, 1);
  }
  // The 2^32 edge: gaps of width 32 and doc ids up to 2^32 - 2 (2^32 - 1 is the end marker),
  // tfs up to 2^32 - 1 (stored as tf - 1).
  add({0xFFFFFFFEu}, 1);
  add({0, 0xFFFFFFFEu}, 1);
  {
    std::vector<std::uint32_t> d(129);
    for (std::size_t i = 0; i < d.size(); ++i) d[i] = 0xFFFFFFFEu - static_cast<std::uint32_t>(128 - i);
    add(d, 3);
    l.tfs.back()[0] = 0xFFFFFFFFu;
    l.tfs.back()[128] = 0xFFFFFFFEu;
  }
  const Segment seg = encode(l);
  CHECK(seg.compressed);
  CHECK_EQ(seg.num_blocks(), seg.list_block.back());
  for (std::size_t s = 0; s < l.docs.size(); ++s) {
    const auto& d = l.docs[s];
    const auto& t = l.tfs[s];
    // next() and for_each_posting
    PostingCursor c;
    c.reset(seg, s);
    for (std::size_t i = 0; i < d.size(); ++i) {
      CHECK_EQ(c.doc(), d[i]);
      CHECK_EQ(c.tf(), t[i]);
      CHECK_EQ(c.block_index(), i / kPostingBlock);
      c.next();
    }
    CHECK_EQ(c.doc(), PostingCursor::kEnd);
    std::size_t i = 0;
    bool ok = true;
    for_each_posting(seg, s, [&](std::uint32_t doc, std::uint32_t tf) {
      ok = ok && i < d.size() && doc == d[i] && tf == t[i];
      ++i;
    });
    CHECK(ok && i == d.size());
    // next_geq against lower_bound, with increasing random targets (some skip blocks, some
    // land on postings, some stay put), then past the end.
    for (int round = 0; round < 20; ++round) {
      PostingCursor g;
      g.reset(seg, s);
      std::uint64_t target = d.front() > 1000 ? d.front() - 1000 : 0;
      while (true) {
        const std::uint64_t span = d.back() - std::min<std::uint64_t>(d.front(), d.back()) + 2;
        target += 1 + rng() % (span / (1 + round % 7) + 1);
        if (round % 3 == 0 && target <= d.back()) target = d[std::lower_bound(d.begin(), d.end(), target) - d.begin()];
        if (target >= 0xFFFFFFFFull) break;
        const auto tgt = static_cast<std::uint32_t>(target);
        g.next_geq(tgt);
        const auto it = std::lower_bound(d.begin(), d.end(), tgt);
        if (it == d.end()) {
          CHECK_EQ(g.doc(), PostingCursor::kEnd);
          break;
        }
        CHECK_EQ(g.doc(), *it);
        CHECK_EQ(g.tf(), t[static_cast<std::size_t>(it - d.begin())]);
      }
      g.next_geq(0xFFFFFFFEu);
      const bool has_last = d.back() == 0xFFFFFFFEu;
      CHECK_EQ(g.doc(), has_last ? 0xFFFFFFFEu : PostingCursor::kEnd);
    }
    // next_geq a few postings on at a time (the short, counted case), landing on postings and
    // between them.
    {
      PostingCursor g;
      g.reset(seg, s);
      std::size_t at = 0;
      while (true) {
        at += rng() % 20;
        if (at >= d.size()) break;
        const std::uint32_t tgt = d[at] - (at > 0 && d[at - 1] + 1 < d[at] && rng() % 2 ? 1 : 0);
        g.next_geq(tgt);
        const auto it = std::lower_bound(d.begin(), d.end(), tgt);
        CHECK_EQ(g.doc(), *it);
        at = static_cast<std::size_t>(it - d.begin());
      }
    }
    // scan_until in random steps up to (and never past) the current block's end, against the
    // flat list.
    for (int round = 0; round < 3; ++round) {
      PostingCursor g;
      g.reset(seg, s);
      std::size_t at = 0;
      bool same = true;
      while (g.doc() != PostingCursor::kEnd) {
        const std::uint32_t last = g.block_last();
        const std::uint32_t lo = g.doc();
        const std::uint32_t hi = round == 0 ? last : lo + static_cast<std::uint32_t>(rng() % (last - lo + 1));
        if (lo > 0) g.scan_until(lo - 1, [&](std::uint32_t, std::uint32_t) { same = false; });  // before the cursor
        g.scan_until(hi, [&](std::uint32_t doc, std::uint32_t tf) {
          same = same && at < d.size() && doc == d[at] && tf == t[at] && doc <= hi;
          ++at;
        });
        same = same && (at == d.size() ? g.doc() == PostingCursor::kEnd : g.doc() == d[at] && d[at] > hi);
        if (!same) break;
      }
      g.scan_until(0xFFFFFFFEu, [&](std::uint32_t, std::uint32_t) { same = false; });  // past the end
      CHECK_MSG(same && at == d.size(), "scan_until list " + std::to_string(s));
    }
  }
}

RAGFIND_TEST_MAIN
