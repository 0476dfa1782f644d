// A cheap first pass over a query's IVF list scores. The centroids are kept a second time as
// int8 rows (a scale each, a quarter of the bytes: they stay in L2 where the float32 ones stream
// from L3), every list is scored from them, and only the lists whose error bound still reaches
// the np-th best are scored again in float32 with the kernel a full scan uses. The lists chosen
// and their scores are therefore exactly those of a full float32 scan.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace ragfind::dense {

/// The int8 form of nlist centroids of d dimensions, and what the error bound needs.
struct CoarseCentroids {
  size_t nlist = 0, d = 0;
  std::vector<int8_t> codes;  // nlist x d: c ~ scale * code
  std::vector<float> scale;   // per centroid
  std::vector<float> err;     // |c - scale * code|_2, rounded up
  std::vector<float> coded;   // |scale * code|_2, rounded up
  std::vector<float> norm;    // |c|_2, rounded up
  std::vector<float> sqnorm;  // |c|^2 (l2 scores)
  float slack = 0;            // relative rounding slack (coarse.cpp)
  std::vector<float> ebound;  // err + slack * norm: the bound is |q| ebound + |e_q| coded
};

CoarseCentroids make_coarse_centroids(const float* C, size_t nlist, size_t d);

/// True when cc was made from C (shape, and the first and last rows within their bounds): a
/// stale form would pick wrong lists without an error, so a search checks this first.
bool coarse_matches(const CoarseCentroids& cc, const float* C, size_t nlist, size_t d);

/// Per-thread scratch of best_lists.
struct CoarseScratch {
  std::vector<int16_t> q16;
  std::vector<float> approx, bound, heap;
  std::vector<std::pair<float, int64_t>> cand;
};

/// The np best of the nlist lists of query q into out as (-score, list), best first (ties to
/// the lower list): score q . c, or with l2 -|q - c|^2, by similarity_kernels().dot_f32 /
/// l2sq_f32 on every centroid. Requires 1 <= np <= nlist.
void best_lists_full(const float* C, size_t nlist, size_t d, const float* q, size_t np, bool l2,
                     std::vector<std::pair<float, int64_t>>& out);

/// best_lists_full from the int8 first pass: the same lists and scores, reading a quarter of
/// the bytes.
void best_lists(const CoarseCentroids& cc, const float* C, const float* q, size_t np, bool l2, CoarseScratch& w,
                std::vector<std::pair<float, int64_t>>& out);

}  // namespace ragfind::dense
