#include "kernels/kda/thread_pool.h"

#include <atomic>
#include <set>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace densegate::kernels::kda {
namespace {

TEST(ThreadPoolTest, EveryIndexRunsExactlyOnce) {
  ThreadPool pool(3);
  for (int64_t n : {0, 1, 2, 7, 64, 1000}) {
    for (int threads : {0, 1, 2, 4, 16}) {
      std::vector<std::atomic<int>> hits(n);
      pool.ParallelFor(n, threads, [&](int64_t i) { hits[i].fetch_add(1); });
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " threads=" << threads;
      }
    }
  }
}

TEST(ThreadPoolTest, OneThreadRunsOnTheCaller) {
  ThreadPool pool(2);
  const std::thread::id me = std::this_thread::get_id();
  std::atomic<int> elsewhere{0};
  pool.ParallelFor(50, 1, [&](int64_t) {
    if (std::this_thread::get_id() != me) elsewhere.fetch_add(1);
  });
  EXPECT_EQ(elsewhere.load(), 0);
}

TEST(ThreadPoolTest, UsesWorkersWhenAllowed) {
  ThreadPool pool(3);
  std::mutex mu;
  std::set<std::thread::id> ids;
  std::atomic<int> arrived{0};
  // Each item waits until all four have started, so they must run on four
  // threads at once (caller + 3 workers).
  pool.ParallelFor(4, 4, [&](int64_t) {
    {
      std::lock_guard<std::mutex> lock(mu);
      ids.insert(std::this_thread::get_id());
    }
    arrived.fetch_add(1);
    while (arrived.load() < 4) std::this_thread::yield();
  });
  EXPECT_EQ(ids.size(), 4u);
}

TEST(ThreadPoolTest, ConcurrentCallersAreSerializedAndComplete) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&] {
      for (int r = 0; r < 20; ++r) {
        pool.ParallelFor(100, 3, [&](int64_t i) { total.fetch_add(i); });
      }
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(total.load(), 4 * 20 * (99 * 100 / 2));
}

TEST(ThreadPoolTest, SharedPoolExists) {
  ThreadPool& a = ThreadPool::Shared();
  ThreadPool& b = ThreadPool::Shared();
  EXPECT_EQ(&a, &b);
  EXPECT_EQ(a.num_workers(), ThreadPool::HardwareThreads() - 1);
}

}  // namespace
}  // namespace densegate::kernels::kda
