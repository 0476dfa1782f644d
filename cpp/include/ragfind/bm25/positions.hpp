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
// rebuilt after a compaction or load; never saved, so its layout is free to change): per term
// the slots holding it, and per slot its positions as delta-coded varints, found in O(1) from
// the end offsets kept per entry (relative to the entry's block of kBlock entries, which holds
// the absolute offset). Each block also keeps what bounds a score before any position is read:
// the shortest document of the block, the most positions of an entry, the shortest document
// holding the term more than once, and which of its entries those are (a search whose
// threshold only documents with 2+ positions can beat reads just those); each entry keeps its
// position count and its document's length in a byte (rounded down), so that bounds read no
// per-document array.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ragfind::bm25 {

/// A document length in one byte, rounded down (so a score bound computed from it is still
/// a bound): exact below 32, then 16 steps per power of two; 255 holds every length >= 507904.
inline std::uint8_t length_code(std::uint32_t len) {
  if (len < 32) return static_cast<std::uint8_t>(len);
  int e = 31;
  while (!(len >> e)) --e;  // e >= 5
  if (e > 18) return 255;
  return static_cast<std::uint8_t>(32 + (e - 5) * 16 + ((len >> (e - 4)) & 15));
}
/// The smallest length with a code (code_length(length_code(n)) <= n).
inline std::uint32_t code_length(std::uint8_t code) {
  if (code < 32) return code;
  const int e = 5 + (code - 32) / 16;
  return (16u + static_cast<std::uint32_t>((code - 32) % 16)) << (e - 4);
}

/// One term's slots and positions (the search-side copy).
struct TermPositions {
  static constexpr std::size_t kBlock = 32;  // <= 256: multi holds offsets in a block as bytes
  struct Block {
    std::uint64_t base;          // byte offset of the block's first entry
    std::uint32_t multi_begin;   // its entries with 2+ positions: multi[multi_begin .. next block's)
    std::uint32_t max_tf;        // most positions of one entry
    std::uint8_t min_len;        // length code of its shortest document
    std::uint8_t min_len_multi;  // length code of its shortest document with 2+ positions
  };
  std::vector<std::uint32_t> slots;   // ascending
  std::vector<std::uint16_t> impact;  // per entry: length code << 8 | min(positions, 255)
  std::vector<std::uint32_t> ends;    // per entry: end of its bytes, relative to its block's base
  std::vector<std::uint8_t> bytes;    // per entry: its positions, delta-coded varints
  std::vector<Block> blocks;          // per kBlock entries
  std::vector<std::uint8_t> multi;    // per block, the offsets in it of the entries with 2+ positions

  std::size_t size() const { return slots.size(); }
  /// Entry i's encoded positions: returns their first byte, len receives their byte count.
  const std::uint8_t* entry(std::size_t i, std::uint32_t& len) const {
    const std::uint32_t begin = i % kBlock ? ends[i - 1] : 0;
    len = ends[i] - begin;
    return bytes.data() + blocks[i / kBlock].base + begin;
  }
  /// An upper bound of entry i's position count (exact below 255; beyond, its byte count:
  /// every varint takes a byte or more).
  std::uint32_t tf_bound(std::size_t i) const {
    const std::uint32_t tf = impact[i] & 255u;
    return tf < 255 ? tf : ends[i] - (i % kBlock ? ends[i - 1] : 0);
  }
  /// The block's entries with 2+ positions: offsets (from the block's first entry) in [*b, *e).
  void multi_range(std::size_t block, const std::uint8_t*& b, const std::uint8_t*& e) const {
    b = multi.data() + blocks[block].multi_begin;
    e = multi.data() + (block + 1 < blocks.size() ? blocks[block + 1].multi_begin : multi.size());
  }
  /// Positions (ascending) of entry i.
  void positions(std::size_t i, std::vector<std::int64_t>& out) const;
  static void decode(const std::uint8_t* p, std::uint32_t len, std::vector<std::int64_t>& out);

  /// Reads one entry's positions in order without storing them (what decode() gives).
  class Reader {
   public:
    Reader(const std::uint8_t* p, std::uint32_t len) : p_(p), end_(p + len) {}
    /// The next position into out; false at the end (or at a cut-off varint, as decode()).
    bool next(std::int64_t& out) {
      if (p_ >= end_) return false;
      std::uint64_t v = 0;
      for (int shift = 0;; shift += 7) {
        if (shift >= 64 || p_ >= end_) return false;
        const std::uint8_t b = *p_++;
        v |= static_cast<std::uint64_t>(b & 0x7F) << shift;
        if (!(b & 0x80)) break;
      }
      pos_ += static_cast<std::int64_t>(v);
      out = pos_;
      return true;
    }

   private:
    const std::uint8_t* p_;
    const std::uint8_t* end_;
    std::int64_t pos_ = 0;
  };
  /// Appends the entry of `slot` (after every slot already held): positions ascending, >= 0,
  /// in a document of `len` counted tokens.
  void push(std::uint32_t slot, const std::int64_t* pos, std::size_t n, std::uint32_t len);
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
