// A small fixed-size thread pool for the KDA kernels' parallel loops.
//
// Worker threads are created once (in the constructor) and reused by every
// ParallelFor call, so a decode step never pays for thread creation. Items
// are handed out one at a time from an atomic counter; which thread runs an
// item never changes what the item computes, so results do not depend on the
// thread count (the kernels rely on this for bit-identical outputs).
//
// Thread-safety: ParallelFor may be called from any thread; concurrent calls
// on one pool are serialized (one loop runs at a time). `fn` must not call
// ParallelFor on the same pool (it would deadlock).
#ifndef DENSEGATE_KERNELS_KDA_THREAD_POOL_H_
#define DENSEGATE_KERNELS_KDA_THREAD_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace densegate::kernels::kda {

class ThreadPool {
 public:
  // Starts `num_workers` (>= 0) threads. With 0 every loop runs inline.
  explicit ThreadPool(int num_workers);
  ~ThreadPool();

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_workers() const { return static_cast<int>(workers_.size()); }

  // Runs fn(i) once for every i in [0, n), on the calling thread plus at most
  // `max_threads - 1` workers, and returns when all calls have finished.
  // max_threads <= 1 (or n <= 1) runs everything on the calling thread.
  void ParallelFor(int64_t n, int max_threads,
                   const std::function<void(int64_t)>& fn);

  // A process-wide pool with hardware_concurrency() - 1 workers (the caller
  // is the remaining thread), created on first use.
  static ThreadPool& Shared();

  // std::thread::hardware_concurrency(), at least 1.
  static int HardwareThreads();

 private:
  void WorkerLoop(int worker_index);
  void RunItems();

  std::vector<std::thread> workers_;

  std::mutex call_mu_;  // Serializes ParallelFor calls.

  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  uint64_t generation_ = 0;  // Bumped for each loop; guarded by mu_.
  int active_workers_ = 0;   // Workers allowed to join this loop.
  int busy_workers_ = 0;     // Workers still inside this loop.
  bool stop_ = false;

  // The current loop; written under mu_ before generation_ is bumped.
  const std::function<void(int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  std::atomic<int64_t> next_{0};
};

}  // namespace densegate::kernels::kda

#endif  // DENSEGATE_KERNELS_KDA_THREAD_POOL_H_
