#include "kernels/kda/thread_pool.h"

#include <algorithm>

namespace densegate::kernels::kda {

ThreadPool::ThreadPool(int num_workers) {
  workers_.reserve(std::max(num_workers, 0));
  for (int i = 0; i < num_workers; ++i) {
    workers_.emplace_back([this, i] { WorkerLoop(i); });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

int ThreadPool::HardwareThreads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

ThreadPool& ThreadPool::Shared() {
  // Function-local static: created once, thread-safe, joined at exit.
  static ThreadPool pool(HardwareThreads() - 1);
  return pool;
}

void ThreadPool::RunItems() {
  const std::function<void(int64_t)>& fn = *fn_;
  for (;;) {
    const int64_t i = next_.fetch_add(1, std::memory_order_relaxed);
    if (i >= n_) return;
    fn(i);
  }
}

void ThreadPool::WorkerLoop(int worker_index) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] {
        return stop_ || (generation_ != seen && worker_index < active_workers_);
      });
      if (stop_) return;
      seen = generation_;
    }
    RunItems();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--busy_workers_ == 0) done_cv_.notify_one();
    }
  }
}

void ThreadPool::ParallelFor(int64_t n, int max_threads,
                             const std::function<void(int64_t)>& fn) {
  if (n <= 0) return;
  const int helpers = static_cast<int>(
      std::min<int64_t>({static_cast<int64_t>(std::max(max_threads, 1)) - 1,
                         static_cast<int64_t>(workers_.size()), n - 1}));
  if (helpers <= 0) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::lock_guard<std::mutex> call_lock(call_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    n_ = n;
    next_.store(0, std::memory_order_relaxed);
    active_workers_ = helpers;
    busy_workers_ = helpers;
    ++generation_;
  }
  work_cv_.notify_all();
  RunItems();
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return busy_workers_ == 0; });
  fn_ = nullptr;
}

}  // namespace densegate::kernels::kda
