// Bit packing of posting blocks and the posting cursor (see postings.hpp).
#include "ragfind/inverted/postings.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "ragfind/inverted/segment.hpp"

namespace ragfind::inverted {

namespace {

// 32 values at a constant width take exactly W words, so every shift and word index below is
// a compile-time constant once the inner loop is unrolled.
// Add is added to every value (1 for tfs, stored as tf - 1).
template <unsigned W, std::uint32_t Add = 0>
void unpack_group_w(const std::uint32_t* in, std::uint32_t* out) {
  if constexpr (W == 0) {
    for (unsigned i = 0; i < 32; ++i) out[i] = Add;
  } else if constexpr (W == 32) {
    for (unsigned i = 0; i < 32; ++i) out[i] = in[i] + Add;
  } else {
    constexpr std::uint32_t mask = (1u << W) - 1;
#pragma GCC unroll 32
    for (unsigned i = 0; i < 32; ++i) {
      const unsigned bit = i * W, w = bit / 32, s = bit % 32;
      std::uint32_t v = in[w] >> s;
      if (s + W > 32) v |= in[w + 1] << (32 - s);
      out[i] = (v & mask) + Add;
    }
  }
}

template <unsigned W, std::uint32_t Add = 0>
void unpack_full(const std::uint32_t* in, std::uint32_t* out) {
  for (unsigned g = 0; g < kPostingBlock / 32; ++g) unpack_group_w<W, Add>(in + g * W, out + 32 * g);
}

// 32 values of a full block fused with the doc-id prefix sum (out[i] = prev + 1 + gap,
// running): one pass.
template <unsigned W>
void unpack_docs_group_w(const std::uint32_t* in, std::uint32_t prev, std::uint32_t* out) {
  if constexpr (W == 0) {
    for (unsigned i = 0; i < 32; ++i) out[i] = prev + 1 + i;
  } else if constexpr (W == 32) {
    for (unsigned i = 0; i < 32; ++i) out[i] = prev = prev + 1 + in[i];
  } else {
    constexpr std::uint32_t mask = (1u << W) - 1;
#pragma GCC unroll 32
    for (unsigned i = 0; i < 32; ++i) {
      const unsigned bit = i * W, w = bit / 32, s = bit % 32;
      std::uint32_t v = in[w] >> s;
      if (s + W > 32) v |= in[w + 1] << (32 - s);
      out[i] = prev = prev + 1 + (v & mask);
    }
  }
}

template <unsigned W>
void unpack_docs_full(const std::uint32_t* in, std::uint32_t prev, std::uint32_t* out) {
  for (unsigned g = 0; g < kPostingBlock / 32; ++g, in += W, out += 32) {
    unpack_docs_group_w<W>(in, prev, out);
    prev = out[31];
  }
}

using UnpackFn = void (*)(const std::uint32_t*, std::uint32_t*);

template <unsigned... W>
constexpr auto make_table(std::integer_sequence<unsigned, W...>) {
  return std::array<UnpackFn, sizeof...(W)>{&unpack_full<W>...};
}
template <unsigned... W>
constexpr auto make_tfs_table(std::integer_sequence<unsigned, W...>) {
  return std::array<UnpackFn, sizeof...(W)>{&unpack_full<W, 1>...};
}
template <unsigned... W>
constexpr auto make_docs_table(std::integer_sequence<unsigned, W...>) {
  return std::array<UnpackDocsFn, sizeof...(W)>{&unpack_docs_full<W>...};
}
template <unsigned... W>
constexpr auto make_plain_group_table(std::integer_sequence<unsigned, W...>) {
  return std::array<UnpackFn, sizeof...(W)>{&unpack_group_w<W>...};
}
template <unsigned... W>
constexpr auto make_group_table(std::integer_sequence<unsigned, W...>) {
  return std::array<UnpackDocsFn, sizeof...(W)>{&unpack_docs_group_w<W>...};
}

}  // namespace

void pack_bits(const std::uint32_t* in, std::size_t n, unsigned w, std::uint32_t* out) {
  const std::uint64_t words = packed_words(n, w);
  std::fill(out, out + words, 0u);
  if (w == 0) return;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t bit = static_cast<std::uint64_t>(i) * w;
    const std::uint64_t at = bit / 32;
    const unsigned s = static_cast<unsigned>(bit % 32);
    out[at] |= in[i] << s;
    if (s + w > 32) out[at + 1] |= in[i] >> (32 - s);
  }
}

void unpack_bits_reference(const std::uint32_t* in, std::size_t n, unsigned w, std::uint32_t* out) {
  const std::uint32_t mask = w == 32 ? 0xFFFFFFFFu : (1u << w) - 1;
  if (w == 0) {
    std::fill(out, out + n, 0u);
    return;
  }
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t bit = static_cast<std::uint64_t>(i) * w;
    const std::uint64_t at = bit / 32;
    const unsigned s = static_cast<unsigned>(bit % 32);
    std::uint64_t v = in[at] >> s;
    if (s + w > 32) v |= static_cast<std::uint64_t>(in[at + 1]) << (32 - s);
    out[i] = static_cast<std::uint32_t>(v) & mask;
  }
}

