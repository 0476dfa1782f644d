// The document-side weight of one posting on the float fast path: tfc(tf, L) - tfc(0), from
// the per-document normalisation the index precomputes (k1 * L, or L for bm25l). A template
// per variant so that the query loops compile to straight-line arithmetic.
#pragma once

#include <cstdint>

#include "ragfind/bm25/scoring.hpp"

namespace ragfind::bm25 {

template <Method M>
struct DocWeight {
  float k1, delta, absent;
  explicit DocWeight(const Params& p)
      : k1(static_cast<float>(p.k1)),
        delta(static_cast<float>(p.delta)),
        absent(static_cast<float>(tf_component_absent(p))) {}

  inline float operator()(std::uint32_t tf_int, float norm) const {
    const float tf = static_cast<float>(tf_int);
    if constexpr (M == Method::Lucene || M == Method::Robertson) {
      return tf / (norm + tf);
    } else if constexpr (M == Method::Atire) {
      return tf * (k1 + 1.0f) / (tf + norm);
    } else if constexpr (M == Method::BM25Plus) {
      return (k1 + 1.0f) * tf / (norm + tf);  // + delta - delta
    } else {
      const float c = tf / norm;
      return (k1 + 1.0f) * (c + delta) / (k1 + c + delta) - absent;
    }
  }
};

}  // namespace ragfind::bm25
