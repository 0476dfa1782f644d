// Exact (brute-force) dense search over stored rows: fused scan + top-k for one query,
// cache-blocked tiles for query batches, both multi-threaded. Plain C++, no Python.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ragfind::dense {

enum class Storage { F32, F16, I8 };

/// Inner product ("ip"; cosine is ip over rows normalised at add time) or squared L2.
enum class Metric { IP, L2 };

/// A read-only view of n stored rows of d elements.
struct RowsView {
  Storage storage = Storage::F32;
  const void* data = nullptr;  // n * d elements: float, uint16_t (binary16) or int8_t
  size_t n = 0, d = 0;
  const float* scales = nullptr;   // I8: per-row dequantisation scale (x ~= scale * q)
  const float* sqnorms = nullptr;  // I8 with L2: per-row |scale * q|^2
};

struct SearchOptions {
  size_t k = 10;
  Metric metric = Metric::IP;
  /// Per-row admission mask (nonzero = may be returned); nullptr admits every row.
  const uint8_t* allowed = nullptr;
  /// When set, only these rows (ascending, each < n) are scored: the gather path for a small
  /// allowed set (`allowed` is then ignored).
  const int64_t* subset = nullptr;
  size_t subset_n = 0;
  /// Drop results worse than this: for IP scores below it, for L2 distances above it.
  bool has_threshold = false;
  float threshold = 0.f;
  /// Worker threads; 0 picks from the work size and the hardware.
  int threads = 0;
};

/// Top-k rows for one query: writes up to k (row, score) pairs best first and returns how many.
/// Scores are inner products (IP) or squared distances (L2, smallest first). Ties go to the
/// lower row. Only one block of scores per thread is ever materialised.
size_t search_one(const RowsView& rows, const float* q, const SearchOptions& opt, int64_t* out_rows, float* out_scores);

/// Top-k for nq queries (rows of Q): out_rows/out_scores are nq x k, padded with -1 / NaN;
/// out_counts[i] is the number of real results of query i.
void search_batch(const RowsView& rows, const float* Q, size_t nq, const SearchOptions& opt, int64_t* out_rows,
                  float* out_scores, int64_t* out_counts);

/// Every row's score for one query (IP: inner product, L2: squared distance), for tests and
/// callers that want the full vector.
void score_all(const RowsView& rows, const float* q, Metric metric, float* out);

/// Threads an automatic (0) request resolves to for a scan of `bytes` bytes.
int auto_threads(size_t bytes);

}  // namespace ragfind::dense
