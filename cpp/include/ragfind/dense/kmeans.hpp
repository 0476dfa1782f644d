// k-means for the IVF coarse quantiser: sampled init, Lloyd iterations whose assignment step is
// the nearest-centroid kernel (ragfind/dense/nearest.hpp), empty-cluster repair by splitting the
// largest cluster. Deterministic for a given seed: the same centroids for every thread count and
// SIMD level (the kernel's scores are bit-identical across levels). Plain C++.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ragfind/dense/exact_search.hpp"

namespace ragfind::dense {

/// out_list[i] = the centroid nearest row i of X (IP: largest inner product; L2: smallest
/// squared distance; ties to the lower centroid). X is n x d, C is nc x d, row-major float32.
void assign_nearest(const float* X, size_t n, size_t d, const float* C, size_t nc, Metric metric, int threads,
                    int64_t* out_list);

struct KmeansResult {
  /// faiss's imbalance factor nc * sum(size^2) / n^2 of the last assignment (1 = perfectly even).
  double imbalance = 1.0;
  /// Empty clusters repaired (over all iterations).
  size_t splits = 0;
};

/// Trains nc centroids (written to out_centroids, nc x d) on the n rows of X (n >= nc >= 1).
/// IP trains spherical k-means (unit-norm centroids: the data are cosine/IP embeddings); L2
/// plain Lloyd. `iters` Lloyd iterations after an init of nc distinct rows drawn with `seed`.
KmeansResult train_kmeans(const float* X, size_t n, size_t d, size_t nc, Metric metric, int iters, uint64_t seed,
                          int threads, float* out_centroids);

}  // namespace ragfind::dense
