// Internal: the per-ISA RaBitQ bit-plane scan tables (ragfind/dense/rabitq.hpp), defined in
// kernels/rabitq_scan/<isa>.cpp.
#pragma once

#include "ragfind/dense/rabitq.hpp"

namespace ragfind::dense::kernels {

extern const RabitqScanKernels rabitq_scan_scalar;
#ifdef RAGFIND_HAVE_AVX2
extern const RabitqScanKernels rabitq_scan_avx2;
#endif
#ifdef RAGFIND_HAVE_AVX512
extern const RabitqScanKernels rabitq_scan_avx512;
extern const RabitqScanKernels rabitq_scan_avx512_vpopcnt;  // needs AVX512_VPOPCNTDQ too
#endif

}  // namespace ragfind::dense::kernels
