// Product quantisation: codebook training, encoding and the 4-bit fast-scan layout.
//
// Training and encoding reuse the IVF k-means and its nearest-centroid kernel on one sub-space
// at a time (copied out contiguous: the kernel reads rows of d floats).
#include "ragfind/dense/pq.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <utility>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "ragfind/common/parallel.hpp"
#include "ragfind/common/topk_queue.hpp"
#include "ragfind/dense/kmeans.hpp"
#include "ragfind/dense/similarity.hpp"

namespace ragfind::dense {
namespace {

void check_shape(size_t d, size_t m, size_t bits) {
  if (m == 0 || d % m != 0) throw std::invalid_argument("pq: d must be a positive multiple of m");
  if (bits != 4 && bits != 8) throw std::invalid_argument("pq: bits must be 4 or 8");
  if (m > 256) throw std::invalid_argument("pq: at most 256 sub-spaces");
}

// Sub-space j of the n rows of X, as n x dsub contiguous floats.
void sub_rows(const float* X, size_t n, size_t d, size_t j, size_t dsub, float* out) {
  for (size_t i = 0; i < n; ++i) std::memcpy(out + i * dsub, X + i * d + j * dsub, dsub * sizeof(float));
}

}  // namespace

PqCodebook train_pq(const float* X, size_t n, size_t d, size_t m, size_t bits, int iters, uint64_t seed, int threads) {
  check_shape(d, m, bits);
  PqCodebook pq;
  pq.d = d;
  pq.m = m;
  pq.bits = bits;
  pq.dsub = d / m;
  pq.ksub = size_t(1) << bits;
  if (n < pq.ksub) throw std::invalid_argument("pq: need at least 2^bits training rows");
  pq.codewords.resize(m * pq.ksub * pq.dsub);
  std::vector<float> sub(n * pq.dsub);
  for (size_t j = 0; j < m; ++j) {
    sub_rows(X, n, d, j, pq.dsub, sub.data());
    train_kmeans(sub.data(), n, pq.dsub, pq.ksub, Metric::L2, iters, seed + j, threads,
                 pq.codewords.data() + j * pq.ksub * pq.dsub);
  }
  return pq;
}

namespace {

// Sub-vectors of D dimensions against 16 codewords: the 16 squared distances in a loop that
// vectorises, then the first smallest, a row at a time (the nearest-centroid kernel's blocking
// and the per-sub-space copies cost more than the arithmetic at 2 to 8 dimensions).
template <size_t D>
void encode_short(const PqCodebook& pq, const float* X, size_t n, int threads, uint8_t* codes) {
  constexpr size_t kRows = 512;
  const size_t m = pq.m, d = pq.d;
  const float* cw = pq.data();
  common::parallel_for((n + kRows - 1) / kRows, common::resolve_threads(threads, (n + kRows - 1) / kRows),
                       [&](size_t b, int) {
                         float dist[16];
                         for (size_t i = b * kRows; i < std::min(n, (b + 1) * kRows); ++i)
                           for (size_t j = 0; j < m; ++j) {
                             const float* x = X + i * d + j * D;
                             const float* w = cw + j * 16 * D;
                             for (size_t c = 0; c < 16; ++c) {
                               float s = 0.f;
                               for (size_t t = 0; t < D; ++t) s += (x[t] - w[c * D + t]) * (x[t] - w[c * D + t]);
                               dist[c] = s;
                             }
                             float best = dist[0];
                             uint32_t at = 0;
                             for (uint32_t c = 1; c < 16; ++c) {  // branch-free: the order is random
                               const bool lt = dist[c] < best;
                               best = lt ? dist[c] : best;
                               at = lt ? c : at;
                             }
                             codes[i * m + j] = static_cast<uint8_t>(at);
                           }
                       });
}

}  // namespace

void encode_pq(const PqCodebook& pq, const float* X, size_t n, int threads, uint8_t* codes) {
  if (n == 0) return;
  if (pq.ksub == 16) {
    switch (pq.dsub) {
      case 2: return encode_short<2>(pq, X, n, threads, codes);
      case 4: return encode_short<4>(pq, X, n, threads, codes);
      case 8: return encode_short<8>(pq, X, n, threads, codes);
      default: break;
    }
  }
  std::vector<float> sub(n * pq.dsub);
  std::vector<int64_t> nearest(n);
  for (size_t j = 0; j < pq.m; ++j) {
    sub_rows(X, n, pq.d, j, pq.dsub, sub.data());
    assign_nearest(sub.data(), n, pq.dsub, pq.data() + j * pq.ksub * pq.dsub, pq.ksub, Metric::L2, threads,
                   nearest.data());
    for (size_t i = 0; i < n; ++i) codes[i * pq.m + j] = static_cast<uint8_t>(nearest[i]);
  }
}

void decode_pq(const PqCodebook& pq, const uint8_t* codes, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < pq.m; ++j) {
      const float* c = pq.data() + (j * pq.ksub + codes[i * pq.m + j]) * pq.dsub;
      std::memcpy(out + i * pq.d + j * pq.dsub, c, pq.dsub * sizeof(float));
    }
}

