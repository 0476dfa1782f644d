// External document ids: all int64 or all strings, one per internal document number (slot,
// insertion order), with tombstones: a deleted slot keeps its place until the index compacts,
// but its id is free at once (find() no longer returns it, and it may be added again).
//
// Int ids that only ever grow (the default ids 0, 1, 2, ... and any increasing run) need no
// hash map: find() is a direct hit for the identity case and a binary search otherwise, so a
// delete or a compaction never builds a map. An id added out of order switches to a hash map
// over the live ids, kept up to date from then on. While every slot's id is the slot itself
// (the default ids, never compacted), no id is stored at all (8 bytes per document saved).
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ragfind::inverted {

class DocIds {
 public:
  enum class Kind : std::uint32_t { Unset = 0, Int = 1, Str = 2 };

  Kind kind() const { return kind_; }
  /// Live ids.
  std::size_t size() const { return num_live_; }
  /// Slots, dead ones included (the internal document numbers in use).
  std::size_t slots() const { return live_.size(); }
  bool is_live(std::size_t slot) const { return live_[slot] != 0; }
  /// Int ids strictly increasing over all slots, dead ones included (a merge can find them).
  bool ints_increasing() const { return kind_ == Kind::Int && sorted_; }
  /// The int id of a slot.
  std::int64_t int_at(std::size_t slot) const { return identity_ ? static_cast<std::int64_t>(slot) : ints_[slot]; }
  const std::vector<std::string>& strs() const { return strs_; }

  /// Slot of a live external id, or -1.
  std::int64_t find(std::int64_t id) const {
    if (kind_ != Kind::Int) return -1;
    std::int64_t pos = -1;
    if (identity_) {
      if (id >= 0 && static_cast<std::uint64_t>(id) < slots()) pos = id;
    } else if (sorted_) {
      if (id >= 0 && static_cast<std::uint64_t>(id) < ints_.size() && ints_[static_cast<std::size_t>(id)] == id) {
        pos = id;
      } else {
        auto it = std::lower_bound(ints_.begin(), ints_.end(), id);
        if (it != ints_.end() && *it == id) pos = it - ints_.begin();
      }
    } else {
      auto it = int_pos_.find(id);
      if (it != int_pos_.end()) pos = static_cast<std::int64_t>(it->second);
    }
    return (pos >= 0 && live_[static_cast<std::size_t>(pos)]) ? pos : -1;
  }
  std::int64_t find(const std::string& id) const {
    if (kind_ != Kind::Str) return -1;
    auto it = str_pos_.find(id);
    return it == str_pos_.end() ? std::int64_t{-1} : static_cast<std::int64_t>(it->second);
  }

  /// The default id for the next document: one more than the largest live int id (0 when none).
  std::int64_t next_auto_id() const { return has_max_ ? max_int_ + 1 : 0; }

  void append(const std::vector<std::int64_t>& ids) {
    if (kind_ == Kind::Str && num_live_ == 0 && slots() == 0) kind_ = Kind::Unset;
    if (kind_ == Kind::Str) throw std::logic_error("ids: index uses str ids");
    kind_ = Kind::Int;
    for (std::int64_t id : ids) {
      if (identity_) {
        if (id == static_cast<std::int64_t>(slots())) {
          live_.push_back(1);
          ++num_live_;
          max_int_ = id;
          has_max_ = true;
          continue;
        }
        materialize();
      }
      if (sorted_ && !ints_.empty() && id <= ints_.back()) {
        sorted_ = false;
        int_pos_.reserve(num_live_ + ids.size());
        for (std::size_t i = 0; i < ints_.size(); ++i)
          if (live_[i]) int_pos_.emplace(ints_[i], static_cast<std::uint32_t>(i));
      }
      if (!sorted_) int_pos_[id] = static_cast<std::uint32_t>(ints_.size());
      ints_.push_back(id);
      live_.push_back(1);
      ++num_live_;
      if (!has_max_ || id > max_int_) max_int_ = id;
      has_max_ = true;
    }
  }
  void append(std::vector<std::string>&& ids) {
    if (kind_ == Kind::Int && num_live_ == 0 && slots() == 0) kind_ = Kind::Unset;
    if (kind_ == Kind::Int) throw std::logic_error("ids: index uses int ids");
    kind_ = Kind::Str;
    for (auto& id : ids) {
      str_pos_[id] = static_cast<std::uint32_t>(strs_.size());
      strs_.push_back(std::move(id));
      live_.push_back(1);
      ++num_live_;
    }
  }

  /// Marks a live slot dead; its id becomes free.
  void kill(std::size_t slot) {
    if (!live_[slot]) return;
    live_[slot] = 0;
    --num_live_;
    if (kind_ == Kind::Str) {
      str_pos_.erase(strs_[slot]);
      std::string().swap(strs_[slot]);
    } else {
      if (!sorted_) int_pos_.erase(ints_[slot]);
      if (int_at(slot) == max_int_) rebuild_max();
    }
  }

  /// Drops the given dead slots (sorted, unique), renumbering the later ones in order; only
  /// the entries after the first dropped slot are touched.
  void compact(const std::vector<std::uint32_t>& dropped) {
    if (dropped.empty()) return;
    if (kind_ != Kind::Str) materialize();  // slots move down, their ids do not
    const std::size_t n = slots(), first = dropped.front();
    std::size_t r = 0, w = first;
    const bool str = kind_ == Kind::Str;
    for (std::size_t i = first; i < n; ++i) {
      if (r < dropped.size() && dropped[r] == i) {
        ++r;
        continue;
      }
      live_[w] = live_[i];
      if (str) {
        strs_[w] = std::move(strs_[i]);
        if (live_[w]) str_pos_[strs_[w]] = static_cast<std::uint32_t>(w);
      } else {
        ints_[w] = ints_[i];
        if (!sorted_ && live_[w]) int_pos_[ints_[w]] = static_cast<std::uint32_t>(w);
      }
      ++w;
    }
    live_.resize(w);
    live_.shrink_to_fit();
    if (str) {
      strs_.resize(w);
      strs_.shrink_to_fit();
    } else {
      ints_.resize(w);
      ints_.shrink_to_fit();
    }
    if (w == 0) {
      // Nothing left: the index may take ids of either kind again; increasing ints again.
      sorted_ = true;
      identity_ = true;
      std::vector<std::int64_t>().swap(ints_);
      int_pos_ = {};
      str_pos_ = {};
    }
  }

  /// Replaces the content (loader: every id live); duplicates raise.
  void assign(Kind kind, std::vector<std::int64_t> ints, std::vector<std::string> strs) {
    kind_ = kind;
    ints_ = std::move(ints);
    strs_ = std::move(strs);
    int_pos_.clear();
    str_pos_.clear();
    identity_ = false;
    live_.assign(kind_ == Kind::Str ? strs_.size() : ints_.size(), 1);
    num_live_ = live_.size();
    if (kind_ == Kind::Str) {
      str_pos_.reserve(strs_.size());
      for (std::size_t i = 0; i < strs_.size(); ++i) str_pos_.emplace(strs_[i], static_cast<std::uint32_t>(i));
      if (str_pos_.size() != strs_.size()) throw std::invalid_argument("duplicate document ids");
    } else {
      identity_ = true;
      for (std::size_t i = 0; i < ints_.size() && identity_; ++i) identity_ = ints_[i] == static_cast<std::int64_t>(i);
      if (identity_) std::vector<std::int64_t>().swap(ints_);
      sorted_ = true;
      for (std::size_t i = 1; i < ints_.size() && sorted_; ++i) sorted_ = ints_[i] > ints_[i - 1];
      if (!sorted_) {
        int_pos_.reserve(ints_.size());
        for (std::size_t i = 0; i < ints_.size(); ++i) int_pos_.emplace(ints_[i], static_cast<std::uint32_t>(i));
        if (int_pos_.size() != ints_.size()) throw std::invalid_argument("duplicate document ids");
      }
    }
    rebuild_max();
  }

 private:
  // Stores every slot's id (the identity no longer holds after the next change).
  void materialize() {
    if (!identity_) return;
    ints_.resize(slots());
    for (std::size_t i = 0; i < ints_.size(); ++i) ints_[i] = static_cast<std::int64_t>(i);
    identity_ = false;
  }
  void rebuild_max() {
    has_max_ = false;
    max_int_ = 0;
    if (kind_ != Kind::Int) return;
    if (sorted_) {
      for (std::size_t i = live_.size(); i-- > 0;)
        if (live_[i]) {
          max_int_ = int_at(i);
          has_max_ = true;
          return;
        }
      return;
    }
    for (std::size_t i = 0; i < ints_.size(); ++i)
      if (live_[i] && (!has_max_ || ints_[i] > max_int_)) {
        max_int_ = ints_[i];
        has_max_ = true;
      }
  }

  Kind kind_ = Kind::Unset;
  std::vector<std::int64_t> ints_;
  std::vector<std::string> strs_;
  std::vector<std::uint8_t> live_;
  std::size_t num_live_ = 0;
  std::int64_t max_int_ = 0;
  bool has_max_ = false;
  bool sorted_ = true;    // ints_ strictly increasing over all slots: int_pos_ is not built
  bool identity_ = true;  // slot i's id is i and ints_ is empty (implies sorted_)
  std::unordered_map<std::int64_t, std::uint32_t> int_pos_;  // live ids only
  std::unordered_map<std::string, std::uint32_t> str_pos_;   // live ids only
};

}  // namespace ragfind::inverted
