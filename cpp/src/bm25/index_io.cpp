// Saving and loading BM25 index files (format in index_io.hpp).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "ragfind/bm25/index_io.hpp"
#include "ragfind/common/crash_safety.hpp"
#include "ragfind/common/crc32.hpp"

namespace ragfind::bm25 {

using common::crc32;
using inverted::packed_words;
using inverted::unpack_bits;

namespace {

constexpr char kMagic[8] = {'R', 'A', 'G', 'F', 'B', 'M', '2', '5'};
constexpr std::size_t kHeaderBytes = 64;
constexpr std::size_t kEntryBytes = 40;
constexpr std::size_t kAlign = 64;

enum SectionId : std::uint32_t {
  kMeta = 1,
  kAnalyzer = 2,
  kVocabOffsets = 3,
  kVocabBytes = 4,
  kDocLen = 5,
  kTermOffsets = 6,
  kDocs = 7,
  kTfs = 8,
  kIdsInt = 9,
  kIdsStrOffsets = 10,
  kIdsStrBytes = 11,
  kPosOffsets = 12,  // optional: positions.hpp, per live document
  kPosBytes = 13,
  // Version 2 keeps the postings in blocks (postings.hpp) instead of sections 7 and 8.
  kBlockLast = 14,
  kBlockWords = 15,
  kBlockBits = 16,
  kPacked = 17,
};

struct Meta {
  std::uint32_t method;
  std::uint32_t id_kind;
  double k1, b, delta;
  std::uint64_t num_docs, num_terms, num_postings, total_len;
};
static_assert(sizeof(Meta) == 64, "Meta layout");

struct Entry {
  std::uint32_t id, elem_size;
  std::uint64_t offset, bytes, count, reserved;
};
static_assert(sizeof(Entry) == kEntryBytes, "Entry layout");

std::string errno_text(const std::string& what, const std::string& path) {
  return what + " '" + path + "': " + std::strerror(errno);
}

// ----- writing

struct Writer {
  FILE* f;
  std::uint32_t crc = 0;
  std::uint64_t pos = 0;
  const std::string& path;
  void write(const void* p, std::size_t n) {
    if (n == 0) return;
    if (std::fwrite(p, 1, n, f) != n) throw IndexWriteError(errno_text("cannot write index file", path));
    crc = crc32(crc, p, n);
    pos += n;
  }
  void pad_to(std::uint64_t target) {
    static const char zeros[kAlign] = {};
    while (pos < target) write(zeros, static_cast<std::size_t>(std::min<std::uint64_t>(kAlign, target - pos)));
  }
};

std::uint64_t align_up(std::uint64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

}  // namespace

void save_index(const std::string& path, const InvertedIndex& index, const DocIds& ids,
                const std::string& analyzer_json, const PositionStore* positions) {
  // Only live documents are written, renumbered in order (the file has no tombstones).
  const std::uint64_t num_docs = index.num_docs();
  const std::uint64_t num_terms = index.num_terms();
  const std::uint64_t num_postings = index.num_postings();
  const bool str_ids = ids.kind() == DocIds::Kind::Str;
  const std::uint32_t slots = index.num_slots();
  const bool has_dead = num_docs != slots;
  if (ids.slots() != slots) throw IndexWriteError("index writer: ids and documents disagree (internal error)");
  std::vector<std::uint32_t> new_number;  // per slot, when some are dead
  std::vector<std::uint32_t> live_len;
  if (has_dead) {
    new_number.assign(slots, 0xFFFFFFFFu);
    live_len.reserve(num_docs);
    for (std::uint32_t d = 0; d < slots; ++d)
      if (index.is_live(d)) {
        new_number[d] = static_cast<std::uint32_t>(live_len.size());
        live_len.push_back(index.doc_len(d));
      }
  }

  Meta meta{};
  meta.method = static_cast<std::uint32_t>(index.params().method);
  meta.id_kind = static_cast<std::uint32_t>(ids.kind());
  meta.k1 = index.params().k1;
  meta.b = index.params().b;
  meta.delta = index.params().delta;
  meta.num_docs = num_docs;
  meta.num_terms = num_terms;
  meta.num_postings = num_postings;
  meta.total_len = index.total_len();

  // Postings of live documents, term by term (the file has one segment with a dense
  // directory): a single such segment without dead documents is written as it is, anything
  // else re-encoded here.
  const Segment* as_is = nullptr;
  if (!has_dead && index.segments().size() == 1) {
    const Segment& s = *index.segments().front();
    if (s.compressed && s.term_ids.empty() && s.directory_size() == num_terms) as_is = &s;
  }
  PostingsWriter encoded;
  std::vector<std::uint64_t> term_offsets;
  if (!as_is) {
    encoded.reserve(num_postings);
    term_offsets.reserve(num_terms + 1);
    term_offsets.push_back(0);
    for (std::uint64_t t = 0; t < num_terms; ++t) {
      for (const auto& s : index.segments()) {
        const std::int64_t slot = s->slot_of(static_cast<std::uint32_t>(t));
        if (slot < 0) continue;
        for_each_posting(*s, static_cast<std::size_t>(slot), [&](std::uint32_t local, std::uint32_t tf) {
          const std::uint32_t d = s->base + local;
          if (has_dead && new_number[d] == 0xFFFFFFFFu) return;
          encoded.add(has_dead ? new_number[d] : d, tf);
        });
      }
      encoded.end_list();
      term_offsets.push_back(encoded.num_postings());
    }
    if (encoded.num_postings() != num_postings)
      throw IndexWriteError("index writer: posting count mismatch (internal error)");
  }
  const std::uint64_t num_blocks = as_is ? as_is->num_blocks() : encoded.num_blocks();
  const std::uint64_t* w_offsets = as_is ? as_is->offsets.data() : term_offsets.data();
  const std::uint32_t* w_last = as_is ? as_is->blk_last.data() : encoded.last_.data();
  const std::uint32_t* w_words = as_is ? as_is->blk_word.data() : encoded.word_.data();
  const std::uint8_t* w_bits = as_is ? as_is->blk_bits.data() : encoded.bits_.data();
  const std::uint32_t* w_packed = as_is ? as_is->packed.data() : encoded.packed_.data();
  const std::uint64_t num_words = w_words[num_blocks];

  std::uint64_t id_bytes = 0;
  if (str_ids)
    for (std::size_t i = 0; i < slots; ++i)
      if (index.is_live(static_cast<std::uint32_t>(i))) id_bytes += ids.strs()[i].size();

  std::vector<Entry> entries;
  auto add = [&](std::uint32_t id, std::uint32_t elem, std::uint64_t count) {
    entries.push_back(Entry{id, elem, 0, elem * count, count, 0});
  };
  add(kMeta, sizeof(Meta), 1);
  add(kAnalyzer, 1, analyzer_json.size());
  add(kVocabOffsets, 8, num_terms + 1);
  add(kVocabBytes, 1, index.vocab().bytes().size());
  add(kDocLen, 4, num_docs);
  add(kTermOffsets, 8, num_terms + 1);
  add(kBlockLast, 4, num_blocks);
  add(kBlockWords, 4, num_blocks + 1);
  add(kBlockBits, 1, 2 * num_blocks);
  add(kPacked, 4, num_words);
  if (str_ids) {
    add(kIdsStrOffsets, 8, num_docs + 1);
    add(kIdsStrBytes, 1, id_bytes);
  } else {
    add(kIdsInt, 8, num_docs);
  }
  PositionStore live_positions;
  if (positions) {
    live_positions = positions->filtered(index.live_mask());
    add(kPosOffsets, 8, live_positions.offsets().size());
    add(kPosBytes, 1, live_positions.bytes().size());
  }
  const std::uint64_t header_bytes = kHeaderBytes + kEntryBytes * entries.size();
  std::uint64_t off = align_up(header_bytes);
  for (auto& e : entries) {
    e.offset = off;
    off = align_up(off + e.bytes);
  }
  const std::uint64_t file_size = off;

  // Temporary file next to the target, so the final rename stays on one file system.
  common::remove_stale_temp_files(path);
  std::random_device rd;
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(rd());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw IndexWriteError(errno_text("cannot create temporary file", tmp));
  FILE* f = ::fdopen(fd, "wb");
  if (!f) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw IndexWriteError(errno_text("cannot open temporary file", tmp));
  }
  std::vector<char> iobuf(1 << 20);
  std::setvbuf(f, iobuf.data(), _IOFBF, iobuf.size());
  common::fault_point("bm25.save.created");
  try {
    std::vector<char> head(static_cast<std::size_t>(header_bytes), 0);
    if (std::fwrite(head.data(), 1, head.size(), f) != head.size())
      throw IndexWriteError(errno_text("cannot write", tmp));
    Writer w{f, 0, head.size(), tmp};
    for (const auto& e : entries) {
      w.pad_to(e.offset);
      switch (e.id) {
        case kMeta: w.write(&meta, sizeof meta); break;
        case kAnalyzer: w.write(analyzer_json.data(), analyzer_json.size()); break;
        case kVocabOffsets: w.write(index.vocab().offsets().data(), 8 * (num_terms + 1)); break;
        case kVocabBytes: w.write(index.vocab().bytes().data(), index.vocab().bytes().size()); break;
        case kDocLen: w.write(has_dead ? live_len.data() : index.doc_lengths().data(), 4 * num_docs); break;
        case kTermOffsets: w.write(w_offsets, 8 * (num_terms + 1)); break;
        case kBlockLast: w.write(w_last, 4 * num_blocks); break;
        case kBlockWords: w.write(w_words, 4 * (num_blocks + 1)); break;
        case kBlockBits: w.write(w_bits, 2 * num_blocks); break;
        case kPacked: w.write(w_packed, 4 * num_words); break;
        case kIdsInt:
          for (std::uint32_t d = 0; d < slots;) {
            // In chunks: the identity stores no ids to write from.
            std::int64_t chunk[512];
            std::size_t m = 0;
            for (; d < slots && m < 512; ++d)
              if (!has_dead || index.is_live(d)) chunk[m++] = ids.int_at(d);
            w.write(chunk, 8 * m);
          }
          break;
        case kIdsStrOffsets: {
          std::uint64_t acc = 0;
          w.write(&acc, 8);
          for (std::uint32_t d = 0; d < slots; ++d) {
            if (!index.is_live(d)) continue;
            acc += ids.strs()[d].size();
            w.write(&acc, 8);
          }
          break;
        }
        case kIdsStrBytes:
          for (std::uint32_t d = 0; d < slots; ++d)
            if (index.is_live(d)) w.write(ids.strs()[d].data(), ids.strs()[d].size());
          break;
        case kPosOffsets: w.write(live_positions.offsets().data(), 8 * live_positions.offsets().size()); break;
        case kPosBytes: w.write(live_positions.bytes().data(), live_positions.bytes().size()); break;
      }
    }
    w.pad_to(file_size);
    common::fault_point("bm25.save.sections_written");
    if (w.pos != file_size) throw IndexWriteError("index writer: size mismatch (internal error)");
    // Header last: it carries the checksums.
    std::memcpy(head.data(), kMagic, 8);
    const std::uint32_t version = kIndexFormatVersion, hb = static_cast<std::uint32_t>(header_bytes),
                        ns = static_cast<std::uint32_t>(entries.size());
    std::memcpy(head.data() + 8, &version, 4);
    std::memcpy(head.data() + 12, &hb, 4);
    std::memcpy(head.data() + 16, &file_size, 8);
    std::memcpy(head.data() + 24, &ns, 4);
    std::memcpy(head.data() + 28, &w.crc, 4);
    std::memcpy(head.data() + kHeaderBytes, entries.data(), kEntryBytes * entries.size());
    const std::uint32_t table_crc = crc32(0, head.data() + kHeaderBytes, kEntryBytes * entries.size());
    std::memcpy(head.data() + 32, &table_crc, 4);
    const std::uint32_t header_crc = crc32(crc32(0, head.data(), 36), head.data() + 40, kHeaderBytes - 40);
    std::memcpy(head.data() + 36, &header_crc, 4);
    if (std::fflush(f) != 0 || std::fseek(f, 0, SEEK_SET) != 0 ||
        std::fwrite(head.data(), 1, header_bytes, f) != header_bytes || std::fflush(f) != 0)
      throw IndexWriteError(errno_text("cannot write index header", tmp));
    if (::fsync(fileno(f)) != 0) throw IndexWriteError(errno_text("cannot fsync", tmp));
  } catch (...) {
    std::fclose(f);
    ::unlink(tmp.c_str());
    throw;
  }
  if (std::fclose(f) != 0) {
    ::unlink(tmp.c_str());
    throw IndexWriteError(errno_text("cannot close", tmp));
  }
  common::fault_point("bm25.save.before_rename");
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string msg = errno_text("cannot move the new index file into place at", path);
    ::unlink(tmp.c_str());
    throw IndexWriteError(msg);
  }
  common::fault_point("bm25.save.after_rename");
  // Make the rename durable.
  std::string dir = path;
  const auto slash = dir.find_last_of('/');
  dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : dir.substr(0, slash));
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

