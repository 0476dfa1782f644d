// Exhaustive top-k for one segment: term at a time into a dense accumulator (reused per
// thread), then a scan through the top-k queue that skips chunks below a bound of the k-th
// best score.
// Used as the reference the MaxScore search is tested against, and by Auto for small segments,
// where scoring every posting beats document-at-a-time bookkeeping.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "ragfind/bm25/doc_weight.hpp"
#include "ragfind/bm25/index.hpp"

namespace ragfind::bm25 {

namespace {
// From this k on, the scan selects the best k before offering them to the queue.
constexpr std::size_t kSelectMinK = 128;
// Documents per chunk of the accumulator whose maximum the final scan takes first.
constexpr std::uint32_t kChunk = 32;

// The maximum score bits of each chunk of kChunk documents in out[0, chunks), and the
// k-th largest of them, with k = the queue's k <= chunks.
std::int32_t chunk_maxima(const float* acc, std::uint32_t chunks, std::int32_t* out, std::size_t k) {
  for (std::uint32_t c = 0; c < chunks; ++c) {
    std::int32_t m = 0;
    for (std::uint32_t j = 0; j < kChunk; ++j) {
      std::int32_t v;
      std::memcpy(&v, acc + c * kChunk + j, sizeof v);
      m = v > m ? v : m;
    }
    out[c] = m;
  }
  // The k largest in a descending array: after the first few chunks a maximum rarely enters.
  thread_local std::vector<std::int32_t> best;
  best.assign(k, -1);
  for (std::uint32_t c = 0; c < chunks; ++c) {
    const std::int32_t v = out[c];
    if (v <= best[k - 1]) continue;
    std::size_t i = k - 1;
    for (; i > 0 && best[i - 1] < v; --i) best[i] = best[i - 1];
    best[i] = v;
  }
  return best[k - 1];
}
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
  if constexpr (Filtered) {
    // Dead or filtered-out documents leave the scan with a sum of 0 (one vectorized pass), so
    // the scan needs no mask and the chunk maxima below bound the allowed documents only.
    for (std::uint32_t d = 0; d < seg.num_docs; ++d) acc[d] = allow[d] ? acc[d] : 0.0f;
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
      if (acc[d] > th) cand.push_back({acc[d], seg.base + d});
    if (cand.size() > heap.k()) {
      std::nth_element(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(heap.k()), cand.end(), RanksBefore{});
      cand.resize(heap.k());
    }
    for (const ScoredDoc& e : cand) heap.insert(e.score, e.doc);
    return;
  }
  std::uint32_t from = 0;
  const std::uint32_t chunks = seg.num_docs / kChunk;
  if (chunks >= heap.k()) {
    // The k-th largest chunk maximum is a lower bound of the k-th best score (k distinct
    // documents reach it), so only chunks whose maximum reaches it are read again, about k
    // of them. The maxima are taken on the score bits: the scores are >= 0 and not NaN, so
    // their bits order as they do, and the integer maximum vectorizes.
    thread_local std::vector<std::int32_t> top;
    top.resize(chunks);
    const std::int32_t floor = chunk_maxima(acc, chunks, top.data(), heap.k());
    float f;
    std::memcpy(&f, &floor, sizeof f);
    // Offered documents must be > th: a score equal to the bound may still enter.
    th = std::max(th, std::nextafter(f, 0.0f));
    std::int32_t cut;
    std::memcpy(&cut, &th, sizeof cut);
    for (std::uint32_t c = 0; c < chunks; ++c) {
      if (top[c] <= cut) continue;
      for (std::uint32_t d = c * kChunk; d < (c + 1) * kChunk; ++d) {
        if (acc[d] > th) {
          heap.insert(acc[d], seg.base + d);
          if (heap.full()) th = std::max(heap.threshold(), th);
        }
      }
      std::memcpy(&cut, &th, sizeof cut);
    }
    from = chunks * kChunk;
  }
  for (std::uint32_t d = from; d < seg.num_docs; ++d) {
    if (acc[d] > th) {
      heap.insert(acc[d], seg.base + d);
      if (heap.full()) th = std::max(heap.threshold(), th);
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