namespace {

// The table of sub-vectors of D dimensions: a loop the compiler unrolls over the D products and
// vectorises over the codewords (the row kernel's per-call cost dominates at 2 to 8 dimensions).
template <size_t D>
void lut_ip_short(const PqCodebook& pq, const float* q, float* lut) {
  const float* cw = pq.data();
  for (size_t j = 0; j < pq.m; ++j) {
    const float* qj = q + j * D;
    const float* w = cw + j * pq.ksub * D;
    float* out = lut + j * pq.ksub;
    for (size_t c = 0; c < pq.ksub; ++c) {
      float s = 0.f;
      for (size_t t = 0; t < D; ++t) s += qj[t] * w[c * D + t];
      out[c] = s;
    }
  }
}

}  // namespace

void pq_lut_ip(const PqCodebook& pq, const float* q, float* lut) {
  switch (pq.dsub) {
    case 2: return lut_ip_short<2>(pq, q, lut);
    case 4: return lut_ip_short<4>(pq, q, lut);
    case 8: return lut_ip_short<8>(pq, q, lut);
    default: break;
  }
  // The SIMD row kernel, a sub-space at a time (256-codeword tables cost m * 256 dot products).
  const SimilarityKernels& S = similarity_kernels();
  for (size_t j = 0; j < pq.m; ++j)
    S.dot_rows_f32(q + j * pq.dsub, pq.data() + j * pq.ksub * pq.dsub, pq.ksub, pq.dsub, lut + j * pq.ksub);
}

void pack_pq4(const uint8_t* codes, size_t n, size_t m, uint8_t* out) {
  const size_t mpad = pq4_mpad(m), nblocks = (n + kPqBlock - 1) / kPqBlock;
  std::memset(out, 0, nblocks * mpad * 16);
  for (size_t i = 0; i < n; ++i) {
    const size_t b = i / kPqBlock, r = i % kPqBlock;
    const int shift = r < 16 ? 0 : 4;
    for (size_t j = 0; j < m; ++j)
      out[(b * mpad + j) * 16 + r % 16] |= static_cast<uint8_t>((codes[i * m + j] & 15) << shift);
  }
}

namespace {

// nearbyint(x) clamped to [0, 255], NaN to 0; inline where SSE2 rounds (to nearest even, as
// nearbyint in the default mode) without a library call.
inline uint8_t round_to_byte(float x) {
  if (!(x >= 0.f)) return 0;
  if (x >= 255.f) return 255;
#if defined(__SSE2__)
  return static_cast<uint8_t>(_mm_cvtss_si32(_mm_set_ss(x)));
#else
  return static_cast<uint8_t>(std::nearbyint(x));
#endif
}

}  // namespace

