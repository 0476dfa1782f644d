// Term positions of a BM25 index, kept beside the postings (not inside them) so that phrase
// queries need nothing from the posting layout but doc ids per term.
//
// Layout: per document slot, its analyzed token stream as varints of (term id << 1 | overlap),
// overlap marking identifier parts and compounds that do not count towards the length; they
// take the position of the word before them. Positions count the words that remain after
// stopword removal (a removed stopword leaves no gap). A slot's bytes are
// bytes[offsets[slot] .. offsets[slot + 1]). Slots follow the index's: append with every add,
// drop the slots compact() drops, truncate when an add is aborted.
//
// For search, a term-major copy is kept in memory beside it (built as documents are added,
// rebuilt after a compaction or load; never saved): per term the slots holding it and their
// positions (per slot: varint byte length, then delta-coded varint positions), with the byte
// offset of every 8th entry, so a phrase reads only its own words' positions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ragfind::bm25 {

/// One term's slots and positions (the search-side copy).
struct TermPositions {
  static constexpr std::size_t kBlock = 8;
  std::vector<std::uint32_t> slots;          // ascending
  std::vector<std::uint8_t> bytes;           // per slot: varint length, then delta varints
  std::vector<std::uint64_t> block_offsets;  // byte offset of entry kBlock * i
  /// Positions (ascending) of entry i.
  void positions(std::size_t i, std::vector<std::int64_t>& out) const;
  /// Entry i's encoded positions: returns their first byte, len receives their byte count
  /// (an upper bound of how many positions there are: every varint takes a byte or more).
  const std::uint8_t* entry(std::size_t i, std::uint64_t& len) const;
  static void decode(const std::uint8_t* p, std::uint64_t len, std::vector<std::int64_t>& out);
};

class PositionStore {
 public:
  std::uint32_t num_slots() const { return static_cast<std::uint32_t>(offsets_.size() - 1); }
  std::size_t memory_bytes() const;
  /// The term-major copy of a term (nullptr when no document holds it).
  const TermPositions* term(std::uint32_t t) const { return t < by_term_.size() ? &by_term_[t] : nullptr; }

  /// Appends n documents (the arguments of InvertedIndex::add_documents; counted may be null).
  void append(const std::uint32_t* terms, const std::uint8_t* counted, const std::size_t* doc_offsets, std::size_t n);
  /// Keeps the first `slots` documents (undoes an aborted add).
  void truncate(std::uint32_t slots);
  /// Removes the given slots (sorted, unique); later slots move down in order.
  void compact(const std::vector<std::uint32_t>& dropped);
  /// Only the slots with keep[slot] != 0, in order (what a save writes).
  PositionStore filtered(const std::uint8_t* keep) const;

  /// For each i, the sorted positions in `slot` of terms[i] (out resized to n).
  void positions(std::uint32_t slot, const std::uint32_t* terms, std::size_t n,
                 std::vector<std::vector<std::int64_t>>& out) const;

  const std::vector<std::uint64_t>& offsets() const { return offsets_; }
  const std::vector<std::uint8_t>& bytes() const { return bytes_; }
  /// Installs loaded data after checking it (monotone offsets ending at bytes.size(), every
  /// varint complete, term ids < num_terms); returns false (leaving this unchanged) if bad.
  bool assign(std::vector<std::uint64_t> offsets, std::vector<std::uint8_t> bytes, std::uint64_t num_terms);

 private:
  void index_slots(std::uint32_t from);  // extends by_term_ with slots [from, num_slots())
  void rebuild();

  std::vector<std::uint64_t> offsets_{0};
  std::vector<std::uint8_t> bytes_;
  std::vector<TermPositions> by_term_;
};

}  // namespace ragfind::bm25
