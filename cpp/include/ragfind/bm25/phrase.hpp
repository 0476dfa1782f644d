// Phrase queries over an InvertedIndex plus its PositionStore, mixed with plain terms.
//
// Matching (Lucene's sloppy phrase, made exact and checkable): for a phrase of words
// t_0 .. t_{n-1} and slop s, every position a of t_0 in a document anchors at most one match:
// the cheapest choice of distinct positions p_i of t_i (p_0 = a) with cost
// max(p_i - i) - min(p_i - i) <= s. A gap of one word costs 1; a swap of two words costs 2.
// Phrase frequency = the sum over anchors with a match of 1 / (1 + cost): for s = 0 the number
// of exact occurrences, for s > 0 Lucene's sloppy frequency.
//
// Scoring (Lucene's PhraseWeight): a phrase is a pseudo-term with idf = the sum of its words'
// idfs (repeats count) and tf = its phrase frequency, saturated and length-normalised by the
// index's variant like any term. A query scores the sum of its plain terms' and phrases'
// parts (a boolean OR: a document needs one of them). Evaluation is exact: over the
// intersection of the phrase words' position lists, and for a phrase alone with score bounds
// that skip only documents (and blocks of them) that provably cannot enter the top k. The
// bounds: pf <= tf(t_0) (one match per anchor), and pf <= tf(t_i) * (1 + 2 * sum over
// d = 1..s of 1 / (1 + d)) for i > 0 (the anchors sharing one position of t_i have distinct
// costs on either side; the factor is 1 for an exact phrase); the score grows with pf and
// falls with the document's length, rounded down to its one-byte code for the bound.
#pragma once

#include <cstdint>
#include <vector>

#include "ragfind/bm25/index.hpp"
#include "ragfind/bm25/positions.hpp"

namespace ragfind::bm25 {

struct PhraseQuery {
  std::vector<std::uint32_t> terms;  // index term ids, in phrase order (>= 2)
  std::int64_t slop = 0;
};

/// The phrase frequency of one document: lists[i] = sorted positions of word i (words with
/// the same term id share a list), terms[i] = its term id; scratch is reused.
double phrase_frequency(const std::vector<const std::vector<std::int64_t>*>& lists,
                        const std::vector<std::uint32_t>& terms, std::int64_t slop, std::vector<std::int64_t>& scratch);

/// Slots (ascending) of the live documents whose postings hold `term` (the posting-access
/// point: the only code here that reads the posting layout).
void term_slots(const InvertedIndex& index, std::uint32_t term, std::vector<std::uint32_t>& out);
/// The same with each posting's term frequency (BM25F reads per-field postings this way).
void term_postings(const InvertedIndex& index, std::uint32_t term, std::vector<std::uint32_t>& slots,
                   std::vector<std::uint32_t>& tfs);

/// Exact top-k of plain terms OR phrases (see above); `allowed` as in InvertedIndex::search.
void search_phrases(const InvertedIndex& index, const PositionStore& positions, const std::vector<QueryTerm>& plain,
                    const std::vector<PhraseQuery>& phrases, std::size_t k, const AllowedSet* allowed,
                    std::vector<ScoredDoc>& out);

/// score(doc) of the same query in double precision (0 when nothing matches).
double score_phrases(const InvertedIndex& index, const PositionStore& positions, const std::vector<QueryTerm>& plain,
                     const std::vector<PhraseQuery>& phrases, std::uint32_t doc,
                     std::vector<double>* phrase_freqs = nullptr);

}  // namespace ragfind::bm25
