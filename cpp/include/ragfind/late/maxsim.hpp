// MaxSim (ColBERT late interaction): score(q, d) = sum_i max_j <q_i, d_j>.
//
// The query (m token vectors) is packed once per call into "query panels": 32 query tokens
// per panel, stored dimension-major (panel[k * 32 + lane] = q[lane][k], zero-padded), so that a
// SIMD register holds one dimension of 4 (NEON), 8 (AVX2) or 16 (AVX-512) query tokens. The
// micro-kernel broadcasts one coordinate of a document token and FMAs it into a register tile
// of (doc tokens x query tokens); once the dot products of the tile are complete, the running
// maxima are taken lane-wise, so no horizontal reduction is needed until the final sum. Zero
// padding lanes contribute max(0) = 0, so the sum needs no mask. Documents are read in place
// (row-major, any length >= 1, no padding); float16 documents are widened in small blocks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ragfind/common/cpu.hpp"

namespace ragfind::late {

/// Storage type of document token vectors.
enum class TokenDType : int { F32 = 0, F16 = 1 };

/// Number of query tokens per packed panel (8 NEON, 4 AVX2 or 2 AVX-512 registers).
inline constexpr int kPanelWidth = 32;
/// Document tokens widened per block when documents are stored as float16.
inline constexpr int kF16Block = 48;

/// Packs a row-major (m, dim) query into ceil(m / 32) dimension-major panels of 32 lanes.
std::vector<float> pack_query(const float* query, int64_t m, int64_t dim);

/// One document's MaxSim from a packed query; `scratch` holds kF16Block * dim floats.
/// maxima (>= panels * 32 floats) receives the per-query-token maxima (padding lanes: 0).
using MaxSimF32Fn = void (*)(const float* panels, int64_t m, int64_t dim, const float* doc, int64_t n, float* maxima);
using MaxSimF16Fn = void (*)(const float* panels, int64_t m, int64_t dim, const uint16_t* doc, int64_t n, float* maxima,
                             float* scratch);

/// Kernel tables (scalar reference, NEON, AVX2, AVX-512).
const common::KernelTable<MaxSimF32Fn>& maxsim_f32_table();
const common::KernelTable<MaxSimF16Fn>& maxsim_f16_table();

/// Where a batch found a non-finite document value (doc = -1: none).
struct NonFinite {
  int64_t doc = -1;
  int64_t position = -1;  // flat index inside that document
};

/// Scores `n_docs` documents given as pointers + token counts (every count >= 1) against a
/// row-major (m, dim) float32 query. Multi-threaded over documents (n_threads <= 0: all cores).
/// With `check_finite`, each worker scans a document for NaN/Inf just before scoring it (the
/// data is then hot in cache for the scoring); the first bad document found is returned and
/// the scores are then unspecified. Throws std::invalid_argument on a non-positive m/dim or an
/// empty document.
NonFinite maxsim_batch(const float* query, int64_t m, int64_t dim, const void* const* docs, const int64_t* n_tokens,
                       int64_t n_docs, TokenDType dtype, float* scores_out, int n_threads, bool check_finite = false);

/// Per query token, the best document token and its similarity (for explanations).
void maxsim_explain(const float* query, int64_t m, int64_t dim, const void* doc, int64_t n, TokenDType dtype,
                    int64_t* best_token_out, float* best_sim_out);

/// Index of the first non-finite value in `count` values, or -1.
int64_t first_non_finite(const void* data, int64_t count, TokenDType dtype);

/// IEEE half -> float (portable, used by the scalar paths).
float half_to_float(uint16_t h);

/// Number of worker threads to use for `work_items` items (n_threads <= 0: hardware).
int resolve_threads(int n_threads, int64_t work_items, int64_t min_items_per_thread);

}  // namespace ragfind::late
