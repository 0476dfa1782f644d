// IVF batch search, grouped by list: every query picks its lists as the single search does
// (ivf_probe.hpp), the picks are inverted to list -> queries, and each list is read once per
// batch: a slice of its rows, small enough to stay in the L1/L2 cache, is scored against every
// query that probes the list before the next slice is loaded. Scores come from the same
// kernel calls on the same 4-row groups as the single search, and the top-k queue's result
// does not depend on the order rows are offered, so every query's answer equals
// ivf_search_one's (rows and scores, bit for bit).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <vector>

#include "ivf_probe.hpp"
#include "ragfind/common/parallel.hpp"
#include "ragfind/dense/ivf.hpp"
#include "ragfind/dense/similarity.hpp"
#include "scan.hpp"

namespace ragfind::dense {
namespace {

using detail::elem_bytes;
using detail::floor_of;
using detail::make_topk;
using detail::merge;
using detail::prepare;
using detail::PreparedQuery;
using detail::ProbeOrder;
using detail::push_block;
using detail::score_block;
using detail::TopK;
using detail::write_results;

// Queries searched together: past about 1,000 a list is shared by enough queries that a larger
// group saves little (bench/dense.md), while the per-query state grows with it.
constexpr size_t kQueryGroup = 2048;

// Bytes of a list slice scored against all of its queries before the next slice is read:
// well inside a 512 KB-2 MB L2, so the slice stays resident while its queries pass over it
// (16 KB, L1-sized, measured the same on 100k x 384).
constexpr size_t kSliceBytes = 128u << 10;

// Rows of a slice: a multiple of 4, so the f16/i8 kernels group rows in fours from the list's
// start exactly as the single search's 1024-row blocks do (lone rows only at the list's end).
size_t slice_rows(size_t row_bytes) {
  const size_t r = std::max<size_t>(4, kSliceBytes / std::max<size_t>(row_bytes, 1));
  return std::min<size_t>(detail::kScanBlock, r & ~size_t(3));
}

// Admitted rows per list (the mask's count over the list), counted on first use; threads may
// count the same list at once and store the same value.
class AdmittedCounts {
 public:
  AdmittedCounts(const IvfView& v, const uint8_t* allowed) : v_(v), allowed_(allowed), n_(allowed ? v.nlist : 0) {
    for (auto& c : n_) c.store(-1, std::memory_order_relaxed);
  }

  size_t operator()(size_t l) {
    const size_t len = static_cast<size_t>(v_.list_len[l]);
    if (!allowed_) return len;
    int64_t c = n_[l].load(std::memory_order_relaxed);
    if (c < 0) {
      const uint8_t* a = allowed_ + v_.list_start[l];
      size_t seen = 0;
      for (size_t r = 0; r < len; ++r) seen += a[r] != 0;
      c = static_cast<int64_t>(seen);
      n_[l].store(c, std::memory_order_relaxed);
    }
    return static_cast<size_t>(c);
  }

