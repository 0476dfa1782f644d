// Block-compressed posting lists (BM25 stores its term frequencies so): the codec, a writer
// and a cursor.
//
// Each posting list is cut into blocks of kPostingBlock postings (the last one may be short).
// A block stores its last local doc id uncompressed (so cursors skip whole blocks without
// decoding them), the offset of its packed words, and two bit widths: one for the doc gaps, one
// for the term frequencies. Gaps are doc - prev - 1, where prev is the last doc of the previous
// block of the list (-1, i.e. 0xFFFFFFFF in u32 arithmetic, before the first block), so a run
// of consecutive documents packs at width 0; tfs are stored as tf - 1 (94% of BM25 tfs are 1:
// width 0). A block's words are the gaps (packed_words(n, gap width)) followed by the tfs.
// Packing is horizontal: value i of a block lies at bits [i*w, (i+1)*w) of its words.
//
// Decoding is exact (the same u32 tf and doc values the flat arrays held), so every score is
// unchanged. The unpack is scalar, unrolled per width; there is no SIMD (vertical BP128-style)
// variant yet (bench/engines.md has the share of a query's time decoding takes).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace ragfind::inverted {

struct Segment;

inline constexpr std::uint32_t kPostingBlock = 128;

/// Bits needed to hold v (0 for 0).
inline unsigned bit_width(std::uint32_t v) { return v ? 32u - static_cast<unsigned>(__builtin_clz(v)) : 0u; }
/// 32-bit words that n values of w bits take.
inline std::uint64_t packed_words(std::size_t n, unsigned w) { return (static_cast<std::uint64_t>(n) * w + 31) / 32; }
/// Packs n <= kPostingBlock values (each < 2^w, w <= 32) into packed_words(n, w) words.
void pack_bits(const std::uint32_t* in, std::size_t n, unsigned w, std::uint32_t* out);
/// The inverse: reads exactly packed_words(n, w) words, writes n values.
void unpack_bits(const std::uint32_t* in, std::size_t n, unsigned w, std::uint32_t* out);
/// Doc ids from packed gaps: out[i] = prev + 1 + gap[i], running (u32 arithmetic).
void unpack_docs(const std::uint32_t* in, std::size_t n, unsigned w, std::uint32_t prev, std::uint32_t* out);
/// The same for one group of 32 values of a full block (w words from in), so that a cursor
/// can decode a block only as far as it reads.
void unpack_docs_group(const std::uint32_t* in, unsigned w, std::uint32_t prev, std::uint32_t* out);
/// A group or block unpack at one width (a cursor keeps its block's instead of dispatching on
/// every group).
using UnpackDocsFn = void (*)(const std::uint32_t*, std::uint32_t, std::uint32_t*);
/// The same, one value at a time (the reference the unrolled unpack is tested against).
void unpack_bits_reference(const std::uint32_t* in, std::size_t n, unsigned w, std::uint32_t* out);

/// Builds the compressed arrays list by list: add() the postings of a list in doc order, then
/// end_list(); finish() moves the arrays into a segment (which keeps its own offsets).
class PostingsWriter {
 public:
  PostingsWriter() { word_.push_back(0); }
  void add(std::uint32_t doc, std::uint32_t tf) {
    doc_[n_] = doc;
    tf_[n_] = tf;
    if (++n_ == kPostingBlock) flush();
  }
  void end_list() {
    if (n_ > 0) flush();
    prev_ = 0xFFFFFFFFu;
  }
  std::uint64_t num_postings() const { return count_ + n_; }
  std::uint64_t num_blocks() const { return last_.size(); }
  void reserve(std::uint64_t postings);
  void finish(Segment& seg);

  std::vector<std::uint32_t> last_;
  std::vector<std::uint32_t> word_;
  std::vector<std::uint8_t> bits_;
  std::vector<std::uint32_t> packed_;

 private:
  void flush();
  std::uint32_t doc_[kPostingBlock], tf_[kPostingBlock];
  std::uint32_t n_ = 0, prev_ = 0xFFFFFFFFu;
  std::uint64_t count_ = 0;
};

