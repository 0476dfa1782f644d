// Internal: the per-ISA tables of the dense impact-column kernel (sparse/impact_columns.hpp),
// defined in impact_column_<isa>.cpp.
#pragma once

#include "ragfind/sparse/impact_columns.hpp"

namespace ragfind::kernels {

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

}  // namespace ragfind::kernels
