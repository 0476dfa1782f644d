// The metadata (payload) index: per field, the rows (chunks) holding each value, so that a
// metadata filter becomes a set of rows without reading any document.
//
// Rows are numbered in insertion order; a deleted row keeps its number (a tombstone) and is
// dropped from every result by the live mask. Postings are sorted runs of row numbers while
// sparse and bitmaps once dense (appending keeps runs sorted); a filter is evaluated into one
// bitmap per node, so AND, OR and NOT are word operations and a leaf costs the postings it reads.
// An add appends (amortised O(1)); nothing is rebuilt for a write, whatever the corpus size.
//
// Every write is logged by row, so a filter evaluated once is kept up to date by patched():
// a write touches one row, and only that row is tested again (per-row value columns answer the
// test without a search), instead of the whole filter being evaluated again.
//
// Numbers are kept as doubles (ints beyond 2^53 compare as their nearest double) in a sorted
// (value, row) array plus an unsorted tail that is merged in once it reaches a sixteenth of the
// array: an add costs amortised O(1) work, never a rebuild of the field. A range reads its slice
// of the array (measured faster than a branch-free scan of a per-row value column even at 50%),
// OR-ing the bitmaps of the equal slices it covers whole.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ragfind/common/paged_bits.hpp"

namespace ragfind::metadata {

/// What a metadata value is; Other (a list or an object) only counts as present.
enum class Kind : std::uint8_t { Null = 0, Str = 1, Num = 2, Bool = 3, Other = 4 };

/// A value going in or a filter operand (str points into memory the caller keeps alive).
struct Value {
  Kind kind = Kind::Null;
  double num = 0.0;
  bool flag = false;
  std::string_view str;
};

/// One bit per row.
class Bitmap {
 public:
  Bitmap() = default;
  /// All clear, n_bits long.
  explicit Bitmap(std::size_t n_bits) : words_((n_bits + 63) / 64, 0), n_bits_(n_bits) {}
  /// Bits (rows) covered.
  std::size_t size() const { return n_bits_; }
  /// Sets bit i.
  void set(std::uint32_t i) { words_[i >> 6] |= std::uint64_t{1} << (i & 63); }
  /// Bit i.
  bool test(std::uint32_t i) const { return (words_[i >> 6] >> (i & 63)) & 1; }
  /// The 64-bit words, bit r of word r / 64 for row r.
  std::vector<std::uint64_t>& words() { return words_; }
  /// The 64-bit words (read-only).
  const std::vector<std::uint64_t>& words() const { return words_; }
  /// Number of set bits.
  std::size_t count() const;
  /// The bits in pages (see common::PagedBits).
  common::PagedBits paged() const { return {words_.data(), words_.size(), n_bits_}; }

 private:
  friend class MetadataIndex;
  std::vector<std::uint64_t> words_;
  std::size_t n_bits_ = 0;
};

/// The rows holding one value: a sorted run while sparse, a bitmap once dense (a run costs a
/// store per row to apply, a bitmap a word per 64 rows; the switch is where they cost the same
/// order, measured in bench/pipeline.md).
class Postings {
 public:
  /// Adds a row above every row added before.
  void add(std::uint32_t row);
  /// Sets these rows in `out`.
  void apply(Bitmap& out) const;
  /// Clears these rows in `out`.
  void clear_in(Bitmap& out) const;
  /// True when `row` is one of these rows.
  bool test(std::uint32_t row) const;
  /// The rows, ascending.
  std::vector<std::uint32_t> rows() const;
  /// True once held as a bitmap.
  bool dense() const { return dense_; }

 private:
  std::vector<std::uint32_t> run_;
  std::vector<std::uint64_t> bits_;
  bool dense_ = false;
};

/// A filter: a tree of leaves over one field each, combined by And, Or and Not.
struct Node {
  enum class Op : std::uint8_t { All, Nothing, Eq, Range, Present, Valued, And, Or, Not };
  Op op = Op::All;
  std::string field;    // leaves
  Value value;          // Eq: a Str, Num or Bool operand; Range: kind Str or Num
  std::string text;     // Eq/Range on strings: owns value.str / the lower bound
  std::string text_hi;  // Range on strings: the upper bound
  bool has_lo = false, has_hi = false, lo_inclusive = true, hi_inclusive = true;
  double lo = 0.0, hi = 0.0;  // Range on numbers
  std::vector<Node> children;
};

/// The rows holding each value of each field, maintained on add and remove.
class MetadataIndex {
 public:
  MetadataIndex() = default;
  MetadataIndex(MetadataIndex&&) = default;
  MetadataIndex& operator=(MetadataIndex&&) = default;
  MetadataIndex(const MetadataIndex&) = delete;  // the string maps view their own storage
  MetadataIndex& operator=(const MetadataIndex&) = delete;

