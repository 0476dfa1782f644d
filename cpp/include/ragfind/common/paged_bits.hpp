// A bitmap held in fixed pages that its copies share: copying one copies a page pointer per
// 32,768 bits, and a copy that changes a bit first copies that bit's page (copy-on-write). A
// kept filter patched after a one-row write so costs a page, not the whole bitmap, and an
// index comparing it with the version it compiled before finds the untouched pages equal by
// pointer, without reading them.
//
// A page is never changed while another copy holds it, so copies may be read from any thread;
// one copy is changed by one thread at a time.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "ragfind/common/bits.hpp"

namespace ragfind::common {

class PagedBits {
 public:
  static constexpr std::size_t kPageWords = 512;  // 4 KB, 32,768 bits
  using Page = std::array<std::uint64_t, kPageWords>;

  PagedBits() = default;
  /// The first n_bits bits of `words` (bit i of word i / 64), copied into pages.
  PagedBits(const std::uint64_t* words, std::size_t n_words, std::size_t n_bits) {
    resize(n_bits);
    n_words = std::min(n_words, words_);
    for (std::size_t p = 0; p * kPageWords < n_words; ++p) {
      const std::size_t n = std::min(kPageWords, n_words - p * kPageWords);
      std::memcpy(pages_[p]->data(), words + p * kPageWords, n * sizeof(std::uint64_t));
    }
    clear_tail();
  }

  /// Bits covered.
  std::size_t size() const { return n_bits_; }
  /// 64-bit words covered ((size() + 63) / 64).
  std::size_t n_words() const { return words_; }
  /// Word w (w < n_words()).
  std::uint64_t operator[](std::size_t w) const { return (*pages_[w / kPageWords])[w % kPageWords]; }
  /// Bit i (i < size()).
  bool test(std::size_t i) const { return ((*this)[i >> 6] >> (i & 63)) & 1; }
  /// 64 bits from bit `from` on (bit 0 of the result is bit `from`); bits past the end are 0.
  std::uint64_t bits_at(std::size_t from) const {
    const std::size_t w = from >> 6, shift = from & 63;
    if (w >= words_) return 0;
    std::uint64_t out = (*this)[w] >> shift;
    if (shift && w + 1 < words_) out |= (*this)[w + 1] << (64 - shift);
    return out;
  }

  /// Covers n_bits bits: new bits are clear; bits past n_bits are dropped.
  void resize(std::size_t n_bits) {
    const std::size_t words = (n_bits + 63) / 64;
    const std::size_t pages = (words + kPageWords - 1) / kPageWords;
    const bool shrinks = n_bits < n_bits_;
    pages_.resize(pages);
    for (auto& p : pages_)
      if (!p) p = std::make_shared<Page>(Page{});
    n_bits_ = n_bits;
    words_ = words;
    if (shrinks) clear_tail();
  }
  /// Word w for writing: its page is copied first when another copy shares it.
  std::uint64_t& word(std::size_t w) {
    auto& page = pages_[w / kPageWords];
    if (page.use_count() != 1) page = std::make_shared<Page>(*page);
    return (*page)[w % kPageWords];
  }
  /// Sets or clears bit i (i < size()).
  void assign(std::size_t i, bool on) {
    const std::uint64_t bit = std::uint64_t{1} << (i & 63);
    if (test(i) == on) return;  // no write, no page copied
    std::uint64_t& w = word(i >> 6);
    w = on ? (w | bit) : (w & ~bit);
  }

  /// Set bits in words [first, first + n) (within n_words()).
  std::size_t count(std::size_t first, std::size_t n) const {
    std::size_t out = 0;
    for_pages(first, n,
              [&](std::size_t p, std::size_t lo, std::size_t len) { out += count_bits(pages_[p]->data() + lo, len); });
    return out;
  }
  /// Set bits.
  std::size_t count() const { return count(0, words_); }
  /// True when words [first, first + n) equal `other`'s (both cover them): pages the two share
  /// are equal without being read.
  bool same_words(const PagedBits& other, std::size_t first, std::size_t n) const {
    bool same = true;
    for_pages(first, n, [&](std::size_t p, std::size_t lo, std::size_t len) {
      if (!same || pages_[p] == other.pages_[p]) return;
      same = std::memcmp(pages_[p]->data() + lo, other.pages_[p]->data() + lo, len * sizeof(std::uint64_t)) == 0;
    });
    return same;
  }
  /// The words, one flat copy.
  std::vector<std::uint64_t> words() const {
    std::vector<std::uint64_t> out(words_);
    for_pages(0, words_, [&](std::size_t p, std::size_t lo, std::size_t len) {
      std::memcpy(out.data() + p * kPageWords + lo, pages_[p]->data() + lo, len * sizeof(std::uint64_t));
    });
    return out;
  }
  /// Page p's words (p < number of pages): for readers walking the pages in order.
  const std::uint64_t* page(std::size_t p) const { return pages_[p]->data(); }

 private:
  // f(page, first word in it, words) over the pages words [first, first + n) fall in.
  template <class F>
  void for_pages(std::size_t first, std::size_t n, F&& f) const {
    for (std::size_t w = first, end = first + n; w < end;) {
      const std::size_t p = w / kPageWords, lo = w % kPageWords;
      const std::size_t len = std::min(kPageWords - lo, end - w);
      f(p, lo, len);
      w += len;
    }
  }
  // Bits past n_bits_ clear (copied or shrunk pages keep whatever lay there).
  void clear_tail() {
    if (pages_.empty()) return;
    const std::size_t last = pages_.size() - 1;
    const std::size_t used = words_ - last * kPageWords;  // words of the last page in use
    const std::uint64_t keep = n_bits_ % 64 ? (std::uint64_t{1} << (n_bits_ % 64)) - 1 : ~std::uint64_t{0};
    const Page& page = *pages_[last];
    bool dirty = used && (page[used - 1] & ~keep);
    for (std::size_t i = used; i < kPageWords && !dirty; ++i) dirty = page[i] != 0;
    if (!dirty) return;
    Page& own = *(pages_[last].use_count() == 1 ? pages_[last] : (pages_[last] = std::make_shared<Page>(page)));
    if (used) own[used - 1] &= keep;
    std::fill(own.begin() + static_cast<std::ptrdiff_t>(used), own.end(), 0);
  }

  std::vector<std::shared_ptr<Page>> pages_;
  std::size_t n_bits_ = 0;
  std::size_t words_ = 0;
};

}  // namespace ragfind::common
