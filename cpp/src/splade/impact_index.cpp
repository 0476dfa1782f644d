// The learned-sparse impact index: building, merging and querying posting segments.
#include "ragfind/splade/impact_index.hpp"
#include "ragfind/splade/impact_columns.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace ragfind::splade {
namespace {

// Document-side weights: quantised impacts (query weights carry the 1 / scale) or float bits.
struct QuantisedWeight {
  float operator()(std::uint32_t, std::uint32_t stored) const { return static_cast<float>(stored); }
};
struct FloatWeight {
  float operator()(std::uint32_t, std::uint32_t stored) const {
    float v;
    std::memcpy(&v, &stored, 4);
    return v;
  }
};

// Exhaustive term-at-a-time scoring of a quantised segment with its dense columns, one tile of
// kTile documents at a time so the accumulator stays in L1. The query comes in the segment's
// canonical order (columns_first: its column terms, then the others), which exhaustive_segment
// also sums in, so scores are bit-identical. Per tile: the column terms' weighted sum by the
// SIMD kernel of impact_columns.hpp, in one pass with the partial sums in registers; then each
// other list's postings that fall in the tile are scattered (a cursor per list, streamed up to
// the tile end; 16 at a time with AVX-512; the lists' first cache lines are prefetched when the
// tile starts); then the tile is scanned for scores above the queue threshold, skipping the
// documents `allowed` (a byte per document, or nullptr for all) excludes.
void dense_taat_segment(const ImpactSegment& s, const std::vector<inverted::WeightedTerm>& query,
                        const std::uint8_t* allowed, common::TopKQueue& heap) {
  constexpr std::uint32_t kTile = 4096;  // 16 KiB of float accumulators
  const inverted::Segment& seg = s.seg;
  const std::uint32_t n = seg.num_docs;
  struct List {
    std::uint64_t pos, end;
    float weight;
  };
  thread_local std::vector<const std::uint16_t*> columns;
  thread_local std::vector<float> column_weights;
  thread_local std::vector<List> lists;
  columns.clear();
  column_weights.clear();
  lists.clear();
  for (const inverted::WeightedTerm& t : query) {
    const std::int64_t slot = seg.slot_of(t.term);
    if (slot < 0) continue;
    const std::int32_t c = s.column_of[static_cast<std::size_t>(slot)];
    if (c >= 0) {
      columns.push_back(s.columns.data() + static_cast<std::size_t>(c) * n);
      column_weights.push_back(t.weight);
    } else {
      lists.push_back({seg.offsets[slot], seg.offsets[slot + 1], t.weight});
    }
  }
  if (columns.empty() && lists.empty()) return;
  const std::uint32_t* docs = seg.docs.data();
  const std::uint32_t* stored = seg.values.data();
  alignas(64) float acc[kTile];
  const auto sum_columns = impact_column_kernels().sum_columns;
  const auto next_above = impact_column_kernels().next_above;
  const auto scatter_add = impact_column_kernels().scatter_add;
  const auto m = static_cast<std::uint32_t>(columns.size());
  float th = heap.full() ? std::max(heap.threshold(), 0.0f) : 0.0f;
  for (std::uint32_t lo = 0; lo < n; lo += kTile) {
    const std::uint32_t hi = std::min(n, lo + kTile), len = hi - lo;
    for (const List& l : lists) {  // start every list's first miss now, so they overlap
      __builtin_prefetch(docs + l.pos);
      __builtin_prefetch(stored + l.pos);
    }
    if (m > 0) sum_columns(acc, columns.data(), column_weights.data(), m, lo, len);
    else std::fill(acc, acc + len, 0.0f);
    for (List& l : lists) l.pos = scatter_add(acc, docs, stored, l.pos, l.end, lo, hi, l.weight);
    if (allowed) {
      // Zero the excluded documents in one vectorisable pass: they then never pass the scan.
      // (Testing them one by one inside the scan would stop at every excluded document above
      // a threshold that, with few allowed documents, stays low.)
      const std::uint8_t* ok = allowed + seg.base + lo;
      for (std::uint32_t i = 0; i < len; ++i) acc[i] = ok[i] ? acc[i] : 0.0f;
    }
    for (std::uint32_t i = next_above(acc, 0, len, th); i < len; i = next_above(acc, i + 1, len, th)) {
      heap.insert(acc[i], seg.base + lo + i);
      if (heap.full()) th = std::max(heap.threshold(), 0.0f);
    }
  }
}

// The segment's canonical summation order: terms with a dense column first, then the others,
// each group in query order. Every scorer of the segment gets the query in this order, so the
// column kernel can sum all columns in one pass and still match the posting-by-posting sums.
// Returns the number of column terms (the leading ones of out).
std::size_t columns_first(const ImpactSegment& s, const std::vector<inverted::WeightedTerm>& q,
                          std::vector<inverted::WeightedTerm>& out) {
  thread_local std::vector<inverted::WeightedTerm> others;
  out.clear();
  others.clear();
  for (const inverted::WeightedTerm& t : q) {
    const std::int64_t slot = s.seg.slot_of(t.term);
    const bool column = slot >= 0 && s.column_of[static_cast<std::size_t>(slot)] >= 0;
    (column ? out : others).push_back(t);
  }
  const std::size_t n_columns = out.size();
  out.insert(out.end(), others.begin(), others.end());
  return n_columns;
}

// One segment's top-k by the chosen posting algorithm (ragfind/inverted/maxscore.hpp).
template <class W, class A>
void run_algorithm(Algorithm alg, const inverted::Segment& seg, const std::vector<inverted::WeightedTerm>& q,
                   const float* bounds, const W& w, common::TopKQueue& heap, const A& allowed) {
  switch (alg) {
    case Algorithm::MaxScore: inverted::maxscore_segment(seg, q, bounds, w, heap, allowed); break;
    case Algorithm::TaatMaxScore: inverted::taat_maxscore_segment(seg, q, bounds, w, heap, allowed); break;
    default: inverted::exhaustive_segment(seg, q, w, heap, allowed); break;
  }
}

}  // namespace

