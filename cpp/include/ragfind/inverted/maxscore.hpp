// Query algorithms over one posting segment (inverted::Segment), generic in how a posting
// turns into a document-side weight. The learned sparse index (SPLADE, splade/impact_index.cpp)
// runs on these. BM25 does not: it has its own MaxScore and term-at-a-time loops
// (src/bm25/query_maxscore.cpp, query_exhaustive.cpp), specialised per variant on the float
// fast path and skipping dead (deleted) and filtered-out documents.
//
// W is a functor: float operator()(uint32_t stored, uint32_t local_doc) const, giving the
// document-side weight of a posting (>= 0); the score of a document is the sum over query
// terms i of weight[i] * W(posting). `bounds[slot]` is an upper bound of W over the posting
// list in directory slot `slot`. Both algorithms follow the TopKQueue contract
// (ragfind/common/topk_queue.hpp) and visit documents in increasing id order.
//
// A is the allowed set: AllDocs (every document; compiles to the unrestricted loops) or
// AllowedDocs (a byte per local document, 0 for a deleted or filtered-out one). A disallowed
// document never enters a candidate list or the queue and never raises a pruning threshold;
// allowed documents get the same sums, in the same order, as unrestricted (bit-identical).
//
// MaxScore (Turtle and Flood, 1995; PISA query/algorithm/maxscore_query.hpp): terms sorted by
// bound; the longest prefix whose bounds sum to <= the queue threshold is non-essential, so
// candidates come from the essential lists only and the others are probed (galloping) only
// while the partial score plus the remaining bounds can still beat the threshold. Bounds are
// inflated by a tiny relative margin so float rounding never prunes a document that belongs.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "ragfind/common/topk_queue.hpp"
#include "ragfind/inverted/segment.hpp"

