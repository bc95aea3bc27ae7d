#include "results/store/internal/concurrency_limit.h"

#include <algorithm>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "results/store/testing/thread_signals.h"

namespace densegate::results::internal {
namespace {

// Records the order in which threads got in.
class Entries {
 public:
  void Add(std::string who) {
    std::lock_guard<std::mutex> lock(mu_);
    order_.push_back(std::move(who));
  }
  std::vector<std::string> order() {
    std::lock_guard<std::mutex> lock(mu_);
    return order_;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> order_;
};

// A thread that takes a turn and records `name` once inside.
std::thread EnterAndRecord(ConcurrencyLimit& limit, Entries& entries,
                           std::string name) {
  return std::thread([&limit, &entries, name = std::move(name)] {
    ConcurrencyLimit::Turn turn(limit);
    entries.Add(name);
  });
}

TEST(ConcurrencyLimitTest, NoLimitNeverWaits) {
  testing::Counter waits;
  ConcurrencyLimit limit(0, waits.Hook());
  ConcurrencyLimit::Turn a(limit);
  ConcurrencyLimit::Turn b(limit);
  ConcurrencyLimit::Turn c(limit);
  EXPECT_EQ(waits.value(), 0);
}

TEST(ConcurrencyLimitTest, ACallerBeyondTheLimitWaitsForOneToLeave) {
  testing::Counter waits;
  Entries entries;
  ConcurrencyLimit limit(1, waits.Hook());
  std::optional<ConcurrencyLimit::Turn> held;
  held.emplace(limit);
  std::thread second = EnterAndRecord(limit, entries, "second");
  waits.AwaitAtLeast(1);
  // The second caller is waiting, not inside.
  EXPECT_TRUE(entries.order().empty());
  entries.Add("first leaves");
  held.reset();
  second.join();
  EXPECT_EQ(entries.order(),
            (std::vector<std::string>{"first leaves", "second"}));
}

TEST(ConcurrencyLimitTest, UpToTheLimitEnterWithoutWaiting) {
  testing::Counter waits;
  Entries entries;
  ConcurrencyLimit limit(2, waits.Hook());
  std::optional<ConcurrencyLimit::Turn> one;
  std::optional<ConcurrencyLimit::Turn> two;
  one.emplace(limit);
  two.emplace(limit);
  EXPECT_EQ(waits.value(), 0);
  std::thread third = EnterAndRecord(limit, entries, "third");
  waits.AwaitAtLeast(1);
  EXPECT_TRUE(entries.order().empty());
  one.reset();
  third.join();
  EXPECT_EQ(entries.order(), std::vector<std::string>{"third"});
  EXPECT_EQ(waits.value(), 1);
}

TEST(ConcurrencyLimitTest, WaitersEnterInArrivalOrder) {
  testing::Counter waits;
  Entries entries;
  ConcurrencyLimit limit(1, waits.Hook());
  std::optional<ConcurrencyLimit::Turn> held;
  held.emplace(limit);
  std::vector<std::thread> threads;
  const std::vector<std::string> names = {"a", "b", "c", "d"};
  for (size_t i = 0; i < names.size(); ++i) {
    threads.push_back(EnterAndRecord(limit, entries, names[i]));
    // The next thread starts only once this one waits: arrival order is
    // the order of `names`.
    waits.AwaitAtLeast(static_cast<int>(i) + 1);
  }
  held.reset();
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(entries.order(), names);
}

TEST(ConcurrencyLimitTest, ManyThreadsNeverExceedTheLimit) {
  constexpr int kMax = 3;
  ConcurrencyLimit limit(kMax);
  std::mutex mu;
  int inside = 0;
  int most = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 500; ++i) {
        ConcurrencyLimit::Turn turn(limit);
        {
          std::lock_guard<std::mutex> lock(mu);
          most = std::max(most, ++inside);
        }
        std::this_thread::yield();
        std::lock_guard<std::mutex> lock(mu);
        --inside;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_LE(most, kMax);
  EXPECT_GE(most, 1);
  EXPECT_EQ(inside, 0);
}

}  // namespace
}  // namespace densegate::results::internal
