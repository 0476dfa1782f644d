// External document ids: all int64 or all strings, mapped to internal ids (insertion order).
// The common case, int ids 0, 1, 2, ... in insertion order, needs no hash map (identity).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ragfind::bm25 {

class DocIds {
 public:
  enum class Kind : std::uint32_t { Unset = 0, Int = 1, Str = 2 };

  Kind kind() const { return kind_; }
  std::size_t size() const { return kind_ == Kind::Str ? strs_.size() : ints_.size(); }
  const std::vector<std::int64_t>& ints() const { return ints_; }
  const std::vector<std::string>& strs() const { return strs_; }

  /// Internal id of an external id, or -1.
  std::int64_t find(std::int64_t id) const {
    if (identity_) return (id >= 0 && static_cast<std::uint64_t>(id) < ints_.size()) ? id : -1;
    auto it = int_pos_.find(id);
    return it == int_pos_.end() ? std::int64_t{-1} : static_cast<std::int64_t>(it->second);
  }
  std::int64_t find(const std::string& id) const {
    auto it = str_pos_.find(id);
    return it == str_pos_.end() ? std::int64_t{-1} : static_cast<std::int64_t>(it->second);
  }

  /// The default id for the next document: one more than the largest int id (0 when empty).
  std::int64_t next_auto_id() const { return ints_.empty() ? 0 : max_int_ + 1; }

  void append(const std::vector<std::int64_t>& ids) {
    if (kind_ == Kind::Str) throw std::logic_error("ids: index uses str ids");
    kind_ = Kind::Int;
    for (std::int64_t id : ids) {
      if (identity_ && id != static_cast<std::int64_t>(ints_.size())) {
        identity_ = false;
        int_pos_.reserve(ints_.size() + ids.size());
        for (std::size_t i = 0; i < ints_.size(); ++i) int_pos_.emplace(ints_[i], static_cast<std::uint32_t>(i));
      }
      if (!identity_) int_pos_.emplace(id, static_cast<std::uint32_t>(ints_.size()));
      ints_.push_back(id);
      if (ints_.size() == 1 || id > max_int_) max_int_ = id;
    }
  }
  void append(std::vector<std::string>&& ids) {
    if (kind_ == Kind::Int) throw std::logic_error("ids: index uses int ids");
    kind_ = Kind::Str;
    for (auto& id : ids) {
      str_pos_.emplace(id, static_cast<std::uint32_t>(strs_.size()));
      strs_.push_back(std::move(id));
    }
  }
  /// Drops the last `count` ids (rolls back a failed add).
  void truncate(std::size_t new_size) {
    while (size() > new_size) {
      if (kind_ == Kind::Str) {
        str_pos_.erase(strs_.back());
        strs_.pop_back();
      } else {
        if (!identity_) int_pos_.erase(ints_.back());
        ints_.pop_back();
      }
    }
    rebuild_max();
  }
  /// Removes sorted unique internal ids, keeping the order of the others.
  void remove(const std::vector<std::uint32_t>& docs) {
    std::size_t r = 0, w = 0;
    const std::size_t n = size();
    for (std::size_t i = 0; i < n; ++i) {
      if (r < docs.size() && docs[r] == i) {
        ++r;
        continue;
      }
      if (kind_ == Kind::Str) {
        strs_[w] = std::move(strs_[i]);
      } else {
        ints_[w] = ints_[i];
      }
      ++w;
    }
    if (kind_ == Kind::Str) strs_.resize(w); else ints_.resize(w);
    rebuild_index();
  }
  void rebuild_index() {
    int_pos_.clear();
    str_pos_.clear();
    if (kind_ == Kind::Str) {
      str_pos_.reserve(strs_.size());
      for (std::size_t i = 0; i < strs_.size(); ++i) str_pos_.emplace(strs_[i], static_cast<std::uint32_t>(i));
    } else {
      identity_ = true;
      for (std::size_t i = 0; i < ints_.size() && identity_; ++i) identity_ = ints_[i] == static_cast<std::int64_t>(i);
      if (!identity_) {
        int_pos_.reserve(ints_.size());
        for (std::size_t i = 0; i < ints_.size(); ++i) int_pos_.emplace(ints_[i], static_cast<std::uint32_t>(i));
      }
    }
    rebuild_max();
  }
  /// Replaces the content (loader); duplicates raise.
  void assign(Kind kind, std::vector<std::int64_t> ints, std::vector<std::string> strs) {
    kind_ = kind;
    ints_ = std::move(ints);
    strs_ = std::move(strs);
    rebuild_index();
    if ((!identity_ && int_pos_.size() != ints_.size()) || str_pos_.size() != strs_.size())
      throw std::invalid_argument("duplicate document ids");
  }

 private:
  void rebuild_max() {
    max_int_ = 0;
    for (std::size_t i = 0; i < ints_.size(); ++i)
      if (i == 0 || ints_[i] > max_int_) max_int_ = ints_[i];
  }

  Kind kind_ = Kind::Unset;
  std::vector<std::int64_t> ints_;
  std::vector<std::string> strs_;
  std::int64_t max_int_ = 0;
  bool identity_ = true;  // ints_[i] == i for every i: int_pos_ is not built
  std::unordered_map<std::int64_t, std::uint32_t> int_pos_;
  std::unordered_map<std::string, std::uint32_t> str_pos_;
};

}  // namespace ragfind::bm25
