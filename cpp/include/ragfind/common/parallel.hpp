// The one way the core runs work on several threads: parallel_for over a count of items,
// pulled one at a time from a shared counter by up to `threads` workers (the caller is one of
// them). Threads that cannot be started leave their share to the ones running; the first
// exception a worker throws stops the others from taking new items and is rethrown to the
// caller after every worker has finished, so nothing terminates the process.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace ragfind::common {

/// Logical CPUs (at least 1).
inline int hardware_threads() {
  const unsigned h = std::thread::hardware_concurrency();
  return h == 0 ? 1 : static_cast<int>(h);
}

/// Worker count for a call: `requested` when positive, else one per CPU; never more than `items`.
inline int resolve_threads(int requested, std::size_t items) {
  const int t = requested > 0 ? requested : hardware_threads();
  return static_cast<int>(std::max<std::size_t>(1, std::min<std::size_t>(static_cast<std::size_t>(t), items)));
}

/// Calls fn(item, worker) for every item in [0, count) on up to `threads` workers (worker is
/// 0 .. threads-1, for per-worker scratch). Rethrows the first exception after all workers stop.
template <typename Fn>
void parallel_for(std::size_t count, int threads, Fn&& fn) {
  if (count == 0) return;
  const int nt = resolve_threads(threads, count);
  if (nt == 1) {
    for (std::size_t i = 0; i < count; ++i) fn(i, 0);
    return;
  }
  std::atomic<std::size_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto work = [&](int worker) {
    try {
      for (std::size_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < count;) fn(i, worker);
    } catch (...) {
      std::lock_guard<std::mutex> g(error_mutex);
      if (!error) error = std::current_exception();
      next.store(count);
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(static_cast<std::size_t>(nt - 1));
  try {
    for (int t = 1; t < nt; ++t) pool.emplace_back(work, t);
  } catch (const std::system_error&) {
    // Could not start more threads: the ones running (and this one) do the work.
  }
  work(0);
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace ragfind::common