ImpactIndex::ImpactIndex(std::uint32_t dim, float scale, bool exact) : dim_(dim), scale_(scale) {
  if (dim == 0) throw std::invalid_argument("dim must be positive");
  if (!(scale >= 0.0f) || !std::isfinite(scale)) throw std::invalid_argument("scale must be finite and >= 0");
  exact_ = exact && scale > 0.0f;  // float32 postings are exact already
  if (exact_) fwd_indptr_ = common::Buffer<std::uint64_t>(std::vector<std::uint64_t>{0});
}

float ImpactIndex::decode(std::uint32_t stored) const {
  if (scale_ > 0.0f) return static_cast<float>(stored) / scale_;
  float v;
  std::memcpy(&v, &stored, 4);
  return v;
}

std::uint64_t ImpactIndex::num_postings() const {
  std::uint64_t n = 0;
  for (const auto& s : segments_) n += s->seg.num_postings();
  return n;
}

void ImpactIndex::compute_bounds(ImpactSegment& s) const {
  const std::size_t n = s.seg.directory_size();
  s.bounds.assign(n, 0.0f);
  for (std::size_t t = 0; t < n; ++t) {
    float best = 0.0f;
    for (std::uint64_t i = s.seg.offsets[t], e = s.seg.offsets[t + 1]; i < e; ++i) {
      const float v = scale_ > 0.0f ? static_cast<float>(s.seg.values[i]) : decode(s.seg.values[i]);
      best = std::max(best, v);
    }
    s.bounds[t] = best;
  }
}

void ImpactIndex::build_columns(ImpactSegment& s) const {
  const std::size_t slots = s.seg.directory_size();
  const std::uint32_t n = s.seg.num_docs;
  s.column_of.assign(slots, -1);
  s.columns.clear();
  if (!(scale_ > 0.0f) || n < kDenseColumnMinDocs) return;
  std::vector<std::size_t> picked;
  for (std::size_t t = 0; t < slots; ++t) {
    const std::uint64_t len = s.seg.offsets[t + 1] - s.seg.offsets[t];
    // bounds hold the largest stored impact of the list (quantised mode).
    if (len * kDenseColumnFraction >= n && s.bounds[t] <= 65535.0f) picked.push_back(t);
  }
  s.columns.assign(picked.size() * static_cast<std::size_t>(n), 0);
  for (std::size_t c = 0; c < picked.size(); ++c) {
    const std::size_t t = picked[c];
    s.column_of[t] = static_cast<std::int32_t>(c);
    std::uint16_t* col = s.columns.data() + c * n;
    for (std::uint64_t i = s.seg.offsets[t]; i < s.seg.offsets[t + 1]; ++i)
      col[s.seg.docs[i]] = static_cast<std::uint16_t>(s.seg.values[i]);
  }
}

