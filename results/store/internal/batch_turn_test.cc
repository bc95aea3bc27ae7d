#include "results/store/internal/batch_turn.h"

#include <algorithm>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/types/span.h"
#include "gtest/gtest.h"
#include "results/store/testing/thread_signals.h"

namespace densegate::results::internal {
namespace {

using testing::Counter;

struct Item {
  std::string name;
  int runs = 0;  // Written by the batch that holds the item.
};

// The batches `run` saw, by item name, in the order they ran.
class Batches {
 public:
  // Records the batch; the first one blocks until `release` has been added.
  void Record(absl::Span<Item* const> batch) {
    std::vector<std::string> names;
    for (Item* item : batch) {
      names.push_back(item->name);
      ++item->runs;
    }
    bool first;
    {
      std::lock_guard<std::mutex> lock(mu_);
      first = batches_.empty();
      batches_.push_back(std::move(names));
    }
    started.Add();
    if (first) release.AwaitAtLeast(1);
  }
  std::vector<std::vector<std::string>> batches() {
    std::lock_guard<std::mutex> lock(mu_);
    return batches_;
  }

  Counter started;
  Counter release;

 private:
  std::mutex mu_;
  std::vector<std::vector<std::string>> batches_;
};

TEST(BatchTurnTest, WithoutALimitEachCallerRunsAloneAtOnce) {
  Counter waits;
  BatchTurn<Item> turn(0, 8, waits.Hook());
  std::vector<std::vector<std::string>> seen;
  Item a{"a"};
  Item b{"b"};
  // b runs while a's batch is still running: nothing waits.
  turn.Run(&a, [&](absl::Span<Item* const> outer) {
    seen.push_back({outer[0]->name});
    turn.Run(&b, [&](absl::Span<Item* const> inner) {
      seen.push_back({inner[0]->name});
    });
  });
  EXPECT_EQ(seen, (std::vector<std::vector<std::string>>{{"a"}, {"b"}}));
  EXPECT_EQ(waits.value(), 0);
}

TEST(BatchTurnTest, CallersArrivingDuringABatchRunTogetherInArrivalOrder) {
  Counter waits;
  Batches batches;
  BatchTurn<Item> turn(1, 8, waits.Hook());
  std::vector<Item> items = {{"first"}, {"b"}, {"c"}, {"d"}};
  auto run = [&](absl::Span<Item* const> batch) { batches.Record(batch); };
  std::vector<std::thread> threads;
  threads.emplace_back([&] { turn.Run(&items[0], run); });
  batches.started.AwaitAtLeast(1);
  // Each next caller starts once the one before it is waiting.
  for (int i = 1; i < 4; ++i) {
    threads.emplace_back([&, i] { turn.Run(&items[i], run); });
    waits.AwaitAtLeast(i);
  }
  batches.release.Add();
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(batches.batches(), (std::vector<std::vector<std::string>>{
                                   {"first"}, {"b", "c", "d"}}));
  for (const Item& item : items) EXPECT_EQ(item.runs, 1) << item.name;
}

TEST(BatchTurnTest, ABatchHoldsAtMostMaxBatchCallers) {
  Counter waits;
  Batches batches;
  BatchTurn<Item> turn(1, 2, waits.Hook());
  std::vector<Item> items = {{"first"}, {"b"}, {"c"}, {"d"}, {"e"}, {"f"}};
  auto run = [&](absl::Span<Item* const> batch) { batches.Record(batch); };
  std::vector<std::thread> threads;
  threads.emplace_back([&] { turn.Run(&items[0], run); });
  batches.started.AwaitAtLeast(1);
  for (int i = 1; i < 6; ++i) {
    threads.emplace_back([&, i] { turn.Run(&items[i], run); });
    waits.AwaitAtLeast(i);
  }
  batches.release.Add();
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(batches.batches(), (std::vector<std::vector<std::string>>{
                                   {"first"}, {"b", "c"}, {"d", "e"}, {"f"}}));
  for (const Item& item : items) EXPECT_EQ(item.runs, 1) << item.name;
}

TEST(BatchTurnTest, AtMostMaxInFlightBatchesRunAtOnce) {
  constexpr int kThreads = 8;
  constexpr int kCallsPerThread = 200;
  BatchTurn<Item> turn(2, 3);
  std::mutex mu;
  int running = 0;
  int most_running = 0;
  int batches = 0;
  std::vector<std::vector<Item>> items(kThreads,
                                       std::vector<Item>(kCallsPerThread));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (Item& item : items[t]) {
        turn.Run(&item, [&](absl::Span<Item* const> batch) {
          {
            std::lock_guard<std::mutex> lock(mu);
            ++batches;
            most_running = std::max(most_running, ++running);
          }
          EXPECT_LE(batch.size(), 3u);
          for (Item* i : batch) ++i->runs;
          std::lock_guard<std::mutex> lock(mu);
          --running;
        });
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_LE(most_running, 2);
  EXPECT_LE(batches, kThreads * kCallsPerThread);
  for (const auto& per_thread : items) {
    for (const Item& item : per_thread) ASSERT_EQ(item.runs, 1);
  }
}

}  // namespace
}  // namespace densegate::results::internal
