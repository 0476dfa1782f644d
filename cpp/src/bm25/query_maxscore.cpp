// BM25 top-k: the scorer (Weigher, length_codes.hpp) and its list and block bounds handed to
// the generic query algorithms of the inverted index (MaxScore in inverted/maxscore.hpp,
// block-max MaxScore in inverted/blockmax.hpp), and the dispatch between them per segment.
//
// Dead and filtered-out documents (a byte mask per slot) are the algorithms' allowed set. A
// small allowed set is scored directly instead (direct_segment): per allowed document, per
// query term, a galloping search of the term's postings, in the exhaustive search's summation
// order.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "ragfind/bm25/index.hpp"
#include "ragfind/inverted/blockmax.hpp"
#include "ragfind/inverted/maxscore.hpp"

namespace ragfind::bm25 {

namespace {

// One pass over a list: the largest document-side weight of any posting (the MaxScore bound)
// and the first `levels` of the kKthLevels-ranked largest among the live postings (0 for a
// rank past their count).
template <Method M>
void scan_list(const Segment& seg, std::size_t slot, const Weigher<M>& wt, const std::uint8_t* live, std::size_t levels,
               float* bound, float* kth) {
  // The largest weights seen so far, at most twice the largest rank wanted: when full, that
  // rank's worth is kept and its smallest becomes the bar a new weight must pass.
  const std::size_t keep = kKthLevels[levels - 1];
  float top[2 * kKthLevels.back()];  // 8 KB on the stack (a thread_local costs a lookup per use)
  std::size_t count = 0;
  float best = 0.0f, bar = 0.0f;
  for_each_posting(seg, slot, [&](std::uint32_t d, std::uint32_t tf) {
    const float v = wt(d, tf);
    best = v > best ? v : best;
    if (v > bar && (!live || live[d])) {
      top[count++] = v;
      if (count == 2 * keep) {
        std::nth_element(top, top + (keep - 1), top + count, std::greater<float>());
        count = keep;
        bar = top[keep - 1];
      }
    }
  });
  *bound = best;
  // Largest rank first, each selection within the previous one's top.
  float* end = top + count;
  for (std::size_t l = levels; l-- > 0;) {
    const std::size_t r = kKthLevels[l];
    if (count < r) {
      kth[l] = 0.0f;
      continue;
    }
    std::nth_element(top, top + (r - 1), end, std::greater<float>());
    kth[l] = top[r - 1];
    end = top + r;
  }
}

// The ranks computed with every bound (the top 100 is cheap to keep while scanning); the top
// 1000 only when a search asks for it.
constexpr std::size_t kCheapLevels = 2;

// A cell's (epoch, value), whatever its epoch.
std::uint32_t cell_epoch(const std::atomic<std::uint64_t>& cell, float* v) {
  const std::uint64_t cached = cell.load(std::memory_order_acquire);
  const auto bits = static_cast<std::uint32_t>(cached);
  std::memcpy(v, &bits, 4);
  return static_cast<std::uint32_t>(cached >> 32);
}

// How far avgdl may drift from a cached bound's before the bound is computed again (a
// rescaled bound is looser by up to this factor, and prunes a little less).
constexpr double kBoundDrift = 1.02;
// Covers float rounding of the weights (relative error ~1e-7) around the rescaled values.
constexpr double kRescaleMargin = 1e-5;

void write_cell(std::atomic<std::uint64_t>& cell, std::uint32_t epoch, float v) {
  std::uint32_t bits;
  std::memcpy(&bits, &v, 4);
  cell.store((static_cast<std::uint64_t>(epoch) << 32) | bits, std::memory_order_release);
}

}  // namespace

float InvertedIndex::scan_term(const Segment& seg, std::size_t slot, const Prepared& q, std::size_t levels,
                               float* kth) const {
  const std::uint8_t* live = seg.num_dead > 0 ? live_.data() + seg.base : nullptr;
  float bound = 0.0f;
  switch (params_.method) {
    case Method::Lucene: scan_list(seg, slot, weigher<Method::Lucene>(q, seg), live, levels, &bound, kth); break;
    case Method::Robertson: scan_list(seg, slot, weigher<Method::Robertson>(q, seg), live, levels, &bound, kth); break;
    case Method::Atire: scan_list(seg, slot, weigher<Method::Atire>(q, seg), live, levels, &bound, kth); break;
    case Method::BM25L: scan_list(seg, slot, weigher<Method::BM25L>(q, seg), live, levels, &bound, kth); break;
    case Method::BM25Plus: scan_list(seg, slot, weigher<Method::BM25Plus>(q, seg), live, levels, &bound, kth); break;
  }
  std::atomic<std::uint64_t>* cells = seg.kth_cache.get() + slot * kKthLevels.size();
  for (std::size_t l = 0; l < levels; ++l) write_cell(cells[l], q.epoch, kth[l]);
  write_cell(seg.bound_cache[slot], q.epoch, bound);
  return bound;
}

// A bound cached at another epoch of this index, rescaled to q's statistics: an upper bound
// grows by avgdl_now / avgdl_then when avgdl grew (a floor shrinks by it when avgdl shrank),
// since every document's L moves by a factor between 1 and avgdl_then / avgdl_now
// (index.hpp). False when it cannot be (q has other statistics, the history does not reach
// back, or avgdl drifted past kBoundDrift).
bool InvertedIndex::rescaled(std::uint32_t cached_epoch, float cached, const Prepared& q, bool upper, float* v) const {
  if (q.epoch != epoch_) return false;  // another collection's statistics: exact entries only
  const double then = rescalable_avgdl(cached_epoch);
  if (then <= 0.0 || q.avgdl <= 0.0) return false;
  const double f = q.avgdl / then;
  if (f > kBoundDrift || f < 1.0 / kBoundDrift) return false;
  const double c = static_cast<double>(cached);
  *v = upper ? static_cast<float>(c * std::max(1.0, f) * (1.0 + kRescaleMargin))
             : static_cast<float>(c * std::min(1.0, f) * (1.0 - kRescaleMargin));
  return true;
}

float InvertedIndex::term_bound(const Segment& seg, std::size_t slot, const Prepared& q) const {
  float v;
  const std::uint32_t e = cell_epoch(seg.bound_cache[slot], &v);
  if (e == q.epoch) return v;
  float scaled;
  if (rescaled(e, v, q, true, &scaled)) return scaled;
  std::array<float, kKthLevels.size()> kth;
  return scan_term(seg, slot, q, kCheapLevels, kth.data());
}

float InvertedIndex::term_kth(const Segment& seg, std::size_t slot, const Prepared& q, std::size_t level) const {
  float v;
  const std::uint32_t e = cell_epoch(seg.kth_cache[slot * kKthLevels.size() + level], &v);
  if (e == q.epoch) return v;
  float scaled;
  // A delete in the segment since may have removed the documents the floor counted.
  if (e >= seg.deleted_epoch && rescaled(e, v, q, false, &scaled)) return scaled;
  std::array<float, kKthLevels.size()> kth;
  scan_term(seg, slot, q, level < kCheapLevels ? kCheapLevels : kKthLevels.size(), kth.data());
  return kth[level];
}

float InvertedIndex::score_floor(const Prepared& q, std::size_t k, const Segment& seg) const {
  std::size_t level = 0;
  while (level < kKthLevels.size() && kKthLevels[level] < k) ++level;
  if (level == kKthLevels.size()) return -std::numeric_limits<float>::infinity();
  // A document's score is a sum of non-negative products weight * w(d, tf), and float addition
  // of non-negative terms never falls below one of them: the kKthLevels[level] documents with
  // the largest w(d, tf) in one list score at least weight * that k-th weight.
  float best = 0.0f;
  for (std::size_t i = 0; i < q.terms.size(); ++i) {
    if (static_cast<std::uint64_t>(df(q.terms[i])) < kKthLevels[level]) continue;
    const std::int64_t slot = seg.slot_of(q.terms[i]);
    if (slot < 0) continue;
    const float v = q.weights[i] * term_kth(seg, static_cast<std::size_t>(slot), q, level);
    best = v > best ? v : best;
  }
  if (best <= 0.0f) return -std::numeric_limits<float>::infinity();
  // Strictly below it (documents at exactly that score belong in the result), with a margin.
  return best * (1.0f - 1e-5f);
}

template <Method M, bool Filtered>
void InvertedIndex::maxscore_segment(const Prepared& q, const Segment& seg, const std::uint8_t* allow,
                                     TopKQueue& heap) const {
  const auto list_bound = [&](std::size_t slot) { return term_bound(seg, slot, q); };
  if constexpr (Filtered) {
    inverted::maxscore_compressed_segment(seg, q.terms, q.weights, list_bound, weigher<M>(q, seg), heap,
                                          inverted::AllowedDocs{allow});
  } else {
    inverted::maxscore_compressed_segment(seg, q.terms, q.weights, list_bound, weigher<M>(q, seg), heap);
  }
}

// The block summaries block-max MaxScore (inverted/blockmax.hpp) bounds candidates with.
template <Method M>
const BlockInfo* InvertedIndex::blocks_of(const Segment& seg, std::size_t slot, std::size_t* n) const {
  const std::uint64_t first = seg.list_block[slot];
  const std::uint64_t count =
      seg.offsets[slot + 1] - seg.offsets[slot] >= kBlockMinPostings ? seg.list_block[slot + 1] - first : 0;
  *n = count;
  if (count == 0) return nullptr;
  BlockInfo* out = seg.blocks.get() + first;
  std::atomic<std::uint64_t>& state = seg.block_state[slot];
  const std::uint64_t ready = (static_cast<std::uint64_t>(epoch_) << 2) | 2;
  std::uint64_t s = state.load(std::memory_order_acquire);
  if (s == ready) return out;
  // Within an epoch the blocks only go from absent to ready; a rebuild for a new epoch happens
  // after a mutation, which has exclusive access, so readers never see them change.
  if ((s & 3) == 1 || !state.compare_exchange_strong(s, ready - 1, std::memory_order_acq_rel)) {
    return state.load(std::memory_order_acquire) == ready ? out : nullptr;
  }
  const Weigher<M> wt(params_, avgdl(), codes_.code.data() + seg.base, doc_len_.data() + seg.base, &table_);
  const std::uint32_t* len = doc_len_.data() + seg.base;
  // One block of maxima per compression block (kBlockSize == kPostingBlock).
  PostingCursor c;
  c.reset(seg, slot);
  for (std::uint64_t b = 0; b < count; ++b, c.next_block()) {
    const std::uint32_t* docs = c.block_docs();
    const std::uint32_t* tfs = c.block_tfs();
    const std::uint32_t m = c.block_size();
    std::uint32_t max_tf = 0, min_len = 0xFFFFFFFFu;
    float best = 0.0f;
    for (std::uint32_t i = 0; i < m; ++i) {
      const std::uint32_t d = docs[i];
      max_tf = std::max(max_tf, tfs[i]);
      min_len = std::min(min_len, len[d]);
      const float v = wt(d, tfs[i]);
      best = v > best ? v : best;
    }
    out[b] = {docs[m - 1], max_tf, min_len, best};
  }
  state.store(ready, std::memory_order_release);
  return out;
}

template <Method M, bool Filtered>
void InvertedIndex::blockmax_segment(const Prepared& q, const Segment& seg, const std::uint8_t* allow,
                                     TopKQueue& heap) const {
  const DocWeight<M> dw(params_);
  // Searches with the index's own statistics use the exact block maxima; others (another
  // avgdl) bound each block by its largest tf and shortest document.
  const bool own_stats = q.avgdl == avgdl();
  const auto list_bound = [&](std::size_t slot) { return term_bound(seg, slot, q); };
  const auto blocks = [&](std::size_t slot, std::size_t* n) { return blocks_of<M>(seg, slot, n); };
  const auto block_weight = [&](const BlockInfo& b) -> double {
    if (own_stats) return b.max_weight;
    return dw(b.max_tf, doc_norm(params_, b.min_len, q.avgdl));
  };
  if constexpr (Filtered) {
    inverted::blockmax_segment(seg, q.terms, q.weights, list_bound, blocks, block_weight, weigher<M>(q, seg), heap,
                               inverted::AllowedDocs{allow});
  } else {
    inverted::blockmax_segment(seg, q.terms, q.weights, list_bound, blocks, block_weight, weigher<M>(q, seg), heap);
  }
}

template <Method M>
void InvertedIndex::direct_segment(const Prepared& q, const Segment& seg, const std::uint32_t* docs, std::size_t count,
                                   TopKQueue& heap) const {
  const Weigher<M> wt = weigher<M>(q, seg);
  thread_local std::vector<inverted::WeightedCursor> cur_store;
  std::size_t n = 0;
  for (std::size_t i = 0; i < q.terms.size(); ++i) {
    const std::int64_t slot = seg.slot_of(q.terms[i]);
    if (slot < 0) continue;
    if (cur_store.size() <= n) cur_store.resize(n + 1);
    inverted::WeightedCursor* const cur = cur_store.data();
    cur[n].pc.reset(seg, static_cast<std::size_t>(slot));
    cur[n].weight = q.weights[i];
    cur[n].bound = 0.0;
    ++n;
  }
  if (n == 0) return;
  inverted::WeightedCursor* const cur = cur_store.data();
  for (std::size_t j = 0; j < count; ++j) {
    const std::uint32_t doc = docs[j] - seg.base;
    float score = 0.0f;
    bool matched = false;
    for (std::size_t i = 0; i < n; ++i) {
      inverted::WeightedCursor& c = cur[i];
      c.pc.next_geq(doc);
      if (c.pc.doc() == doc) {
        score += c.weight * wt(doc, c.pc.tf());
        matched = true;
      }
    }
    // As the exhaustive scan: matching documents score > 0 (every weight is > 0).
    if (matched && score > 0.0f) heap.insert(score, docs[j]);
  }
}

template <Method M>
void InvertedIndex::search_impl(const Prepared& q, std::size_t k, Algorithm algorithm, const AllowedSet* allowed,
                                std::vector<ScoredDoc>& out) const {
  TopKQueue heap(k);
  const bool many_terms = q.terms.size() > kMaxScoreMaxTerms;
  bool direct = algorithm == Algorithm::Direct;
  if (allowed && algorithm == Algorithm::Auto) {
    // Direct costs about one galloping search per allowed document and term. MaxScore touches
    // the query terms' postings, but sublinearly in their number once its threshold prunes:
    // the second condition is a fit of measured Direct/MaxScore time ratios (1M documents,
    // filters of 0.1% to 10%, bench/compare_metadata_filters.py); the first keeps the fit from
    // choosing Direct where it costs several times the postings themselves.
    std::uint64_t postings = 0;
    double direct_cost = 0;
    const double a = static_cast<double>(allowed->count);
    for (std::uint32_t t : q.terms) {
      const double p = static_cast<double>(df(t));
      postings += df(t);
      direct_cost += a * (2.0 + std::log2(1.0 + p / (a + 1.0)));
    }
    const double p = static_cast<double>(postings);
    direct = postings > 0 && direct_cost < 4.0 * p && 1.2 * std::log(direct_cost) - 0.43 * std::log(p) < 9.3;
  }
  if (direct) {
    // Allowed (or, without a filter, live) slots per segment, in increasing order.
    thread_local std::vector<std::uint32_t> live_docs;
    const std::uint32_t* docs = nullptr;
    std::size_t count = 0;
    if (allowed && allowed->docs) {
      docs = allowed->docs;
      count = allowed->count;
    } else {
      const std::uint8_t* listed = allowed ? allowed->mask : live_.data();  // an unlisted filter too
      live_docs.clear();
      for (std::uint32_t d = 0; d < num_slots(); ++d)
        if (listed[d]) live_docs.push_back(d);
      docs = live_docs.data();
      count = live_docs.size();
    }
    std::size_t j = 0;
    for (const auto& seg : segments_) {
      const std::uint32_t end = seg->base + seg->num_docs;
      std::size_t e = j;
      while (e < count && docs[e] < end) ++e;
      if (e > j) direct_segment<M>(q, *seg, docs + j, e - j, heap);
      j = e;
    }
  } else {
    auto pruned = [&](const Segment& seg) {
      return algorithm == Algorithm::MaxScore || algorithm == Algorithm::BlockMax ||
             (algorithm == Algorithm::Auto && !many_terms && seg.num_docs > kSmallSegmentDocs);
    };
    // The floor holds for every live document, not for a filtered subset. It is taken from the
    // segments that prune (a floor from one segment holds for the whole search); term-at-a-time
    // scoring of small segments would not use one, nor pay for one.
    if (!allowed) {
      float floor = -std::numeric_limits<float>::infinity();
      for (const auto& seg : segments_)
        if (pruned(*seg)) floor = std::max(floor, score_floor(q, k, *seg));
      if (floor > -std::numeric_limits<float>::infinity()) heap.set_floor(floor);
    }
    // Segments in increasing doc-id order, as the MaxScore threshold test assumes.
    for (const auto& seg : segments_) {
      const std::uint8_t* allow = allowed ? allowed->mask : (seg->num_dead > 0 ? live_.data() : nullptr);
      if (allow) allow += seg->base;
      if (!pruned(*seg)) {
        if (allow) exhaustive_segment<M, true>(q, *seg, allow, heap);
        else exhaustive_segment<M, false>(q, *seg, nullptr, heap);
      } else if (algorithm == Algorithm::BlockMax) {
        if (allow) blockmax_segment<M, true>(q, *seg, allow, heap);
        else blockmax_segment<M, false>(q, *seg, nullptr, heap);
      } else {
        if (allow) maxscore_segment<M, true>(q, *seg, allow, heap);
        else maxscore_segment<M, false>(q, *seg, nullptr, heap);
      }
    }
  }
  heap.finalize(out);
  if (q.constant != 0.0)
    for (auto& e : out) e.score = static_cast<float>(static_cast<double>(e.score) + q.constant);
}

void InvertedIndex::search(const std::vector<QueryTerm>& query, std::size_t k, std::vector<ScoredDoc>& out,
                           Algorithm algorithm, const AllowedSet* allowed, const CollectionStats* stats) const {
  out.clear();
  if (k == 0 || num_docs() == 0) return;
  if (allowed && allowed->count == 0) return;
  const Prepared q = stats ? prepare(query, *stats) : prepare(query);
  if (q.terms.empty()) return;
  k = std::min<std::size_t>(k, allowed ? allowed->count : num_docs());
  switch (params_.method) {
    case Method::Lucene: search_impl<Method::Lucene>(q, k, algorithm, allowed, out); break;
    case Method::Robertson: search_impl<Method::Robertson>(q, k, algorithm, allowed, out); break;
    case Method::Atire: search_impl<Method::Atire>(q, k, algorithm, allowed, out); break;
    case Method::BM25L: search_impl<Method::BM25L>(q, k, algorithm, allowed, out); break;
    case Method::BM25Plus: search_impl<Method::BM25Plus>(q, k, algorithm, allowed, out); break;
  }
}

}  // namespace ragfind::bm25
