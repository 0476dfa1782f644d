// What the IVF single-query and batch searches share, so a batch answers exactly as the single
// search: the probe order of a query's lists and the float32 re-scoring of a quantised pool.
// Internal to cpp/src/dense (not installed).
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "ragfind/dense/ivf.hpp"
#include "ragfind/dense/similarity.hpp"
#include "scan.hpp"

namespace ragfind::dense::detail {

/// The lists in probe order (best centroid first), sorted lazily: only the first `sorted`
/// entries are in order, the rest are the remaining lists in any order.
class ProbeOrder {
 public:
  ProbeOrder(const SimilarityKernels& K, const IvfView& v, const float* q, Metric metric, size_t first)
      : cs_(v.nlist), order_(v.nlist) {
    if (metric == Metric::IP) {
      K.dot_rows_f32(q, v.centroids, v.nlist, v.rows.d, cs_.data());
    } else {
      K.l2_rows_f32(q, v.centroids, v.nlist, v.rows.d, cs_.data());
      for (float& s : cs_) s = -s;
    }
    std::iota(order_.begin(), order_.end(), uint32_t(0));
    extend(first);
  }

  /// Makes the first m entries the m best lists, in order.
  void extend(size_t m) {
    m = std::min(m, order_.size());
    if (m <= sorted_) return;
    const float* cs = cs_.data();
    std::partial_sort(order_.begin() + static_cast<std::ptrdiff_t>(sorted_),
                      order_.begin() + static_cast<std::ptrdiff_t>(m), order_.end(),
                      [cs](uint32_t a, uint32_t b) { return cs[a] > cs[b] || (cs[a] == cs[b] && a < b); });
    sorted_ = m;
  }

  size_t sorted() const { return sorted_; }
  uint32_t operator[](size_t i) const { return order_[i]; }

 private:
  std::vector<float> cs_;
  std::vector<uint32_t> order_;
  size_t sorted_ = 0;
};

/// Writes the k best of `pool` (internal scores of quantised rows) re-scored exactly from
/// v.exact with the single-row call of the exact scan's kernel, so a position's score equals
/// the one an exact float32 scan gives it; the threshold applies to the exact scores.
inline size_t rescore_pool(const SimilarityKernels& K, const IvfView& v, const float* q, const SearchOptions& so,
                           TopK& pool, int64_t* out_rows, float* out_scores) {
  TopK fin = make_topk(so.k, so.has_threshold, floor_of(so));
  const size_t d = v.rows.d;
  std::vector<TopK::Entry> pooled;
  pool.finalize(pooled);
  for (const auto& c : pooled) {
    const float* x = v.exact + static_cast<size_t>(c.doc) * d;
    float s;
    if (so.metric == Metric::IP) {
      K.dot_rows_f32(q, x, 1, d, &s);
    } else {
      K.l2_rows_f32(q, x, 1, d, &s);
      s = -s;
    }
    fin.insert(s, c.doc);
  }
  return write_results(fin, so.metric, so.k, out_rows, out_scores);
}

}  // namespace ragfind::dense::detail