/// How many of the first min(lim, 16) values of the sorted p are below target (p readable 16
/// values on).
inline std::uint32_t count_below(const std::uint32_t* p, std::uint32_t target, std::uint32_t lim) {
#if defined(__SSE2__)
  // Sorted, so the lanes below target are a prefix: its length is the trailing ones of the mask.
  const __m128i bias = _mm_set1_epi32(static_cast<int>(0x80000000u));
  const __m128i t = _mm_xor_si128(_mm_set1_epi32(static_cast<int>(target)), bias);
  unsigned mask = 0;
  for (int g = 0; g < 4; ++g) {
    const __m128i v = _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p) + g), bias);
    mask |= static_cast<unsigned>(_mm_movemask_ps(_mm_castsi128_ps(_mm_cmpgt_epi32(t, v)))) << (4 * g);
  }
  if (lim < 16) mask &= (1u << lim) - 1;
  return static_cast<std::uint32_t>(__builtin_ctz(~mask));
#else
  std::uint32_t cnt = 0;
  for (std::uint32_t k = 0; k < 16; ++k) cnt += (p[k] < target) & (k < lim);
  return cnt;
#endif
}

/// The index of the first of the len >= 1 sorted values at p that is >= target (len when
/// none is): a binary search without branches on the comparisons, for searches whose outcome
/// is unpredictable.
inline std::uint32_t first_not_below(const std::uint32_t* p, std::uint32_t len, std::uint32_t target) {
  const std::uint32_t* base = p;
  for (; len > 1;) {
    const std::uint32_t half = len / 2;
    base = base[half] < target ? base + half : base;
    len -= half;
  }
  return static_cast<std::uint32_t>(base - p) + (*base < target);
}

/// Reads one posting list of a compressed segment a block at a time. doc() is kEnd past the
/// end; tf() reads from the block's unpacked tfs when next() entered the block (in-order
/// scoring wants them all), else straight from the packed bits. A block reached by next_geq skipping is
/// decoded a group of 32 doc ids at a time, only as far as it is read (a probe of a long list
/// usually wants one doc of the block); next() decodes whole blocks.
class PostingCursor {
 public:
  static constexpr std::uint32_t kEnd = 0xFFFFFFFFu;
  /// Positions on the first posting of directory slot `slot` of seg. With `prefetch` (a
  /// per-local-doc array), next() entering a block prefetches the entries of its first docs.
  void reset(const Segment& seg, std::size_t slot, const std::uint8_t* prefetch = nullptr);
  std::uint32_t doc() const { return doc_; }
  std::uint32_t tf() const {
    // One value read straight from the packed tfs: cursors that score a posting here and
    // there (probes of long lists) never decode a whole block of them.
    if (tf_width_ == 0) return 1;
    if (tf_ready_) return tfs_[i_];
    const std::uint64_t bit = static_cast<std::uint64_t>(i_) * tf_width_;
    const std::uint32_t* p = tf_words_ + (bit >> 5);
    const unsigned s = static_cast<unsigned>(bit & 31);
    std::uint64_t v = p[0] >> s;
    if (s + tf_width_ > 32) v |= static_cast<std::uint64_t>(p[1]) << (32 - s);
    return (static_cast<std::uint32_t>(v) & tf_mask_) + 1;
  }
  void next() {
    if (++i_ < dec_) {
      doc_ = docs_[i_];
    } else if (i_ < n_) {
      while (dec_ < n_) decode_group();
      doc_ = docs_[i_];
    } else {
      load_next();
    }
  }
  /// Prefetches the prefetch array's entry k postings ahead in the current block.
  void prefetch_ahead(std::uint32_t k) const {
    if (i_ + k < dec_) __builtin_prefetch(prefetch_ + docs_[i_ + k]);
  }
  /// Moves to the first posting whose doc is >= target (never backwards). Always inlined: the
  /// probes of every query algorithm call it, and GCC's budget would otherwise outline it from
  /// the larger of them.
  [[gnu::always_inline]] inline void next_geq(std::uint32_t target) {
    if (doc_ >= target) return;
    if (last_[blk_] < target) {
      skip_to(target);
      if (doc_ == kEnd) return;
    }
    while (docs_[dec_ - 1] < target) decode_group();  // stops: the block's last doc is >= target
    // Where a probe lands is unpredictable, but mostly within a few postings (93% within 16 at
    // 1M documents): those are counted without a branch (the padding past dec_ is masked off),
    // the rest found by a binary search without branches on the comparisons.
    const std::uint32_t lim = dec_ - i_;  // >= 1: docs_[dec_ - 1] >= target
    if ((lim <= kScan) | (docs_[i_ + kScan - 1] >= target)) {
      i_ += count_below(docs_ + i_, target, lim);
    } else {
      i_ += kScan + first_not_below(docs_ + i_ + kScan, lim - kScan, target);
    }
    doc_ = docs_[i_];
  }
  /// The last doc of the current block (kEnd past the end).
  std::uint32_t block_last() const { return doc_ == kEnd ? kEnd : last_[blk_]; }
  /// Calls f(doc, tf) for the postings from the cursor on whose doc is <= hi, then moves past
  /// them; hi is at most block_last() (the postings read lie in the current block). Always
  /// inlined: out of line, f's captures are read through memory on every posting.
  template <class F>
  [[gnu::always_inline]] inline void scan_until(std::uint32_t hi, F&& f) {
    if (doc_ > hi) return;  // (and past the end)
    while (dec_ < n_) decode_group();
    // The end of the run first (a branch-free binary search unless the whole rest is wanted),
    // so the loops below test nothing else. (hi < kEnd: hi + 1 does not wrap.)
    const std::uint32_t e = docs_[n_ - 1] > hi ? i_ + first_not_below(docs_ + i_, n_ - i_, hi + 1) : n_;
    // The prefetch array is read in doc order but far apart: fetch the entries a few on.
    constexpr std::uint32_t ahead = 16;
    const std::uint32_t pe = prefetch_ ? std::min(e, n_ > ahead ? n_ - ahead : 0u) : 0u;
    std::uint32_t j = i_;
    if (tf_width_ == 0) {
      for (; j < pe; ++j) {
        __builtin_prefetch(prefetch_ + docs_[j + ahead]);
        f(docs_[j], 1u);
      }
      for (; j < e; ++j) f(docs_[j], 1u);
    } else {
      if (!tf_ready_) decode_tfs();
      for (; j < pe; ++j) {
        __builtin_prefetch(prefetch_ + docs_[j + ahead]);
        f(docs_[j], tfs_[j]);
      }
      for (; j < e; ++j) f(docs_[j], tfs_[j]);
    }
    i_ = j;
    if (j < n_) doc_ = docs_[j];
    else load_next();
  }
  /// Index of the current block within the list.
  std::uint64_t block_index() const { return blk_ - first_; }
  /// The decoded docs and tfs of the current block (for term-at-a-time scans).
  const std::uint32_t* block_docs() const { return docs_; }
  const std::uint32_t* block_tfs() {
    if (!tf_ready_) decode_tfs();
    return tfs_;
  }
  std::uint32_t block_size() const { return n_; }
  /// Moves to the first posting of the next block.
  void next_block() { load(blk_ + 1); }