void quantise_pq4_lut_into(const float* lut, size_t m, uint8_t* lut8, float* bias, float* scale) {
  const size_t mpad = pq4_mpad(m);
  std::memset(lut8, 0, mpad * 16);
  float span = 0.f;
  double b = 0.0;
  for (size_t j = 0; j < m; ++j) {
    const float* t = lut + j * 16;
    const float mn = *std::min_element(t, t + 16), mx = *std::max_element(t, t + 16);
    b += mn;
    span = std::max(span, mx - mn);
  }
  // One scale for every sub-space (the bytes are summed), set by the widest table.
  const float sc = span > 0.f && std::isfinite(span) ? span / 255.f : 1.f;
  const float inv = 1.f / sc;
  for (size_t j = 0; j < m; ++j) {
    const float* t = lut + j * 16;
    const float lo = *std::min_element(t, t + 16);
    for (size_t c = 0; c < 16; ++c) lut8[j * 16 + c] = round_to_byte((t[c] - lo) * inv);
  }
  *bias = static_cast<float>(b);
  *scale = sc;
}

Pq4Lut quantise_pq4_lut(const float* lut, size_t m) {
  Pq4Lut q;
  q.lut8.resize(pq4_mpad(m) * 16);
  quantise_pq4_lut_into(lut, m, q.lut8.data(), &q.bias, &q.scale);
  return q;
}

// ---- IVF-PQ search ------------------------------------------------------------------------
//
// One routine serves a single query and a batch: per query, the centroid scores pick the
// nprobe lists and one quantised table serves them all (a list adds its centroid's score);
// the lists are then visited one at a time, each scanned for every query of the batch that
// probes it, so its codes are read once per batch. Each query keeps its k * rerank best
// estimates in a pool; a row can only enter with a byte sum at or above the smallest
// sum whose estimate reaches the pool's threshold, so most rows are dropped by one integer
// compare. The survivors are re-scored exactly in row order (addresses ascending, prefetched).
// The pool keeps the best by (estimate, position), whatever order rows are offered in, so a
// batch returns what single searches return.

namespace {

using Candidate = common::Scored<int64_t>;

// The cap best estimates offered (ties to the lower position), kept as a reservoir: once cap
// rows are held the worst of them is the threshold, rows below it are turned away, the rest
// appended, and at 2 * cap the best cap are kept (nth_element) and the threshold rises. An
// offer costs O(1) amortised where a heap of cap paid a mispredicted sift each; the rows kept
// are the same whatever order they come in.
class CandidatePool {
 public:
  void reset(size_t cap) {
    cap_ = std::max<size_t>(cap, 1);
    rows_.clear();
    full_ = false;
    thr_ = -std::numeric_limits<float>::infinity();
  }
  bool full() const { return full_; }
  /// Rows estimated below this cannot enter (meaningful once full()).
  float threshold() const { return thr_; }
  /// Rows held: min(rows offered, cap) while fewer than cap were offered.
  size_t size() const { return rows_.size(); }
  void offer(float est, int64_t at) {
    if (full_ && est < thr_) return;
    rows_.push_back({est, at});
    if (rows_.size() == cap_ && !full_) {
      full_ = true;
      thr_ = std::min_element(rows_.begin(), rows_.end(), [](const Candidate& a, const Candidate& b) {
               return a.score < b.score;
             })->score;
    } else if (rows_.size() >= 2 * cap_) {
      keep_best();
    }
  }
  /// The cap best rows offered (any order).
  const std::vector<Candidate>& rows() {
    keep_best();
    return rows_;
  }

