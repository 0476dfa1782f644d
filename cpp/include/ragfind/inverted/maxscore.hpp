// Query algorithms over one posting segment (inverted::Segment), generic in how a posting
// turns into a document-side weight: the scorer policy, as PISA's query/algorithm/* are
// generic over the scorer. The learned sparse index (SPLADE, splade/impact_index.cpp) runs the
// flat-array algorithms below on its impacts; BM25 (src/bm25/query_maxscore.cpp) runs the
// block-compressed MaxScore here and block-max MaxScore (blockmax.hpp) with its own scorer.
//
// W, the scorer: float operator()(uint32_t local_doc, uint32_t value) const, the
// document-side weight of a posting (>= 0) from its stored value (a quantised impact or float
// bits for SPLADE; a term frequency, with the document's length code, for BM25). The score of a
// document is the sum over query terms i of weight[i] * W(doc, value). Over compressed segments
// W also has const uint8_t* prefetch() const: a per-local-doc array the scorer reads, which the
// cursors prefetch ahead of scoring (nullptr: none). Bounds are upper bounds of W over a list.
// Every algorithm follows the TopKQueue contract (ragfind/common/topk_queue.hpp) and visits
// documents in increasing id order.
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
#include <limits>
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
/// the term's score bound (weight x the list's largest document-side weight, slightly inflated so float rounding
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

/// MaxScore top-k of one flat segment (documents reported as seg.base + local id); bounds[slot]
/// is an upper bound of w over the list in directory slot `slot`.
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
        score += c.weight * w(doc, stored[c.pos]);
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
      if (c.pos < c.end && docs[c.pos] == doc) score += c.weight * w(doc, stored[c.pos]);
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
      acc[docs[j]] += t.weight * w(docs[j], stored[j]);
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
        acc[d] += t.weight * w(d, stored[j]);
      }
      if (touched.size() > seg.num_docs / 4) track = false;
    } else {
      for (std::uint64_t j = t.pos; j < t.end; ++j)
        if (allowed(docs[j])) acc[docs[j]] += t.weight * w(docs[j], stored[j]);
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
        if (allowed(docs[j])) acc[docs[j]] += terms[r].weight * w(docs[j], stored[j]);
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
      if (pos < t.end && docs[pos] == d) acc[d] += t.weight * w(d, stored[pos]);
      if (static_cast<double>(acc[d]) + rest[r + 1] >= theta) cand[kept++] = d;
    }
    cand.resize(kept);
  }
  for (std::uint32_t d : cand) heap.insert(acc[d], seg.base + d);
}

// ---- Over block-compressed segments (PostingCursor) ----

/// A query term's list in a segment before its cursor is opened: directory slot, query
/// weight and score bound (weight x list bound, inflated).
struct ListInSegment {
  std::size_t slot;
  float weight;
  double bound;
};

/// The query terms (terms[i] with weights[i]) the segment has, with their score bounds
/// (list_bound(slot) is an upper bound of the scorer over the list), sorted by increasing
/// bound: the order MaxScore and block-max MaxScore split essential lists in. Sorted before
/// the cursors open (cursors hold a decoded block each and are not cheap to move).
template <class ListBound>
void segment_lists(const Segment& seg, const std::vector<std::uint32_t>& terms, const std::vector<float>& weights,
                   double inflate, ListBound&& list_bound, std::vector<ListInSegment>& out) {
  out.clear();
  for (std::size_t i = 0; i < terms.size(); ++i) {
    const std::int64_t slot = seg.slot_of(terms[i]);
    if (slot < 0) continue;
    const auto s = static_cast<std::size_t>(slot);
    out.push_back({s, weights[i], static_cast<double>(weights[i]) * list_bound(s) * inflate});
  }
  std::sort(out.begin(), out.end(), [](const ListInSegment& a, const ListInSegment& b) { return a.bound < b.bound; });
}

/// A float at or below which a score s cannot pass `s + rest > theta` (rest summed in double):
/// a few float ulps under theta - rest, so the float test never rejects a score the double
/// test would keep; -inf when every score passes.
inline float pass_limit(float theta, double rest) {
  const double d = static_cast<double>(theta) - rest;
  if (!(d > 0.0)) return -std::numeric_limits<float>::infinity();
  return static_cast<float>(d) * (1.0f - 4 * std::numeric_limits<float>::epsilon());
}

