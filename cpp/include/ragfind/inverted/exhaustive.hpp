// Exhaustive top-k of one compressed segment, generic over the scorer like maxscore.hpp and
// blockmax.hpp: every posting scored term at a time into a dense accumulator (reused per
// thread), then a scan through the top-k queue that skips chunks below a bound of the k-th
// best score. The reference the pruned algorithms are tested against, and the fastest for
// small segments, where scoring every posting beats document-at-a-time bookkeeping.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "ragfind/common/topk_queue.hpp"
#include "ragfind/inverted/segment.hpp"

namespace ragfind::inverted {

namespace exhaustive_detail {
// From this k on, the scan selects the best k before offering them to the queue.
constexpr std::size_t kSelectMinK = 128;
// Documents per chunk of the accumulator whose maximum the final scan takes first.
constexpr std::uint32_t kChunk = 32;

// The maximum score bits of each chunk of kChunk documents in out[0, chunks), and the
// k-th largest of them, with k = the queue's k <= chunks.
inline std::int32_t chunk_maxima(const float* acc, std::uint32_t chunks, std::int32_t* out, std::size_t k) {
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
}  // namespace exhaustive_detail

/// Offers the documents base + [0, n) whose accumulated score is > 0 (every weight is > 0, so
/// they are the matching ones; scores must be >= 0 and not NaN) to the queue, reading again only
/// the chunks whose maximum can reach the k-th best.
inline void offer_accumulated(const float* acc, std::uint32_t n, std::uint32_t base, common::TopKQueue& heap) {
  using namespace exhaustive_detail;
  // Documents are offered in increasing id order, so an equal score never displaces an entry
  // (queue contract).
  float th = heap.full() ? heap.threshold() : 0.0f;
  if (th < 0.0f) th = 0.0f;
  if (heap.k() >= kSelectMinK) {
    // Large k: most matching documents would pass through the heap; select the k best by the
    // queue's own order (score, then lower id) and offer only those.
    thread_local std::vector<common::ScoredDoc> cand;
    cand.clear();
    for (std::uint32_t d = 0; d < n; ++d)
      if (acc[d] > th) cand.push_back({acc[d], base + d});
    if (cand.size() > heap.k()) {
      std::nth_element(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(heap.k()), cand.end(),
                       common::RanksBefore{});
      cand.resize(heap.k());
    }
    for (const common::ScoredDoc& e : cand) heap.insert(e.score, e.doc);
    return;
  }
  std::uint32_t from = 0;
  const std::uint32_t chunks = n / kChunk;
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
          heap.insert(acc[d], base + d);
          if (heap.full()) th = std::max(heap.threshold(), th);
        }
      }
      std::memcpy(&cut, &th, sizeof cut);
    }
    from = chunks * kChunk;
  }
  for (std::uint32_t d = from; d < n; ++d) {
    if (acc[d] > th) {
      heap.insert(acc[d], base + d);
      if (heap.full()) th = std::max(heap.threshold(), th);
    }
  }
}

/// Exhaustive top-k of one compressed segment: query[i] (a term) weighted weights[i], wt(local
/// doc, value) > 0 the scorer's weight of a posting; with Filtered, allow[local doc] == 0
/// excludes a document.
template <bool Filtered, class W>
void exhaustive_compressed_segment(const Segment& seg, const std::vector<std::uint32_t>& query,
                                   const std::vector<float>& weights, W wt, const std::uint8_t* allow,
                                   common::TopKQueue& heap) {
  // Dense accumulator reused per thread. Tracking touched documents costs an unpredictable
  // branch per posting; zeroing and scanning the (small) segment is cheaper.
  thread_local std::vector<float> buffer;
  if (buffer.size() < seg.num_docs) buffer.resize(seg.num_docs);
  float* acc = buffer.data();
  std::fill(acc, acc + seg.num_docs, 0.0f);
  for (std::size_t i = 0; i < query.size(); ++i) {
    const std::int64_t slot = seg.slot_of(query[i]);
    if (slot < 0) continue;
    const float w = weights[i];
    // Block by block: the decoded block stays in L1 while it is scattered. Captures by value:
    // by reference, the stores to acc could alias w and every posting would reload it.
    for_each_posting(seg, static_cast<std::size_t>(slot),
                     [acc, w, wt](std::uint32_t d, std::uint32_t v) { acc[d] += w * wt(d, v); });
  }
  if constexpr (Filtered) {
    // Excluded documents leave the scan with a sum of 0 (one vectorized pass), so the scan
    // needs no mask and the chunk maxima bound the allowed documents only.
    for (std::uint32_t d = 0; d < seg.num_docs; ++d) acc[d] = allow[d] ? acc[d] : 0.0f;
  }
  offer_accumulated(acc, seg.num_docs, seg.base, heap);
}

}  // namespace ragfind::inverted
