// IVF search: centroid scores -> probe order -> fused scan + top-k over each probed list (the
// exact scan's score_block and heap, scan.hpp) -> optional float32 re-scoring of the pool.
#include "ragfind/dense/ivf.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

#include "ivf_probe.hpp"
#include "ragfind/common/parallel.hpp"
#include "ragfind/dense/similarity.hpp"
#include "scan.hpp"

namespace ragfind::dense {
namespace {

using detail::elem_bytes;
using detail::floor_of;
using detail::kScanBlock;
using detail::prepare;
using detail::ProbeOrder;
using detail::PreparedQuery;
using detail::score_block;
using detail::make_topk;
using detail::merge;
using detail::push_block;
using detail::TopK;
using detail::write_results;

// Scores list l into top; returns how many of its rows the admission mask lets through.
size_t scan_list(const SimilarityKernels& K, const IvfView& v, const PreparedQuery& p, const SearchOptions& so,
                 size_t l, TopK& top) {
  const size_t start = static_cast<size_t>(v.list_start[l]), len = static_cast<size_t>(v.list_len[l]);
  float buf[kScanBlock];
  for (size_t r = start; r < start + len; r += kScanBlock) {
    const size_t cnt = std::min(kScanBlock, start + len - r);
    score_block(K, v.rows, p, so.metric, r, cnt, buf);
    push_block(top, buf, cnt, static_cast<int64_t>(r), so.allowed);
  }
  if (!so.allowed) return len;
  size_t seen = 0;
  for (size_t r = start; r < start + len; ++r) seen += so.allowed[r] != 0;
  return seen;
}

}  // namespace

size_t ivf_search_one(const IvfView& v, const float* q, const IvfOptions& opt, int64_t* out_rows, float* out_scores) {
  const SearchOptions& so = opt.search;
  if (so.k == 0 || v.nlist == 0) return 0;
  const SimilarityKernels& K = similarity_kernels();
  const bool rerank = v.exact != nullptr && v.rows.storage != Storage::F32 && opt.rerank > 0;
  const size_t pool = rerank ? so.k * opt.rerank : so.k;
  // With re-scoring the threshold applies to the exact scores, after the pool.
  const bool pool_floor = so.has_threshold && !rerank;
  const float floor = floor_of(so);
  const size_t np = std::max<size_t>(1, std::min(opt.nprobe, v.nlist));
  ProbeOrder order(K, v, q, so.metric, np);
  const PreparedQuery p = prepare(v.rows, q, so.metric);

  size_t bytes = 0;
  for (size_t i = 0; i < np; ++i) bytes += static_cast<size_t>(v.list_len[order[i]]);
  bytes *= v.rows.d * elem_bytes(v.rows.storage);
  int nt = so.threads > 0 ? so.threads : auto_threads(bytes);
  nt = static_cast<int>(std::min<size_t>(static_cast<size_t>(std::max(nt, 1)), np));
  std::vector<TopK> tops(static_cast<size_t>(nt), make_topk(pool, pool_floor, floor));
  std::vector<size_t> seen(static_cast<size_t>(nt), 0);
  if (nt == 1) {
    for (size_t i = 0; i < np; ++i) seen[0] += scan_list(K, v, p, so, order[i], tops[0]);
  } else {
    // Lists dealt round-robin: neighbouring probes have similar sizes, so shares even out.
    common::parallel_for(static_cast<size_t>(nt), nt, [&](size_t t, int) {
      for (size_t i = t; i < np; i += static_cast<size_t>(nt)) seen[t] += scan_list(K, v, p, so, order[i], tops[t]);
    });
    for (int t = 1; t < nt; ++t) merge(tops[0], tops[static_cast<size_t>(t)]);
  }
  size_t total = std::accumulate(seen.begin(), seen.end(), size_t(0));
  // Too few admitted rows in the probed lists (a filter, deletes, tiny lists): keep probing
  // in centroid order, so a query returns min(k, admitted rows) like an exact search.
  for (size_t i = np; total < so.k && i < v.nlist; ++i) {
    if (i >= order.sorted()) order.extend(std::max(2 * i, i + 1));
    total += scan_list(K, v, p, so, order[i], tops[0]);
  }
  if (!rerank) return write_results(tops[0], so.metric, so.k, out_rows, out_scores);
  return detail::rescore_pool(K, v, q, so, tops[0], out_rows, out_scores);
}

}  // namespace ragfind::dense
