// MaxSim query packing and the multi-threaded batch over documents (the kernel tables are in
// kernels/maxsim/dispatch.cpp).
#include "ragfind/late/maxsim.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "ragfind/common/parallel.hpp"

namespace ragfind::late {

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  float magnitude;
  if (exp == 0) {
    magnitude = std::ldexp(static_cast<float>(mant), -24);  // zero or subnormal
  } else if (exp == 31) {
    magnitude = mant ? __builtin_nanf("") : __builtin_inff();
  } else {
    magnitude = std::ldexp(static_cast<float>(mant | 0x400u), static_cast<int>(exp) - 25);
  }
  uint32_t bits;
  std::memcpy(&bits, &magnitude, 4);
  bits |= sign;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

std::vector<float> pack_query(const float* query, int64_t m, int64_t dim) {
  const int64_t n_panels = (m + kPanelWidth - 1) / kPanelWidth;
  std::vector<float> panels(static_cast<size_t>(n_panels * dim * kPanelWidth), 0.0f);
  for (int64_t i = 0; i < m; ++i) {
    float* panel = panels.data() + (i / kPanelWidth) * dim * kPanelWidth;
    const int64_t lane = i % kPanelWidth;
    for (int64_t k = 0; k < dim; ++k) panel[k * kPanelWidth + lane] = query[i * dim + k];
  }
  return panels;
}

int resolve_threads(int n_threads, int64_t work_items, int64_t min_items_per_thread) {
  const int n = n_threads > 0 ? n_threads : common::hardware_threads();
  const int64_t by_work = std::max<int64_t>(1, work_items / std::max<int64_t>(1, min_items_per_thread));
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(n, by_work)));
}

namespace {

void check_shape(int64_t m, int64_t dim) {
  if (m <= 0) throw std::invalid_argument("query must have at least one token vector, got m=" + std::to_string(m));
  if (dim <= 0) throw std::invalid_argument("dim must be positive, got " + std::to_string(dim));
}

}  // namespace

NonFinite maxsim_batch(const float* query, int64_t m, int64_t dim, const void* const* docs, const int64_t* n_tokens,
                       int64_t n_docs, TokenDType dtype, float* scores_out, int n_threads, bool check_finite) {
  check_shape(m, dim);
  for (int64_t d = 0; d < n_docs; ++d) {
    if (n_tokens[d] <= 0)
      throw std::invalid_argument("document " + std::to_string(d) + " has no token vectors (MaxSim needs >= 1)");
  }
  NonFinite result;
  if (n_docs == 0) return result;
  const std::vector<float> panels = pack_query(query, m, dim);
  const int64_t padded = static_cast<int64_t>(panels.size()) / dim;
  // Read the dispatch level once, in the calling thread.
  const MaxSimF32Fn f32 = maxsim_f32_table().get();
  const MaxSimF16Fn f16 = maxsim_f16_table().get();

  // Dynamic scheduling in small chunks: document lengths vary a lot.
  int64_t total_tokens = 0;
  for (int64_t d = 0; d < n_docs; ++d) total_tokens += n_tokens[d];
  const int threads = resolve_threads(n_threads, total_tokens * m, int64_t(1) << 18);
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(16, n_docs / (threads * 8)));
  const int64_t n_chunks = (n_docs + chunk - 1) / chunk;
  // The lowest bad document found so far. Chunks are handed out in increasing order and one
  // is never abandoned half way, so every document below a bad one is checked: the document
  // reported is the first bad one, whichever worker finds it. Chunks past it are skipped.
  std::atomic<int64_t> first_bad{n_docs};
  std::vector<std::vector<float>> maxima(static_cast<size_t>(threads), std::vector<float>(static_cast<size_t>(padded)));
  std::vector<std::vector<float>> scratch(
      static_cast<size_t>(threads),
      std::vector<float>(dtype == TokenDType::F16 ? static_cast<size_t>(kF16Block * dim) : 0));
  common::parallel_for(static_cast<size_t>(n_chunks), threads, [&](size_t c, int worker) {
    const int64_t begin = static_cast<int64_t>(c) * chunk;
    if (begin > first_bad.load(std::memory_order_relaxed)) return;
    const int64_t end = std::min(n_docs, begin + chunk);
    float* mx = maxima[static_cast<size_t>(worker)].data();
    float* sc = scratch[static_cast<size_t>(worker)].data();
    for (int64_t d = begin; d < end; ++d) {
      if (check_finite && first_non_finite(docs[d], n_tokens[d] * dim, dtype) >= 0) {
        int64_t seen = first_bad.load();
        while (d < seen && !first_bad.compare_exchange_weak(seen, d)) {}
        return;
      }
      if (dtype == TokenDType::F32) f32(panels.data(), m, dim, static_cast<const float*>(docs[d]), n_tokens[d], mx);
      else f16(panels.data(), m, dim, static_cast<const uint16_t*>(docs[d]), n_tokens[d], mx, sc);
      float sum = 0.0f;
      for (int64_t i = 0; i < m; ++i) sum += mx[i];
      scores_out[d] = sum;
    }
  });
  if (first_bad.load() < n_docs) {
    // Report the bad document with the lowest index that any worker found, with its position
    // recomputed (cheap, one document) so it is exact whichever worker stopped first.
    result.doc = first_bad.load();
    result.position = first_non_finite(docs[result.doc], n_tokens[result.doc] * dim, dtype);
  }
  return result;
}

