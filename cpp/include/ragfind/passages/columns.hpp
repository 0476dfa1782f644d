// The passage columns of the Retriever's document store, read in place: a UTF-8 byte arena, a
// chunk table and a document table of int64 columns, and the live chunk ids sorted with their
// chunk-table rows. The tables are owned elsewhere (numpy arrays, or a memory map of a saved
// file); a lookup checks every offset it follows, so corrupt columns raise instead of reading
// outside them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace ragfind::passages {

/// Columns of the chunk table, in order (one row of kChunkColumns int64 per chunk).
enum ChunkColumn : int { kId, kDoc, kStart, kEnd, kTextLo, kTextHi, kContextLo, kContextHi, kChunkColumns };
/// Columns of the document table (arena spans of the document id, title and metadata JSON).
enum DocColumn : int { kDocIdLo, kDocIdHi, kTitleLo, kTitleHi, kMetaLo, kMetaHi, kDocColumns };

/// A read-only view of the columns (pointers into arrays owned by the caller).
struct ColumnsView {
  const char* arena = nullptr;
  int64_t arena_size = 0;
  const int64_t* chunks = nullptr;  // n_chunks x kChunkColumns
  int64_t n_chunks = 0;
  const int64_t* docs = nullptr;  // n_docs x kDocColumns
  int64_t n_docs = 0;
  const int64_t* keys = nullptr;   // live chunk ids, ascending
  const int64_t* slots = nullptr;  // their chunk-table rows
  int64_t n_keys = 0;
};

/// One chunk's row, its strings pointing into the arena.
struct PassageRow {
  int64_t id, start, end;
  std::string_view doc_id, text, title, metadata, context;
};

/// The chunk-table row of live chunk `id`, or -1 when it is not live (binary search of keys).
/// Throws std::out_of_range when the row it maps to lies outside the chunk table.
int64_t find_row(const ColumnsView& v, int64_t id);

/// The strings and offsets of chunk-table row `row`. Throws std::out_of_range when the row,
/// its document row or a string span lies outside the tables or the arena.
PassageRow read_row(const ColumnsView& v, int64_t row);

/// One live chunk found by read_rows: its position among the ids asked for, and its row.
struct FoundRow {
  int64_t at;
  PassageRow row;
};

/// The rows of the live chunks among ids[0..n), in their order (absent ids skipped). Every id is
/// looked up before any row is read, and each level (chunk row, document row, text) is
/// prefetched for all of them first, so the cache misses of different ids overlap. Throws as
/// find_row and read_row do.
std::vector<FoundRow> read_rows(const ColumnsView& v, const int64_t* ids, int64_t n);

}  // namespace ragfind::passages