 private:
  void load(std::uint64_t b, bool lazy = false);
  void decode_group();
  void load_next();
  void skip_to(std::uint32_t target);
  void decode_tfs();

  // The state next(), tf() and next_geq() read comes first (one cache line); the rest is read
  // on entering a block.
  std::uint32_t i_ = 0, dec_ = 0, n_ = 0, doc_ = kEnd;  // dec_: doc ids decoded so far
  unsigned tf_width_ = 0;
  std::uint32_t tf_mask_ = 0;
  const std::uint32_t* tf_words_ = nullptr;
  const std::uint32_t* last_ = nullptr;
  const std::uint8_t* prefetch_ = nullptr;
  std::uint64_t blk_ = 0;
  std::uint64_t first_ = 0, end_ = 0, len_ = 0;
  unsigned gap_width_ = 0;
  bool tf_ready_ = false;
  const std::uint32_t* gap_words_ = nullptr;
  UnpackDocsFn group_fn_ = nullptr;
  // The segment's arrays as raw pointers (a Buffer checks which storage it uses on each read).
  const Segment* seg_ = nullptr;
  const std::uint32_t* packed_ = nullptr;
  const std::uint32_t* blk_word_ = nullptr;
  const std::uint8_t* blk_bits_ = nullptr;
  // kScan words of padding: next_geq reads (and masks off) up to kScan - 1 past the block.
  static constexpr std::uint32_t kScan = 16;
  std::uint32_t docs_[kPostingBlock + kScan] = {};
  std::uint32_t tfs_[kPostingBlock];
};

/// Calls f(local doc, tf) for every posting of directory slot `slot`, in doc order.
template <class F>
void for_each_posting(const Segment& seg, std::size_t slot, F&& f);

}  // namespace ragfind::inverted