 private:
  void keep_best() {
    if (rows_.size() <= cap_) return;
    std::nth_element(rows_.begin(), rows_.begin() + static_cast<std::ptrdiff_t>(cap_ - 1), rows_.end(),
                     common::RanksBefore{});
    rows_.resize(cap_);
    thr_ = rows_[cap_ - 1].score;
  }
  size_t cap_ = 1;
  std::vector<Candidate> rows_;
  bool full_ = false;
  float thr_ = 0;
};

inline float estimate(float base, float scale, uint32_t sum) { return base + scale * static_cast<float>(sum); }

// The smallest byte sum whose estimate might reach thr (65536: none); a relative margin covers
// rounding (a fused multiply-add here and not there), the pool then decides exactly.
uint32_t min_passing_sum(float base, float scale, float thr) {
  if (!std::isfinite(base) || !std::isfinite(scale) || !(scale > 0.f)) return 0;  // the pool decides
  if (thr == std::numeric_limits<float>::infinity()) return 65536;
  if (!std::isfinite(thr)) return 0;  // -inf or NaN
  const float slack = 1e-5f * (std::fabs(base) + std::fabs(thr) + scale * 65536.f);
  const float lim = thr - slack;
  const float guess = (lim - base) / scale;
  uint32_t s = guess <= 0.f ? 0 : guess >= 65536.f ? 65536 : static_cast<uint32_t>(guess);
  while (s > 0 && estimate(base, scale, s - 1) >= lim) --s;
  while (s < 65536 && estimate(base, scale, s) < lim) ++s;
  return s;
}

// Bit i set when sums[i] >= g, for the 32 rows of a block (g <= 65536).
inline uint32_t rows_at_or_above(const uint16_t* sums, uint32_t g) {
  if (g == 0) return ~0u;
  if (g > 65535) return 0;
#if defined(__SSE2__)
  // SSE2 (the x86-64 baseline) compares signed 16-bit lanes: flipping the top bit of both
  // sides keeps the unsigned order, and s >= g is s > g - 1.
  const __m128i flip = _mm_set1_epi16(static_cast<short>(0x8000));
  const __m128i t = _mm_set1_epi16(static_cast<short>(static_cast<uint16_t>((g - 1) ^ 0x8000u)));
  uint32_t mask = 0;
  for (int h = 0; h < 2; ++h) {
    const __m128i a = _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sums + 16 * h)), flip);
    const __m128i b = _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sums + 16 * h + 8)), flip);
    const __m128i m = _mm_packs_epi16(_mm_cmpgt_epi16(a, t), _mm_cmpgt_epi16(b, t));
    mask |= static_cast<uint32_t>(_mm_movemask_epi8(m)) << (16 * h);
  }
  return mask;
#else
  uint32_t mask = 0;
  for (uint32_t i = 0; i < kPqBlock; ++i) mask |= static_cast<uint32_t>(sums[i] >= g) << i;
  return mask;
#endif
}

// When a batch scans list by list (the visits sorted by list, each list read once for all the
// queries of a chunk that probe it) rather than each query's lists best first, as a single
// query does. Lists in address order stream well, but fill each pool in an order unrelated
// to its scores, so its threshold rises later and it takes many more rows (perf: scan_list's
// row loop 39% of the time, not 29%, at a pool of k * 128): the larger the pool, the more
// that costs. Measured on 200k x 384 (nlist 1024 and 2048, 64-query chunks, k 10, one
// thread; bench/dense.md), list order against best first: 4-bit codes 0.99-1.16x with a pool
// of k * 2 to k * 8, 0.94-1.0x at k * 16, 0.79-0.98x at k * 32 or more, at 1 to 64 queries a
// list alike; 8-bit codes (4x the bytes) 1.12x at 16 and 64 queries a list with a pool of
// k * 4 (0.99-1.12x at k * 64), 0.92-1.03x at 1 and 4.
constexpr size_t kListOrderPool = 128;  // pools below this many rows: list order
constexpr size_t kPq8ListShare = 8;     // 8-bit codes: list order from this many queries a list

struct QueryState {
  std::vector<uint8_t> lut8;  // 4-bit codes: the quantised table
  std::vector<float> lut;     // 8-bit codes: the float table
  float bias = 0, scale = 1;
  CandidatePool pool;
};

