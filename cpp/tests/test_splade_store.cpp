// splade::Store (ragfind/splade/store.hpp): remove is all or nothing, stale allowed-sets are
// refused, search_batch agrees with score_all, and adds, deletes and searches racing on the
// store's reader-writer lock leave every result consistent with some state of the index.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <thread>
#include <vector>

#include "check.hpp"
#include "ragfind/splade/store.hpp"

using namespace ragfind::splade;
using ragfind::inverted::WeightedTerm;

namespace {

constexpr std::uint32_t kDim = 64;

// Document j: term j % 7 with weight 1 + (j % 5), and term 10 + j % 3 with weight 2.
struct Batch {
  std::vector<std::int64_t> indptr{0};
  std::vector<std::uint32_t> indices;
  std::vector<float> values;
};

Batch make_docs(std::int64_t first, std::int64_t n) {
  Batch b;
  for (std::int64_t j = first; j < first + n; ++j) {
    b.indices.push_back(static_cast<std::uint32_t>(j % 7));
    b.values.push_back(static_cast<float>(1 + j % 5));
    b.indices.push_back(static_cast<std::uint32_t>(10 + j % 3));
    b.values.push_back(2.0f);
    b.indptr.push_back(static_cast<std::int64_t>(b.indices.size()));
  }
  return b;
}

void add_docs(Store& s, std::int64_t first, std::int64_t n) {
  Batch b = make_docs(first, n);
  s.add(b.indptr.data(), b.indices.data(), b.values.data(), static_cast<std::size_t>(n));
}

// The score of document j for the query {term t: 1.0} (scale 0: exact float32).
float expected(std::int64_t j, std::uint32_t t) {
  float x = 0.0f;
  if (static_cast<std::uint32_t>(j % 7) == t) x += static_cast<float>(1 + j % 5);
  if (static_cast<std::uint32_t>(10 + j % 3) == t) x += 2.0f;
  return x;
}

}  // namespace

TEST(remove_is_all_or_nothing) {
  Store s(kDim, 0.0f, false);
  add_docs(s, 0, 10);
  const auto g = s.stats().generation;
  CHECK_THROWS(std::invalid_argument, (s.remove(std::vector<std::int64_t>{3, 10})));  // 10 was never added
  CHECK_THROWS(std::invalid_argument, (s.remove(std::vector<std::int64_t>{4, 4})));   // repeated
  CHECK_THROWS(std::invalid_argument, (s.remove(std::vector<std::int64_t>{-1})));
  CHECK_EQ(s.stats().num_live, 10u);
  CHECK(s.stats().generation == g);
  s.remove(std::vector<std::int64_t>{4, 2});
  CHECK_EQ(s.stats().num_live, 8u);
  CHECK_THROWS(std::invalid_argument, (s.remove(std::vector<std::int64_t>{2})));  // already deleted
  CHECK_EQ(s.stats().num_live, 8u);
}

TEST(weights_and_score_all) {
  Store s(kDim, 0.0f, false);
  add_docs(s, 0, 20);
  const std::uint32_t terms[] = {3, 11, 40};
  const std::vector<float> w = s.weights(terms, 3, 10);  // doc 10: term 3 (weight 1), term 11 (2)
  CHECK_EQ(w[0], 1.0f);
  CHECK_EQ(w[1], 2.0f);
  CHECK_EQ(w[2], 0.0f);
  CHECK_THROWS(std::out_of_range, s.weights(terms, 3, 20));
  CHECK_THROWS(std::out_of_range, s.weights(terms, 3, -1));
  const std::vector<float> all = s.score_all({WeightedTerm{11, 1.0f}});
  CHECK_EQ(all.size(), 20u);
  for (std::int64_t j = 0; j < 20; ++j) CHECK_EQ(all[static_cast<std::size_t>(j)], expected(j, 11));
}

