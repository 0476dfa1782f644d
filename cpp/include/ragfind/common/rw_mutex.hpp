// A shared mutex that does not let a stream of readers starve a writer.
//
// glibc's pthread rwlock (behind std::shared_mutex) prefers readers: while searches keep
// overlapping, add()/delete() can wait indefinitely (measured: ~6 s per write with 4 Python
// threads searching one BM25 index; tests/reliability/test_concurrency.py). A writer here first takes the
// gate, so readers arriving after it wait at the gate until the writer has had its turn;
// readers already inside finish normally. Readers pay one uncontended mutex lock/unlock.
// Not recursive: a thread holding a shared lock must not take it again (a waiting writer
// would deadlock it), which the bindings never do.
#pragma once
#include <mutex>
#include <shared_mutex>

namespace ragfind::common {

class WriterPreferringSharedMutex {
 public:
  void lock() {
    std::lock_guard<std::mutex> gate(gate_);
    mu_.lock();
  }
  bool try_lock() { return mu_.try_lock(); }
  void unlock() { mu_.unlock(); }
  void lock_shared() {
    { std::lock_guard<std::mutex> gate(gate_); }
    mu_.lock_shared();
  }
  bool try_lock_shared() { return mu_.try_lock_shared(); }
  // Non-blocking versions that still respect the gate (a waiting writer goes first).
  bool try_lock_gated() {
    if (!gate_.try_lock()) return false;
    const bool ok = mu_.try_lock();
    gate_.unlock();
    return ok;
  }
  bool try_lock_shared_gated() {
    if (!gate_.try_lock()) return false;
    gate_.unlock();
    return mu_.try_lock_shared();
  }
  void unlock_shared() { mu_.unlock_shared(); }

 private:
  std::mutex gate_;
  std::shared_mutex mu_;
};

}  // namespace ragfind::common