  /// Live rows.
  std::size_t size() const { return n_live_; }
  /// Rows ever added (tombstones included).
  std::size_t rows() const { return row_ids_.size(); }
  /// True when `chunk_id` is a live row.
  bool contains(std::int64_t chunk_id) const { return find(chunk_id) >= 0; }
  /// Appends a row for `chunk_id` (not live yet: the caller checked it is absent); its number.
  std::uint32_t append_row(std::int64_t chunk_id);
  /// Records that row `row` holds `value` under `field` (each field once per row).
  void put(std::uint32_t row, std::string_view field, const Value& value);
  /// Removes the live rows of these chunk ids (others are ignored); how many were removed.
  std::size_t remove(const std::vector<std::int64_t>& chunk_ids);
  /// The live rows matching `node`.
  Bitmap evaluate(const Node& node) const;
  /// Incremented by every row added or removed.
  std::uint64_t generation() const { return generation_; }
  /// The live rows matching `node` now, given `rows`, what evaluate(node) gave at generation
  /// `since`: a copy with only the rows written since tested again (sharing the pages of
  /// `rows` no write touched), or evaluate(node) once a patch would cost more or the write log
  /// no longer reaches back to `since`. With `count` (the set rows of `rows` on entry), the
  /// result's set rows on return: a patch counts only the rows it tests.
  common::PagedBits patched(const Node& node, const common::PagedBits& rows, std::uint64_t since,
                            std::size_t* count = nullptr) const;
  /// Whether row `row` holds values matching `node` (liveness aside): one row of evaluate().
  bool matches(const Node& node, std::uint32_t row) const;
  /// True while every row r holds chunk id r: a row bitmap is then a bitmap over chunk ids.
  bool ids_are_rows() const { return identity_; }
  /// The chunk ids of the set rows, ascending.
  std::vector<std::int64_t> ids_of(const Bitmap& rows) const;
  std::vector<std::int64_t> ids_of(const common::PagedBits& rows) const;
  /// Every live chunk id, ascending.
  std::vector<std::int64_t> live_ids() const;
  /// Bit (1 << Kind) per kind of value `field` has held; 0 for a field never seen.
  std::uint8_t kinds(std::string_view field) const;
  /// Incremented whenever a field holds a kind of value it never held (a new field included):
  /// while it stays the same, so does every field's kinds().
  std::uint64_t kinds_version() const { return kinds_version_; }
  /// Field names ever seen.
  std::vector<std::string> fields() const;
  /// The index as bytes (load() reads them back).
  std::string dump() const;
  /// An index from dump() bytes; std::invalid_argument naming what is malformed.
  static MetadataIndex load(std::string_view bytes);

 private:
  struct Field {
    std::uint8_t kinds = 0;
    Postings present;  // rows holding the key, null included
    Postings nulls;
    Postings bools[2];
    std::deque<std::string> strs;  // a deque: the map's views stay valid as it grows
    std::unordered_map<std::string_view, std::uint32_t> str_ids;
    std::vector<Postings> str_rows;
    std::vector<std::pair<double, std::uint32_t>> nums;  // sorted
    std::vector<std::pair<double, std::uint32_t>> tail;  // unsorted, merged into nums
    // Equal slices of nums (a slice per kBuckets-th), each as a bitmap of its rows: a range
    // ORs the slices it covers and sets rows one by one only in the two it cuts.
    std::vector<std::vector<std::uint64_t>> buckets;
    // Per row: its number (NaN: none) and its string's index in strs (kNoStr: none), so that
    // matches() tests one row in O(1); grown on demand.
    std::vector<double> num_of_row;
    std::vector<std::uint32_t> str_of_row;
  };
  static constexpr std::uint32_t kNoStr = UINT32_MAX;

  std::int64_t find(std::int64_t chunk_id) const;
  void merge_tail(Field& f);
  static void build_buckets(Field& f);
  void leaf(const Node& node, Bitmap& out) const;
  void eval_into(const Node& node, Bitmap& out) const;
  void push_row(std::int64_t chunk_id, bool live);
  void log_write(std::uint32_t row);
  bool leaf_matches(const Node& node, std::uint32_t row) const;

  std::vector<std::int64_t> row_ids_;
  Bitmap live_;  // grows with the rows
  std::size_t n_live_ = 0;
  bool identity_ = true;                                    // row r holds chunk id r: no map needed
  bool ascending_ = true;                                   // chunk ids grow with rows: results need no sort
  std::unordered_map<std::int64_t, std::uint32_t> row_of_;  // live rows, once not identity
  std::unordered_map<std::string, Field> fields_;
  std::uint64_t generation_ = 0;
  std::uint64_t kinds_version_ = 0;
  // (generation, row) of each write after generation log_floor_, oldest first; halved when long.
  std::vector<std::pair<std::uint64_t, std::uint32_t>> log_;
  std::uint64_t log_floor_ = 0;
};

}  // namespace ragfind::metadata
