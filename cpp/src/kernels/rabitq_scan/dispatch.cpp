// Runtime dispatch for the RaBitQ bit-plane scan: one KernelTable over the per-ISA tables (no
// NEON kernel yet: AArch64 runs the scalar reference).
#include "kernels.hpp"

namespace ragfind::dense {
namespace {

const common::KernelTable<const RabitqScanKernels*>& table() {
  static const common::KernelTable<const RabitqScanKernels*> t = [] {
    common::KernelTable<const RabitqScanKernels*> k;
    k.by_level[static_cast<int>(SimdLevel::Scalar)] = &kernels::rabitq_scan_scalar;
#ifdef RAGFIND_HAVE_AVX2
    k.by_level[static_cast<int>(SimdLevel::AVX2)] = &kernels::rabitq_scan_avx2;
#endif
#ifdef RAGFIND_HAVE_AVX512
    k.by_level[static_cast<int>(SimdLevel::AVX512)] = &kernels::rabitq_scan_avx512;
#endif
    return k;
  }();
  return t;
}

}  // namespace

const RabitqScanKernels& rabitq_scan_kernels() { return *table().get(); }

const RabitqScanKernels& rabitq_scan_kernels_at(SimdLevel level) { return *table().at(level); }

}  // namespace ragfind::dense