std::size_t ImpactIndex::num_dense_columns() const {
  std::size_t n = 0;
  for (const auto& s : segments_) n += s->seg.num_docs ? s->columns.size() / s->seg.num_docs : 0;
  return n;
}

std::uint64_t ImpactIndex::dense_column_bytes() const {
  std::uint64_t n = 0;
  for (const auto& s : segments_) n += s->columns.size() * sizeof(std::uint16_t);
  return n;
}

void ImpactIndex::add(const std::int64_t* indptr, const std::uint32_t* indices, const float* values, std::size_t n) {
  if (n == 0) return;
  if (static_cast<std::uint64_t>(num_docs_) + n > 0xFFFFFFF0ull) throw std::length_error("too many documents");
  // Counting sort of the batch's postings by term: docs come out increasing within each term.
  std::vector<std::uint64_t> offsets(static_cast<std::size_t>(dim_) + 1, 0);
  auto encode = [&](float w, std::uint32_t& out) {
    if (scale_ > 0.0f) {
      const double q = std::nearbyint(static_cast<double>(w) * scale_);
      if (q < 1.0) return false;
      out = q > 4294967295.0 ? 0xFFFFFFFFu : static_cast<std::uint32_t>(q);
      return true;
    }
    if (!(w > 0.0f)) return false;
    std::memcpy(&out, &w, 4);
    return true;
  };
  std::uint32_t tmp;
  for (std::size_t d = 0; d < n; ++d)
    for (std::int64_t j = indptr[d]; j < indptr[d + 1]; ++j)
      if (encode(values[j], tmp)) ++offsets[indices[j] + 1];
  for (std::size_t t = 0; t < dim_; ++t) offsets[t + 1] += offsets[t];
  std::vector<std::uint32_t> docs(offsets[dim_]), stored(offsets[dim_]);
  std::vector<std::uint64_t> fill(offsets.begin(), offsets.end() - 1);
  for (std::size_t d = 0; d < n; ++d)
    for (std::int64_t j = indptr[d]; j < indptr[d + 1]; ++j)
      if (encode(values[j], tmp)) {
        const std::uint64_t p = fill[indices[j]]++;
        docs[p] = static_cast<std::uint32_t>(d);
        stored[p] = tmp;
      }
  if (exact_) {
    std::vector<std::uint64_t>& fi = fwd_indptr_.mutable_vec();
    std::vector<std::uint32_t>& ft = fwd_terms_.mutable_vec();
    std::vector<float>& fv = fwd_values_.mutable_vec();
    for (std::size_t d = 0; d < n; ++d) {
      for (std::int64_t j = indptr[d]; j < indptr[d + 1]; ++j)
        if (values[j] > 0.0f) {
          ft.push_back(indices[j]);
          fv.push_back(values[j]);
        }
      fi.push_back(ft.size());
    }
  }
  auto s = std::make_unique<ImpactSegment>();
  s->seg.base = num_docs_;
  s->seg.num_docs = static_cast<std::uint32_t>(n);
  s->seg.offsets = common::Buffer<std::uint64_t>(std::move(offsets));
  s->seg.docs = common::Buffer<std::uint32_t>(std::move(docs));
  s->seg.values = common::Buffer<std::uint32_t>(std::move(stored));
  compute_bounds(*s);
  build_columns(*s);
  segments_.push_back(std::move(s));
  num_docs_ += static_cast<std::uint32_t>(n);
  live_.resize(num_docs_, 1);
  ++generation_;
  // Merge trailing segments of similar size: O(log N) segments, each posting copied O(log N) times.
  while (segments_.size() >= 2) {
    const auto& a = segments_[segments_.size() - 2];
    const auto& b = segments_.back();
    if (static_cast<std::uint64_t>(b->seg.num_docs) * 2 < a->seg.num_docs) break;
    auto merged = merge(*a, *b);
    segments_.pop_back();
    segments_.back() = std::move(merged);
  }
}