void unpack_bits(const std::uint32_t* in, std::size_t n, unsigned w, std::uint32_t* out) {
  static constexpr auto table = make_table(std::make_integer_sequence<unsigned, 33>{});
  static constexpr auto groups = make_plain_group_table(std::make_integer_sequence<unsigned, 33>{});
  if (n == kPostingBlock) {
    table[w](in, out);
    return;
  }
  // A short (tail) block: whole groups of 32 at the unrolled speed, then the rest.
  std::size_t done = 0;
  for (; done + 32 <= n; done += 32, in += w) groups[w](in, out + done);
  if (done < n) {
    std::uint32_t pad[32] = {}, vals[32];
    // Width 0 has no words (and `in` may be null then).
    if (const std::uint64_t words = packed_words(n - done, w)) std::memcpy(pad, in, words * 4);
    groups[w](pad, vals);
    std::memcpy(out + done, vals, (n - done) * 4);
  }
}

void unpack_docs(const std::uint32_t* in, std::size_t n, unsigned w, std::uint32_t prev, std::uint32_t* out) {
  static constexpr auto table = make_docs_table(std::make_integer_sequence<unsigned, 33>{});
  if (n == kPostingBlock) {
    table[w](in, prev, out);
    return;
  }
  // A short (tail) block: whole groups of 32 at the unrolled speed, then the rest.
  std::size_t done = 0;
  for (; done + 32 <= n; done += 32, in += w) {
    unpack_docs_group(in, w, prev, out + done);
    prev = out[done + 31];
  }
  if (done < n) {
    // The last partial group through the unrolled code too, from a zero-padded copy (it may
    // read up to w words; the block has fewer).
    std::uint32_t pad[32] = {}, vals[32];
    // Width 0 has no words (and `in` may be null then).
    if (const std::uint64_t words = packed_words(n - done, w)) std::memcpy(pad, in, words * 4);
    unpack_docs_group(pad, w, prev, vals);
    std::memcpy(out + done, vals, (n - done) * 4);
  }
}

namespace {
constexpr auto kDocsGroupTable = make_group_table(std::make_integer_sequence<unsigned, 33>{});
constexpr auto kDocsBlockTable = make_docs_table(std::make_integer_sequence<unsigned, 33>{});
}  // namespace

void unpack_docs_group(const std::uint32_t* in, unsigned w, std::uint32_t prev, std::uint32_t* out) {
  kDocsGroupTable[w](in, prev, out);
}

void PostingsWriter::reserve(std::uint64_t postings) {
  const std::uint64_t blocks = postings / kPostingBlock + 16;
  last_.reserve(blocks);
  word_.reserve(blocks + 1);
  bits_.reserve(2 * blocks);
  packed_.reserve(postings / 2 + 64);
}

void PostingsWriter::flush() {
  std::uint32_t gaps[kPostingBlock], tfs[kPostingBlock];
  std::uint32_t gap_or = 0, tf_or = 0, prev = prev_;
  for (std::uint32_t i = 0; i < n_; ++i) {
    gaps[i] = doc_[i] - prev - 1;
    prev = doc_[i];
    tfs[i] = tf_[i] - 1;
    gap_or |= gaps[i];
    tf_or |= tfs[i];
  }
  const unsigned gw = bit_width(gap_or), tw = bit_width(tf_or);
  const std::size_t at = packed_.size();
  const std::uint64_t gwords = packed_words(n_, gw), twords = packed_words(n_, tw);
  packed_.resize(at + gwords + twords);
  pack_bits(gaps, n_, gw, packed_.data() + at);
  pack_bits(tfs, n_, tw, packed_.data() + at + gwords);
  // Word offsets are 32-bit: a segment holds at most 2^32 - 1 packed words (16 GiB).
  if (packed_.size() > 0xFFFFFFFFull) throw std::length_error("BM25 segment too large (over 16 GiB of postings)");
  last_.push_back(prev);
  word_.push_back(static_cast<std::uint32_t>(packed_.size()));
  bits_.push_back(static_cast<std::uint8_t>(gw));
  bits_.push_back(static_cast<std::uint8_t>(tw));
  prev_ = prev;
  count_ += n_;
  n_ = 0;
}

void PostingsWriter::finish(Segment& seg) {
  end_list();
  packed_.shrink_to_fit();
  seg.compressed = true;
  seg.blk_last = Buffer<std::uint32_t>(std::move(last_));
  seg.blk_word = Buffer<std::uint32_t>(std::move(word_));
  seg.blk_bits = Buffer<std::uint8_t>(std::move(bits_));
  seg.packed = Buffer<std::uint32_t>(std::move(packed_));
  seg.docs = Buffer<std::uint32_t>();
  seg.values = Buffer<std::uint32_t>();
  seg.set_list_blocks();
  last_.clear();
  word_.assign(1, 0);
  bits_.clear();
  packed_.clear();
  count_ = 0;
}

