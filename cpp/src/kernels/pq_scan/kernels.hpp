// Internal: the per-ISA 4-bit fast-scan tables (ragfind/dense/pq.hpp), defined in
// kernels/pq_scan/<isa>.cpp.
#pragma once

#include "ragfind/dense/pq.hpp"

namespace ragfind::dense::kernels {

extern const Pq4ScanKernels pq4_scan_scalar;
#ifdef RAGFIND_HAVE_AVX2
extern const Pq4ScanKernels pq4_scan_avx2;
#endif
#ifdef RAGFIND_HAVE_AVX512
extern const Pq4ScanKernels pq4_scan_avx512;
#endif
#ifdef RAGFIND_HAVE_NEON
extern const Pq4ScanKernels pq4_scan_neon;
#endif

}  // namespace ragfind::dense::kernels
