// An append-only string interner: string -> dense id (0, 1, 2, ... in insertion order).
//
// Open addressing with linear probing; a slot holds the id and 32 bits of the hash, so a probe
// touches the string only when the tags match. The strings live in one byte arena, so lookups
// take a string_view and never allocate. Used for the analyzer's surface forms,
// the index vocabulary and string document ids.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

namespace ragfind::text {

class StringTable {
 public:
  static constexpr std::uint32_t kNotFound = 0xFFFFFFFFu;

  StringTable() { slots_.assign(16, 0); }

  // slot = (hash >> 32) << 32 | (id + 1); 0 = empty.
  static std::uint64_t make_slot(std::uint64_t h, std::uint32_t id) {
    return (h & 0xFFFFFFFF00000000ull) | (id + 1ull);
  }

  std::size_t size() const { return offsets_.size() - 1; }

  std::string_view get(std::uint32_t id) const {
    return std::string_view(bytes_.data() + offsets_[id], offsets_[id + 1] - offsets_[id]);
  }

  /// The id of s, or kNotFound.
  std::uint32_t find(std::string_view s) const {
    const std::uint64_t h = hash(s);
    const std::size_t mask = slots_.size() - 1;
    const std::uint64_t tag = h & 0xFFFFFFFF00000000ull;
    for (std::size_t i = h & mask;; i = (i + 1) & mask) {
      const std::uint64_t slot = slots_[i];
      if (slot == 0) return kNotFound;
      const auto id = static_cast<std::uint32_t>(slot) - 1;
      if ((slot & 0xFFFFFFFF00000000ull) == tag && get(id) == s) return id;
    }
  }

  /// The id of s, inserting it if new; `inserted` says which.
  std::uint32_t insert(std::string_view s, bool* inserted = nullptr) {
    const std::uint64_t h = hash(s);
    std::size_t mask = slots_.size() - 1;
    std::size_t i = h & mask;
    const std::uint64_t tag = h & 0xFFFFFFFF00000000ull;
    for (;; i = (i + 1) & mask) {
      const std::uint64_t slot = slots_[i];
      if (slot == 0) break;
      const auto id = static_cast<std::uint32_t>(slot) - 1;
      if ((slot & 0xFFFFFFFF00000000ull) == tag && get(id) == s) {
        if (inserted) *inserted = false;
        return id;
      }
    }
    const auto id = static_cast<std::uint32_t>(size());
    bytes_.insert(bytes_.end(), s.begin(), s.end());
    offsets_.push_back(bytes_.size());
    hashes_.push_back(h);
    slots_[i] = make_slot(h, id);
    if ((size() + 1) * 4 > slots_.size() * 3) rehash(slots_.size() * 2);
    if (inserted) *inserted = true;
    return id;
  }

  void reserve(std::size_t n) {
    std::size_t want = 16;
    while (want * 3 < (n + 1) * 4) want *= 2;
    if (want > slots_.size()) rehash(want);
  }

  std::size_t memory_bytes() const {
    return bytes_.capacity() + offsets_.capacity() * 8 + hashes_.capacity() * 8 + slots_.capacity() * 8;
  }

  const std::vector<char>& bytes() const { return bytes_; }
  const std::vector<std::uint64_t>& offsets() const { return offsets_; }

  static std::uint64_t hash(std::string_view s) {
    // 64-bit FNV-1a over 8-byte words then a murmur-style finalizer: fast for short tokens.
    std::uint64_t h = 0xcbf29ce484222325ull ^ s.size();
    const char* p = s.data();
    std::size_t n = s.size();
    while (n >= 8) {
      std::uint64_t w;
      std::memcpy(&w, p, 8);
      h = (h ^ w) * 0x100000001b3ull;
      h ^= h >> 29;
      p += 8;
      n -= 8;
    }
    std::uint64_t w = 0;
    std::memcpy(&w, p, n);
    h = (h ^ w) * 0x100000001b3ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h;
  }

 private:
  void rehash(std::size_t new_size) {
    std::vector<std::uint64_t> slots(new_size, 0);
    const std::size_t mask = new_size - 1;
    for (std::uint32_t id = 0; id < size(); ++id) {
      std::size_t i = hashes_[id] & mask;
      while (slots[i] != 0) i = (i + 1) & mask;
      slots[i] = make_slot(hashes_[id], id);
    }
    slots_.swap(slots);
  }

  std::vector<char> bytes_;
  std::vector<std::uint64_t> offsets_{0};
  std::vector<std::uint64_t> hashes_;
  std::vector<std::uint64_t> slots_;
};

}  // namespace ragfind::text