void Segment::set_list_blocks() {
  const std::size_t n = directory_size();
  list_block.assign(n + 1, 0);
  for (std::size_t s = 0; s < n; ++s)
    list_block[s + 1] = list_block[s] + (offsets[s + 1] - offsets[s] + kPostingBlock - 1) / kPostingBlock;
}

void compress_segment(Segment& seg) {
  PostingsWriter w;
  w.reserve(seg.docs.size());
  for (std::size_t s = 0; s < seg.directory_size(); ++s) {
    for (std::uint64_t i = seg.offsets[s]; i < seg.offsets[s + 1]; ++i) w.add(seg.docs[i], seg.values[i]);
    w.end_list();
  }
  w.finish(seg);
}

void PostingCursor::reset(const Segment& seg, std::size_t slot, const std::uint8_t* prefetch) {
  seg_ = &seg;
  prefetch_ = prefetch;
  last_ = seg.blk_last.data();
  packed_ = seg.packed.data();
  blk_word_ = seg.blk_word.data();
  blk_bits_ = seg.blk_bits.data();
  first_ = seg.list_block[slot];
  end_ = seg.list_block[slot + 1];
  len_ = seg.offsets[slot + 1] - seg.offsets[slot];
  load(first_);
}

void PostingCursor::load(std::uint64_t b, bool lazy) {
  blk_ = b;
  i_ = 0;
  tf_ready_ = false;
  if (b >= end_) {
    blk_ = end_ > first_ ? end_ - 1 : first_;
    n_ = 0;
    dec_ = 0;
    doc_ = kEnd;
    return;
  }
  n_ = b + 1 < end_ ? kPostingBlock : static_cast<std::uint32_t>(len_ - (b - first_) * kPostingBlock);
  const std::uint32_t* words = packed_ + blk_word_[b];
  const std::uint32_t prev = b > first_ ? last_[b - 1] : 0xFFFFFFFFu;
  gap_width_ = blk_bits_[2 * b];
  gap_words_ = words;
  tf_width_ = blk_bits_[2 * b + 1];
  tf_mask_ = tf_width_ == 32 ? 0xFFFFFFFFu : (1u << tf_width_) - 1;
  tf_words_ = words + packed_words(n_, gap_width_);
  if (n_ == kPostingBlock) {
    group_fn_ = kDocsGroupTable[gap_width_];
    if (lazy) {
      group_fn_(words, prev, docs_);
      dec_ = 32;
    } else {
      kDocsBlockTable[gap_width_](words, prev, docs_);
      dec_ = n_;
    }
  } else {
    unpack_docs(words, n_, gap_width_, prev, docs_);
    dec_ = n_;
  }
  doc_ = docs_[0];
}

void PostingCursor::decode_group() {
  // Only full blocks are decoded lazily: group g starts at word g * width.
  group_fn_(gap_words_ + (dec_ / 32) * gap_width_, docs_[dec_ - 1], docs_ + dec_);
  dec_ += 32;
}

void PostingCursor::load_next() {
  load(blk_ + 1);
  // Read in order, every tf of the block is wanted: one unpack beats per-posting extraction.
  if (tf_width_ != 0 && n_ != 0) decode_tfs();
  // Sequential reading: the entries of the block's first docs are needed next (prefetch_ahead
  // covers the rest of the block).
  if (prefetch_)
    for (std::uint32_t j = 0; j < n_ && j < 16; ++j) __builtin_prefetch(prefetch_ + docs_[j]);
}

void PostingCursor::decode_tfs() {
  static constexpr auto full = make_tfs_table(std::make_integer_sequence<unsigned, 33>{});
  if (n_ == kPostingBlock) {
    full[tf_width_](tf_words_, tfs_);  // tf - 1 unpacked and 1 added in one pass
  } else {
    unpack_bits(tf_words_, n_, tf_width_, tfs_);
    for (std::uint32_t i = 0; i < n_; ++i) ++tfs_[i];
  }
  tf_ready_ = true;
}

void PostingCursor::skip_to(std::uint32_t target) {
  // Galloping over the blocks' last docs, then a binary search: the first block whose last doc
  // is >= target.
  std::uint64_t lo = blk_ + 1, step = 1;
  while (lo + step < end_ && last_[lo + step - 1] < target) {
    lo += step;
    step <<= 1;
  }
  const std::uint64_t hi = std::min(end_, lo + step);
  const std::uint64_t b = static_cast<std::uint64_t>(std::lower_bound(last_ + lo, last_ + hi, target) - last_);
  load(b, true);
}

}  // namespace ragfind::inverted