/// How many postings ahead a cursor prefetches the scorer's entry for the document it will score.
inline constexpr std::uint32_t kPrefetch = 16;

/// An open list: its cursor, query weight and score bound.
struct WeightedCursor {
  PostingCursor pc;
  float weight;
  double bound;
};

/// MaxScore top-k of one compressed segment (documents reported as seg.base + local id):
/// query terms `query` with query-side weights `weights`, list_bound(slot) an upper bound of
/// the scorer w over the list in directory slot `slot`.
///
/// The essential lists are merged a window of documents at a time (each list's postings in
/// the window scored in one loop, then merged by doc without branches), and the candidates then
/// go through the probes document at a time, in doc order. Disallowed documents are skipped as
/// candidates before any probe; a bound over all postings stays a valid bound over the allowed
/// ones. The scorer and the allowed set come by value: a local copy stays in registers, where
/// members read through a reference would be reloaded after every store to the buffers.
template <class W, class ListBound, class A = AllDocs>
void maxscore_compressed_segment(const Segment& seg, const std::vector<std::uint32_t>& query,
                                 const std::vector<float>& weights, ListBound&& list_bound, W wt, TopKQueue& heap,
                                 A allowed = {}) {
  const double inflate = 1.0 + 1e-6 * static_cast<double>(query.size() + 4);
  thread_local std::vector<ListInSegment> terms;
  // Thread-local storage, used through plain pointers (a thread_local in a shared library is
  // looked up again after every call the compiler cannot see through).
  thread_local std::vector<WeightedCursor> cur_store;
  thread_local std::vector<double> cum_store;
  segment_lists(seg, query, weights, inflate, list_bound, terms);
  if (terms.empty()) return;
  const std::size_t n = terms.size();
  if (cur_store.size() < n) cur_store.resize(n);
  cum_store.resize(n);
  WeightedCursor* const cur = cur_store.data();
  double* const cum = cum_store.data();
  for (std::size_t i = 0; i < n; ++i) {
    cur[i].pc.reset(seg, terms[i].slot, wt.prefetch());
    cur[i].weight = terms[i].weight;
    cur[i].bound = terms[i].bound;
  }
  double acc = 0;
  for (std::size_t i = 0; i < n; ++i) cum[i] = (acc += cur[i].bound);
  float theta = heap.threshold();
  std::size_t first_ess = 0;
  while (first_ess < n && cum[first_ess] <= theta) ++first_ess;
  // A candidate's first test (its score plus the non-essential bounds against theta) in float:
  // a few ulps under theta minus those bounds, so it never rejects a score the double test
  // keeps. About half of the candidates fail it at 1M top-10.
  float pass = pass_limit(theta, first_ess > 0 ? cum[first_ess - 1] : 0.0);
  // Probes the non-essential lists for a candidate and offers it to the queue.
  auto finish = [&](std::uint32_t doc, float score) {
    if (score <= pass) return;
    // The first list is probed without its double test: a score passing `pass` nearly always
    // passes it too, and probing one list too many costs no exactness (the tests only prune).
    for (std::size_t i = first_ess; i-- > 0;) {
      if (i + 1 < first_ess && static_cast<double>(score) + cum[i] <= theta) return;
      WeightedCursor& c = cur[i];
      c.pc.next_geq(doc);
      if (c.pc.doc() == doc) score += c.weight * wt(doc, c.pc.tf());
    }
    // Docs come in increasing order, so an equal score never displaces an entry (queue contract).
    if (score <= theta) return;
    if (heap.insert(score, seg.base + doc) && heap.full()) {
      theta = heap.threshold();
      while (first_ess < n && cum[first_ess] <= theta) ++first_ess;
      pass = pass_limit(theta, first_ess > 0 ? cum[first_ess - 1] : 0.0);
    }
  };
  // The essential lists are read a window of documents at a time, [lo, hi], hi the end of
  // the first essential cursor's current block: each list's postings in the window are scored
  // in one loop, the lists are merged by doc without branches (a document in several gets its
  // shares summed in list order, as a document at a time would sum them), and the candidates
  // passing the first test are kept without a branch. The essential lists rarely share a
  // document, so comparing their cursors per posting (a run of 1.6 candidates on average at
  // 1M) spent most of its time on unpredictable branches.
  //
  // A window's candidates are probed after the whole window is read. A list the threshold
  // makes non-essential meanwhile is past the window already, so probing it for them finds
  // nothing and its share is counted once.
  thread_local std::vector<std::uint32_t> cand_doc_store;
  thread_local std::vector<float> cand_score_store;
  thread_local std::vector<std::uint32_t> merge_doc_store;
  thread_local std::vector<float> merge_score_store;
  // A window holds at most the rest of one block per essential list.
  const std::size_t cap = n * kPostingBlock;
  if (cand_doc_store.size() < cap) {
    cand_doc_store.resize(cap);
    cand_score_store.resize(cap);
    merge_doc_store.resize(3 * cap);
    merge_score_store.resize(3 * cap);
  }
  std::uint32_t* const cand_doc = cand_doc_store.data();
  float* const cand_score = cand_score_store.data();
  // Three buffers, rotated by the merges.
  std::uint32_t* const mdoc[3] = {merge_doc_store.data(), merge_doc_store.data() + cap,
                                  merge_doc_store.data() + 2 * cap};
  float* const mscore[3] = {merge_score_store.data(), merge_score_store.data() + cap,
                            merge_score_store.data() + 2 * cap};
  while (first_ess < n) {
    std::uint32_t lo = PostingCursor::kEnd, hi = PostingCursor::kEnd;
    for (std::size_t i = first_ess; i < n; ++i) {
      lo = std::min(lo, cur[i].pc.doc());
      hi = std::min(hi, cur[i].pc.block_last());
    }
    if (lo == PostingCursor::kEnd) break;
    // Candidates whose essential score passes the first test, in doc order (kept without a
    // branch: about half fail it, unpredictably).
    std::size_t m = 0;
    auto keep = [&](std::uint32_t doc, float score) {
      cand_doc[m] = doc;
      cand_score[m] = score;
      bool ok = score > pass;
      if constexpr (!std::is_same_v<A, AllDocs>) ok = ok && allowed(doc);
      m += ok;
    };
    if (first_ess + 1 == n) {
      WeightedCursor& c = cur[first_ess];
      c.pc.scan_until(hi, [&](std::uint32_t doc, std::uint32_t tf) { keep(doc, c.weight * wt(doc, tf)); });
    } else {
      // A list's scored postings in the window, into (docs, scores); their count.
      auto read_window = [&](WeightedCursor& c, std::uint32_t* docs, float* scores) {
        std::size_t k = 0;
        c.pc.scan_until(hi, [&](std::uint32_t doc, std::uint32_t tf) {
          docs[k] = doc;
          scores[k] = c.weight * wt(doc, tf);
          ++k;
        });
        return k;
      };
      // The first list's scored postings, then each next list's merged in.
      std::uint32_t* ad = mdoc[0];
      float* as = mscore[0];
      std::size_t na = read_window(cur[first_ess], ad, as);
      std::uint32_t* bd = mdoc[1];
      float* bs = mscore[1];
      std::uint32_t* od = mdoc[2];
      float* os = mscore[2];
      for (std::size_t i = first_ess + 1; i < n; ++i) {
        const std::size_t nb = read_window(cur[i], bd, bs);
        if (nb == 0) continue;
        if (na == 0) {
          std::swap(ad, bd);
          std::swap(as, bs);
          na = nb;
          continue;
        }
        // Without branches on the order (the lists interleave unpredictably): x * 1 is x and
        // x + 0 is x, so a document in one list keeps its exact score, and one in both gets the
        // sum in list order.
        std::size_t x = 0, y = 0, o = 0;
        while (x < na && y < nb) {
          const std::uint32_t da = ad[x], db = bd[y];
          const bool ta = da <= db, tb = db <= da;
          od[o] = ta ? da : db;
          os[o] = as[x] * static_cast<float>(ta) + bs[y] * static_cast<float>(tb);
          x += ta;
          y += tb;
          ++o;
        }
        for (; x < na; ++x, ++o) od[o] = ad[x], os[o] = as[x];
        for (; y < nb; ++y, ++o) od[o] = bd[y], os[o] = bs[y];
        std::swap(ad, od);
        std::swap(as, os);
        na = o;
      }
      for (std::size_t x = 0; x < na; ++x) keep(ad[x], as[x]);
    }
    for (std::size_t j = 0; j < m; ++j) finish(cand_doc[j], cand_score[j]);
  }
}

}  // namespace ragfind::inverted
