// Internal: the per-ISA tables of the dense impact-column kernel (ragfind/splade/impact_columns.hpp),
// defined in kernels/impact_column/<isa>.cpp, and the one-document-at-a-time loops they share.
#pragma once

#include <cstdint>

#include "ragfind/splade/impact_columns.hpp"

namespace ragfind::splade::kernels {

// The one-at-a-time forms of the kernels: the scalar level's scatter and scan, and the tails of
// the SIMD levels. Internal linkage (anonymous namespace): each ISA file compiles its own copy
// with its own flags, so the linker can never hand the scalar table an AVX-512 build of them.
namespace {

// acc[i] for documents [i, n) of the tile: each document's columns in order.
inline void sum_columns_each(float* acc, const std::uint16_t* const* cols, const float* w, std::uint32_t m,
                             std::uint32_t from, std::uint32_t i, std::uint32_t n) {
  for (; i < n; ++i) {
    float s = w[0] * static_cast<float>(cols[0][from + i]);
    for (std::uint32_t c = 1; c < m; ++c) s += w[c] * static_cast<float>(cols[c][from + i]);
    acc[i] = s;
  }
}

// ImpactColumnKernels::scatter_add, one posting at a time.
inline std::uint64_t scatter_add_each(float* acc, const std::uint32_t* docs, const std::uint32_t* stored,
                                      std::uint64_t pos, std::uint64_t end, std::uint32_t lo, std::uint32_t hi,
                                      float w) {
  for (; pos < end && docs[pos] < hi; ++pos) acc[docs[pos] - lo] += w * static_cast<float>(stored[pos]);
  return pos;
}

// ImpactColumnKernels::next_above, one score at a time.
inline std::uint32_t next_above_each(const float* acc, std::uint32_t i, std::uint32_t n, float threshold) {
  while (i < n && !(acc[i] > threshold)) ++i;
  return i;
}

}  // namespace

extern const ImpactColumnKernels impact_column_scalar;
#ifdef RAGFIND_HAVE_AVX2
extern const ImpactColumnKernels impact_column_avx2;
#endif
#ifdef RAGFIND_HAVE_AVX512
extern const ImpactColumnKernels impact_column_avx512;
#endif
#ifdef RAGFIND_HAVE_NEON
extern const ImpactColumnKernels impact_column_neon;
#endif

}  // namespace ragfind::splade::kernels
