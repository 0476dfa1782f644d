// Rank fusion (reciprocal rank fusion) and score fusion (normalise, then combine) of several
// ranked lists into one. Used by the hybrid Retriever (BM25 + dense + other stages, and several
// phrasings of one question: RAG-Fusion), and exposed as ragfind.rrf / ragfind.fuse_scores.
//
// The work is three linear steps, sized for "3 lists x 1,000 candidates in a few microseconds":
//   1. intern: every id gets a dense code in first-appearance order (list 0 rank 0 first). Ids in
//      a small non-negative range (max id < 4x the number of input ids: the row numbers indexes
//      hand out) go through a direct-mapped array, others through an open-addressing hash table;
//      both are stamped per call and per list, so nothing is cleared between calls and the same
//      stamp catches an id repeated inside one list. When the caller already has dense codes (the
//      Python binding after interning str ids) there is no table at all.
//   2. accumulate: each list's contribution is added into an array indexed by code (RRF does it
//      in the interning pass itself; score fusion normalises each list first).
//   3. rank, exactly, ties by first appearance. RRF with equal positive weights: an id held by
//      one list only scores w / (k + rank), so those ids are already ranked per list, and at equal
//      rank the lists' order is their code order; they are read off rank by rank. The ids held by
//      several lists (usually a quarter) are radix-sorted, and each one's place among the others
//      follows from inverting w / (k + rank) at its score. Otherwise: an LSD radix sort of all
//      codes on a 16-bit prefix of their scores, then an exact fix-up of prefix ties.
// Scratch buffers live in a Fuser (the binding keeps one per thread), so steady-state calls do
// not allocate; the ranking is written straight into the caller's buffers (numpy arrays
// allocated once the fused size is known).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace ragfind::fusion {

/// One input list: ids best first (position = rank) and, for score fusion, their scores.
struct RankedList {
  const int64_t* ids = nullptr;
  const double* scores = nullptr;  // may be null for rank fusion
  size_t size = 0;
};

/// How each list's scores are rescaled before they are combined (names as in ranx).
enum class Norm {
  None,    // raw scores
  MinMax,  // (s - min) / (max - min); a list whose scores are all equal maps to 1
  ZScore,  // (s - mean) / std (population std); a constant list maps to 0
  Max,     // s / max (max > 0 required, else the list maps to its raw scores)
  Sum,     // (s - min) / sum(s - min) (Montague & Aslam); a constant list maps to 1/n
};

/// How the rescaled scores of one id across lists become its fused score.
enum class Combine {
  Sum,  // CombSUM / weighted sum: sum_i w_i * norm_i(s); missing lists add 0
  Mnz,  // CombMNZ: the weighted sum times the number of lists holding the id
  Max,  // CombMAX: max_i w_i * norm_i(s) over the lists holding the id
};

/// Raised when an id appears twice in one list (its rank would be ambiguous).
struct DuplicateIdError : std::invalid_argument {
  size_t list, position, first_position;
  DuplicateIdError(size_t l, size_t p, size_t fp, const std::string& what)
      : std::invalid_argument(what), list(l), position(p), first_position(fp) {}
};

/// The fused ranking, best first.
struct Fused {
  std::vector<int64_t> ids;
  std::vector<double> scores;
};

/// Options shared by both fusions. `weights` (one per list, or null for all 1) scale each list's
/// contribution. `top_k` = 0 keeps every fused id. When `dense_codes` > 0 the ids are promised
/// to be codes in [0, dense_codes) already given in first-appearance order (the str-id path of
/// the binding); the hash table is skipped.
struct Options {
  const double* weights = nullptr;
  size_t top_k = 0;
  size_t dense_codes = 0;
};

struct Workspace;

/// Fusion scratch plus the last result. Not thread-safe: use one per thread.
class Fuser {
 public:
  Fuser();
  ~Fuser();
  Fuser(const Fuser&) = delete;
  Fuser& operator=(const Fuser&) = delete;

  /// Reciprocal rank fusion (Cormack et al., SIGIR 2009): score(d) = sum_i w_i / (k + rank_i(d)),
  /// rank counted from 1. Returns the number of fused ids (top_k applied), for write().
  /// Throws std::invalid_argument for k < 0 or a non-finite weight, and DuplicateIdError for an
  /// id repeated inside one list.
  size_t rrf(const std::vector<RankedList>& lists, double k, const Options& options);

  /// Score fusion: per-list normalisation then combination. Every list needs scores (finite;
  /// std::invalid_argument otherwise). Throws DuplicateIdError like rrf. Returns like rrf.
  size_t fuse_scores(const std::vector<RankedList>& lists, Norm norm, Combine combine, const Options& options);

  /// Writes the last fusion's ranking, best first, into ids[0, n) and scores[0, n), n as
  /// returned by rrf / fuse_scores (with dense_codes, the ids written are the codes). The input
  /// lists need not outlive the fusion call.
  void write(int64_t* ids, double* scores);

 private:
  std::unique_ptr<Workspace> ws_;
};

/// Convenience forms of Fuser::rrf / fuse_scores + write into vectors (a thread-local Fuser).
void rrf(const std::vector<RankedList>& lists, double k, const Options& options, Fused& out);
void fuse_scores(const std::vector<RankedList>& lists, Norm norm, Combine combine, const Options& options, Fused& out);

/// Parses "none" | "min-max" | "z-score" | "max" | "sum" (also "minmax", "zscore", "zmuv").
Norm parse_norm(const std::string& name);

/// Parses "sum" (alias "wsum", "combsum") | "mnz" ("combmnz") | "max" ("combmax").
Combine parse_combine(const std::string& name);

}  // namespace ragfind::fusion
