// The BM25 index file (little-endian, version 2).
//
//   header (64 bytes)  magic "RAGFBM25", version, header size, file size, section count,
//                      CRC-32 of the payload, of the section table and of the header itself
//   section table      per section: id, element size, offset, byte size, element count
//   payload            the sections, each 64-byte aligned: metadata, analyzer config (JSON
//                      text, opaque here), vocabulary, document lengths, postings (one
//                      segment, dense term directory: term offsets, then per block of 128
//                      postings its last doc id, packed-word offset and two bit widths, then
//                      the packed words; version 1 had flat doc ids and tfs), external ids
//
// save_index writes a temporary file in the target's folder, fsyncs it and renames it over
// the target (then fsyncs the folder), so a crash mid-save leaves the previous file intact.
// load_index checks magic, version, sizes, every checksum and every offset and structural
// invariant (sorted doc ids in range, monotone offsets, unique ids) before trusting anything;
// problems raise IndexFileError. With mmap the postings and lengths borrow from the mapping.
#pragma once

#include <stdexcept>
#include <string>

#include <memory>

#include "ragfind/bm25/index.hpp"
#include "ragfind/bm25/positions.hpp"
#include "ragfind/inverted/doc_ids.hpp"

namespace ragfind::bm25 {

using inverted::DocIds;

/// A missing, foreign, truncated or corrupt index file (a ValueError in Python).
class IndexFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Writing an index file failed (an OSError in Python).
class IndexWriteError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Version 2 stores the postings in blocks (postings.hpp) that a mapped load uses in place;
/// version 1 files (flat doc ids and tfs) still load, encoded into blocks at load.
inline constexpr std::uint32_t kIndexFormatVersion = 2;
inline constexpr std::uint32_t kOldestIndexFormatVersion = 1;

/// Writes the index atomically. Throws IndexWriteError (with errno text) on I/O failure.
/// With positions, two optional sections (12, 13) hold them; readers without them ignore them.
void save_index(const std::string& path, const InvertedIndex& index, const DocIds& ids,
                const std::string& analyzer_json, const PositionStore* positions = nullptr);

/// Loads into an empty index and id map; throws IndexFileError.
/// positions (optional) receives the file's positions when it has them (else stays null).
void load_index(const std::string& path, bool mmap, InvertedIndex& index, DocIds& ids,
                std::unique_ptr<PositionStore>* positions = nullptr);

/// Only the analyzer JSON of a file (validated like load_index).
std::string read_index_metadata(const std::string& path);

}  // namespace ragfind::bm25
