// Scalar reference for the nearest-centroid kernel, and the packing every level shares: one
// centroid per panel (plain rows), each score a std::fma chain in dimension order, exactly the
// sums the SIMD levels form lane by lane.
#include <cmath>
#include <limits>
#include <stdexcept>

#include "kernels.hpp"

namespace ragfind::dense {

CentroidPanels pack_centroids(const NearestKernels& K, const float* C, size_t nc, size_t d, const float* bias) {
  if (K.lanes == 0 || K.width % K.lanes != 0) throw std::logic_error("pack_centroids: bad panel shape");
  if (nc > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    throw std::invalid_argument("pack_centroids: more than 2^31 - 1 centroids");
  CentroidPanels P;
  P.nc = nc;
  P.d = d;
  P.lanes = K.lanes;
  P.width = K.width;
  const size_t padded = (nc + K.lanes - 1) / K.lanes * K.lanes;
  P.data.assign(padded * d, 0.f);
  P.bias.assign(padded, -std::numeric_limits<float>::infinity());
  for (size_t c = 0; c < nc; ++c) P.bias[c] = bias ? bias[c] : 0.f;
  for (size_t c0 = 0; c0 < nc; c0 += K.width) {
    const size_t wp = std::min(K.width, padded - c0);
    float* pan = P.data.data() + c0 * d;
    for (size_t j = 0; j < wp && c0 + j < nc; ++j) {
      const float* c = C + (c0 + j) * d;
      for (size_t k = 0; k < d; ++k) pan[k * wp + j] = c[k];
    }
  }
  return P;
}

namespace kernels {
namespace {

void nearest_f32(const float* X, size_t n, const CentroidPanels& P, int64_t* out) {
  const size_t d = P.d;
  for (size_t i = 0; i < n; ++i) {
    const float* x = X + i * d;
    float best = -std::numeric_limits<float>::infinity();
    int64_t at = 0;
    for (size_t c = 0; c < P.nc; ++c) {
      const float* row = P.data.data() + c * d;  // width 1: a panel is one centroid's row
      float acc = 0.f;
      for (size_t k = 0; k < d; ++k) acc = std::fma(x[k], row[k], acc);
      const float s = acc + P.bias[c];
      if (s > best) {  // strict: ties keep the lower centroid; NaN never wins
        best = s;
        at = static_cast<int64_t>(c);
      }
    }
    out[i] = at;
  }
}

}  // namespace

extern const NearestKernels nearest_scalar = {"scalar", 1, 1, nearest_f32};

}  // namespace kernels
}  // namespace ragfind::dense