struct SearchScratch {
  std::vector<std::pair<float, int64_t>> best;  // a query's lists, best first
  CoarseScratch coarse;
  std::vector<float> lut;
  std::vector<float> rq, cw_norm;  // l2: the query's residual to a centroid, |codeword|^2
  std::vector<uint16_t> sums;
  std::vector<float> sums8;
  std::vector<uint64_t> visits;   // (list << 32 | query in chunk): by query, or sorted by list
  std::vector<float> visit_base;  // centroid score per (query, probe)
  std::vector<QueryState> queries;
  std::vector<Candidate> cand;
};

SearchScratch& scratch() {
  thread_local SearchScratch s;
  return s;
}

// The 8-bit version of scan_list: float sums, compared with the pool's threshold directly.
void scan_list8(const IvfPqView& v, const Pq4ScanKernels& K, size_t l, float centroid_score, QueryState& qs,
                std::vector<float>& sums) {
  const size_t n = static_cast<size_t>(v.len[l]), r0 = static_cast<size_t>(v.row0[l]), m = v.pq->m;
  if (sums.size() < n) sums.resize(n);
  K.scan8(v.blocks + r0 * m, n, m, qs.lut.data(), sums.data());
  CandidatePool& pool = qs.pool;
  const int64_t* pos = v.pos == nullptr ? nullptr : v.pos + r0;
  const int64_t first = v.pos == nullptr ? v.start[l] : 0;
  const int64_t n_exact = static_cast<int64_t>(v.n_exact);
  for (size_t r = 0; r < n; ++r) {
    const float est = centroid_score + sums[r];
    if (pool.full() && !(est >= pool.threshold())) continue;
    const int64_t at = pos == nullptr ? first + static_cast<int64_t>(r) : pos[r];
    if (at == -1) continue;
    if (at < -1 || at >= n_exact) throw std::invalid_argument("ivf_pq_search: pos holds a row outside exact");
    if (v.allowed != nullptr && v.allowed[at] == 0) continue;
    pool.offer(est, at);
  }
}

// Scans list l for one query, offering the rows that pass the running threshold.
void scan_list(const IvfPqView& v, const Pq4ScanKernels& K, size_t mpad, size_t l, float centroid_score, QueryState& qs,
               std::vector<uint16_t>& sums) {
  const size_t n = static_cast<size_t>(v.len[l]), r0 = static_cast<size_t>(v.row0[l]);
  if (n == 0) return;
  const size_t nb = (n + kPqBlock - 1) / kPqBlock;
  if (sums.size() < nb * kPqBlock) sums.resize(nb * kPqBlock);
  K.scan(v.blocks + (r0 / kPqBlock) * mpad * 16, nb, mpad, qs.lut8.data(), sums.data());
  const float base = centroid_score + qs.bias, scale = qs.scale;
  CandidatePool& pool = qs.pool;
  const int64_t* pos = v.pos == nullptr ? nullptr : v.pos + r0;
  const int64_t first = v.pos == nullptr ? v.start[l] : 0;
  const int64_t n_exact = static_cast<int64_t>(v.n_exact);
  // The passing sum follows the pool's threshold once a block: within a block the rows above
  // a stale one are offered and the pool turns the extra ones away exactly.
  uint32_t g = 0;
  float g_for = -std::numeric_limits<float>::infinity();
  for (size_t b = 0; b < nb; ++b) {
    if (pool.full() && pool.threshold() != g_for) {
      g_for = pool.threshold();
      g = min_passing_sum(base, scale, g_for);
    }
    const size_t rows = std::min(kPqBlock, n - b * kPqBlock);
    const uint16_t* s = sums.data() + b * kPqBlock;
    uint32_t mask = rows_at_or_above(s, g);
    if (rows < kPqBlock) mask &= (1u << rows) - 1;
    while (mask != 0) {
      const unsigned i = static_cast<unsigned>(__builtin_ctz(mask));
      mask &= mask - 1;
      const size_t r = b * kPqBlock + i;
      const int64_t at = pos == nullptr ? first + static_cast<int64_t>(r) : pos[r];
      if (at == -1) continue;
      if (at < -1 || at >= n_exact) throw std::invalid_argument("ivf_pq_search: pos holds a row outside exact");
      if (v.allowed != nullptr && v.allowed[at] == 0) continue;
      pool.offer(estimate(base, scale, s[i]), at);
    }
  }
}