// ----- reading

namespace {

struct FileBytes {
  const unsigned char* data = nullptr;
  std::uint64_t size = 0;
  void* map = nullptr;
  std::vector<std::uint64_t> owned;
  ~FileBytes() {
    if (map) ::munmap(map, size);
  }
  // Validation reads the whole file once; with a mapping, the pages already checked are
  // dropped from this process's resident set (they stay in the page cache and fault back in
  // when a query needs them), so loading never holds the whole index resident.
  void release(const void* from, const void* to) const {
    if (!map || to <= from) return;
    static const std::uintptr_t page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    const std::uintptr_t a = (reinterpret_cast<std::uintptr_t>(from) + page - 1) / page * page;
    const std::uintptr_t b = reinterpret_cast<std::uintptr_t>(to) / page * page;
    if (b > a) ::madvise(reinterpret_cast<void*>(a), b - a, MADV_DONTNEED);
  }
};

constexpr std::uint64_t kWindow = std::uint64_t(4) << 20;  // bytes validated between releases

[[noreturn]] void bad(const std::string& path, const std::string& why) {
  throw IndexFileError("'" + path + "' is not a valid ragfind BM25 index: " + why);
}

std::shared_ptr<FileBytes> open_bytes(const std::string& path, bool mmap) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    throw IndexFileError("cannot open BM25 index '" + path + "': " + std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw IndexFileError("cannot read BM25 index '" + path + "': not a regular file");
  }
  auto fb = std::make_shared<FileBytes>();
  fb->size = static_cast<std::uint64_t>(st.st_size);
  if (fb->size < kHeaderBytes) {
    ::close(fd);
    bad(path, "the file is " + std::to_string(fb->size) + " bytes, shorter than the header (truncated or foreign)");
  }
  if (mmap) {
    void* p = ::mmap(nullptr, fb->size, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) throw IndexFileError("cannot map BM25 index '" + path + "': " + std::strerror(errno));
    fb->map = p;
    fb->data = static_cast<const unsigned char*>(p);
  } else {
    fb->owned.resize((fb->size + 7) / 8);
    auto* dst = reinterpret_cast<char*>(fb->owned.data());
    std::uint64_t got = 0;
    while (got < fb->size) {
      const ssize_t r =
          ::read(fd, dst + got, static_cast<std::size_t>(std::min<std::uint64_t>(fb->size - got, 1 << 30)));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        ::close(fd);
        throw IndexFileError("cannot read BM25 index '" + path +
                             "': " + (r < 0 ? std::strerror(errno) : "unexpected end of file"));
      }
      got += static_cast<std::uint64_t>(r);
    }
    ::close(fd);
    fb->data = reinterpret_cast<const unsigned char*>(fb->owned.data());
  }
  return fb;
}

