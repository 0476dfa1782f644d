// Runtime dispatch for the impact-column kernel: one KernelTable over the per-ISA tables.
#include "kernels.hpp"
#include "ragfind/common/cpu.hpp"

namespace ragfind::splade {

const ImpactColumnKernels& impact_column_kernels() {
  static const common::KernelTable<const ImpactColumnKernels*> t = [] {
    common::KernelTable<const ImpactColumnKernels*> k;
    k.by_level[static_cast<int>(common::SimdLevel::Scalar)] = &kernels::impact_column_scalar;
#ifdef RAGFIND_HAVE_AVX2
    k.by_level[static_cast<int>(common::SimdLevel::AVX2)] = &kernels::impact_column_avx2;
#endif
#ifdef RAGFIND_HAVE_AVX512
    k.by_level[static_cast<int>(common::SimdLevel::AVX512)] = &kernels::impact_column_avx512;
#endif
#ifdef RAGFIND_HAVE_NEON
    k.by_level[static_cast<int>(common::SimdLevel::NEON)] = &kernels::impact_column_neon;
#endif
    return k;
  }();
  return *t.get();
}

}  // namespace ragfind::splade
