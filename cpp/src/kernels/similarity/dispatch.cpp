// Runtime dispatch for the similarity kernels: one KernelTable over the per-ISA tables.
#include "kernels.hpp"

namespace ragfind::dense {
namespace {

const common::KernelTable<const SimilarityKernels*>& table() {
  static const common::KernelTable<const SimilarityKernels*> t = [] {
    common::KernelTable<const SimilarityKernels*> k;
    k.by_level[static_cast<int>(SimdLevel::Scalar)] = &kernels::similarity_scalar;
#ifdef RAGFIND_HAVE_NEON
    k.by_level[static_cast<int>(SimdLevel::NEON)] = &kernels::similarity_neon;
#endif
#ifdef RAGFIND_HAVE_AVX2
    k.by_level[static_cast<int>(SimdLevel::AVX2)] = &kernels::similarity_avx2;
#endif
#ifdef RAGFIND_HAVE_AVX512
    k.by_level[static_cast<int>(SimdLevel::AVX512)] = &kernels::similarity_avx512;
#endif
    return k;
  }();
  return t;
}

}  // namespace

const SimilarityKernels& similarity_kernels() { return *table().get(); }

const SimilarityKernels& similarity_kernels_at(SimdLevel level) { return *table().at(level); }

}  // namespace ragfind::dense
