// Runtime dispatch for the 4-bit fast scan: one KernelTable over the per-ISA tables.
#include "kernels.hpp"

namespace ragfind::dense {
namespace {

const common::KernelTable<const Pq4ScanKernels*>& table() {
  static const common::KernelTable<const Pq4ScanKernels*> t = [] {
    common::KernelTable<const Pq4ScanKernels*> k;
    k.by_level[static_cast<int>(SimdLevel::Scalar)] = &kernels::pq4_scan_scalar;
#ifdef RAGFIND_HAVE_NEON
    k.by_level[static_cast<int>(SimdLevel::NEON)] = &kernels::pq4_scan_neon;
#endif
#ifdef RAGFIND_HAVE_AVX2
    k.by_level[static_cast<int>(SimdLevel::AVX2)] = &kernels::pq4_scan_avx2;
#endif
#ifdef RAGFIND_HAVE_AVX512
    k.by_level[static_cast<int>(SimdLevel::AVX512)] = &kernels::pq4_scan_avx512;
#endif
    return k;
  }();
  return t;
}

}  // namespace

const Pq4ScanKernels& pq4_scan_kernels() { return *table().get(); }

const Pq4ScanKernels& pq4_scan_kernels_at(SimdLevel level) { return *table().at(level); }

}  // namespace ragfind::dense