 private:
  const IvfView& v_;
  const uint8_t* allowed_;
  std::vector<std::atomic<int64_t>> n_;
};

// The lists query q scans, the single search's rule: the np best, then more in centroid order
// while fewer than k admitted rows were seen.
void pick_lists(const SimilarityKernels& K, const IvfView& v, const float* q, const SearchOptions& so, size_t np,
                AdmittedCounts& admitted, std::vector<uint32_t>& out) {
  ProbeOrder order(K, v, q, so.metric, np);
  out.clear();
  size_t total = 0;
  for (size_t i = 0; i < np; ++i) {
    out.push_back(order[i]);
    total += admitted(order[i]);
  }
  for (size_t i = np; total < so.k && i < v.nlist; ++i) {
    if (i >= order.sorted()) order.extend(std::max(2 * i, i + 1));
    out.push_back(order[i]);
    total += admitted(order[i]);
  }
}

// pick_lists for an IP query from approximate centroid scores `a` (the tile kernel, which sums
// in another order than ProbeOrder's kernel): every float sum of the d products lies within
// gamma * sum|q_j c_j| <= gamma * |q| |c| of the exact value, so two orders differ by at most
// `margin` and the np best lists by the single search's scores all score a >= (np-th best a) -
// 2 * margin. Only those candidates are scored again with ProbeOrder's kernel and ranked by its
// rule. Returns false (the caller runs pick_lists) when the np lists hold fewer than k
// admitted rows, where the single search goes on probing in centroid order.
bool pick_lists_from_tile(const SimilarityKernels& K, const IvfView& v, const float* q, const float* a, float margin,
                          const SearchOptions& so, size_t np, AdmittedCounts& admitted, std::vector<float>& scratch,
                          std::vector<uint32_t>& out) {
  scratch.assign(a, a + v.nlist);
  std::nth_element(scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(np - 1), scratch.end(),
                   std::greater<float>());
  const float cut = scratch[np - 1] - 2.f * margin;
  if (!std::isfinite(cut)) return false;
  out.clear();
  for (size_t l = 0; l < v.nlist; ++l)
    if (a[l] >= cut) out.push_back(static_cast<uint32_t>(l));
  scratch.resize(out.size());
  for (size_t i = 0; i < out.size(); ++i)
    K.dot_rows_f32(q, v.centroids + static_cast<size_t>(out[i]) * v.rows.d, 1, v.rows.d, &scratch[i]);
  std::vector<size_t> idx(out.size());
  std::iota(idx.begin(), idx.end(), size_t(0));
  const float* e = scratch.data();
  const uint32_t* l = out.data();
  std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(np), idx.end(),
                    [e, l](size_t x, size_t y) { return e[x] > e[y] || (e[x] == e[y] && l[x] < l[y]); });
  std::vector<uint32_t> best(np);
  size_t total = 0;
  for (size_t i = 0; i < np; ++i) {
    best[i] = out[idx[i]];
    total += admitted(best[i]);
  }
  out.swap(best);
  return total >= so.k;
}

// ivf_search_batch for one group of queries.
void search_group(const IvfView& v, const float* Q, size_t nq, const IvfOptions& opt, int64_t* out_rows,
                  float* out_scores, int64_t* out_counts) {
  const SearchOptions& so = opt.search;
  const size_t k = so.k;
  for (size_t i = 0; i < nq * k; ++i) {
    out_rows[i] = -1;
    out_scores[i] = std::numeric_limits<float>::quiet_NaN();
  }
  for (size_t i = 0; i < nq; ++i) out_counts[i] = 0;
  if (nq == 0 || k == 0 || v.nlist == 0) return;
  const SimilarityKernels& K = similarity_kernels();
  const size_t d = v.rows.d;
  const bool rerank = v.exact != nullptr && v.rows.storage != Storage::F32 && opt.rerank > 0;
  const size_t pool = rerank ? k * opt.rerank : k;
  const bool pool_floor = so.has_threshold && !rerank;  // with re-scoring: after the pool
  const float floor = floor_of(so);
  const size_t np = std::max<size_t>(1, std::min(opt.nprobe, v.nlist));
  const int hw = so.threads > 0 ? so.threads : common::hardware_threads();

  // 1. Each query's lists and its prepared form, blocks of queries split over the workers. For
  // IP the centroids are scored by the register-blocked tile kernel (centroids read once per
  // block), then the few near the cut again as the single search scores them.
  AdmittedCounts admitted(v, so.allowed);
  std::vector<std::vector<uint32_t>> lists(nq);
  std::vector<PreparedQuery> prepared(nq);
  // A few queries gain nothing from the tile and would pay for the centroid norms.
  const bool tiled = so.metric == Metric::IP && np < v.nlist && nq >= 8;
  const double unit = std::ldexp(1.0, -24), gamma = (d + 1) * unit / (1.0 - (d + 1) * unit);
  double cmax = 0.0;  // the largest centroid norm, from float sums within gamma of the exact ones
  if (tiled) {
    for (size_t l = 0; l < v.nlist; ++l) {
      const float* c = v.centroids + l * d;
      cmax = std::max(cmax, static_cast<double>(K.dot_f32(c, c, d)));
    }
    cmax = std::sqrt(cmax / (1.0 - gamma));
  }
  constexpr size_t kQueryBlock = 16;
  common::parallel_for((nq + kQueryBlock - 1) / kQueryBlock, hw, [&](size_t b, int) {
    const size_t q0 = b * kQueryBlock, m = std::min(kQueryBlock, nq - q0);
    std::vector<float> a(tiled ? m * v.nlist : 0), scratch;
    if (tiled) K.dot_tile_f32(Q + q0 * d, m, v.centroids, v.nlist, d, a.data(), v.nlist);
    for (size_t i = q0; i < q0 + m; ++i) {
      const float* q = Q + i * d;
      prepared[i] = prepare(v.rows, q, so.metric);
      bool done = false;
      if (tiled) {
        double qn = 0.0;
        for (size_t j = 0; j < d; ++j) qn += double(q[j]) * q[j];
        // Twice the bound on |tile score - single score|: headroom for the norms' own rounding.
        const auto margin = static_cast<float>(4.0 * gamma * std::sqrt(qn) * cmax);
        done =
            pick_lists_from_tile(K, v, q, a.data() + (i - q0) * v.nlist, margin, so, np, admitted, scratch, lists[i]);
      }
      if (!done) pick_lists(K, v, q, so, np, admitted, lists[i]);
    }
  });

  // 2. list -> the queries probing it (ascending), as offsets into one array.
  std::vector<size_t> offs(v.nlist + 1, 0);
  for (const auto& ls : lists)
    for (uint32_t l : ls) ++offs[l + 1];
  for (size_t l = 0; l < v.nlist; ++l) offs[l + 1] += offs[l];
  std::vector<uint32_t> who(offs[v.nlist]);
  {
    std::vector<size_t> fill(offs.begin(), offs.end() - 1);
    for (size_t i = 0; i < nq; ++i)
      for (uint32_t l : lists[i]) who[fill[l]++] = static_cast<uint32_t>(i);
  }
  std::vector<uint32_t> work;  // the probed lists, the most work first (even shares)
  size_t bytes = 0;
  for (size_t l = 0; l < v.nlist; ++l) {
    if (offs[l + 1] == offs[l] || v.list_len[l] == 0) continue;
    work.push_back(static_cast<uint32_t>(l));
    bytes += static_cast<size_t>(v.list_len[l]) * (offs[l + 1] - offs[l]);
  }
  bytes *= d * elem_bytes(v.rows.storage);
  int nt = so.threads > 0 ? so.threads : auto_threads(bytes);
  nt = static_cast<int>(std::min<size_t>(static_cast<size_t>(std::max(nt, 1)), work.size()));
  if (nt > 1) {
    std::stable_sort(work.begin(), work.end(), [&](uint32_t a, uint32_t b) {
      return v.list_len[a] * static_cast<int64_t>(offs[a + 1] - offs[a]) >
             v.list_len[b] * static_cast<int64_t>(offs[b + 1] - offs[b]);
    });
  }

  // 3. Each list read once: slice by slice, every probing query scores the slice into its own
  // queue (one queue per query and worker; merged after, which the queue's contract allows).
  const size_t slice = slice_rows(d * elem_bytes(v.rows.storage));
  std::vector<std::vector<TopK>> tops(static_cast<size_t>(std::max(nt, 1)));
  common::parallel_for(work.size(), nt, [&](size_t w, int worker) {
    std::vector<TopK>& mine = tops[static_cast<size_t>(worker)];
    if (mine.empty()) mine.assign(nq, make_topk(pool, pool_floor, floor));
    const size_t l = work[w];
    const size_t start = static_cast<size_t>(v.list_start[l]), end = start + static_cast<size_t>(v.list_len[l]);
    float buf[detail::kScanBlock];
    for (size_t r = start; r < end; r += slice) {
      const size_t cnt = std::min(slice, end - r);
      for (size_t j = offs[l]; j < offs[l + 1]; ++j) {
        const uint32_t i = who[j];
        score_block(K, v.rows, prepared[i], so.metric, r, cnt, buf);
        push_block(mine[i], buf, cnt, static_cast<int64_t>(r), so.allowed);
      }
    }
  });

  // 4. Per query: the workers' queues merged, the pool re-scored, the results written.
  std::vector<TopK*> used;
  for (auto& t : tops)
    if (!t.empty()) used.push_back(t.data());
  common::parallel_for(nq, hw, [&](size_t i, int) {
    TopK empty = make_topk(pool, pool_floor, floor);
    TopK& top = used.empty() ? empty : used[0][i];
    for (size_t t = 1; t < used.size(); ++t) merge(top, used[t][i]);
    int64_t* pr = out_rows + i * k;
    float* ps = out_scores + i * k;
    const size_t cnt =
        rerank ? detail::rescore_pool(K, v, Q + i * d, so, top, pr, ps) : write_results(top, so.metric, k, pr, ps);
    out_counts[i] = static_cast<int64_t>(cnt);
  });
}

}  // namespace

void ivf_search_batch(const IvfView& v, const float* Q, size_t nq, const IvfOptions& opt, int64_t* out_rows,
                      float* out_scores, int64_t* out_counts) {
  // Groups of queries: each list is read once per group, and what a query holds meanwhile (its
  // queue, picks, prepared form) stays bounded for any batch size.
  const size_t k = opt.search.k, d = v.rows.d;
  for (size_t q0 = 0; q0 < nq; q0 += kQueryGroup)
    search_group(v, Q + q0 * d, std::min(kQueryGroup, nq - q0), opt, out_rows + q0 * k, out_scores + q0 * k,
                 out_counts + q0);
}

}  // namespace ragfind::dense
