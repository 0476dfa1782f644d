// Runtime dispatch for the RaBitQ bit-plane scan: one KernelTable over the per-ISA tables (no
// NEON kernel yet: AArch64 runs the scalar reference). The AVX-512 level counts bits with
// vpopcntq where the CPU has AVX512_VPOPCNTDQ (not part of the build's AVX-512 level).
#include <algorithm>
#include <vector>

#include "kernels.hpp"

namespace ragfind::dense {
namespace {

bool has_vpopcntdq() {
#if defined(RAGFIND_HAVE_AVX512) && (defined(__GNUC__) || defined(__clang__))
  return __builtin_cpu_supports("avx512vpopcntdq");
#else
  return false;
#endif
}

const common::KernelTable<const RabitqScanKernels*>& table() {
  static const common::KernelTable<const RabitqScanKernels*> t = [] {
    common::KernelTable<const RabitqScanKernels*> k;
    k.by_level[static_cast<int>(SimdLevel::Scalar)] = &kernels::rabitq_scan_scalar;
#ifdef RAGFIND_HAVE_AVX2
    k.by_level[static_cast<int>(SimdLevel::AVX2)] = &kernels::rabitq_scan_avx2;
#endif
#ifdef RAGFIND_HAVE_AVX512
    k.by_level[static_cast<int>(SimdLevel::AVX512)] =
        has_vpopcntdq() ? &kernels::rabitq_scan_avx512_vpopcnt : &kernels::rabitq_scan_avx512;
#endif
    return k;
  }();
  return t;
}

}  // namespace

const RabitqScanKernels& rabitq_scan_kernels() { return *table().get(); }

const RabitqScanKernels& rabitq_scan_kernels_at(SimdLevel level) { return *table().at(level); }

std::vector<const RabitqScanKernels*> rabitq_scan_kernel_variants() {
  std::vector<const RabitqScanKernels*> out;
  for (SimdLevel level : common::supported_simd_levels()) {
    const RabitqScanKernels* k = &rabitq_scan_kernels_at(level);
    if (std::find(out.begin(), out.end(), k) == out.end()) out.push_back(k);
  }
#ifdef RAGFIND_HAVE_AVX512
  if (common::simd_level_supported(SimdLevel::AVX512) && has_vpopcntdq()) out.push_back(&kernels::rabitq_scan_avx512);
#endif
  return out;
}

}  // namespace ragfind::dense
