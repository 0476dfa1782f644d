// Inverted-file (IVF) dense search: rows grouped in lists by their nearest centroid, each list a
// contiguous range of one row array; a query scores the centroids, scans the nprobe best lists
// with the exact scan's fused kernels + top-k, and (for f16/i8 lists) re-scores a candidate
// pool exactly from float32 copies of the rows. Plain C++, no Python.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ragfind/dense/exact_search.hpp"

namespace ragfind::dense {

/// A read-only view of an IVF index's lists.
struct IvfView {
  /// Every list's rows in one array ("positions"); list l is rows [start[l], start[l] + len[l]).
  /// Rows outside every list (slack, or a list's old place after it grew) are never read.
  RowsView rows;
  const float* centroids = nullptr;  // nlist x rows.d float32
  size_t nlist = 0;
  const int64_t* list_start = nullptr;
  const int64_t* list_len = nullptr;
  /// float32 copies of the rows at the same positions, for re-scoring f16/i8 candidates;
  /// nullptr: scores stay those of the stored format.
  const float* exact = nullptr;
};

struct IvfOptions {
  /// k, metric, admission mask (per position), threshold, threads; `subset` is not used.
  SearchOptions search;
  /// Lists scanned (the best by centroid score); more are scanned while fewer than k
  /// admitted rows have been seen, so a filter or deletes never leave a query short.
  size_t nprobe = 8;
  /// f16/i8 with `exact`: the k * rerank best quantised scores are re-scored in float32.
  size_t rerank = 4;
};

/// Top-k positions for one query, best first (scores as search_one: IP descending, L2 squared
/// distances ascending; ties to the lower position). Returns how many were written.
size_t ivf_search_one(const IvfView& ivf, const float* q, const IvfOptions& opt, int64_t* out_rows, float* out_scores);

/// ivf_search_one for each of nq queries (rows of Q), equal to it bit for bit, grouped by list
/// so each probed list is read once per batch (ivf_batch.cpp); up to opt.search.threads
/// workers. out_rows/out_scores are nq x k padded with -1 / NaN, out_counts[i] the real results.
void ivf_search_batch(const IvfView& ivf, const float* Q, size_t nq, const IvfOptions& opt, int64_t* out_rows,
                      float* out_scores, int64_t* out_counts);

}  // namespace ragfind::dense
