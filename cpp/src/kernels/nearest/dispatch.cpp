// Runtime dispatch for the nearest-centroid kernel: one KernelTable over the per-ISA tables.
#include "kernels.hpp"

namespace ragfind::dense {
namespace {

const common::KernelTable<const NearestKernels*>& table() {
  static const common::KernelTable<const NearestKernels*> t = [] {
    common::KernelTable<const NearestKernels*> k;
    k.by_level[static_cast<int>(SimdLevel::Scalar)] = &kernels::nearest_scalar;
#ifdef RAGFIND_HAVE_NEON
    k.by_level[static_cast<int>(SimdLevel::NEON)] = &kernels::nearest_neon;
#endif
#ifdef RAGFIND_HAVE_AVX2
    k.by_level[static_cast<int>(SimdLevel::AVX2)] = &kernels::nearest_avx2;
#endif
#ifdef RAGFIND_HAVE_AVX512
    k.by_level[static_cast<int>(SimdLevel::AVX512)] = &kernels::nearest_avx512;
#endif
    return k;
  }();
  return t;
}

}  // namespace

const NearestKernels& nearest_kernels() { return *table().get(); }

const NearestKernels& nearest_kernels_at(SimdLevel level) { return *table().at(level); }

}  // namespace ragfind::dense