void maxsim_explain(const float* query, int64_t m, int64_t dim, const void* doc, int64_t n, TokenDType dtype,
                    int64_t* best_token_out, float* best_sim_out) {
  check_shape(m, dim);
  if (n <= 0) throw std::invalid_argument("document has no token vectors (MaxSim needs >= 1)");
  std::vector<float> row(static_cast<size_t>(dim));
  for (int64_t i = 0; i < m; ++i) {
    best_token_out[i] = -1;
    best_sim_out[i] = -__builtin_inff();
  }
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t k = 0; k < dim; ++k)
      row[k] = dtype == TokenDType::F32 ? static_cast<const float*>(doc)[t * dim + k]
                                        : half_to_float(static_cast<const uint16_t*>(doc)[t * dim + k]);
    for (int64_t i = 0; i < m; ++i) {
      double dot = 0.0;
      for (int64_t k = 0; k < dim; ++k) dot += static_cast<double>(query[i * dim + k]) * row[k];
      if (best_token_out[i] < 0 || dot > best_sim_out[i]) {
        best_sim_out[i] = static_cast<float>(dot);
        best_token_out[i] = t;
      }
    }
  }
}

int64_t first_non_finite(const void* data, int64_t count, TokenDType dtype) {
  // Exponent-all-ones test on the bit patterns: branch-free blocks that the compiler
  // vectorises at the baseline ISA, then an exact scan of the block that failed.
  constexpr int64_t kBlock = 256;
  if (dtype == TokenDType::F32) {
    const float* p = static_cast<const float*>(data);
    for (int64_t i = 0; i < count; i += kBlock) {
      const int64_t end = std::min(count, i + kBlock);
      uint32_t bad = 0;
      for (int64_t j = i; j < end; ++j) {
        uint32_t bits;
        std::memcpy(&bits, p + j, 4);
        bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
      }
      if (bad)
        for (int64_t j = i; j < end; ++j)
          if (!std::isfinite(p[j])) return j;
    }
    return -1;
  }
  const uint16_t* p = static_cast<const uint16_t*>(data);
  for (int64_t i = 0; i < count; i += kBlock) {
    const int64_t end = std::min(count, i + kBlock);
    uint16_t bad = 0;
    for (int64_t j = i; j < end; ++j) bad |= static_cast<uint16_t>((p[j] & 0x7c00u) == 0x7c00u);
    if (bad)
      for (int64_t j = i; j < end; ++j)
        if ((p[j] & 0x7c00u) == 0x7c00u) return j;
  }
  return -1;
}

}  // namespace ragfind::late