// The first codes of list l, so the next list's scan does not start on a run of misses before
// the hardware prefetcher has caught its stream.
inline void prefetch_codes(const IvfPqView& v, size_t l) {
  const size_t unit = v.pq->bits == 8 ? v.pq->m : pq4_mpad(v.pq->m) * 16 / kPqBlock;  // bytes a row
  const char* p = reinterpret_cast<const char*>(v.blocks) + static_cast<size_t>(v.row0[l]) * unit;
  const size_t bytes = std::min<size_t>(static_cast<size_t>(v.len[l]) * unit, 1024);
  for (size_t t = 0; t < bytes; t += 64) __builtin_prefetch(p + t);
}

// l2: the table of query q for list l, 2 (q - c)_j . codeword - |codeword|^2, into qs.
void l2_list_table(const IvfPqView& v, const float* q, size_t l, SearchScratch& w, QueryState& qs) {
  const PqCodebook& pq = *v.pq;
  const size_t d = pq.d, n = pq.m * pq.ksub;
  const float* c = v.centroids + l * d;
  w.rq.resize(d);
  for (size_t t = 0; t < d; ++t) w.rq[t] = q[t] - c[t];
  std::vector<float>& table = pq.bits == 8 ? qs.lut : w.lut;
  table.resize(n);
  pq_lut_ip(pq, w.rq.data(), table.data());
  for (size_t i = 0; i < n; ++i) table[i] = 2.f * table[i] - w.cw_norm[i];
  if (pq.bits != 8) {
    qs.lut8.resize(pq4_mpad(pq.m) * 16);
    quantise_pq4_lut_into(table.data(), pq.m, qs.lut8.data(), &qs.bias, &qs.scale);
  }
}

// Re-scores the pool's rows exactly and writes the k best (padding -1 / NaN).
void rescore(const IvfPqView& v, const float* q, size_t k, CandidatePool& pool, std::vector<Candidate>& cand,
             int64_t* out_pos, float* out_scores) {
  const SimilarityKernels& S = similarity_kernels();
  const size_t d = v.pq->d;
  const bool f16 = v.exact == nullptr;
  const size_t row_bytes = d * (f16 ? sizeof(uint16_t) : sizeof(float));
  const char* rows = f16 ? reinterpret_cast<const char*>(v.exact_f16) : reinterpret_cast<const char*>(v.exact);
  const std::vector<Candidate>& kept = pool.rows();
  cand.assign(kept.begin(), kept.end());
  std::sort(cand.begin(), cand.end(), [](const Candidate& a, const Candidate& b) { return a.doc < b.doc; });
  constexpr size_t kAhead = 2;  // rows prefetched ahead of the one scored (more did not help)
  auto prefetch = [&](size_t i) {
    const char* row = rows + static_cast<size_t>(cand[i].doc) * row_bytes;
    for (size_t t = 0; t < row_bytes; t += 64) __builtin_prefetch(row + t);
  };
  // The first line of every row first: each row sits on its own page, so this starts the
  // address translations of all of them, not two at a time.
  for (const Candidate& c : cand) __builtin_prefetch(rows + static_cast<size_t>(c.doc) * row_bytes);
  for (size_t i = 0; i < std::min(kAhead, cand.size()); ++i) prefetch(i);
  for (size_t i = 0; i < cand.size(); ++i) {
    if (i + kAhead < cand.size()) prefetch(i + kAhead);
    const size_t at = static_cast<size_t>(cand[i].doc);
    float& sc = cand[i].score;
    if (v.l2) {  // ranked as -distance: higher is better, as for inner products
      if (f16) S.l2_rows_f16(q, v.exact_f16 + at * d, 1, d, &sc);
      else sc = S.l2sq_f32(q, v.exact + at * d, d);
      sc = -sc;
    } else if (f16) {
      S.dot_rows_f16(q, v.exact_f16 + at * d, 1, d, &sc);
    } else {
      sc = S.dot_f32(q, v.exact + at * d, d);
    }
  }
  const size_t kk = std::min(k, cand.size());
  std::partial_sort(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(kk), cand.end(), common::RanksBefore{});
  for (size_t i = 0; i < kk; ++i) {
    out_pos[i] = cand[i].doc;
    out_scores[i] = v.l2 ? -cand[i].score : cand[i].score;
  }
  for (size_t i = kk; i < k; ++i) {
    out_pos[i] = -1;
    out_scores[i] = std::numeric_limits<float>::quiet_NaN();
  }
}