TEST(search_batch_matches_score_all_and_refuses_stale_masks) {
  Store s(kDim, 0.0f, false);
  add_docs(s, 0, 200);
  s.remove(std::vector<std::int64_t>{5, 17, 100});
  const std::int64_t indptr[] = {0, 1, 2, 2};  // queries: term 2, term 12, empty
  const std::uint32_t ix[] = {2, 12};
  const float v[] = {1.0f, 1.0f};
  BatchHits h;
  CHECK(s.search_batch(indptr, ix, v, 3, 15, 2, Algorithm::Auto, nullptr, 0, -1, 0, h));
  CHECK_EQ(h.k, 15u);
  for (std::size_t q = 0; q < 2; ++q) {
    const std::uint32_t t = ix[q];
    std::vector<float> ref;
    for (std::int64_t j = 0; j < 200; ++j)
      if (j != 5 && j != 17 && j != 100 && expected(j, t) > 0) ref.push_back(expected(j, t));
    std::sort(ref.rbegin(), ref.rend());
    for (std::size_t r = 0; r < h.k; ++r) {
      const std::int64_t d = h.docs[q * h.k + r];
      CHECK(d >= 0 && d != 5 && d != 17 && d != 100);
      CHECK_EQ(h.scores[q * h.k + r], expected(d, t));
      CHECK_EQ(h.scores[q * h.k + r], ref[r]);
    }
  }
  for (std::size_t r = 0; r < h.k; ++r) CHECK_EQ(h.docs[2 * h.k + r], -1);  // the empty query
  // An allowed-set of the current generation is used; one of an older generation is refused.
  const std::int64_t gen = static_cast<std::int64_t>(s.stats().generation);
  std::vector<std::uint8_t> allowed(200, 0);
  allowed[9] = allowed[16] = 1;
  CHECK(s.search_batch(indptr, ix, v, 1, 5, 1, Algorithm::Auto, allowed.data(), allowed.size(), gen, 0, h));
  CHECK_EQ(h.docs[0], 9);  // doc 9: 9 % 7 = 2 with weight 5; doc 16: weight 2
  CHECK_EQ(h.docs[1], 16);
  CHECK_EQ(h.docs[2], -1);
  add_docs(s, 200, 1);
  CHECK(!s.search_batch(indptr, ix, v, 1, 5, 1, Algorithm::Auto, allowed.data(), allowed.size(), gen, 0, h));
}

TEST(adds_deletes_and_searches_race) {
  Store s(kDim, 100.0f, false);
  constexpr std::int64_t kBatches = 200, kBatch = 50;
  std::atomic<bool> done{false};
  std::atomic<long> searches{0}, bad{0};
  std::atomic<std::int64_t> deleted_below{0};  // every 4th document below it is deleted
  std::vector<std::thread> threads;
  threads.emplace_back([&] {  // writer: adds batches, a search finishing between two of them
    for (std::int64_t b = 0; b < kBatches; ++b) {
      const long seen = searches.load();
      add_docs(s, b * kBatch, kBatch);
      while (searches.load() == seen) std::this_thread::yield();
    }
  });
  threads.emplace_back([&] {  // deleter: deletes every 4th document once it exists
    std::int64_t next = 0;
    while (next < kBatches * kBatch) {
      const std::int64_t have = s.stats().num_docs;
      std::vector<std::int64_t> del;
      for (; next < have; next += 4) del.push_back(next);
      if (!del.empty()) {
        s.remove(del);
        deleted_below.store(next);
        try {
          s.remove(std::vector<std::int64_t>{del[0]});  // deleted already: refused
          bad.fetch_add(1);
        } catch (const std::invalid_argument&) {}
      }
      std::this_thread::yield();
    }
  });
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {  // readers
      const std::int64_t indptr[] = {0, 1, 2};
      const std::uint32_t ix[] = {static_cast<std::uint32_t>(r), static_cast<std::uint32_t>(10 + r % 3)};
      const float v[] = {1.0f, 1.0f};
      std::uint64_t last_gen = 0;
      BatchHits h;
      while (!done.load()) {
        const StoreStats st = s.stats();
        if (st.generation < last_gen || st.num_live > st.num_docs) bad.fetch_add(1);
        last_gen = st.generation;
        const std::int64_t gone = deleted_below.load();
        s.search_batch(indptr, ix, v, 2, 20, 1, Algorithm::Auto, nullptr, 0, -1, 0, h);
        for (std::size_t q = 0; q < 2; ++q) {
          float prev = std::numeric_limits<float>::infinity();
          for (std::size_t i = 0; i < h.k; ++i) {
            const std::int64_t d = h.docs[q * h.k + i];
            if (d < 0) continue;
            const float sc = h.scores[q * h.k + i];
            // Deleted before the search: never returned. Scores as added, in decreasing order.
            if ((d % 4 == 0 && d < gone) || d >= kBatches * kBatch || std::fabs(sc - expected(d, ix[q])) > 1e-4f ||
                sc > prev)
              bad.fetch_add(1);
            prev = sc;
          }
        }
        searches.fetch_add(1);
      }
    });
  threads[0].join();
  threads[1].join();
  while (searches.load() < 3) std::this_thread::yield();  // every reader searched at least once
  done.store(true);
  for (std::size_t i = 2; i < threads.size(); ++i) threads[i].join();
  CHECK_EQ(bad.load(), 0);
  const StoreStats st = s.stats();
  CHECK_EQ(st.num_docs, static_cast<std::uint32_t>(kBatches * kBatch));
  CHECK_EQ(st.num_live, static_cast<std::uint32_t>(kBatches * kBatch * 3 / 4));
  // The final state agrees with a fresh index of the live documents' scores.
  const std::vector<float> all = s.score_all({WeightedTerm{3, 1.0f}});
  for (std::int64_t j = 0; j < kBatches * kBatch; ++j)
    CHECK(std::fabs(all[static_cast<std::size_t>(j)] - expected(j, 3)) < 1e-4f);
}

RAGFIND_TEST_MAIN
