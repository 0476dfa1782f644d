// The MaxSim register tile, written once over a vector-traits type V and instantiated by
// neon.cpp, avx2.cpp and avx512.cpp (each compiled with its own ISA flags).
//
// Everything here has internal linkage (anonymous namespace): the same template compiled with
// different -m flags in several translation units must never be merged by the linker (ODR), or an
// AVX-512 instantiation could end up being called on an AVX2-only CPU.
//
// V provides: type reg, constexpr int lanes, zero(), load(const float*) (panel rows),
// bcast(const float*), fma(a, b, c) = a * b + c, max(a, b), store(float*, reg), and
// widen(const uint16_t* src, float* dst, int64_t count) for float16 documents.
#pragma once

#include <cstdint>

#include "ragfind/late/maxsim.hpp"

namespace ragfind::late {
namespace {

// One tile: NR document tokens x QV registers of query lanes. The dot products of the tile
// are completed over `dim` in registers, then folded into the running maxima (kept in L1:
// one load and one store per query register per tile, against dim * NR * QV FMAs).
template <class V, int QV, int NR>
inline void maxsim_tile(const float* panel, int64_t dim, const float* doc, float* maxima) {
  typename V::reg acc[NR][QV];
#pragma GCC unroll 32
  for (int r = 0; r < NR; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < QV; ++v) acc[r][v] = V::zero();
  for (int64_t k = 0; k < dim; ++k) {
    typename V::reg q[QV];
#pragma GCC unroll 8
    for (int v = 0; v < QV; ++v) q[v] = V::load(panel + k * kPanelWidth + v * V::lanes);
#pragma GCC unroll 32
    for (int r = 0; r < NR; ++r) {
      typename V::reg b = V::bcast(doc + r * dim + k);
#pragma GCC unroll 8
      for (int v = 0; v < QV; ++v) acc[r][v] = V::fma(b, q[v], acc[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int v = 0; v < QV; ++v) {
    typename V::reg mx = V::load(maxima + v * V::lanes);
#pragma GCC unroll 32
    for (int r = 0; r < NR; ++r) mx = V::max(mx, acc[r][v]);
    V::store(maxima + v * V::lanes, mx);
  }
}

template <class V, int QV, int NR>
inline void maxsim_panel_tokens(const float* panel, int64_t dim, const float* doc, int64_t n, float* maxima) {
  int64_t t = 0;
  for (; t + NR <= n; t += NR) maxsim_tile<V, QV, NR>(panel, dim, doc + t * dim, maxima);
  if constexpr (NR > 4) {
    for (; t + 4 <= n; t += 4) maxsim_tile<V, QV, 4>(panel, dim, doc + t * dim, maxima);
  }
  for (; t < n; ++t) maxsim_tile<V, QV, 1>(panel, dim, doc + t * dim, maxima);
}

// All panels against `n` float32 document tokens; `maxima` holds the running maxima of every
// panel (panels * 32 floats). Each panel is swept in slices of at most QVMain registers
// (the widest tile that fits the register file); NRq is the tile height for q registers.
template <class V, int QVMain, int NR1, int NR2, int NR3, int NR4>
inline void maxsim_all_panels(const float* panels, int64_t m, int64_t dim, const float* doc, int64_t n, float* maxima) {
  static_assert(kPanelWidth % V::lanes == 0, "panel width must be a multiple of the lanes");
  static_assert(QVMain >= 1 && QVMain <= 4, "1..4 registers per tile row");
  const int64_t n_panels = (m + kPanelWidth - 1) / kPanelWidth;
  for (int64_t p = 0; p < n_panels; ++p) {
    const float* panel = panels + p * dim * kPanelWidth;
    float* mx = maxima + p * kPanelWidth;
    const int64_t rows = (p + 1 < n_panels) ? kPanelWidth : m - p * kPanelWidth;
    const int regs = static_cast<int>((rows + V::lanes - 1) / V::lanes);
    for (int s = 0; s < regs; s += QVMain) {
      const int qv = regs - s < QVMain ? regs - s : QVMain;
      const float* slice = panel + s * V::lanes;
      float* slice_max = mx + s * V::lanes;
      if (qv == 1) {
        maxsim_panel_tokens<V, 1, NR1>(slice, dim, doc, n, slice_max);
      } else if constexpr (QVMain >= 2) {
        if (qv == 2) {
          maxsim_panel_tokens<V, 2, NR2>(slice, dim, doc, n, slice_max);
        } else if constexpr (QVMain >= 3) {
          if (qv == 3) maxsim_panel_tokens<V, 3, NR3>(slice, dim, doc, n, slice_max);
          else if constexpr (QVMain >= 4) maxsim_panel_tokens<V, 4, NR4>(slice, dim, doc, n, slice_max);
        }
      }
    }
  }
}

inline void maxsim_init_maxima(int64_t m, float* maxima) {
  const int64_t padded = (m + kPanelWidth - 1) / kPanelWidth * kPanelWidth;
  for (int64_t i = 0; i < padded; ++i) maxima[i] = i < m ? -__builtin_inff() : 0.0f;
}

template <class V, int QVMain, int NR1, int NR2, int NR3, int NR4>
inline void maxsim_doc_f32(const float* panels, int64_t m, int64_t dim, const float* doc, int64_t n, float* maxima) {
  maxsim_init_maxima(m, maxima);
  maxsim_all_panels<V, QVMain, NR1, NR2, NR3, NR4>(panels, m, dim, doc, n, maxima);
}

// float16 documents: widen kF16Block tokens at a time into `scratch`, reused by every panel.
template <class V, int QVMain, int NR1, int NR2, int NR3, int NR4>
inline void maxsim_doc_f16(const float* panels, int64_t m, int64_t dim, const uint16_t* doc, int64_t n, float* maxima,
                           float* scratch) {
  maxsim_init_maxima(m, maxima);
  for (int64_t t = 0; t < n; t += kF16Block) {
    const int64_t count = (n - t < kF16Block) ? n - t : kF16Block;
    V::widen(doc + t * dim, scratch, count * dim);
    maxsim_all_panels<V, QVMain, NR1, NR2, NR3, NR4>(panels, m, dim, scratch, count, maxima);
  }
}

}  // namespace
}  // namespace ragfind::late