namespace ragfind::inverted {

using common::TopKQueue;

/// First position >= pos whose doc is >= target (galloping, then binary search).
inline std::uint64_t next_geq(const std::uint32_t* docs, std::uint64_t pos, std::uint64_t end, std::uint32_t target) {
  if (pos >= end || docs[pos] >= target) return pos;
  std::uint64_t step = 1, lo = pos;
  while (lo + step < end && docs[lo + step] < target) {
    lo += step;
    step <<= 1;
  }
  const std::uint64_t hi = std::min(end, lo + step + 1);
  return static_cast<std::uint64_t>(std::lower_bound(docs + lo + 1, docs + hi, target) - docs);
}

/// Every document of the segment is allowed.
struct AllDocs {
  bool operator()(std::uint32_t) const { return true; }
};

/// The documents whose byte is non-zero (`ok` points at the segment's first local document).
struct AllowedDocs {
  const std::uint8_t* ok;
  bool operator()(std::uint32_t local_doc) const { return ok[local_doc] != 0; }
};

struct WeightedTerm {
  std::uint32_t term;
  float weight;  // query-side weight, > 0
};

/// One query term's posting list in a segment: the postings [pos, end), the query weight and
/// the term's score bound (weight x the list's max impact, slightly inflated so float rounding
/// never prunes a document that ties the threshold).
struct BoundedList {
  std::uint64_t pos, end;
  float weight;
  double bound;
};

/// The query terms present in the segment, in query order.
inline std::vector<BoundedList> bounded_lists(const Segment& seg, const std::vector<WeightedTerm>& query,
                                              const float* bounds) {
  const double inflate = 1.0 + 1e-6 * static_cast<double>(query.size() + 4);
  std::vector<BoundedList> out;
  out.reserve(query.size());
  for (const WeightedTerm& t : query) {
    const std::int64_t slot = seg.slot_of(t.term);
    if (slot < 0) continue;
    out.push_back(
        {seg.offsets[slot], seg.offsets[slot + 1], t.weight, static_cast<double>(t.weight) * bounds[slot] * inflate});
  }
  return out;
}

/// Offers the accumulated scores of documents seg.base + [0, n) to the queue; documents with
/// score 0 (matching nothing) are not offered.
inline void offer_scores(const float* acc, std::uint32_t n, std::uint32_t base, TopKQueue& heap) {
  float th = heap.full() ? std::max(heap.threshold(), 0.0f) : 0.0f;
  for (std::uint32_t d = 0; d < n; ++d) {
    if (acc[d] > th) {
      heap.insert(acc[d], base + d);
      if (heap.full()) th = std::max(heap.threshold(), 0.0f);
    }
  }
}

/// MaxScore top-k of one segment (documents reported as seg.base + local id).
template <class W, class A = AllDocs>
void maxscore_segment(const Segment& seg, const std::vector<WeightedTerm>& query, const float* bounds, const W& w,
                      TopKQueue& heap, const A& allowed = {}) {
  using Cursor = BoundedList;
  std::vector<Cursor> cur = bounded_lists(seg, query, bounds);
  if (cur.empty()) return;
  std::sort(cur.begin(), cur.end(), [](const Cursor& a, const Cursor& b) { return a.bound < b.bound; });
  const std::size_t n = cur.size();
  std::vector<double> cum(n);
  double acc = 0;
  for (std::size_t i = 0; i < n; ++i) cum[i] = (acc += cur[i].bound);
  const std::uint32_t* docs = seg.docs.data();
  const std::uint32_t* stored = seg.values.data();
  float theta = heap.threshold();
  std::size_t first_ess = 0;
  while (first_ess < n && cum[first_ess] <= theta) ++first_ess;
  while (first_ess < n) {
    std::uint32_t doc = 0xFFFFFFFFu;
    for (std::size_t i = first_ess; i < n; ++i)
      if (cur[i].pos < cur[i].end && docs[cur[i].pos] < doc) doc = docs[cur[i].pos];
    if (doc == 0xFFFFFFFFu) break;
    if (!allowed(doc)) {  // stepped over: its essential cursors advance, nothing is scored
      for (std::size_t i = first_ess; i < n; ++i)
        if (cur[i].pos < cur[i].end && docs[cur[i].pos] == doc) ++cur[i].pos;
      continue;
    }
    float score = 0.0f;
    for (std::size_t i = first_ess; i < n; ++i) {
      Cursor& c = cur[i];
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
      Cursor& c = cur[i];
      c.pos = next_geq(docs, c.pos, c.end, doc);
      if (c.pos < c.end && docs[c.pos] == doc) score += c.weight * w(stored[c.pos], doc);
    }
    if (alive && heap.insert(score, seg.base + doc) && heap.full()) {
      theta = heap.threshold();
      while (first_ess < n && cum[first_ess] <= theta) ++first_ess;
    }
  }
}

/// Every posting scored term at a time into a dense accumulator, then offered to the queue
/// (documents with score 0, i.e. matching nothing, are not offered).
template <class W, class A = AllDocs>
void exhaustive_segment(const Segment& seg, const std::vector<WeightedTerm>& query, const W& w, TopKQueue& heap,
                        const A& allowed = {}) {
  thread_local std::vector<float> buffer;
  if (buffer.size() < seg.num_docs) buffer.resize(seg.num_docs);
  float* acc = buffer.data();
  std::fill(acc, acc + seg.num_docs, 0.0f);
  const std::uint32_t* docs = seg.docs.data();
  const std::uint32_t* stored = seg.values.data();
  for (const WeightedTerm& t : query) {
    const std::int64_t slot = seg.slot_of(t.term);
    if (slot < 0) continue;
    for (std::uint64_t j = seg.offsets[slot], e = seg.offsets[slot + 1]; j < e; ++j)
      acc[docs[j]] += t.weight * w(stored[j], docs[j]);
  }
  // Excluded documents zeroed in one pass: cheaper than a branch per posting, and nothing
  // prunes here.
  if constexpr (!std::is_same_v<A, AllDocs>)
    for (std::uint32_t d = 0; d < seg.num_docs; ++d) acc[d] = allowed(d) ? acc[d] : 0.0f;
  offer_scores(acc, seg.num_docs, seg.base, heap);
}

/// Term-at-a-time MaxScore ("quit/continue", Turtle and Flood 1995; as in Lucene's TAAT
/// scorers): terms are processed by decreasing score bound into a dense accumulator. After
/// each term, the k-th best partial score (partial scores only grow, so it is a lower bound of
/// the final k-th score, like the queue threshold) is compared with the sum of the remaining
/// terms' bounds: once that sum is below it, no untouched document can enter the top-k, so the
/// remaining (low-bound, typically long) lists are only probed, by galloping, for the
/// candidates that can still make it. Exact; degrades to exhaustive when nothing can be pruned.
template <class W, class A = AllDocs>
void taat_maxscore_segment(const Segment& seg, const std::vector<WeightedTerm>& query, const float* bounds, const W& w,
                           TopKQueue& heap, const A& allowed = {}) {
  using Term = BoundedList;
  std::vector<Term> terms = bounded_lists(seg, query, bounds);
  if (terms.empty()) return;
  std::sort(terms.begin(), terms.end(), [](const Term& a, const Term& b) { return a.bound > b.bound; });
  const std::size_t n = terms.size();
  std::vector<double> rest(n + 1, 0.0);  // rest[i]: sum of the bounds of terms i..n-1
  for (std::size_t i = n; i-- > 0;) rest[i] = rest[i + 1] + terms[i].bound;

  thread_local std::vector<float> buffer;
  thread_local std::vector<std::uint32_t> touched;
  thread_local std::vector<float> scratch;
  if (buffer.size() < seg.num_docs) buffer.resize(seg.num_docs);
  float* acc = buffer.data();
  std::fill(acc, acc + seg.num_docs, 0.0f);
  touched.clear();
  const std::uint32_t* docs = seg.docs.data();
  const std::uint32_t* stored = seg.values.data();
  const std::size_t k = heap.k();
  double theta = heap.full() ? std::max(0.0f, heap.threshold()) : 0.0;
  bool track = true;  // keep the touched list while it stays small next to the segment
  std::size_t i = 0;
  for (; i < n; ++i) {
    if (rest[i] < theta) break;  // an untouched document can gain at most rest[i]
    const Term& t = terms[i];
    if (track) {
      for (std::uint64_t j = t.pos; j < t.end; ++j) {
        const std::uint32_t d = docs[j];
        if (!allowed(d)) continue;  // only allowed partial scores feed the threshold
        if (acc[d] == 0.0f) touched.push_back(d);
        acc[d] += t.weight * w(stored[j], d);
      }
      if (touched.size() > seg.num_docs / 4) track = false;
    } else {
      for (std::uint64_t j = t.pos; j < t.end; ++j)
        if (allowed(docs[j])) acc[docs[j]] += t.weight * w(stored[j], docs[j]);
    }
    if (track && touched.size() >= k && i + 1 < n) {
      scratch.resize(touched.size());
      for (std::size_t c = 0; c < touched.size(); ++c) scratch[c] = acc[touched[c]];
      std::nth_element(scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(k - 1), scratch.end(),
                       [](float a, float b) { return a > b; });
      theta = std::max(theta, static_cast<double>(scratch[k - 1]));
    }
  }
  if (i == n || !track) {
    // Nothing (more) to prune with: finish term at a time and scan, as exhaustive_segment.
    for (std::size_t r = i; r < n; ++r)
      for (std::uint64_t j = terms[r].pos; j < terms[r].end; ++j)
        if (allowed(docs[j])) acc[docs[j]] += terms[r].weight * w(stored[j], docs[j]);
    offer_scores(acc, seg.num_docs, seg.base, heap);
    return;
  }
  // Continue phase: only candidates that can still reach theta, in increasing doc order.
  std::vector<std::uint32_t> cand;
  for (std::uint32_t d : touched)
    if (static_cast<double>(acc[d]) + rest[i] >= theta) cand.push_back(d);
  std::sort(cand.begin(), cand.end());
  for (std::size_t r = i; r < n && !cand.empty(); ++r) {
    const Term& t = terms[r];
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

}  // namespace ragfind::inverted
