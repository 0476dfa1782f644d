// IVF lists of RaBitQ codes (ragfind/dense/rabitq.hpp) of the residuals to each list's centroid,
// searched by inner product: q . x = q . c + c . r + (q - c) . r, the first two exact, the last
// estimated from the code with the query residual of each probed list quantised to 4 bits (its
// error scales with |q - c|, not |q|). The k * rerank best estimates are re-scored exactly in
// decreasing order of their upper bound (estimate + error bound), and the re-scoring stops once
// a bound falls below the k-th exact score: such a candidate cannot reach the top k (with the
// bound's probability). Plain C++.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ragfind/dense/coarse.hpp"

namespace ragfind::dense {

/// The confidence of the bound the search skips by, in standard deviations of the estimate's
/// error (the RaBitQ error and the query's 4-bit rounding, added in quadrature). The paper's
/// eps0 = 1.9 is about two; a skipped true neighbour is a wrong result, so the search widens it
/// to three (rare misses, still most of the pool skipped).
inline constexpr float kRabitqSearchEps = 3.0f;

/// A read-only view of RaBitQ-coded IVF lists. List l is positions [start[l], start[l] + len[l]);
/// a position indexes the codes, `exact` and `allowed`.
struct IvfRabitqView {
  size_t d = 0;
  const float* centroids = nullptr;  // nlist x d
  size_t nlist = 0;
  const float* rotation = nullptr;       // d x d, row-major: the rotated x is rotation * x
  const float* rot_centroids = nullptr;  // nlist x d: rotation * centroid
  const uint64_t* bits = nullptr;        // rabitq_words(d) words per position
  const float* norm = nullptr;           // |residual| per position
  const float* ipq = nullptr;            // <xbar, o'> per position
  const float* cdot = nullptr;           // centroid . residual per position
  const int64_t* start = nullptr;
  const int64_t* len = nullptr;
  const float* exact = nullptr;             // n_rows x d float32 rows for re-scoring
  const uint8_t* allowed = nullptr;         // per position, nullptr: all
  size_t n_rows = 0;                        // positions: a list reaching past them throws
  const CoarseCentroids* coarse = nullptr;  // when set, picks the lists (the same as a full scan)
};

/// What one search did (for tests and tuning).
struct RabitqSearchStats {
  size_t scanned = 0;   // admitted rows estimated
  size_t pooled = 0;    // candidates kept for re-scoring (at most k * rerank)
  size_t rescored = 0;  // exact scores computed (the rest were skipped by their bound)
};

/// The search's estimate of q . x and its upper bound (estimate + kRabitqSearchEps error
/// bound) for every row of list l (allowed or not), in list order: what the search ranks and
/// skips by, for tests. Throws std::invalid_argument on a list outside the positions.
void ivf_rabitq_list_bounds(const IvfRabitqView& v, const float* q, size_t list, float* est, float* upper);

/// Top-k positions by inner product for one query, scores descending, ties to the lower
/// position; more lists than nprobe are scanned while fewer than k admitted rows have been seen.
/// Returns how many were written (at most k). Throws std::invalid_argument on a list outside
/// the positions.
size_t ivf_rabitq_search_one(const IvfRabitqView& v, const float* q, size_t k, size_t nprobe, size_t rerank,
                             int64_t* out_pos, float* out_scores, RabitqSearchStats* stats = nullptr);

}  // namespace ragfind::dense
