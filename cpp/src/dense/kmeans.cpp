// k-means for the IVF coarse quantiser.
//
// Assignment is the cost: n x nc dot products, done by the nearest-centroid kernel (a blocked
// multiply-add tile with a fused running argmax, ragfind/dense/nearest.hpp); L2 uses
// argmax(x.c - |c|^2 / 2), the same ranking as the smallest distance, so one kernel serves both.
#include "ragfind/dense/kmeans.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "ragfind/common/parallel.hpp"
#include "ragfind/dense/nearest.hpp"

namespace ragfind::dense {
namespace {

// Rows per parallel work item (the kernel blocks further inside).
constexpr size_t kRowBlock = 512;
// Dimensions per worker's share of the centroid sums (two cache lines of each row).
constexpr size_t kDimSlice = 32;

void normalise(float* c, size_t d) {
  double s = 0.0;
  for (size_t j = 0; j < d; ++j) s += double(c[j]) * c[j];
  if (s > 0) {
    const float inv = static_cast<float>(1.0 / std::sqrt(s));
    for (size_t j = 0; j < d; ++j) c[j] *= inv;
  }
}

// faiss's imbalance factor of the cluster sizes.
double imbalance(const std::vector<size_t>& counts, size_t n) {
  double sq = 0.0;
  for (size_t c : counts) sq += double(c) * double(c);
  return sq * static_cast<double>(counts.size()) / (double(n) * double(n));
}

}  // namespace

void assign_nearest(const float* X, size_t n, size_t d, const float* C, size_t nc, Metric metric, int threads,
                    int64_t* out_list) {
  if (n == 0) return;
  if (nc == 0) throw std::invalid_argument("assign_nearest: no centroids");
  const NearestKernels& K = nearest_kernels();
  std::vector<float> bias(nc, 0.f);  // L2: -|c|^2 / 2, summed in double: the same at every level
  if (metric == Metric::L2)
    for (size_t c = 0; c < nc; ++c) {
      double s = 0.0;
      for (size_t j = 0; j < d; ++j) s += double(C[c * d + j]) * C[c * d + j];
      bias[c] = static_cast<float>(-0.5 * s);
    }
  const CentroidPanels P = pack_centroids(K, C, nc, d, bias.data());
  const size_t nblocks = (n + kRowBlock - 1) / kRowBlock;
  const int nt = common::resolve_threads(threads, nblocks);
  common::parallel_for(nblocks, nt, [&](size_t b, int) {
    const size_t r0 = b * kRowBlock;
    K.nearest_f32(X + r0 * d, std::min(kRowBlock, n - r0), P, out_list + r0);
  });
}

KmeansResult train_kmeans(const float* X, size_t n, size_t d, size_t nc, Metric metric, int iters, uint64_t seed,
                          int threads, float* out_centroids) {
  if (nc == 0 || n < nc) throw std::invalid_argument("train_kmeans: need n >= nc >= 1");
  KmeansResult res;
  // Init: nc distinct rows (a partial Fisher-Yates shuffle with a fixed generator).
  std::mt19937_64 rng(seed);
  std::vector<size_t> perm(n);
  for (size_t i = 0; i < n; ++i) perm[i] = i;
  for (size_t i = 0; i < nc; ++i) {
    std::uniform_int_distribution<size_t> pick(i, n - 1);
    std::swap(perm[i], perm[pick(rng)]);
  }
  float* C = out_centroids;
  for (size_t c = 0; c < nc; ++c) std::copy(X + perm[c] * d, X + perm[c] * d + d, C + c * d);
  if (metric == Metric::IP)
    for (size_t c = 0; c < nc; ++c) normalise(C + c * d, d);
  std::vector<int64_t> assign(n);
  std::vector<double> sums(nc * d);
  std::vector<size_t> counts(nc);
  const size_t nslices = (d + kDimSlice - 1) / kDimSlice;
  for (int it = 0; it < iters; ++it) {
    assign_nearest(X, n, d, C, nc, metric, threads, assign.data());
    std::fill(counts.begin(), counts.end(), size_t(0));
    for (size_t i = 0; i < n; ++i) ++counts[static_cast<size_t>(assign[i])];
    // Centroid sums split by dimension across the workers: each sum still adds its rows in
    // row order, so the result does not depend on the thread count.
    common::parallel_for(nslices, common::resolve_threads(threads, nslices), [&](size_t b, int) {
      const size_t j0 = b * kDimSlice, j1 = std::min(d, j0 + kDimSlice);
      for (size_t c = 0; c < nc; ++c) std::fill(sums.data() + c * d + j0, sums.data() + c * d + j1, 0.0);
      for (size_t i = 0; i < n; ++i) {
        double* s = sums.data() + static_cast<size_t>(assign[i]) * d;
        const float* x = X + i * d;
        for (size_t j = j0; j < j1; ++j) s[j] += x[j];
      }
    });
    for (size_t c = 0; c < nc; ++c) {
      if (counts[c] == 0) continue;
      const double inv = 1.0 / static_cast<double>(counts[c]);
      for (size_t j = 0; j < d; ++j) C[c * d + j] = static_cast<float>(sums[c * d + j] * inv);
    }
    res.imbalance = imbalance(counts, n);
    // Empty clusters: split the largest in two (faiss's repair), a symmetric nudge apart.
    for (size_t c = 0; c < nc; ++c) {
      if (counts[c] != 0) continue;
      const size_t big = static_cast<size_t>(std::max_element(counts.begin(), counts.end()) - counts.begin());
      if (counts[big] < 2) break;
      constexpr float kEps = 1.f / 1024;
      for (size_t j = 0; j < d; ++j) {
        const float v = C[big * d + j];
        const float up = v * (1 + kEps), down = v * (1 - kEps);
        C[c * d + j] = j % 2 ? up : down;
        C[big * d + j] = j % 2 ? down : up;
      }
      counts[c] = counts[big] / 2;
      counts[big] -= counts[c];
      ++res.splits;
    }
    if (metric == Metric::IP)
      for (size_t c = 0; c < nc; ++c) normalise(C + c * d, d);
  }
  if (iters <= 0) {
    assign_nearest(X, n, d, C, nc, metric, threads, assign.data());
    std::fill(counts.begin(), counts.end(), size_t(0));
    for (size_t i = 0; i < n; ++i) ++counts[static_cast<size_t>(assign[i])];
  }
  res.imbalance = imbalance(counts, n);
  return res;
}

}  // namespace ragfind::dense