// Searches nc queries (rows of Q) together; writes k results per query.
void search_chunk(const IvfPqView& v, const float* Q, size_t nc, size_t k, size_t nprobe, size_t rerank,
                  int64_t* out_pos, float* out_scores) {
  const PqCodebook& pq = *v.pq;
  const size_t d = pq.d, nlist = v.nlist, mpad = pq4_mpad(pq.m);
  const size_t np = std::min(std::max<size_t>(nprobe, 1), nlist);
  const SimilarityKernels& S = similarity_kernels();
  const Pq4ScanKernels& K = pq4_scan_kernels();
  SearchScratch& w = scratch();
  if (w.queries.size() < nc) w.queries.resize(nc);
  const bool eight = pq.bits == 8;
  w.lut.resize(pq.m * pq.ksub);
  w.visits.clear();
  w.visit_base.resize(nc * np);
  if (v.l2) {
    w.cw_norm.resize(pq.m * pq.ksub);
    const float* cw = pq.data();
    for (size_t i = 0; i < pq.m * pq.ksub; ++i) w.cw_norm[i] = S.dot_f32(cw + i * pq.dsub, cw + i * pq.dsub, pq.dsub);
  }
  for (size_t qi = 0; qi < nc; ++qi) {
    const float* q = Q + qi * d;
    // The np best lists (ties to the lower list), best first: the threshold rises sooner.
    if (v.coarse != nullptr) best_lists(*v.coarse, v.centroids, q, np, v.l2, w.coarse, w.best);
    else best_lists_full(v.centroids, nlist, d, q, np, v.l2, w.best);
    for (size_t p = 0; p < np; ++p) {
      const size_t l = static_cast<size_t>(w.best[p].second);
      w.visits.push_back(uint64_t(l) << 32 | (qi * np + p));
      w.visit_base[qi * np + p] = -w.best[p].first;
    }
    QueryState& qs = w.queries[qi];
    if (v.l2) {
      // a table per list, built as each list is visited
    } else if (eight) {
      qs.lut.resize(pq.m * pq.ksub);
      pq_lut_ip(pq, q, qs.lut.data());
    } else {
      pq_lut_ip(pq, q, w.lut.data());
      qs.lut8.resize(mpad * 16);
      quantise_pq4_lut_into(w.lut.data(), pq.m, qs.lut8.data(), &qs.bias, &qs.scale);
    }
    // Not capped by the rows probed: a query left short by a filter or deletes scans more lists.
    qs.pool.reset(std::max(k, k * rerank));
  }
  // A single query visits its lists best first: the first lists fill the pool with good
  // estimates, so its threshold rises at once. A batch does the same unless list order pays
  // (kListOrderPool, kPq8ListShare).
  const bool list_order = std::max(k, k * rerank) < kListOrderPool || (eight && nc * np >= kPq8ListShare * nlist);
  if (nc > 1 && list_order) std::sort(w.visits.begin(), w.visits.end());
  for (size_t i = 0; i < w.visits.size(); ++i) {
    const uint64_t vis = w.visits[i];
    const size_t l = static_cast<size_t>(vis >> 32), slot = static_cast<size_t>(vis & 0xffffffffu);
    if (i + 1 < w.visits.size()) prefetch_codes(v, static_cast<size_t>(w.visits[i + 1] >> 32));
    if (v.l2) l2_list_table(v, Q + (slot / np) * d, l, w, w.queries[slot / np]);
    if (eight) scan_list8(v, K, l, w.visit_base[slot], w.queries[slot / np], w.sums8);
    else scan_list(v, K, mpad, l, w.visit_base[slot], w.queries[slot / np], w.sums);
  }
  // While the pool is short of k it admits every admitted row offered, so its size is the
  // admitted rows seen: a short query scans the next lists in centroid order (rare: a filter or
  // deletes); the first np lists of the full order are the ones already scanned.
  if (np < nlist) {
    for (size_t qi = 0; qi < nc; ++qi) {
      QueryState& qs = w.queries[qi];
      if (qs.pool.size() >= k) continue;
      best_lists_full(v.centroids, nlist, d, Q + qi * d, nlist, v.l2, w.best);
      for (size_t p = np; qs.pool.size() < k && p < nlist; ++p) {
        const size_t l = static_cast<size_t>(w.best[p].second);
        if (v.l2) l2_list_table(v, Q + qi * d, l, w, qs);
        if (eight) scan_list8(v, K, l, -w.best[p].first, qs, w.sums8);
        else scan_list(v, K, mpad, l, -w.best[p].first, qs, w.sums);
      }
    }
  }
  for (size_t qi = 0; qi < nc; ++qi)
    rescore(v, Q + qi * d, k, w.queries[qi].pool, w.cand, out_pos + qi * k, out_scores + qi * k);
}

}  // namespace