std::unique_ptr<ImpactSegment> ImpactIndex::merge(const ImpactSegment& a, const ImpactSegment& b) const {
  const std::uint32_t shift = b.seg.base - a.seg.base;
  std::vector<std::uint64_t> offsets(static_cast<std::size_t>(dim_) + 1, 0);
  std::vector<std::uint32_t> docs, stored;
  docs.reserve(a.seg.num_postings() + b.seg.num_postings());
  stored.reserve(docs.capacity());
  for (std::uint32_t t = 0; t < dim_; ++t) {
    for (std::uint64_t i = a.seg.offsets[t]; i < a.seg.offsets[t + 1]; ++i) {
      docs.push_back(a.seg.docs[i]);
      stored.push_back(a.seg.values[i]);
    }
    for (std::uint64_t i = b.seg.offsets[t]; i < b.seg.offsets[t + 1]; ++i) {
      docs.push_back(b.seg.docs[i] + shift);
      stored.push_back(b.seg.values[i]);
    }
    offsets[t + 1] = docs.size();
  }
  auto s = std::make_unique<ImpactSegment>();
  s->seg.base = a.seg.base;
  s->seg.num_docs = a.seg.num_docs + b.seg.num_docs;
  s->seg.offsets = common::Buffer<std::uint64_t>(std::move(offsets));
  s->seg.docs = common::Buffer<std::uint32_t>(std::move(docs));
  s->seg.values = common::Buffer<std::uint32_t>(std::move(stored));
  s->bounds.resize(dim_);
  for (std::uint32_t t = 0; t < dim_; ++t) s->bounds[t] = std::max(a.bounds[t], b.bounds[t]);
  build_columns(*s);
  return s;
}

void ImpactIndex::remove(const std::uint32_t* docs, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    if (docs[i] >= num_docs_ || !live_[docs[i]]) throw std::invalid_argument("remove: not a live document");
  }
  for (std::size_t i = 0; i < n; ++i) {
    live_[docs[i]] = 0;
    ++num_dead_;
  }
  ++generation_;
}

void ImpactIndex::search_impacts(const std::vector<inverted::WeightedTerm>& query, std::size_t k,
                                 std::vector<common::ScoredDoc>& out, Algorithm algorithm,
                                 const std::uint8_t* allowed) const {
  out.clear();
  if (k == 0 || num_live() == 0 || query.empty()) return;
  if (allowed == nullptr && num_dead_ > 0) allowed = live_.data();
  std::vector<inverted::WeightedTerm> q;
  q.reserve(query.size());
  for (const auto& t : query)
    if (t.weight > 0.0f && t.term < dim_) q.push_back({t.term, scale_ > 0.0f ? t.weight / scale_ : t.weight});
  if (q.empty()) return;
  common::TopKQueue heap(std::min<std::size_t>(k, num_live()));
  std::vector<inverted::WeightedTerm> ordered;
  for (const auto& s : segments_) {
    const std::size_t column_terms = s->columns.empty() ? 0 : columns_first(*s, q, ordered);
    const std::vector<inverted::WeightedTerm>& sq = s->columns.empty() ? q : ordered;  // segment order
    Algorithm alg = algorithm;
    const bool automatic = alg == Algorithm::Auto;
    if (automatic) {
      // Term at a time over a dense accumulator (with the dense columns) unless the query's
      // lists are short next to the segment: document-at-a-time MaxScore pays per candidate
      // for every essential cursor, which only wins when it can skip most of the segment
      // (measured: 5-7x slower than term at a time on lists covering the segment once).
      // Small segments, and queries with a column term, always go term at a time.
      alg = Algorithm::Exhaustive;
      if (column_terms == 0 && s->seg.num_docs > kSmallSegmentDocs) {
        std::uint64_t postings = 0;
        for (const auto& t : sq) {
          const std::int64_t slot = s->seg.slot_of(t.term);
          if (slot >= 0) postings += s->seg.offsets[slot + 1] - s->seg.offsets[slot];
        }
        if (postings * 4 < s->seg.num_docs) alg = Algorithm::MaxScore;
      }
    }
    // Forced Exhaustive stays the plain posting-by-posting reference that tests compare with.
    if (automatic && alg == Algorithm::Exhaustive && scale_ > 0.0f && !s->columns.empty()) {
      dense_taat_segment(*s, sq, allowed, heap);
      continue;
    }
    const float* b = s->bounds.data();
    if (allowed != nullptr) {
      const inverted::AllowedDocs ok{allowed + s->seg.base};
      if (scale_ > 0.0f) run_algorithm(alg, s->seg, sq, b, QuantisedWeight{}, heap, ok);
      else run_algorithm(alg, s->seg, sq, b, FloatWeight{}, heap, ok);
    } else if (scale_ > 0.0f) {
      run_algorithm(alg, s->seg, sq, b, QuantisedWeight{}, heap, inverted::AllDocs{});
    } else {
      run_algorithm(alg, s->seg, sq, b, FloatWeight{}, heap, inverted::AllDocs{});
    }
  }
  heap.finalize(out);
}

