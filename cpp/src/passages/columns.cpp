// Lookups in the passage columns; see ragfind/passages/columns.hpp.
#include "ragfind/passages/columns.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace ragfind::passages {
namespace {

std::string_view span(const ColumnsView& v, int64_t lo, int64_t hi, const char* what) {
  if (lo < 0 || hi < lo || hi > v.arena_size)
    throw std::out_of_range(std::string("passage columns: the ") + what + " span [" + std::to_string(lo) + ", " +
                            std::to_string(hi) + ") lies outside the arena of " + std::to_string(v.arena_size) +
                            " bytes (corrupt columns)");
  return {v.arena + lo, static_cast<size_t>(hi - lo)};
}

}  // namespace

int64_t find_row(const ColumnsView& v, int64_t id) {
  const int64_t* end = v.keys + v.n_keys;
  const int64_t* at = nullptr;
  // Ids are dense and ascending until chunks are deleted: try id's place in that case first.
  if (v.n_keys > 0) {
    const int64_t guess = id - v.keys[0];
    if (guess >= 0 && guess < v.n_keys && v.keys[guess] == id) at = v.keys + guess;
  }
  if (at == nullptr) {
    at = std::lower_bound(v.keys, end, id);
    if (at == end || *at != id) return -1;
  }
  const int64_t row = v.slots[at - v.keys];
  if (row < 0 || row >= v.n_chunks)
    throw std::out_of_range("passage columns: chunk " + std::to_string(id) + " maps to row " + std::to_string(row) +
                            " of " + std::to_string(v.n_chunks) + " (corrupt columns)");
  return row;
}

PassageRow read_row(const ColumnsView& v, int64_t row) {
  if (row < 0 || row >= v.n_chunks)
    throw std::out_of_range("passage columns: row " + std::to_string(row) + " of " + std::to_string(v.n_chunks));
  const int64_t* c = v.chunks + row * kChunkColumns;
  const int64_t doc = c[kDoc];
  if (doc < 0 || doc >= v.n_docs)
    throw std::out_of_range("passage columns: row " + std::to_string(row) + " names document row " +
                            std::to_string(doc) + " of " + std::to_string(v.n_docs) + " (corrupt columns)");
  const int64_t* d = v.docs + doc * kDocColumns;
  return PassageRow{c[kId],
                    c[kStart],
                    c[kEnd],
                    span(v, d[kDocIdLo], d[kDocIdHi], "document id"),
                    span(v, c[kTextLo], c[kTextHi], "text"),
                    span(v, d[kTitleLo], d[kTitleHi], "title"),
                    span(v, d[kMetaLo], d[kMetaHi], "metadata"),
                    span(v, c[kContextLo], c[kContextHi], "context")};
}

std::vector<FoundRow> read_rows(const ColumnsView& v, const int64_t* ids, int64_t n) {
  struct Found {
    int64_t at, row;
  };
  std::vector<Found> found;
  found.reserve(static_cast<size_t>(std::max<int64_t>(n, 0)));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = find_row(v, ids[i]);
    if (row < 0) continue;
    __builtin_prefetch(v.chunks + row * kChunkColumns);
    found.push_back({i, row});
  }
  // Only hints: read_row checks every offset it follows.
  for (const Found& f : found) {
    const int64_t* c = v.chunks + f.row * kChunkColumns;
    if (c[kDoc] >= 0 && c[kDoc] < v.n_docs) __builtin_prefetch(v.docs + c[kDoc] * kDocColumns);
    // The whole text (up to 8 KB): its lines then arrive together, not one miss after another.
    const int64_t lo = std::max<int64_t>(c[kTextLo], 0), hi = std::min({c[kTextHi], lo + 8192, v.arena_size});
    for (int64_t at = lo; at < hi; at += 64) __builtin_prefetch(v.arena + at);
  }
  std::vector<FoundRow> out;
  out.reserve(found.size());
  for (const Found& f : found) {
    out.push_back({f.at, read_row(v, f.row)});
    // The document's strings, one more dependent read each: started now, not when built.
    const PassageRow& r = out.back().row;
    __builtin_prefetch(r.doc_id.data());
    __builtin_prefetch(r.title.data());
    __builtin_prefetch(r.metadata.data());
  }
  return out;
}

}  // namespace ragfind::passages
