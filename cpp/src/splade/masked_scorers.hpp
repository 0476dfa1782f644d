// The shared posting-list algorithms (ragfind/inverted/maxscore.hpp) restricted to an allowed
// set of documents: `allowed` is a byte per document of the segment (seg.base + local), 0 for a
// deleted or filtered-out document. A disallowed document never enters a candidate list or the
// queue and never raises a pruning threshold; allowed documents get the same sums, in the same
// order, as in the unrestricted algorithms (bit-identical scores).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "ragfind/inverted/maxscore.hpp"

namespace ragfind::sparse::masked {

using postings::BoundedList;
using postings::next_geq;
using postings::WeightedTerm;

/// Every posting term at a time into a dense accumulator; the excluded documents are then
/// zeroed in one pass (cheaper than a data-dependent branch per posting, and nothing prunes
/// here) and the rest offered to the queue.
template <class W>
void exhaustive_segment(const bm25::Segment& seg, const std::vector<WeightedTerm>& query, const W& w,
                        const std::uint8_t* allowed, bm25::TopKQueue& heap) {
  thread_local std::vector<float> buffer;
  if (buffer.size() < seg.num_docs) buffer.resize(seg.num_docs);
  float* acc = buffer.data();
  std::fill(acc, acc + seg.num_docs, 0.0f);
  const std::uint8_t* ok = allowed + seg.base;
  const std::uint32_t* docs = seg.docs.data();
  const std::uint32_t* stored = seg.tfs.data();
  for (const WeightedTerm& t : query) {
    const std::int64_t slot = seg.slot_of(t.term);
    if (slot < 0) continue;
    for (std::uint64_t j = seg.offsets[slot], e = seg.offsets[slot + 1]; j < e; ++j)
      acc[docs[j]] += t.weight * w(stored[j], docs[j]);
  }
  for (std::uint32_t d = 0; d < seg.num_docs; ++d) acc[d] = ok[d] ? acc[d] : 0.0f;
  postings::offer_scores(acc, seg.num_docs, seg.base, heap);
}

/// Document-at-a-time MaxScore over the allowed documents: a disallowed candidate is stepped
/// over (its essential cursors advanced) without being scored.
template <class W>
void maxscore_segment(const bm25::Segment& seg, const std::vector<WeightedTerm>& query, const float* bounds,
                      const W& w, const std::uint8_t* allowed, bm25::TopKQueue& heap) {
  std::vector<BoundedList> cur = postings::bounded_lists(seg, query, bounds);
  if (cur.empty()) return;
  std::sort(cur.begin(), cur.end(), [](const BoundedList& a, const BoundedList& b) { return a.bound < b.bound; });
  const std::size_t n = cur.size();
  std::vector<double> cum(n);
  double acc = 0;
  for (std::size_t i = 0; i < n; ++i) cum[i] = (acc += cur[i].bound);
  const std::uint8_t* ok = allowed + seg.base;
  const std::uint32_t* docs = seg.docs.data();
  const std::uint32_t* stored = seg.tfs.data();
  float theta = heap.threshold();
  std::size_t first_ess = 0;
  while (first_ess < n && cum[first_ess] <= theta) ++first_ess;
  while (first_ess < n) {
    std::uint32_t doc = 0xFFFFFFFFu;
    for (std::size_t i = first_ess; i < n; ++i)
      if (cur[i].pos < cur[i].end && docs[cur[i].pos] < doc) doc = docs[cur[i].pos];
    if (doc == 0xFFFFFFFFu) break;
    if (!ok[doc]) {
      for (std::size_t i = first_ess; i < n; ++i)
        if (cur[i].pos < cur[i].end && docs[cur[i].pos] == doc) ++cur[i].pos;
      continue;
    }
    float score = 0.0f;
    for (std::size_t i = first_ess; i < n; ++i) {
      BoundedList& c = cur[i];
      if (c.pos < c.end && docs[c.pos] == doc) {
        score += c.weight * w(stored[c.pos], doc);
        ++c.pos;
      }
    }
    bool alive = true;
    for (std::size_t i = first_ess; i-- > 0;) {
      if (static_cast<double>(score) + cum[i] <= theta) {
        alive = false;
        break;
      }
      BoundedList& c = cur[i];
      c.pos = next_geq(docs, c.pos, c.end, doc);
      if (c.pos < c.end && docs[c.pos] == doc) score += c.weight * w(stored[c.pos], doc);
    }
    if (alive && heap.insert(score, seg.base + doc) && heap.full()) {
      theta = heap.threshold();
      while (first_ess < n && cum[first_ess] <= theta) ++first_ess;
    }
  }
}

/// Term-at-a-time MaxScore (quit/continue) over the allowed documents: only their partial
/// scores feed the threshold estimate.
template <class W>
void taat_maxscore_segment(const bm25::Segment& seg, const std::vector<WeightedTerm>& query, const float* bounds,
                           const W& w, const std::uint8_t* allowed, bm25::TopKQueue& heap) {
  std::vector<BoundedList> terms = postings::bounded_lists(seg, query, bounds);
  if (terms.empty()) return;
  std::sort(terms.begin(), terms.end(), [](const BoundedList& a, const BoundedList& b) { return a.bound > b.bound; });
  const std::size_t n = terms.size();
  std::vector<double> rest(n + 1, 0.0);
  for (std::size_t i = n; i-- > 0;) rest[i] = rest[i + 1] + terms[i].bound;

  thread_local std::vector<float> buffer;
  thread_local std::vector<std::uint32_t> touched;
  thread_local std::vector<float> scratch;
  if (buffer.size() < seg.num_docs) buffer.resize(seg.num_docs);
  float* acc = buffer.data();
  std::fill(acc, acc + seg.num_docs, 0.0f);
  touched.clear();
  const std::uint8_t* ok = allowed + seg.base;
  const std::uint32_t* docs = seg.docs.data();
  const std::uint32_t* stored = seg.tfs.data();
  const std::size_t k = heap.k();
  double theta = heap.full() ? std::max(0.0f, heap.threshold()) : 0.0;
  bool track = true;
  std::size_t i = 0;
  for (; i < n; ++i) {
    if (rest[i] < theta) break;
    const BoundedList& t = terms[i];
    for (std::uint64_t j = t.pos; j < t.end; ++j) {
      const std::uint32_t d = docs[j];
      if (!ok[d]) continue;
      if (track && acc[d] == 0.0f) touched.push_back(d);
      acc[d] += t.weight * w(stored[j], d);
    }
    if (track && touched.size() > seg.num_docs / 4) track = false;
    if (track && touched.size() >= k && i + 1 < n) {
      scratch.resize(touched.size());
      for (std::size_t c = 0; c < touched.size(); ++c) scratch[c] = acc[touched[c]];
      std::nth_element(scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(k - 1), scratch.end(),
                       [](float a, float b) { return a > b; });
      theta = std::max(theta, static_cast<double>(scratch[k - 1]));
    }
  }
  if (i == n || !track) {
    for (std::size_t r = i; r < n; ++r)
      for (std::uint64_t j = terms[r].pos; j < terms[r].end; ++j)
        if (ok[docs[j]]) acc[docs[j]] += terms[r].weight * w(stored[j], docs[j]);
    postings::offer_scores(acc, seg.num_docs, seg.base, heap);
    return;
  }
  std::vector<std::uint32_t> cand;
  for (std::uint32_t d : touched)
    if (static_cast<double>(acc[d]) + rest[i] >= theta) cand.push_back(d);
  std::sort(cand.begin(), cand.end());
  for (std::size_t r = i; r < n && !cand.empty(); ++r) {
    const BoundedList& t = terms[r];
    std::uint64_t pos = t.pos;
    std::size_t kept = 0;
    for (std::uint32_t d : cand) {
      pos = next_geq(docs, pos, t.end, d);
      if (pos < t.end && docs[pos] == d) acc[d] += t.weight * w(stored[pos], d);
      if (static_cast<double>(acc[d]) + rest[r + 1] >= theta) cand[kept++] = d;
    }
    cand.resize(kept);
  }
  for (std::uint32_t d : cand) heap.insert(acc[d], seg.base + d);
}

}  // namespace ragfind::sparse::masked
