// MaxSim, scalar reference: the obvious loops over the unpacked layout read back from the
// panels. Every SIMD level is tested against this one.
#include "ragfind/late/maxsim.hpp"

namespace ragfind::late {

void maxsim_f32_scalar(const float* panels, int64_t m, int64_t dim, const float* doc, int64_t n, float* maxima) {
  const int64_t padded = (m + kPanelWidth - 1) / kPanelWidth * kPanelWidth;
  for (int64_t i = 0; i < padded; ++i) maxima[i] = 0.0f;
  for (int64_t i = 0; i < m; ++i) {
    const float* panel = panels + (i / kPanelWidth) * dim * kPanelWidth;
    const int64_t lane = i % kPanelWidth;
    float best = -__builtin_inff();
    for (int64_t t = 0; t < n; ++t) {
      float dot = 0.0f;
      for (int64_t k = 0; k < dim; ++k) dot += panel[k * kPanelWidth + lane] * doc[t * dim + k];
      if (dot > best) best = dot;
    }
    maxima[i] = best;
  }
}

void maxsim_f16_scalar(const float* panels, int64_t m, int64_t dim, const uint16_t* doc, int64_t n, float* maxima,
                       float* scratch) {
  const int64_t padded = (m + kPanelWidth - 1) / kPanelWidth * kPanelWidth;
  for (int64_t i = 0; i < padded; ++i) maxima[i] = i < m ? -__builtin_inff() : 0.0f;
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t k = 0; k < dim; ++k) scratch[k] = half_to_float(doc[t * dim + k]);
    for (int64_t i = 0; i < m; ++i) {
      const float* panel = panels + (i / kPanelWidth) * dim * kPanelWidth;
      const int64_t lane = i % kPanelWidth;
      float dot = 0.0f;
      for (int64_t k = 0; k < dim; ++k) dot += panel[k * kPanelWidth + lane] * scratch[k];
      if (dot > maxima[i]) maxima[i] = dot;
    }
  }
}

}  // namespace ragfind::late
