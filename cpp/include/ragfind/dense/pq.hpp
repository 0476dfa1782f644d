// Product quantisation (Jegou et al., 2011) for IVF lists: each residual x - centroid is cut into
// m sub-vectors of dsub = d / m dimensions and each sub-vector stored as the index of its nearest
// codeword (2^bits per sub-space, k-means on training residuals). A query's inner product with
// a code is the sum of m look-up-table entries. With 4 bits the table of one sub-space is 16
// entries, so, quantised to bytes, it fits one SIMD register and a shuffle looks up 16 or more
// codes at once (the "fast scan" of Andre et al., 2015; faiss IndexIVFPQFastScan). Plain C++.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ragfind/common/cpu.hpp"
#include "ragfind/dense/coarse.hpp"

namespace ragfind::dense {

using common::SimdLevel;

/// Codes of one 4-bit fast-scan block: kPqBlock rows.
inline constexpr size_t kPqBlock = 32;

/// Trained codebooks: m sub-spaces of dsub dimensions, ksub = 2^bits codewords each, stored
/// as m x ksub x dsub float32.
struct PqCodebook {
  size_t d = 0, m = 0, bits = 0, dsub = 0, ksub = 0;
  std::vector<float> codewords;
  /// When set, the codewords are read from this caller memory (same layout) instead: a search
  /// need not copy 256-codeword books (m x 1 KB x dsub) on every call.
  const float* borrowed = nullptr;
  const float* data() const { return borrowed != nullptr ? borrowed : codewords.data(); }
};

/// Trains codebooks on the n rows of X (n x d, n >= 2^bits; d a multiple of m; bits 4 or 8):
/// L2 k-means per sub-space, `iters` Lloyd iterations, deterministic for a given seed.
PqCodebook train_pq(const float* X, size_t n, size_t d, size_t m, size_t bits, int iters, uint64_t seed, int threads);

/// codes[i * m + j] = the codeword of sub-space j nearest row i of X (one byte per code).
void encode_pq(const PqCodebook& pq, const float* X, size_t n, int threads, uint8_t* codes);

/// Decodes n codes (n x m bytes) to float32 rows (n x d).
void decode_pq(const PqCodebook& pq, const uint8_t* codes, size_t n, float* out);

/// lut[j * ksub + c] = q_j . codeword(j, c): the inner product of query q (d floats) with a code
/// is the sum over j of lut[j * ksub + code_j].
void pq_lut_ip(const PqCodebook& pq, const float* q, float* lut);

/// Padded sub-space count of the 4-bit fast-scan layout (a multiple of 4, zero codes beyond m).
inline size_t pq4_mpad(size_t m) { return (m + 3) / 4 * 4; }

/// Packs n 4-bit codes (n x m bytes, values < 16) into fast-scan blocks of kPqBlock rows:
/// block b, sub-space j is 16 bytes at out[(b * mpad + j) * 16], byte i holding row b*32+i in its
/// low nibble and row b*32+16+i in its high nibble. Rows past n (and sub-spaces past m) hold
/// code 0: their sums are not scores and the caller ignores them.
/// out holds ceil(n / 32) * mpad * 16 bytes.
void pack_pq4(const uint8_t* codes, size_t n, size_t m, uint8_t* out);

/// A float look-up table (m x 16) as bytes: lut8[j * 16 + c] = round((lut[j, c] - min_j) / scale),
/// rows j >= m zero. The float score of a code is then bias + scale * (sum of its bytes), with
/// an error of at most m * scale / 2. lut8 holds mpad x 16 bytes.
struct Pq4Lut {
  std::vector<uint8_t> lut8;
  float bias = 0, scale = 1;
};
Pq4Lut quantise_pq4_lut(const float* lut, size_t m);

/// quantise_pq4_lut into caller memory: lut8 holds mpad x 16 bytes.
void quantise_pq4_lut_into(const float* lut, size_t m, uint8_t* lut8, float* bias, float* scale);

/// One SIMD level's PQ scan kernels.
struct Pq4ScanKernels {
  const char* name;
  /// out[b * 32 + i] = sum over j < mpad of lut8[j * 16 + code(b, i, j)] for the nblocks
  /// packed blocks (pack_pq4's layout); exact integer sums (mpad <= 256), the same at every level.
  void (*scan)(const uint8_t* blocks, size_t nblocks, size_t mpad, const uint8_t* lut8, uint16_t* out);
  /// 8-bit codes, one byte a sub-space, m bytes a row: out[i] = sum over j < m of
  /// lut[j * 256 + codes[i * m + j]] for n rows, summed in float32 in order of j (as
  /// pq8_scan_ref does), so every level returns the same bits.
  void (*scan8)(const uint8_t* codes, size_t n, size_t m, const float* lut, float* out);
};

/// The scalar reference of Pq4ScanKernels::scan8.
void pq8_scan_ref(const uint8_t* codes, size_t n, size_t m, const float* lut, float* out);

/// The kernel for the active SIMD level.
const Pq4ScanKernels& pq4_scan_kernels();

/// The kernel compiled for `level` (falls back to the next lower compiled+supported level).
const Pq4ScanKernels& pq4_scan_kernels_at(SimdLevel level);

/// IVF lists of PQ codes of the residuals to each list's centroid (inner product). Rows live in
/// a row space of their own: list l is rows [row0[l], row0[l] + len[l]). 4-bit codes: row0[l] a
/// multiple of kPqBlock, its codes the packed blocks from row0[l] / kPqBlock. 8-bit codes: row r's
/// m code bytes at blocks[r * m]. pos[r] is row r's position (-1 for padding), exact[pos * d] its
/// float32 vector for re-scoring (or exact_f16[pos * d] its float16 one). With `start` instead of
/// `pos` (the layout of a growing index), row i of list l is position start[l] + i. `allowed`
/// (per position, nullptr: all) admits rows, as a filter or the live mask of IVF lists.
struct IvfPqView {
  const float* centroids = nullptr;  // nlist x d
  size_t nlist = 0;
  const PqCodebook* pq = nullptr;   // bits 4 or 8
  const uint8_t* blocks = nullptr;  // 4-bit packed blocks or 8-bit code rows
  const int64_t* row0 = nullptr;
  const int64_t* len = nullptr;
  const int64_t* pos = nullptr;
  const float* exact = nullptr;
  const uint16_t* exact_f16 = nullptr;  // float16 rows for re-scoring, used when exact is nullptr
  size_t n_exact = 0;                   // rows of exact: a position outside [-1, n_exact) throws
  const int64_t* start = nullptr;       // used when pos is nullptr
  const uint8_t* allowed = nullptr;     // n_exact entries
  /// Squared L2 distance instead of inner product: lists by nearest centroid, each list's table
  /// built for the query's residual to its centroid (-|q - c - r|^2 = -|q - c|^2 + sum over
  /// j of 2 (q - c)_j . r_j - |r_j|^2), rows re-scored by squared distance, ascending.
  bool l2 = false;
  /// When set (made from centroids), the lists are picked by its int8 first pass: the same
  /// lists and scores as a full float32 scan of the centroids, at a fraction of the reads.
  const CoarseCentroids* coarse = nullptr;
};

/// Top-k positions by inner product for one query: the nprobe lists of the best centroids are
/// scanned (q . x ~ q . centroid + the table sum of the residual's codes; one table serves
/// every list), the k * rerank best estimates (ties to the lower position) are re-scored
/// exactly against the float32 rows, or the float16 rows (q . the row decoded to float32,
/// summed in float32: the scores returned). While fewer than k admitted rows have been seen, more lists are scanned in
/// centroid order (a filter or deletes never leave a query short). Scores descending, ties to the lower position.
/// Returns how many were written (at most k). Throws std::invalid_argument on a position outside exact (checked for the
/// rows whose estimate could enter the k * rerank best, so a search costs no O(n)). Allocates nothing per call once a
/// thread has searched an index of this shape.
size_t ivf_pq_search_one(const IvfPqView& v, const float* q, size_t k, size_t nprobe, size_t rerank, int64_t* out_pos,
                         float* out_scores);

/// Queries a worker takes at a time from a batch: their tables and queues stay in cache.
inline constexpr size_t kSearchChunk = 64;

/// ivf_pq_search_one for the nq rows of Q (nq x d): each query scans its lists best first as
/// there, except small re-scoring pools and 8-bit codes shared by many queries of a chunk,
/// scanned list by list (kListOrderPool in pq.cpp); chunks run on `threads` workers (0: one per CPU). Writes k
/// results per query (out_pos and out_scores nq x k), padded with -1 and NaN; query i's
/// equal ivf_pq_search_one's for that query.
void ivf_pq_search_batch(const IvfPqView& v, const float* Q, size_t nq, size_t k, size_t nprobe, size_t rerank,
                         int threads, int64_t* out_pos, float* out_scores);

}  // namespace ragfind::dense
