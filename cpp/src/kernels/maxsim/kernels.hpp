// The per-ISA MaxSim kernels (kernels/maxsim/<isa>.cpp) that dispatch.cpp puts in its tables.
#pragma once

#include <cstdint>

#include "ragfind/late/maxsim.hpp"

namespace ragfind::late {

void maxsim_f32_scalar(const float*, int64_t, int64_t, const float*, int64_t, float*);
void maxsim_f16_scalar(const float*, int64_t, int64_t, const uint16_t*, int64_t, float*, float*);
#ifdef RAGFIND_HAVE_NEON
void maxsim_f32_neon(const float*, int64_t, int64_t, const float*, int64_t, float*);
void maxsim_f16_neon(const float*, int64_t, int64_t, const uint16_t*, int64_t, float*, float*);
#endif
#ifdef RAGFIND_HAVE_AVX2
void maxsim_f32_avx2(const float*, int64_t, int64_t, const float*, int64_t, float*);
void maxsim_f16_avx2(const float*, int64_t, int64_t, const uint16_t*, int64_t, float*, float*);
#endif
#ifdef RAGFIND_HAVE_AVX512
void maxsim_f32_avx512(const float*, int64_t, int64_t, const float*, int64_t, float*);
void maxsim_f16_avx512(const float*, int64_t, int64_t, const uint16_t*, int64_t, float*, float*);
#endif

}  // namespace ragfind::late
