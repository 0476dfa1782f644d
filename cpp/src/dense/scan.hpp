// What the exact and IVF scans share: the top-k queue helpers, a query prepared for one storage
// format, and the scoring of a block of rows. Internal to cpp/src/dense (not installed).
//
// Internally every score is "higher is better" (L2 distances are negated) so one queue serves
// both metrics; results are converted back on output.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "ragfind/common/topk_queue.hpp"
#include "ragfind/dense/exact_search.hpp"
#include "ragfind/dense/similarity.hpp"

namespace ragfind::dense::detail {

constexpr size_t kScanBlock = 1024;  // rows scored per kernel call on the single-query path

inline size_t elem_bytes(Storage s) { return s == Storage::F32 ? 4 : s == Storage::F16 ? 2 : 1; }

/// The top-k of a scan: the one queue (common/topk_queue.hpp) over int64 rows.
using TopK = common::BasicTopKQueue<int64_t>;

/// A queue for the k best rows, only those scoring >= floor when has_floor (the queue's own
/// floor is exclusive: it gets the next float below).
inline TopK make_topk(size_t k, bool has_floor, float floor) {
  TopK top(k);
  if (has_floor && floor > -std::numeric_limits<float>::infinity())
    top.set_floor(std::nextafter(floor, -std::numeric_limits<float>::infinity()));
  return top;
}

/// Offers a block of scores for rows row0 .. row0 + cnt, honouring the admission mask.
inline void push_block(TopK& top, const float* s, size_t cnt, int64_t row0, const uint8_t* allowed) {
  if (top.k() == 0) return;
  float a = top.threshold();
  for (size_t i = 0; i < cnt; ++i) {
    if (s[i] < a) continue;
    if (allowed && !allowed[row0 + static_cast<int64_t>(i)]) continue;
    top.insert(s[i], row0 + static_cast<int64_t>(i));
    a = top.threshold();
  }
}

/// Offers every entry of `from` to `into`.
inline void merge(TopK& into, const TopK& from) {
  if (into.k() == 0) return;
  for (const TopK::Entry& e : from.entries()) into.insert(e.score, e.doc);
}

/// A query prepared for one storage format.
struct PreparedQuery {
  const float* q = nullptr;
  float sqnorm = 0.f;        // |q|^2 (I8 + L2)
  std::vector<int16_t> q16;  // I8: int16 quantised query
  float qscale = 0.f;        // I8: q ~= qscale * q16
};

inline PreparedQuery prepare(const RowsView& rows, const float* q, Metric metric) {
  PreparedQuery p;
  p.q = q;
  if (rows.storage == Storage::I8) {
    float mx = 0.f;
    double sq = 0.0;
    for (size_t j = 0; j < rows.d; ++j) {
      mx = std::max(mx, std::fabs(q[j]));
      sq += double(q[j]) * q[j];
    }
    p.sqnorm = static_cast<float>(sq);
    p.q16.assign(rows.d, 0);
    p.qscale = mx > 0.f ? mx / 16383.f : 1.f;
    const float inv = mx > 0.f ? 16383.f / mx : 0.f;
    for (size_t j = 0; j < rows.d; ++j) p.q16[j] = static_cast<int16_t>(std::lrint(q[j] * inv));
  }
  return p;
}

/// Internal ("higher is better") scores of rows [r0, r0 + cnt) into out.
inline void score_block(const SimilarityKernels& K, const RowsView& rows, const PreparedQuery& p, Metric metric,
                        size_t r0, size_t cnt, float* out) {
  const size_t d = rows.d;
  switch (rows.storage) {
    case Storage::F32: {
      const float* X = static_cast<const float*>(rows.data) + r0 * d;
      if (metric == Metric::IP) {
        K.dot_rows_f32(p.q, X, cnt, d, out);
      } else {
        K.l2_rows_f32(p.q, X, cnt, d, out);
        for (size_t i = 0; i < cnt; ++i) out[i] = -out[i];
      }
      break;
    }
    case Storage::F16: {
      const uint16_t* X = static_cast<const uint16_t*>(rows.data) + r0 * d;
      if (metric == Metric::IP) {
        K.dot_rows_f16(p.q, X, cnt, d, out);
      } else {
        K.l2_rows_f16(p.q, X, cnt, d, out);
        for (size_t i = 0; i < cnt; ++i) out[i] = -out[i];
      }
      break;
    }
    case Storage::I8: {
      const int8_t* X = static_cast<const int8_t*>(rows.data) + r0 * d;
      K.dot_rows_i8(p.q16.data(), X, cnt, d, out);
      const float* sc = rows.scales + r0;
      if (metric == Metric::IP) {
        for (size_t i = 0; i < cnt; ++i) out[i] *= p.qscale * sc[i];
      } else {
        const float* sn = rows.sqnorms + r0;
        for (size_t i = 0; i < cnt; ++i) out[i] = -(p.sqnorm + sn[i] - 2.f * out[i] * p.qscale * sc[i]);
      }
      break;
    }
  }
}

inline float floor_of(const SearchOptions& opt) { return opt.metric == Metric::L2 ? -opt.threshold : opt.threshold; }

/// Writes top's entries best first (emptying it); returns how many.
inline size_t write_results(TopK& top, Metric metric, size_t k, int64_t* out_rows, float* out_scores) {
  std::vector<TopK::Entry> v;
  top.finalize(v);
  const size_t cnt = std::min(k, v.size());
  for (size_t i = 0; i < cnt; ++i) {
    out_rows[i] = v[i].doc;
    out_scores[i] = metric == Metric::L2 ? -v[i].score : v[i].score;
  }
  return cnt;
}

}  // namespace ragfind::dense::detail
