// Exact dense search: fused scan + top-k, blocked batches, threads (the heap and the block
// scoring are in scan.hpp, shared with the IVF scan).
#include "ragfind/dense/exact_search.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>
#include <utility>
#include <vector>

#include "ragfind/common/parallel.hpp"
#include "ragfind/dense/similarity.hpp"
#include "scan.hpp"

namespace ragfind::dense {
namespace {

using detail::elem_bytes;
using detail::floor_of;
using detail::kScanBlock;
using detail::prepare;
using detail::PreparedQuery;
using detail::score_block;
using detail::make_topk;
using detail::merge;
using detail::push_block;
using detail::TopK;
using detail::write_results;

// Calls fn(t) for t in [0, nthreads) on the core's pool, one chunk per worker.
template <typename Fn>
void run_parallel(int nthreads, Fn&& fn) {
  if (nthreads <= 1) {
    fn(0);
    return;
  }
  common::parallel_for(static_cast<size_t>(nthreads), nthreads, [&fn](size_t t, int) { fn(static_cast<int>(t)); });
}

void scan_range(const SimilarityKernels& K, const RowsView& rows, const PreparedQuery& p, const SearchOptions& opt,
                size_t begin, size_t end, TopK& top) {
  float buf[kScanBlock];
  for (size_t r = begin; r < end; r += kScanBlock) {
    const size_t cnt = std::min(kScanBlock, end - r);
    score_block(K, rows, p, opt.metric, r, cnt, buf);
    push_block(top, buf, cnt, static_cast<int64_t>(r), opt.allowed);
  }
}

// Scores only the listed rows (the gather path of a small allowed set). The f16/i8 kernels
// reduce rows in groups of four differently from a lone row, so rows the full scan scores in
// a group are copied four at a time into a scratch group, and the scan's lone tail rows (past
// n rounded down to 4) are scored alone: every row gets the same score as in the full scan.
void scan_subset(const SimilarityKernels& K, const RowsView& rows, const PreparedQuery& p, Metric metric,
                 const int64_t* idx, size_t cnt_total, TopK& top) {
  float buf[kScanBlock];
  const size_t n4 = rows.n & ~size_t(3);
  const size_t row_bytes = rows.d * elem_bytes(rows.storage);
  const bool grouped = rows.storage != Storage::F32;
  std::vector<uint8_t> scratch(grouped ? 4 * row_bytes : 0);
  float sc[4] = {0, 0, 0, 0}, sn[4] = {0, 0, 0, 0};
  RowsView g = rows;
  g.data = scratch.data();
  g.n = 4;
  if (rows.scales) g.scales = sc;
  if (rows.sqnorms) g.sqnorms = sn;
  const auto* base = static_cast<const uint8_t*>(rows.data);
  for (size_t b = 0; b < cnt_total; b += kScanBlock) {
    const size_t cnt = std::min(kScanBlock, cnt_total - b);
    const int64_t* ix = idx + b;
    for (size_t i = 0; i < cnt;) {
      const size_t r = static_cast<size_t>(ix[i]);
      if (!grouped || r >= n4) {
        score_block(K, rows, p, metric, r, 1, buf + i);
        ++i;
        continue;
      }
      size_t m = 1;
      while (m < 4 && i + m < cnt && static_cast<size_t>(ix[i + m]) < n4) ++m;
      for (size_t j = 0; j < 4; ++j) {
        const size_t src = static_cast<size_t>(ix[i + std::min(j, m - 1)]);
        std::memcpy(scratch.data() + j * row_bytes, base + src * row_bytes, row_bytes);
        if (rows.scales) sc[j] = rows.scales[src];
        if (rows.sqnorms) sn[j] = rows.sqnorms[src];
      }
      float out4[4];
      score_block(K, g, p, metric, 0, 4, out4);
      for (size_t j = 0; j < m; ++j) buf[i + j] = out4[j];
      i += m;
    }
    float a = top.threshold();
    for (size_t i = 0; i < cnt; ++i) {
      if (buf[i] < a) continue;
      top.insert(buf[i], ix[i]);
      a = top.threshold();
    }
  }
}

size_t search_subset(const RowsView& rows, const float* q, const SearchOptions& opt, int threads, int64_t* out_rows,
                     float* out_scores) {
  if (opt.k == 0 || opt.subset_n == 0) return 0;
  const SimilarityKernels& K = similarity_kernels();
  const PreparedQuery p = prepare(rows, q, opt.metric);
  const size_t bytes = opt.subset_n * rows.d * elem_bytes(rows.storage);
  int nt = threads > 0 ? threads : auto_threads(bytes);
  const size_t nblocks = (opt.subset_n + kScanBlock - 1) / kScanBlock;
  nt = static_cast<int>(std::min<size_t>(static_cast<size_t>(nt), nblocks));
  std::vector<TopK> tops(nt, make_topk(opt.k, opt.has_threshold, floor_of(opt)));
  const size_t per = (nblocks + nt - 1) / nt * kScanBlock;
  run_parallel(nt, [&](int t) {
    const size_t b = std::min(opt.subset_n, per * t), e = std::min(opt.subset_n, per * (t + 1));
    if (b < e) scan_subset(K, rows, p, opt.metric, opt.subset + b, e - b, tops[t]);
  });
  for (int t = 1; t < nt; ++t) merge(tops[0], tops[t]);
  return write_results(tops[0], opt.metric, opt.k, out_rows, out_scores);
}

}  // namespace

int auto_threads(size_t bytes) {
  // Below ~4 MB a second thread costs more to start than it saves.
  const size_t by_work = std::max<size_t>(1, bytes / (4u << 20));
  return static_cast<int>(std::min<size_t>(by_work, static_cast<size_t>(common::hardware_threads())));
}

size_t search_one(const RowsView& rows, const float* q, const SearchOptions& opt, int64_t* out_rows,
                  float* out_scores) {
  if (opt.k == 0 || rows.n == 0) return 0;
  if (opt.subset) return search_subset(rows, q, opt, opt.threads, out_rows, out_scores);
  const SimilarityKernels& K = similarity_kernels();
  const PreparedQuery p = prepare(rows, q, opt.metric);
  const size_t bytes = rows.n * rows.d * elem_bytes(rows.storage);
  int nt = opt.threads > 0 ? opt.threads : auto_threads(bytes);
  const size_t nblocks = (rows.n + kScanBlock - 1) / kScanBlock;
  nt = static_cast<int>(std::min<size_t>(static_cast<size_t>(nt), nblocks));
  const float floor = floor_of(opt);
  std::vector<TopK> tops(nt, make_topk(opt.k, opt.has_threshold, floor));
  const size_t per = (nblocks + nt - 1) / nt * kScanBlock;
  run_parallel(nt, [&](int t) {
    const size_t b = std::min(rows.n, per * t), e = std::min(rows.n, per * (t + 1));
    scan_range(K, rows, p, opt, b, e, tops[t]);
  });
  for (int t = 1; t < nt; ++t) merge(tops[0], tops[t]);
  return write_results(tops[0], opt.metric, opt.k, out_rows, out_scores);
}

namespace {

// Queries [qa, qb) against every row, cache-blocked: a block of queries stays in L1/L2
// while tiles of rows stream through, each tile decoded (f16/i8) once and reused by every
// query of the block.
void batch_range(const SimilarityKernels& K, const RowsView& rows, const float* Q, size_t qa, size_t qb,
                 const SearchOptions& opt, std::vector<TopK>& tops) {
  const size_t d = rows.d;
  const size_t kQB = 64;
  size_t tb = (96u << 10) / (d * sizeof(float));
  tb = std::max<size_t>(8, std::min<size_t>(512, tb)) & ~size_t(1);
  std::vector<float> tile_scores(kQB * tb);
  std::vector<float> decoded(rows.storage == Storage::F32 ? 0 : tb * d);
  std::vector<float> qsq(kQB);
  for (size_t q0 = qa; q0 < qb; q0 += kQB) {
    const size_t nq = std::min(kQB, qb - q0);
    const float* Qb = Q + q0 * d;
    if (opt.metric == Metric::L2 && rows.storage == Storage::I8)
      for (size_t i = 0; i < nq; ++i) qsq[i] = K.dot_f32(Qb + i * d, Qb + i * d, d);
    for (size_t r0 = 0; r0 < rows.n; r0 += tb) {
      const size_t cnt = std::min(tb, rows.n - r0);
      const float* X;
      if (rows.storage == Storage::F32) {
        X = static_cast<const float*>(rows.data) + r0 * d;
      } else if (rows.storage == Storage::F16) {
        K.f16_to_f32(static_cast<const uint16_t*>(rows.data) + r0 * d, decoded.data(), cnt * d);
        X = decoded.data();
      } else {
        K.i8_to_f32(static_cast<const int8_t*>(rows.data) + r0 * d, decoded.data(), cnt * d);
        X = decoded.data();
      }
      if (opt.metric == Metric::IP || rows.storage == Storage::I8) {
        K.dot_tile_f32(Qb, nq, X, cnt, d, tile_scores.data(), tb);
      } else {
        for (size_t i = 0; i < nq; ++i) K.l2_rows_f32(Qb + i * d, X, cnt, d, tile_scores.data() + i * tb);
      }
      for (size_t i = 0; i < nq; ++i) {
        float* s = tile_scores.data() + i * tb;
        if (rows.storage == Storage::I8) {
          const float* sc = rows.scales + r0;
          if (opt.metric == Metric::IP) {
            for (size_t j = 0; j < cnt; ++j) s[j] *= sc[j];
          } else {
            const float* sn = rows.sqnorms + r0;
            for (size_t j = 0; j < cnt; ++j) s[j] = -(qsq[i] + sn[j] - 2.f * sc[j] * s[j]);
          }
        } else if (opt.metric == Metric::L2) {
          for (size_t j = 0; j < cnt; ++j) s[j] = -s[j];
        }
        push_block(tops[q0 - qa + i], s, cnt, static_cast<int64_t>(r0), opt.allowed);
      }
    }
  }
}

}  // namespace

void search_batch(const RowsView& rows, const float* Q, size_t nq, const SearchOptions& opt, int64_t* out_rows,
                  float* out_scores, int64_t* out_counts) {
  const size_t k = opt.k;
  for (size_t i = 0; i < nq * k; ++i) {
    out_rows[i] = -1;
    out_scores[i] = std::numeric_limits<float>::quiet_NaN();
  }
  for (size_t i = 0; i < nq; ++i) out_counts[i] = 0;
  if (nq == 0 || k == 0 || rows.n == 0) return;
  const int hw = opt.threads > 0 ? opt.threads : common::hardware_threads();
  if (opt.subset) {
    // A small allowed set: each query gathers its rows on one worker, queries in parallel.
    const size_t bytes = opt.subset_n * rows.d * elem_bytes(rows.storage) * nq;
    const int nt = opt.threads > 0 ? opt.threads : std::min(hw, auto_threads(bytes));
    common::parallel_for(nq, nt, [&](size_t i, int) {
      out_counts[i] =
          static_cast<int64_t>(search_subset(rows, Q + i * rows.d, opt, 1, out_rows + i * k, out_scores + i * k));
    });
    return;
  }
  if (nq < static_cast<size_t>(std::max(2, hw))) {
    // Too few queries to split: run each on the corpus-splitting single-query path.
    SearchOptions one = opt;
    for (size_t i = 0; i < nq; ++i)
      out_counts[i] = static_cast<int64_t>(search_one(rows, Q + i * rows.d, one, out_rows + i * k, out_scores + i * k));
    return;
  }
  const SimilarityKernels& K = similarity_kernels();
  const float floor = floor_of(opt);
  const size_t bytes = rows.n * rows.d * elem_bytes(rows.storage) * nq;
  int nt = opt.threads > 0 ? opt.threads : std::min(hw, auto_threads(bytes));
  nt = static_cast<int>(std::min<size_t>(static_cast<size_t>(nt), nq));
  const size_t per = (nq + nt - 1) / nt;
  run_parallel(nt, [&](int t) {
    const size_t qa = std::min(nq, per * t), qb = std::min(nq, per * (t + 1));
    if (qa >= qb) return;
    std::vector<TopK> tops(qb - qa, make_topk(k, opt.has_threshold, floor));
    batch_range(K, rows, Q, qa, qb, opt, tops);
    for (size_t i = qa; i < qb; ++i)
      out_counts[i] =
          static_cast<int64_t>(write_results(tops[i - qa], opt.metric, k, out_rows + i * k, out_scores + i * k));
  });
}

void score_all(const RowsView& rows, const float* q, Metric metric, float* out) {
  const SimilarityKernels& K = similarity_kernels();
  const PreparedQuery p = prepare(rows, q, metric);
  for (size_t r = 0; r < rows.n; r += kScanBlock) {
    const size_t cnt = std::min(kScanBlock, rows.n - r);
    score_block(K, rows, p, metric, r, cnt, out + r);
    if (metric == Metric::L2)
      for (size_t i = 0; i < cnt; ++i) out[r + i] = -out[r + i];
  }
}

}  // namespace ragfind::dense
