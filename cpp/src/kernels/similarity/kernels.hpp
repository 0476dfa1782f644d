// Internal: the per-ISA kernel tables, defined in kernels/similarity/<isa>.cpp.
#pragma once

#include "ragfind/dense/similarity.hpp"

namespace ragfind::dense::kernels {

extern const SimilarityKernels similarity_scalar;
#ifdef RAGFIND_HAVE_AVX2
extern const SimilarityKernels similarity_avx2;
#endif
#ifdef RAGFIND_HAVE_AVX512
extern const SimilarityKernels similarity_avx512;
#endif
#ifdef RAGFIND_HAVE_NEON
extern const SimilarityKernels similarity_neon;
#endif

/// Elements of an int8 x int16 dot product summed in int32 before flushing to float. The
/// kernels spread a chunk over at least 8 int32 lanes, so one lane sums at most 512 products:
/// 512 * 127 * 16383 < 2^31 (the whole chunk in one lane would not fit).
inline constexpr size_t kI8ChunkElems = 4096;

}  // namespace ragfind::dense::kernels
