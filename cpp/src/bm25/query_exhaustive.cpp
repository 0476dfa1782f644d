// Exhaustive top-k for one segment: term at a time into a dense accumulator (reused per
// thread), then a scan through the top-k queue.
// Used as the reference the MaxScore search is tested against, and by Auto for small segments,
// where scoring every posting beats document-at-a-time bookkeeping.
#include <algorithm>

#include "ragfind/bm25/doc_weight.hpp"
#include "ragfind/bm25/index.hpp"

namespace ragfind::bm25 {

namespace {
// From this k on, the scan selects the best k before offering them to the queue.
constexpr std::size_t kSelectMinK = 128;
}  // namespace

template <Method M, bool Filtered>
void InvertedIndex::exhaustive_segment(const Prepared& q, const Segment& seg, const std::uint8_t* allow,
                                       TopKQueue& heap) const {
  // Dense accumulator reused per thread. Tracking touched documents costs an unpredictable
  // branch per posting; zeroing and scanning the (small) segment is cheaper.
  thread_local std::vector<float> buffer;
  if (buffer.size() < seg.num_docs) buffer.resize(seg.num_docs);
  float* acc = buffer.data();
  std::fill(acc, acc + seg.num_docs, 0.0f);
  const Weigher<M> wt = weigher<M>(q, seg);
  const DocWeight<M> dw(params_);
  const float* norm = q.norm ? q.norm + seg.base : nullptr;
  for (std::size_t i = 0; i < q.terms.size(); ++i) {
    const std::int64_t slot = seg.slot_of(q.terms[i]);
    if (slot < 0) continue;
    const float w = q.weights[i];
    // Block by block: the decoded block stays in L1 while it is scattered. Captures by value:
    // by reference, the stores to acc could alias w and every posting would reload it.
    // A small index's float norms are cheaper to scatter with than the code table (the table's
    // tests mispredict on corpora with many long documents); both give the same floats.
    if (norm) {
      for_each_posting(seg, static_cast<std::size_t>(slot),
                       [acc, w, norm, dw](std::uint32_t d, std::uint32_t tf) { acc[d] += w * dw(tf, norm[d]); });
    } else {
      for_each_posting(seg, static_cast<std::size_t>(slot),
                       [acc, w, wt](std::uint32_t d, std::uint32_t tf) { acc[d] += w * wt(d, tf); });
    }
  }
  // Every weight is > 0, so matching documents have a score > 0. Documents are offered in
  // increasing id order, so an equal score never displaces an entry (queue contract).
  float th = heap.full() ? heap.threshold() : 0.0f;
  if (th < 0.0f) th = 0.0f;
  if (heap.k() >= kSelectMinK) {
    // Large k: most matching documents would pass through the heap; select the k best by the
    // queue's own order (score, then lower id) and offer only those.
    thread_local std::vector<ScoredDoc> cand;
    cand.clear();
    for (std::uint32_t d = 0; d < seg.num_docs; ++d)
      if (acc[d] > th && (!Filtered || allow[d])) cand.push_back({acc[d], seg.base + d});
    if (cand.size() > heap.k()) {
      std::nth_element(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(heap.k()), cand.end(), RanksBefore{});
      cand.resize(heap.k());
    }
    for (const ScoredDoc& e : cand) heap.insert(e.score, e.doc);
    return;
  }
  for (std::uint32_t d = 0; d < seg.num_docs; ++d) {
    const float s = acc[d];
    // Dead or filtered-out documents are checked only when they would enter the queue.
    if (s > th && (!Filtered || allow[d])) {
      heap.insert(s, seg.base + d);
      if (heap.full()) th = std::max(heap.threshold(), 0.0f);
    }
  }
}

template void InvertedIndex::exhaustive_segment<Method::Lucene, false>(const Prepared&, const Segment&,
                                                                       const std::uint8_t*, TopKQueue&) const;
template void InvertedIndex::exhaustive_segment<Method::Lucene, true>(const Prepared&, const Segment&,
                                                                      const std::uint8_t*, TopKQueue&) const;
template void InvertedIndex::exhaustive_segment<Method::Robertson, false>(const Prepared&, const Segment&,
                                                                          const std::uint8_t*, TopKQueue&) const;
template void InvertedIndex::exhaustive_segment<Method::Robertson, true>(const Prepared&, const Segment&,
                                                                         const std::uint8_t*, TopKQueue&) const;
template void InvertedIndex::exhaustive_segment<Method::Atire, false>(const Prepared&, const Segment&,
                                                                      const std::uint8_t*, TopKQueue&) const;
template void InvertedIndex::exhaustive_segment<Method::Atire, true>(const Prepared&, const Segment&,
                                                                     const std::uint8_t*, TopKQueue&) const;
template void InvertedIndex::exhaustive_segment<Method::BM25L, false>(const Prepared&, const Segment&,
                                                                      const std::uint8_t*, TopKQueue&) const;
template void InvertedIndex::exhaustive_segment<Method::BM25L, true>(const Prepared&, const Segment&,
                                                                     const std::uint8_t*, TopKQueue&) const;
template void InvertedIndex::exhaustive_segment<Method::BM25Plus, false>(const Prepared&, const Segment&,
                                                                         const std::uint8_t*, TopKQueue&) const;
template void InvertedIndex::exhaustive_segment<Method::BM25Plus, true>(const Prepared&, const Segment&,
                                                                        const std::uint8_t*, TopKQueue&) const;

}  // namespace ragfind::bm25
