// Internal: the per-ISA nearest-centroid tables (ragfind/dense/nearest.hpp), defined in
// kernels/nearest/<isa>.cpp, and the blocked loop nest the SIMD levels share.
//
// The loop nest, per block of rows (about 256 KB of them): for each centroid panel, for each slice
// of kc dimensions, for each group of MR rows, one micro-kernel call keeps an MR x NV tile of
// vector accumulators in registers (NV vectors of `lanes` centroids), broadcasting one row value
// per multiply-add against NV panel loads. The panel (or its kc slice) stays in L1/L2 while the
// row groups stream past it; when d > kc the tile is parked in a small buffer between slices,
// which keeps each score's multiply-add chain in dimension order. After the last slice the tile
// (plus bias) updates a per-row, per-lane best score and centroid (strict >: lanes see centroids
// in increasing order, so the first maximum stays); a final pass reduces the lanes.
//
// Templates over an ISA's Ops struct, which each ISA file defines in an anonymous namespace: the
// instantiations have internal linkage, so no two files' builds can be merged by the linker.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

#include "ragfind/dense/nearest.hpp"

namespace ragfind::dense::kernels {

extern const NearestKernels nearest_scalar;
#ifdef RAGFIND_HAVE_AVX2
extern const NearestKernels nearest_avx2;
#endif
#ifdef RAGFIND_HAVE_AVX512
extern const NearestKernels nearest_avx512;
#endif
#ifdef RAGFIND_HAVE_NEON
extern const NearestKernels nearest_neon;
#endif

namespace nearest_detail {

// Ops: V (float vector), I (int32 vector), L lanes, MR rows, NV vectors per panel, and
// zero/load/store/bcast/fma/add/iload/istore/index/update (see the ISA files).

template <class O, int MR, int NV>
inline void micro(const float* x, size_t ldx, size_t kc, const float* pan, size_t wp, float* part, size_t ldp,
                  bool first, bool last, const float* bias, int32_t base, float* bv, int32_t* bi) {
  constexpr size_t L = O::L;
  typename O::V acc[MR][NV];
  if (first) {
    for (int r = 0; r < MR; ++r)
      for (int v = 0; v < NV; ++v) acc[r][v] = O::zero();
  } else {
    for (int r = 0; r < MR; ++r)
      for (int v = 0; v < NV; ++v) acc[r][v] = O::load(part + r * ldp + v * L);
  }
  for (size_t k = 0; k < kc; ++k) {
    const float* pk = pan + k * wp;
    typename O::V c[NV];
    for (int v = 0; v < NV; ++v) c[v] = O::load(pk + v * L);
    for (int r = 0; r < MR; ++r) {
      const typename O::V xb = O::bcast(x + r * ldx + k);
      for (int v = 0; v < NV; ++v) acc[r][v] = O::fma(xb, c[v], acc[r][v]);
    }
  }
  if (!last) {
    for (int r = 0; r < MR; ++r)
      for (int v = 0; v < NV; ++v) O::store(part + r * ldp + v * L, acc[r][v]);
    return;
  }
  for (int r = 0; r < MR; ++r) {
    typename O::V b = O::load(bv + r * L);
    typename O::I j = O::iload(bi + r * L);
    for (int v = 0; v < NV; ++v)
      O::update(O::add(acc[r][v], O::load(bias + v * L)), O::index(base + static_cast<int32_t>(v * L)), b, j);
    O::store(bv + r * L, b);
    O::istore(bi + r * L, j);
  }
}

// micro<O, mr, NV> for a run-time mr in [1, M].
template <class O, int NV, int M>
inline void micro_rows(int mr, const float* x, size_t ldx, size_t kc, const float* pan, size_t wp, float* part,
                       size_t ldp, bool first, bool last, const float* bias, int32_t base, float* bv, int32_t* bi) {
  if constexpr (M >= 1) {
    if (mr == M) micro<O, M, NV>(x, ldx, kc, pan, wp, part, ldp, first, last, bias, base, bv, bi);
    else micro_rows<O, NV, M - 1>(mr, x, ldx, kc, pan, wp, part, ldp, first, last, bias, base, bv, bi);
  }
}

// micro_rows for a run-time nv in [1, N].
template <class O, int N>
inline void micro_tile(int nv, int mr, const float* x, size_t ldx, size_t kc, const float* pan, size_t wp, float* part,
                       size_t ldp, bool first, bool last, const float* bias, int32_t base, float* bv, int32_t* bi) {
  if constexpr (N >= 1) {
    if (nv == N) micro_rows<O, N, O::MR>(mr, x, ldx, kc, pan, wp, part, ldp, first, last, bias, base, bv, bi);
    else micro_tile<O, N - 1>(nv, mr, x, ldx, kc, pan, wp, part, ldp, first, last, bias, base, bv, bi);
  }
}

template <class O>
void nearest_blocked(const float* X, size_t n, const CentroidPanels& P, int64_t* out) {
  constexpr size_t L = O::L, MR = O::MR, W = O::L * O::NV;
  const size_t d = P.d, nc = P.nc;
  if (n == 0 || nc == 0) return;
  if (P.width != W || P.lanes != L) throw std::logic_error("nearest_f32: centroids packed for another level");
  const size_t kc = d <= 512 ? d : 256;
  // Row blocks of at most ~256 KB, evened out so the last is not a sliver that reloads every
  // panel for a few rows.
  const size_t mc_max = std::max(MR, std::min<size_t>(256, (65536 / std::max<size_t>(d, 1)) / MR * MR));
  const size_t nblk = (n + mc_max - 1) / mc_max;
  const size_t mc = std::min(mc_max, ((n + nblk - 1) / nblk + MR - 1) / MR * MR);
  std::vector<float> bv(mc * L), part(kc < d ? mc * W : 0);
  std::vector<int32_t> bi(mc * L);
  for (size_t r0 = 0; r0 < n; r0 += mc) {
    const size_t nr = std::min(mc, n - r0);
    std::fill(bv.begin(), bv.end(), -std::numeric_limits<float>::infinity());
    std::fill(bi.begin(), bi.end(), 0);
    for (size_t c0 = 0; c0 < nc; c0 += W) {
      const size_t wp = std::min(W, (nc - c0 + L - 1) / L * L);
      const float* pan = P.data.data() + c0 * d;
      for (size_t k0 = 0; k0 < d; k0 += kc) {
        const size_t kl = std::min(kc, d - k0);
        const bool first = k0 == 0, last = k0 + kl == d;
        for (size_t g = 0; g < nr; g += MR)
          micro_tile<O, O::NV>(static_cast<int>(wp / L), static_cast<int>(std::min(MR, nr - g)), X + (r0 + g) * d + k0,
                               d, kl, pan + k0 * wp, wp, part.data() + g * W, W, first, last, P.bias.data() + c0,
                               static_cast<int32_t>(c0), bv.data() + g * L, bi.data() + g * L);
      }
    }
    for (size_t i = 0; i < nr; ++i) {
      const float* b = bv.data() + i * L;
      const int32_t* j = bi.data() + i * L;
      float best = b[0];
      int32_t at = j[0];
      for (size_t l = 1; l < L; ++l)
        if (b[l] > best || (b[l] == best && j[l] < at)) {
          best = b[l];
          at = j[l];
        }
      out[r0 + i] = at;
    }
  }
}

}  // namespace nearest_detail
}  // namespace ragfind::dense::kernels
