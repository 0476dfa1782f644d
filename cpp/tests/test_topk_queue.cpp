// The TopKQueue contract (ragfind/common/topk_queue.hpp) against sorting every offer:
// best first by score, ties by the lower doc id; threshold() is the worst kept score when full
// (-inf before); insert() says whether the offer entered; finalize() empties the queue.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "check.hpp"
#include "ragfind/common/topk_queue.hpp"

using ragfind::common::RanksBefore;
using ragfind::common::ScoredDoc;
using ragfind::common::TopKQueue;

namespace {

// Offers `docs` in the given order to a queue of size k and checks every step and the result.
void check_offers(const std::vector<ScoredDoc>& docs, std::size_t k) {
  TopKQueue q(k);
  CHECK_EQ(q.k(), k);
  std::vector<ScoredDoc> seen;
  for (const ScoredDoc& d : docs) {
    // Would d be among the k best of everything offered so far (itself included)?
    std::vector<ScoredDoc> with = seen;
    with.push_back(d);
    std::sort(with.begin(), with.end(), RanksBefore{});
    bool should_enter = false;
    for (std::size_t i = 0; i < std::min(k, with.size()); ++i)
      should_enter |= with[i].doc == d.doc && with[i].score == d.score;
    const bool was_full = q.full();
    const float before = q.threshold();
    if (!was_full) CHECK(before == -std::numeric_limits<float>::infinity());
    const bool entered = q.insert(d.score, d.doc);
    CHECK_EQ(entered, should_enter);
    // A score strictly above a full queue's threshold always enters; below it, never.
    if (was_full && d.score > before) CHECK(entered);
    if (was_full && d.score < before) CHECK(!entered);
    seen = with;
    CHECK_EQ(q.full(), seen.size() >= k);
    if (q.full()) CHECK_EQ(q.threshold(), seen[k - 1].score);
  }
  std::vector<ScoredDoc> got;
  q.finalize(got);
  const std::size_t n = std::min(k, seen.size());
  CHECK_EQ(got.size(), n);
  for (std::size_t i = 0; i < std::min(n, got.size()); ++i) {
    CHECK_EQ(got[i].doc, seen[i].doc);
    CHECK_EQ(got[i].score, seen[i].score);
  }
  CHECK(!q.full() || k == 0);  // finalize() empties it
}

std::vector<ScoredDoc> random_docs(std::mt19937& rng, std::size_t n, int distinct_scores) {
  std::uniform_int_distribution<int> s(0, distinct_scores - 1);
  std::vector<ScoredDoc> out(n);
  for (std::size_t i = 0; i < n; ++i)
    out[i] = {static_cast<float>(s(rng)) * 0.25f - 3.0f, static_cast<std::uint32_t>(i)};
  return out;
}

}  // namespace

TEST(increasing_doc_order_with_ties) {
  std::mt19937 rng(7);
  for (std::size_t n : {0, 1, 2, 5, 40, 200})
    for (std::size_t k : {1, 2, 3, 10, 64, 500})
      for (int distinct : {1, 3, 50}) check_offers(random_docs(rng, n, distinct), k);
}

TEST(any_doc_order) {  // finalize() orders by (score, doc) whatever the offer order
  std::mt19937 rng(11);
  for (int rep = 0; rep < 20; ++rep) {
    std::vector<ScoredDoc> docs = random_docs(rng, 150, rep % 2 ? 4 : 1000);
    std::shuffle(docs.begin(), docs.end(), rng);
    for (std::size_t k : {1, 7, 150, 151}) check_offers(docs, k);
  }
}

TEST(equal_score_lower_id_displaces_higher_id) {
  TopKQueue q(2);
  CHECK(q.insert(1.0f, 5));
  CHECK(q.insert(1.0f, 9));
  CHECK(q.full());
  CHECK(!q.insert(1.0f, 10));  // equal score, higher id than the worst: stays out
  CHECK(q.insert(1.0f, 3));    // equal score, lower id: enters, evicts doc 9
  CHECK(!q.insert(0.5f, 0));
  std::vector<ScoredDoc> out;
  q.finalize(out);
  CHECK_EQ(out.size(), 2u);
  CHECK_EQ(out[0].doc, 3u);
  CHECK_EQ(out[1].doc, 5u);
}

TEST(floor_keeps_out_scores_at_or_below_it_and_is_the_threshold_until_full) {
  // With a floor f below the k-th best score, the result equals the floorless queue's.
  std::mt19937 rng(5);
  for (int rep = 0; rep < 50; ++rep) {
    std::vector<ScoredDoc> docs = random_docs(rng, 120, rep % 2 ? 6 : 400);
    for (std::size_t k : {1, 5, 40}) {
      std::vector<ScoredDoc> sorted = docs;
      std::sort(sorted.begin(), sorted.end(), RanksBefore{});
      const float kth = sorted[k - 1].score;
      TopKQueue plain(k), floored(k);
      floored.set_floor(std::nextafter(kth, -std::numeric_limits<float>::infinity()));
      CHECK_EQ(floored.threshold(), std::nextafter(kth, -std::numeric_limits<float>::infinity()));
      for (const ScoredDoc& d : docs) {
        plain.insert(d.score, d.doc);
        const bool entered = floored.insert(d.score, d.doc);
        if (d.score < kth) CHECK(!entered);
        CHECK(floored.threshold() >= plain.threshold());
      }
      std::vector<ScoredDoc> a, b;
      plain.finalize(a);
      floored.finalize(b);
      CHECK_EQ(a.size(), b.size());
      for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
        CHECK_EQ(a[i].doc, b[i].doc);
        CHECK_EQ(a[i].score, b[i].score);
      }
    }
  }
  TopKQueue q(3);
  q.set_floor(1.0f);
  CHECK(!q.insert(1.0f, 0));  // at the floor: out, even while the queue has room
  CHECK(q.insert(1.5f, 1));
  CHECK_EQ(q.threshold(), 1.0f);
}

TEST(infinite_scores) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<ScoredDoc> docs = {{-inf, 0}, {inf, 1}, {0.f, 2}, {inf, 3}, {-inf, 4}, {1.f, 5}};
  for (std::size_t k : {1, 2, 3, 6, 7}) check_offers(docs, k);
}

RAGFIND_TEST_MAIN