float ImpactIndex::exact_score(const std::vector<inverted::WeightedTerm>& sorted_query, std::uint32_t doc) const {
  const std::uint32_t* terms = fwd_terms_.data();
  const float* values = fwd_values_.data();
  std::uint64_t p = fwd_indptr_[doc];
  const std::uint64_t e = fwd_indptr_[doc + 1];
  float score = 0.0f;
  for (const inverted::WeightedTerm& t : sorted_query) {  // merge: both sides by increasing term
    while (p < e && terms[p] < t.term) ++p;
    if (p == e) break;
    if (terms[p] == t.term) score += t.weight * values[p];
  }
  return score;
}

namespace {
// The query as a dense vector over the vocabulary (a thread's scratch, zero outside the query's
// terms), so that scoring a document is one pass over its row, with no branch per term: in
// increasing term order, as exact_score's merge adds, so the sums are the same.
struct DenseQuery {
  std::vector<float>& w;
  const std::vector<inverted::WeightedTerm>& terms;
  DenseQuery(std::uint32_t dim, const std::vector<inverted::WeightedTerm>& q) : w(scratch()), terms(q) {
    if (w.size() < dim) w.assign(dim, 0.0f);
    for (const auto& t : q) w[t.term] += t.weight;
  }
  ~DenseQuery() {
    for (const auto& t : terms) w[t.term] = 0.0f;
  }
  static std::vector<float>& scratch() {
    thread_local std::vector<float> v;
    return v;
  }
  float score(const std::uint32_t* row_terms, const float* row_values, std::uint64_t a, std::uint64_t b) const {
    float s = 0.0f;
    for (std::uint64_t p = a; p < b; ++p) s += w[row_terms[p]] * row_values[p];
    return s;
  }
};
}  // namespace