size_t ivf_pq_search_one(const IvfPqView& v, const float* q, size_t k, size_t nprobe, size_t rerank, int64_t* out_pos,
                         float* out_scores) {
  if (k == 0 || v.nlist == 0) return 0;
  // The padding goes to scratch: this function writes only the results it returns.
  thread_local std::vector<int64_t> pos;
  thread_local std::vector<float> scores;
  pos.resize(k);
  scores.resize(k);
  search_chunk(v, q, 1, k, nprobe, rerank, pos.data(), scores.data());
  size_t kk = 0;
  while (kk < k && pos[kk] >= 0) ++kk;
  std::copy(pos.begin(), pos.begin() + static_cast<std::ptrdiff_t>(kk), out_pos);
  std::copy(scores.begin(), scores.begin() + static_cast<std::ptrdiff_t>(kk), out_scores);
  return kk;
}

void ivf_pq_search_batch(const IvfPqView& v, const float* Q, size_t nq, size_t k, size_t nprobe, size_t rerank,
                         int threads, int64_t* out_pos, float* out_scores) {
  if (k == 0 || nq == 0) return;
  if (v.nlist == 0) {
    std::fill(out_pos, out_pos + nq * k, int64_t(-1));
    std::fill(out_scores, out_scores + nq * k, std::numeric_limits<float>::quiet_NaN());
    return;
  }
  const int nt = common::resolve_threads(threads, nq);
  // Chunks small enough that every query's pool and table stay in cache, and at least one
  // per worker.
  const size_t chunk = std::max<size_t>(1, std::min<size_t>(kSearchChunk, (nq + nt - 1) / nt));
  const size_t nchunks = (nq + chunk - 1) / chunk;
  common::parallel_for(nchunks, nt, [&](size_t c, int) {
    const size_t q0 = c * chunk, nc = std::min(chunk, nq - q0);
    search_chunk(v, Q + q0 * v.pq->d, nc, k, nprobe, rerank, out_pos + q0 * k, out_scores + q0 * k);
  });
}

}  // namespace ragfind::dense