struct Parsed {
  std::shared_ptr<FileBytes> bytes;
  std::uint32_t version = 0;
  std::map<std::uint32_t, Entry> sections;
  Meta meta{};
  template <typename T>
  const T* ptr(std::uint32_t id) const {
    return reinterpret_cast<const T*>(bytes->data + sections.at(id).offset);
  }
  std::uint64_t count(std::uint32_t id) const { return sections.at(id).count; }
};

Parsed parse(const std::string& path, bool mmap) {
  Parsed p;
  p.bytes = open_bytes(path, mmap);
  const unsigned char* d = p.bytes->data;
  const std::uint64_t size = p.bytes->size;
  if (std::memcmp(d, kMagic, 8) != 0)
    bad(path, "wrong magic bytes (not an index file written by ragfind.BM25Index.save)");
  std::uint32_t version, header_bytes, num_sections, payload_crc, table_crc, header_crc;
  std::uint64_t file_size;
  std::memcpy(&version, d + 8, 4);
  std::memcpy(&header_bytes, d + 12, 4);
  std::memcpy(&file_size, d + 16, 8);
  std::memcpy(&num_sections, d + 24, 4);
  std::memcpy(&payload_crc, d + 28, 4);
  std::memcpy(&table_crc, d + 32, 4);
  std::memcpy(&header_crc, d + 36, 4);
  if (crc32(crc32(0, d, 36), d + 40, kHeaderBytes - 40) != header_crc)
    bad(path, "header checksum mismatch (corrupt file)");
  if (version < kOldestIndexFormatVersion || version > kIndexFormatVersion)
    bad(path, "format version " + std::to_string(version) + " is not supported (this ragfind reads versions " +
                  std::to_string(kOldestIndexFormatVersion) + " to " + std::to_string(kIndexFormatVersion) + ")");
  p.version = version;
  if (file_size != size)
    bad(path, "the header says " + std::to_string(file_size) + " bytes but the file has " + std::to_string(size) +
                  (size < file_size ? " (truncated)" : " (trailing data)"));
  if (num_sections == 0 || num_sections > 64 || header_bytes != kHeaderBytes + kEntryBytes * num_sections ||
      header_bytes > size)
    bad(path, "bad section table size");
  if (crc32(0, d + kHeaderBytes, kEntryBytes * num_sections) != table_crc)
    bad(path, "section table checksum mismatch (corrupt file)");
  std::uint32_t crc = 0;
  for (std::uint64_t off = header_bytes; off < size; off += kWindow) {
    const std::uint64_t n = std::min(kWindow, size - off);
    crc = crc32(crc, d + off, n);
    p.bytes->release(d + off, d + off + n);
  }
  if (crc != payload_crc) bad(path, "payload checksum mismatch (corrupt file)");
  for (std::uint32_t i = 0; i < num_sections; ++i) {
    Entry e;
    std::memcpy(&e, d + kHeaderBytes + kEntryBytes * i, kEntryBytes);
    if (e.elem_size == 0 || e.elem_size > 64 || e.offset % 8 != 0 || e.offset < header_bytes || e.offset > size ||
        e.bytes > size - e.offset || e.count > e.bytes / e.elem_size || e.count * e.elem_size != e.bytes)
      bad(path, "section " + std::to_string(e.id) + " lies outside the file or has inconsistent sizes");
    if (!p.sections.emplace(e.id, e).second) bad(path, "section " + std::to_string(e.id) + " appears twice");
  }
  auto need = [&](std::uint32_t id, std::uint32_t elem) {
    auto it = p.sections.find(id);
    if (it == p.sections.end()) bad(path, "section " + std::to_string(id) + " is missing");
    if (it->second.elem_size != elem) bad(path, "section " + std::to_string(id) + " has the wrong element size");
  };
  need(kMeta, sizeof(Meta));
  need(kAnalyzer, 1);
  if (p.count(kMeta) != 1) bad(path, "metadata section has the wrong size");
  std::memcpy(&p.meta, d + p.sections.at(kMeta).offset, sizeof(Meta));
  return p;
}

}  // namespace