void ImpactIndex::search(const std::vector<inverted::WeightedTerm>& query, std::size_t k,
                         std::vector<common::ScoredDoc>& out, Algorithm algorithm, const std::uint8_t* allowed,
                         std::uint32_t query_cut) const {
  if (!exact_) {
    if (query_cut == 0 || query.size() <= query_cut) return search_impacts(query, k, out, algorithm, allowed);
    std::vector<inverted::WeightedTerm> cut(query);
    std::partial_sort(cut.begin(), cut.begin() + query_cut, cut.end(),
                      [](const auto& a, const auto& b) { return a.weight > b.weight; });
    cut.resize(query_cut);
    return search_impacts(cut, k, out, algorithm, allowed);
  }
  out.clear();
  const std::size_t live = num_live();
  if (k == 0 || live == 0 || query.empty()) return;
  std::vector<inverted::WeightedTerm> sorted;  // the query's usable terms by increasing term id
  sorted.reserve(query.size());
  double weight_sum = 0.0;
  for (const auto& t : query)
    if (t.weight > 0.0f && t.term < dim_) {
      sorted.push_back(t);
      weight_sum += t.weight;
    }
  if (sorted.empty()) return;
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.term < b.term; });
  k = std::min(k, live);
  const std::uint8_t* ok = allowed != nullptr ? allowed : (num_dead_ > 0 ? live_.data() : nullptr);
  std::vector<inverted::WeightedTerm> candidate_query;
  const bool approximate = query_cut > 0 && sorted.size() > query_cut;
  if (approximate) {
    candidate_query = sorted;
    std::partial_sort(candidate_query.begin(), candidate_query.begin() + query_cut, candidate_query.end(),
                      [](const auto& a, const auto& b) { return a.weight > b.weight; });
    candidate_query.resize(query_cut);
  }
  const std::vector<inverted::WeightedTerm>& cq = approximate ? candidate_query : sorted;
  // Every stored weight is within 0.5 / scale of its float weight, so a document's quantised
  // score is within err of its float score (rounding of the sums: `rel` below).
  const double err = weight_sum * 0.5 / static_cast<double>(scale_) * (1.0 + 1e-3);
  std::vector<common::ScoredDoc> cand, rescored;
  std::size_t pool = std::min(live, std::max<std::size_t>(2 * k, k + 16));
  const DenseQuery dq(dim_, sorted);
  const std::uint32_t* ft = fwd_terms_.data();
  const float* fv = fwd_values_.data();
  const std::uint64_t* fi = fwd_indptr_.data();
  for (;;) {
    search_impacts(cq, pool, cand, algorithm, allowed);
    rescored.clear();
    for (const common::ScoredDoc& c : cand) rescored.push_back({dq.score(ft, fv, fi[c.doc], fi[c.doc + 1]), c.doc});
    std::sort(rescored.begin(), rescored.end(), common::RanksBefore{});
    if (approximate) break;
    // Any document outside the pool scores at most `last` quantised (0 when the pool holds
    // every document with a nonzero quantised score), so at most last + err in float.
    // float32 sums of n terms are off by at most about n ulps, on either side.
    const double last = cand.size() == pool ? static_cast<double>(cand.back().score) : 0.0;
    const double rel = 2.4e-7 * static_cast<double>(sorted.size() + 2);
    if (rescored.size() >= k) {
      const double kth = static_cast<double>(rescored[k - 1].score);
      if (kth > last + err + rel * (std::fabs(last) + std::fabs(kth))) break;
    }
    if (pool >= live || cand.size() < pool) {
      // Scores too close to separate by the bound, or the pool already holds every document
      // with a nonzero quantised score (a larger pool finds no more): score every allowed
      // live document.
      common::TopKQueue heap(k);
      for (std::uint32_t d = 0; d < num_docs_; ++d) {
        if (ok != nullptr ? !ok[d] : !live_[d]) continue;
        const float v = dq.score(ft, fv, fi[d], fi[d + 1]);
        if (v > 0.0f) heap.insert(v, d);
      }
      heap.finalize(out);
      return;
    }
    pool = std::min(live, pool * 4);
  }
  std::size_t n = std::min(k, rescored.size());
  while (n > 0 && !(rescored[n - 1].score > 0.0f)) --n;
  out.assign(rescored.begin(), rescored.begin() + static_cast<std::ptrdiff_t>(n));
}

void ImpactIndex::export_forward(std::vector<std::uint64_t>& indptr, std::vector<std::uint32_t>& terms,
                                 std::vector<float>& values) const {
  indptr.assign(1, 0);
  terms.clear();
  values.clear();
  if (!exact_) return;
  for (std::uint32_t d = 0; d < num_docs_; ++d) {
    if (!live_[d]) continue;
    terms.insert(terms.end(), fwd_terms_.data() + fwd_indptr_[d], fwd_terms_.data() + fwd_indptr_[d + 1]);
    values.insert(values.end(), fwd_values_.data() + fwd_indptr_[d], fwd_values_.data() + fwd_indptr_[d + 1]);
    indptr.push_back(terms.size());
  }
}

void ImpactIndex::install_forward(const std::uint64_t* indptr, const std::uint32_t* terms, const float* values,
                                  std::uint64_t n, std::shared_ptr<const void> keepalive) {
  if (!(scale_ > 0.0f)) throw std::invalid_argument("install_forward: the index stores float weights already");
  fwd_indptr_ = common::Buffer<std::uint64_t>::borrow(indptr, static_cast<std::size_t>(num_docs_) + 1);
  fwd_terms_ = common::Buffer<std::uint32_t>::borrow(terms, n);
  fwd_values_ = common::Buffer<float>::borrow(values, n);
  fwd_keepalive_ = std::move(keepalive);
  exact_ = true;
}

std::uint64_t ImpactIndex::forward_bytes() const {
  return fwd_indptr_.size() * 8 + fwd_terms_.size() * 4 + fwd_values_.size() * 4;
}

