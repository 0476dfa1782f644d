// Runtime dispatch for the MaxSim kernels: one KernelTable per storage format over the per-ISA
// kernels.
#include "kernels.hpp"

namespace ragfind::late {

const common::KernelTable<MaxSimF32Fn>& maxsim_f32_table() {
  static const common::KernelTable<MaxSimF32Fn> table = [] {
    common::KernelTable<MaxSimF32Fn> t;
    t.by_level[static_cast<int>(common::SimdLevel::Scalar)] = maxsim_f32_scalar;
#ifdef RAGFIND_HAVE_NEON
    t.by_level[static_cast<int>(common::SimdLevel::NEON)] = maxsim_f32_neon;
#endif
#ifdef RAGFIND_HAVE_AVX2
    t.by_level[static_cast<int>(common::SimdLevel::AVX2)] = maxsim_f32_avx2;
#endif
#ifdef RAGFIND_HAVE_AVX512
    t.by_level[static_cast<int>(common::SimdLevel::AVX512)] = maxsim_f32_avx512;
#endif
    return t;
  }();
  return table;
}

const common::KernelTable<MaxSimF16Fn>& maxsim_f16_table() {
  static const common::KernelTable<MaxSimF16Fn> table = [] {
    common::KernelTable<MaxSimF16Fn> t;
    t.by_level[static_cast<int>(common::SimdLevel::Scalar)] = maxsim_f16_scalar;
#ifdef RAGFIND_HAVE_NEON
    t.by_level[static_cast<int>(common::SimdLevel::NEON)] = maxsim_f16_neon;
#endif
#ifdef RAGFIND_HAVE_AVX2
    t.by_level[static_cast<int>(common::SimdLevel::AVX2)] = maxsim_f16_avx2;
#endif
#ifdef RAGFIND_HAVE_AVX512
    t.by_level[static_cast<int>(common::SimdLevel::AVX512)] = maxsim_f16_avx512;
#endif
    return t;
  }();
  return table;
}

}  // namespace ragfind::late
