// A read-only array that either owns its elements or borrows them (from a memory-mapped
// index file kept alive by the owner). Writers call mutable_vec(), which copies on first write.
#pragma once

#include <cstddef>
#include <vector>

namespace ragfind::common {

template <typename T>
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(std::vector<T> v) : own_(std::move(v)) {}
  static Buffer borrow(const T* data, std::size_t size) {
    Buffer b;
    b.view_ = data;
    b.view_size_ = size;
    b.owned_ = false;
    return b;
  }
  Buffer(Buffer&&) noexcept = default;
  Buffer& operator=(Buffer&&) noexcept = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  const T* data() const { return owned_ ? own_.data() : view_; }
  std::size_t size() const { return owned_ ? own_.size() : view_size_; }
  bool empty() const { return size() == 0; }
  const T& operator[](std::size_t i) const { return data()[i]; }
  const T* begin() const { return data(); }
  const T* end() const { return data() + size(); }
  bool owned() const { return owned_; }

  std::vector<T>& mutable_vec() {
    if (!owned_) {
      own_.assign(view_, view_ + view_size_);
      owned_ = true;
      view_ = nullptr;
      view_size_ = 0;
    }
    return own_;
  }

 private:
  std::vector<T> own_;
  const T* view_ = nullptr;
  std::size_t view_size_ = 0;
  bool owned_ = true;
};

}  // namespace ragfind::common
