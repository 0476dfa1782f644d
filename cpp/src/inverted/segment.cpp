// Segment: the term directory lookup, the forward index and the per-list caches (segment.hpp).
#include "ragfind/inverted/segment.hpp"

#include <algorithm>
#include <cstdlib>
#include <new>

namespace ragfind::inverted {

std::int64_t Segment::slot_of(std::uint32_t term) const {
  if (term_ids.empty()) {
    if (term >= directory_size()) return -1;
    return offsets[term] == offsets[term + 1] ? -1 : static_cast<std::int64_t>(term);
  }
  const std::uint32_t* it = std::lower_bound(term_ids.begin(), term_ids.end(), term);
  if (it == term_ids.end() || *it != term) return -1;
  return it - term_ids.begin();
}

void Segment::ensure_forward() {
  if (has_forward) return;
  // Transposes the postings; terms come out sorted per document (slots are in term order).
  std::vector<std::uint64_t> off(static_cast<std::size_t>(num_docs) + 1, 0);
  for (std::size_t slot = 0; slot < directory_size(); ++slot)
    for_each_posting(*this, slot, [&](std::uint32_t d, std::uint32_t) { ++off[d + 1]; });
  for (std::size_t d = 0; d < num_docs; ++d) off[d + 1] += off[d];
  std::vector<std::uint32_t> terms(num_postings());
  std::vector<std::uint64_t> fill(off.begin(), off.end() - 1);
  for (std::size_t slot = 0; slot < directory_size(); ++slot) {
    const std::uint32_t t = term_ids.empty() ? static_cast<std::uint32_t>(slot) : term_ids[slot];
    for_each_posting(*this, slot, [&](std::uint32_t d, std::uint32_t) { terms[fill[d]++] = t; });
  }
  fwd_offsets = std::move(off);
  fwd_terms = std::move(terms);
  has_forward = true;
}

namespace {
// A zeroed array of atomics from calloc: large ones come as fresh zero pages that cost memory
// only once written (a lock-free std::atomic<std::uint64_t> is a plain 8-byte word; all-zero
// bits are the value 0).
std::atomic<std::uint64_t>* zeroed_atomics(std::size_t n) {
  static_assert(sizeof(std::atomic<std::uint64_t>) == 8 && std::atomic<std::uint64_t>::is_always_lock_free);
  void* p = std::calloc(n > 0 ? n : 1, sizeof(std::atomic<std::uint64_t>));
  if (!p) throw std::bad_alloc();
  return static_cast<std::atomic<std::uint64_t>*>(p);
}
}  // namespace

void Segment::reset_bounds() {
  const std::size_t n = directory_size();
  bound_cache.reset(zeroed_atomics(n));
  kth_cache.reset(zeroed_atomics(n * kKthLevels.size()));
  blocks.reset(new BlockInfo[num_blocks() > 0 ? num_blocks() : 1]);
  block_state.reset(zeroed_atomics(n));
}

}  // namespace ragfind::inverted