void ImpactIndex::score_all(const std::vector<inverted::WeightedTerm>& query, float* out) const {
  std::fill(out, out + num_docs_, 0.0f);
  if (exact_) {  // the float vectors, as search() scores
    std::vector<inverted::WeightedTerm> sorted;
    for (const auto& t : query)
      if (t.term < dim_) sorted.push_back(t);
    const DenseQuery dq(dim_, sorted);
    for (std::uint32_t d = 0; d < num_docs_; ++d)
      out[d] = dq.score(fwd_terms_.data(), fwd_values_.data(), fwd_indptr_[d], fwd_indptr_[d + 1]);
    return;
  }
  for (const auto& s : segments_) {
    for (const auto& t : query) {
      const std::int64_t slot = s->seg.slot_of(t.term);
      if (slot < 0) continue;
      for (std::uint64_t j = s->seg.offsets[slot]; j < s->seg.offsets[slot + 1]; ++j)
        out[s->seg.base + s->seg.docs[j]] += t.weight * decode(s->seg.values[j]);
    }
  }
}

float ImpactIndex::weight(std::uint32_t term, std::uint32_t doc) const {
  if (term >= dim_ || doc >= num_docs_) return 0.0f;
  if (exact_) {
    const std::uint32_t* b = fwd_terms_.data() + fwd_indptr_[doc];
    const std::uint32_t* e = fwd_terms_.data() + fwd_indptr_[doc + 1];
    const std::uint32_t* it = std::lower_bound(b, e, term);
    return it != e && *it == term ? fwd_values_[static_cast<std::size_t>(it - fwd_terms_.data())] : 0.0f;
  }
  for (const auto& s : segments_) {
    if (doc < s->seg.base || doc >= s->seg.base + s->seg.num_docs) continue;
    const std::int64_t slot = s->seg.slot_of(term);
    if (slot < 0) return 0.0f;
    const std::uint32_t* b = s->seg.docs.data() + s->seg.offsets[slot];
    const std::uint32_t* e = s->seg.docs.data() + s->seg.offsets[slot + 1];
    const std::uint32_t local = doc - s->seg.base;
    const std::uint32_t* it = std::lower_bound(b, e, local);
    if (it == e || *it != local) return 0.0f;
    return decode(s->seg.values[static_cast<std::size_t>(it - s->seg.docs.data())]);
  }
  return 0.0f;
}

void ImpactIndex::export_arrays(std::vector<std::uint64_t>& offsets, std::vector<std::uint32_t>& docs,
                                std::vector<std::uint32_t>& stored) const {
  // new_id[d]: the live document's number among the live ones (deleted: unused).
  std::vector<std::uint32_t> new_id(num_docs_);
  std::uint32_t next = 0;
  for (std::uint32_t d = 0; d < num_docs_; ++d) new_id[d] = live_[d] ? next++ : 0;
  offsets.assign(static_cast<std::size_t>(dim_) + 1, 0);
  docs.clear();
  stored.clear();
  docs.reserve(num_postings());
  stored.reserve(num_postings());
  for (std::uint32_t t = 0; t < dim_; ++t) {
    for (const auto& s : segments_) {
      for (std::uint64_t i = s->seg.offsets[t]; i < s->seg.offsets[t + 1]; ++i) {
        const std::uint32_t d = s->seg.base + s->seg.docs[i];
        if (!live_[d]) continue;
        docs.push_back(new_id[d]);
        stored.push_back(s->seg.values[i]);
      }
    }
    offsets[t + 1] = docs.size();
  }
}

void ImpactIndex::install(std::uint32_t num_docs, const std::uint64_t* offsets, const std::uint32_t* docs,
                          const std::uint32_t* stored, std::uint64_t n_postings,
                          std::shared_ptr<const void> keepalive) {
  auto s = std::make_unique<ImpactSegment>();
  s->seg.base = 0;
  s->seg.num_docs = num_docs;
  s->seg.offsets = common::Buffer<std::uint64_t>::borrow(offsets, static_cast<std::size_t>(dim_) + 1);
  s->seg.docs = common::Buffer<std::uint32_t>::borrow(docs, n_postings);
  s->seg.values = common::Buffer<std::uint32_t>::borrow(stored, n_postings);
  compute_bounds(*s);
  build_columns(*s);
  segments_.clear();
  segments_.push_back(std::move(s));
  num_docs_ = num_docs;
  num_dead_ = 0;
  live_.assign(num_docs, 1);
  ++generation_;
  keepalive_ = std::move(keepalive);
  // The float vectors come with install_forward (files written before they were saved have none).
  exact_ = false;
  fwd_indptr_ = common::Buffer<std::uint64_t>();
  fwd_terms_ = common::Buffer<std::uint32_t>();
  fwd_values_ = common::Buffer<float>();
  fwd_keepalive_.reset();
}

}  // namespace ragfind::splade
