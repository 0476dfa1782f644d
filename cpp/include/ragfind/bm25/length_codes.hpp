// One byte per document for the length normalisation a query reads, instead of a float.
//
// A posting's document-side weight depends on the document only through its length (norm =
// k1 * L(dl), L for bm25l). The index gives each of the kCodes most common lengths a code
// and every document the code of its length (kEscape for the rare others, whose norm is
// computed from the length when read). A query reads one byte per candidate (1 MB for a million
// documents, which stays in L2 where a float per document missed it) and looks the weight up in
// a per-code table for tf 1 .. kTableTf (94% of BM25 postings have tf 1), which also saves the
// division. The table holds the very floats DocWeight computes from the same norm, so every
// score is bit-identical to computing it per posting.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ragfind/bm25/doc_weight.hpp"
#include "ragfind/bm25/scoring.hpp"

namespace ragfind::bm25 {

inline constexpr unsigned kCodes = 255;
inline constexpr unsigned kEscape = kCodes;
inline constexpr unsigned kTableTf = 8;

/// Per-slot length codes and the length each code stands for.
struct LengthCodes {
  std::vector<std::uint8_t> code;       // per slot
  std::vector<std::uint32_t> length;    // per code (at most kCodes)
  std::vector<std::uint8_t> of_length;  // per length up to the longest coded one
  std::size_t built = 0;                // slots the codes were chosen from
  std::size_t appended_escapes = 0;     // escapes among the slots appended since
  /// Codes for n documents of lengths len (the most common lengths first; ties by length).
  void build(const std::uint32_t* len, std::size_t n);
  /// Codes for the slots from code.size() to n - 1 appended with the codes chosen before (a
  /// one-document add then costs O(1), not O(n)); false, changing nothing, once the codes no
  /// longer fit: escapes past 1/64 of the slots, or the slots doubled since they were chosen.
  bool extend(const std::uint32_t* len, std::size_t n);
};

/// The norms and document-side weights of every code under one variant and avgdl.
struct WeightTable {
  float norm[kCodes];
  float weight[kCodes * kTableTf];  // [code * kTableTf + tf - 1]
};

/// The norm a document of length dl gets (as the index computes it for every document).
inline float doc_norm(const Params& p, std::uint32_t dl, double avgdl) {
  const double L = length_norm(p, dl, avgdl);
  return static_cast<float>(p.method == Method::BM25L ? L : p.k1 * L);
}

/// Fills a table for the codes' lengths under p and avgdl.
void build_weight_table(const Params& p, double avgdl, const LengthCodes& codes, WeightTable& t);

/// The document-side weight of a posting, from the document's code: what DocWeight<M> gives
/// for (tf, the document's norm), read from the table where it can be. BM25's scorer policy for
/// the generic query algorithms (inverted/maxscore.hpp, inverted/blockmax.hpp).
template <Method M>
struct Weigher {
  DocWeight<M> dw;
  Params params;
  double avgdl;
  const std::uint8_t* code;  // per local doc of a segment (shifted by its base)
  const std::uint32_t* len;  // the same for the lengths (escapes only)
  const WeightTable* table;

  Weigher(const Params& p, double avg, const std::uint8_t* code_, const std::uint32_t* len_, const WeightTable* t)
      : dw(p), params(p), avgdl(avg), code(code_), len(len_), table(t) {}

  /// What the generic query algorithms' cursors prefetch ahead of scoring (inverted/maxscore.hpp).
  const std::uint8_t* prefetch() const { return code; }
  float norm(std::uint32_t doc) const {
    const unsigned c = code[doc];
    return c != kEscape ? table->norm[c] : doc_norm(params, len[doc], avgdl);
  }
  inline float operator()(std::uint32_t doc, std::uint32_t tf) const {
    const unsigned c = code[doc];
    if (c != kEscape) [[likely]] {
      if (tf <= kTableTf) [[likely]]
        return table->weight[c * kTableTf + tf - 1];
      return dw(tf, table->norm[c]);
    }
    return dw(tf, doc_norm(params, len[doc], avgdl));
  }
};

}  // namespace ragfind::bm25