std::string read_index_metadata(const std::string& path) {
  Parsed p = parse(path, true);
  return std::string(p.ptr<char>(kAnalyzer), p.count(kAnalyzer));
}

void load_index(const std::string& path, bool mmap, InvertedIndex& index, DocIds& ids,
                std::unique_ptr<PositionStore>* positions) {
  Parsed p = parse(path, mmap);
  const Meta& m = p.meta;
  auto need = [&](std::uint32_t id, std::uint32_t elem, std::uint64_t count) {
    auto it = p.sections.find(id);
    if (it == p.sections.end()) bad(path, "section " + std::to_string(id) + " is missing");
    if (it->second.elem_size != elem || it->second.count != count)
      bad(path, "section " + std::to_string(id) + " has " + std::to_string(it->second.count) + " elements, expected " +
                    std::to_string(count));
  };
  if (m.method > static_cast<std::uint32_t>(Method::BM25Plus)) bad(path, "unknown BM25 variant");
  if (!(m.k1 >= 0 && std::isfinite(m.k1)) || !(m.b >= 0 && m.b <= 1) || !(m.delta >= 0 && std::isfinite(m.delta)))
    bad(path, "invalid BM25 parameters");
  if (m.num_docs > 0xFFFFFFF0ull || m.num_terms > 0xFFFFFFF0ull) bad(path, "implausible document or term count");
  if (m.id_kind > 2) bad(path, "unknown id kind");
  need(kVocabOffsets, 8, m.num_terms + 1);
  need(kDocLen, 4, m.num_docs);
  need(kTermOffsets, 8, m.num_terms + 1);

  // Vocabulary: monotone offsets within the byte section, unique terms.
  const auto* voff = p.ptr<std::uint64_t>(kVocabOffsets);
  if (p.sections.find(kVocabBytes) == p.sections.end()) bad(path, "vocabulary bytes are missing");
  const std::uint64_t vbytes = p.count(kVocabBytes);
  const char* vdata = p.ptr<char>(kVocabBytes);
  if (voff[0] != 0 || voff[m.num_terms] != vbytes) bad(path, "vocabulary offsets do not match the vocabulary size");
  StringTable& vocab = index.vocab();
  vocab.reserve(m.num_terms);
  for (std::uint64_t t = 0; t < m.num_terms; ++t) {
    if (voff[t + 1] < voff[t] || voff[t + 1] > vbytes) bad(path, "vocabulary offsets are not increasing");
    bool inserted = false;
    vocab.insert(std::string_view(vdata + voff[t], voff[t + 1] - voff[t]), &inserted);
    if (!inserted) bad(path, "duplicate vocabulary term");
  }
  // Lengths.
  const auto* dl = p.ptr<std::uint32_t>(kDocLen);
  std::uint64_t total = 0;
  for (std::uint64_t i = 0; i < m.num_docs; ++i) total += dl[i];
  if (total != m.total_len) bad(path, "document lengths do not add up to the stored total");
  // Postings: monotone offsets, strictly increasing doc ids in range, tf >= 1.
  const auto* toff = p.ptr<std::uint64_t>(kTermOffsets);
  if (toff[0] != 0 || toff[m.num_terms] != m.num_postings) bad(path, "posting offsets do not match the posting count");
  std::uint64_t num_blocks = 0;
  for (std::uint64_t t = 0; t < m.num_terms; ++t) {
    if (toff[t + 1] < toff[t] || toff[t + 1] > m.num_postings) bad(path, "posting offsets are not increasing");
    num_blocks += (toff[t + 1] - toff[t] + kPostingBlock - 1) / kPostingBlock;
  }
  auto seg = std::make_unique<Segment>();
  seg->base = 0;
  seg->num_docs = static_cast<std::uint32_t>(m.num_docs);
  seg->offsets = Buffer<std::uint64_t>::borrow(toff, m.num_terms + 1);
  if (p.version == 1) {
    // Flat doc ids and tfs: checked, then encoded into blocks (owned, not mapped).
    need(kDocs, 4, m.num_postings);
    need(kTfs, 4, m.num_postings);
    const auto* docs = p.ptr<std::uint32_t>(kDocs);
    const auto* tfs = p.ptr<std::uint32_t>(kTfs);
    for (std::uint64_t t = 0; t < m.num_terms; ++t) {
      for (std::uint64_t i = toff[t]; i < toff[t + 1]; ++i) {
        if (docs[i] >= m.num_docs || (i > toff[t] && docs[i] <= docs[i - 1]))
          bad(path, "a posting list has a document id out of range or out of order");
        if (tfs[i] == 0) bad(path, "a posting has a zero term frequency");
      }
    }
    seg->docs = Buffer<std::uint32_t>::borrow(docs, m.num_postings);
    seg->values = Buffer<std::uint32_t>::borrow(tfs, m.num_postings);
    compress_segment(*seg);
    p.bytes->release(docs, docs + m.num_postings);
    p.bytes->release(tfs, tfs + m.num_postings);
  } else {
    need(kBlockLast, 4, num_blocks);
    need(kBlockWords, 4, num_blocks + 1);
    need(kBlockBits, 1, 2 * num_blocks);
    const auto* last = p.ptr<std::uint32_t>(kBlockLast);
    const auto* words = p.ptr<std::uint32_t>(kBlockWords);
    const auto* bits = p.ptr<std::uint8_t>(kBlockBits);
    if (words[0] != 0) bad(path, "block offsets do not start at 0");
    need(kPacked, 4, words[num_blocks]);
    const auto* packed = p.ptr<std::uint32_t>(kPacked);
    // Every block decoded once: widths and word counts first (so nothing reads past the
    // packed section), then the doc ids (in range, increasing, ending at the stored last
    // doc) and the tfs (>= 1).
    std::uint32_t docs[kPostingBlock], tfs[kPostingBlock];
    std::uint64_t b = 0, released = 0;  // released: words of packed
    for (std::uint64_t t = 0; t < m.num_terms; ++t) {
      std::uint64_t prev = 0xFFFFFFFFFFFFFFFFull;  // -1: the first gap counts from before doc 0
      for (std::uint64_t left = toff[t + 1] - toff[t]; left > 0; ++b) {
        const auto n = static_cast<std::uint32_t>(std::min<std::uint64_t>(left, kPostingBlock));
        left -= n;
        const unsigned gw = bits[2 * b], tw = bits[2 * b + 1];
        if (gw > 32 || tw > 32) bad(path, "a posting block has a bit width above 32");
        if (words[b + 1] < words[b] || words[b + 1] > words[num_blocks] ||
            words[b + 1] - words[b] != packed_words(n, gw) + packed_words(n, tw))
          bad(path, "a posting block's size does not match its bit widths");
        unpack_bits(packed + words[b], n, gw, docs);
        unpack_bits(packed + words[b] + packed_words(n, gw), n, tw, tfs);
        for (std::uint32_t i = 0; i < n; ++i) {
          prev = prev + 1 + docs[i];
          if (prev >= m.num_docs) bad(path, "a posting list has a document id out of range");
          if (tfs[i] == 0xFFFFFFFFu) bad(path, "a posting has a zero term frequency");
        }
        if (prev != last[b]) bad(path, "a posting block's last document does not match its postings");
      }
      if (words[b] - released >= kWindow / 4) {
        p.bytes->release(packed + released, packed + words[b]);
        released = words[b];
      }
    }
    p.bytes->release(packed + released, packed + words[num_blocks]);
    p.bytes->release(last, last + num_blocks);
    p.bytes->release(words, words + num_blocks + 1);
    p.bytes->release(bits, bits + 2 * num_blocks);
    seg->compressed = true;
    seg->blk_last = Buffer<std::uint32_t>::borrow(last, num_blocks);
    seg->blk_word = Buffer<std::uint32_t>::borrow(words, num_blocks + 1);
    seg->blk_bits = Buffer<std::uint8_t>::borrow(bits, 2 * num_blocks);
    seg->packed = Buffer<std::uint32_t>::borrow(packed, words[num_blocks]);
    seg->set_list_blocks();
  }
  p.bytes->release(toff, toff + m.num_terms + 1);
  // External ids.
  std::vector<std::int64_t> int_ids;
  std::vector<std::string> str_ids;
  const auto kind = static_cast<DocIds::Kind>(m.id_kind);
  if (kind == DocIds::Kind::Str) {
    need(kIdsStrOffsets, 8, m.num_docs + 1);
    if (p.sections.find(kIdsStrBytes) == p.sections.end()) bad(path, "id bytes are missing");
    const auto* ioff = p.ptr<std::uint64_t>(kIdsStrOffsets);
    const std::uint64_t ib = p.count(kIdsStrBytes);
    const char* idata = p.ptr<char>(kIdsStrBytes);
    if (ioff[0] != 0 || ioff[m.num_docs] != ib) bad(path, "id offsets do not match the id bytes");
    str_ids.reserve(m.num_docs);
    for (std::uint64_t i = 0; i < m.num_docs; ++i) {
      if (ioff[i + 1] < ioff[i] || ioff[i + 1] > ib) bad(path, "id offsets are not increasing");
      str_ids.emplace_back(idata + ioff[i], ioff[i + 1] - ioff[i]);
    }
    p.bytes->release(ioff, ioff + m.num_docs + 1);  // copied
    p.bytes->release(idata, idata + ib);
  } else {
    need(kIdsInt, 8, m.num_docs);
    const auto* iid = p.ptr<std::int64_t>(kIdsInt);
    int_ids.assign(iid, iid + m.num_docs);
    p.bytes->release(iid, iid + m.num_docs);  // copied (or, for the identity, not kept at all)
  }
  try {
    ids.assign(kind == DocIds::Kind::Unset && m.num_docs == 0 ? DocIds::Kind::Unset : kind, std::move(int_ids),
               std::move(str_ids));
  } catch (const std::invalid_argument&) { bad(path, "duplicate document ids"); }

  std::unique_ptr<PositionStore> loaded_positions;
  if (positions && p.sections.count(kPosOffsets)) {
    need(kPosOffsets, 8, m.num_docs + 1);
    if (!p.sections.count(kPosBytes)) bad(path, "position bytes are missing");
    const Entry& pb = p.sections.at(kPosBytes);
    if (pb.elem_size != 1) bad(path, "section 13 has the wrong element size");
    const auto* po = p.ptr<std::uint64_t>(kPosOffsets);
    const auto* pbytes = p.ptr<std::uint8_t>(kPosBytes);
    loaded_positions = std::make_unique<PositionStore>();
    if (!loaded_positions->assign(std::vector<std::uint64_t>(po, po + m.num_docs + 1),
                                  std::vector<std::uint8_t>(pbytes, pbytes + pb.count), m.num_terms))
      bad(path, "bad positions");
  }

  Params params;
  params.method = static_cast<Method>(m.method);
  params.k1 = m.k1;
  params.b = m.b;
  params.delta = m.delta;
  index.set_params(params);
  seg->keepalive = p.bytes;
  index.install(Buffer<std::uint32_t>::borrow(dl, m.num_docs), std::move(seg), p.bytes);
  // The lengths went into the per-document length codes; only the rare documents without a
  // code, block maxima, explain and the double-precision scorers read them again (they fault
  // back in then).
  p.bytes->release(dl, dl + m.num_docs);
  if (positions) *positions = std::move(loaded_positions);
}

}  // namespace ragfind::bm25
