// MaxSim, AVX-512F (+F16C conversions; dispatched at run time). Only AVX-512F instructions are
// used here: no VNNI/BF16 (the file's flags allow them, but the AVX512 level does not imply
// them). 32 zmm registers: a 2-register panel row (32 query tokens) x 12 document tokens =
// 24 accumulators, 2 query registers, broadcasts folded into the FMA as {1to16} operands.
// GCC 12 warns about _mm512_undefined_ps() inside its own _mm512_max_ps (a known false
// positive of the header); silence it for this file only.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "tile.hpp"

namespace ragfind::late {
namespace {

struct Avx512Vec {
  using reg = __m512;
  static constexpr int lanes = 16;
  static reg zero() { return _mm512_setzero_ps(); }
  static reg load(const float* p) { return _mm512_loadu_ps(p); }
  static reg bcast(const float* p) { return _mm512_set1_ps(*p); }
  static reg fma(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
  static reg max(reg a, reg b) { return _mm512_max_ps(a, b); }
  static void store(float* p, reg v) { _mm512_storeu_ps(p, v); }
  static void widen(const uint16_t* src, float* dst, int64_t count) {
    int64_t i = 0;
    for (; i + 16 <= count; i += 16)
      _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
    for (; i < count; ++i) dst[i] = _cvtsh_ss(src[i]);
  }
};

}  // namespace

void maxsim_f32_avx512(const float* panels, int64_t m, int64_t dim, const float* doc, int64_t n, float* maxima) {
  maxsim_doc_f32<Avx512Vec, 2, 16, 12, 1, 1>(panels, m, dim, doc, n, maxima);
}

void maxsim_f16_avx512(const float* panels, int64_t m, int64_t dim, const uint16_t* doc, int64_t n, float* maxima,
                       float* scratch) {
  maxsim_doc_f16<Avx512Vec, 2, 16, 12, 1, 1>(panels, m, dim, doc, n, maxima, scratch);
}

}  // namespace ragfind::late
