// BatchTurn: callers that would wait for a turn are served together. At most
// `max_in_flight` batches run at once; a caller that arrives while they all
// run waits, and when a batch ends the caller at the head of the queue runs
// the next one with every caller then waiting (up to `max_batch`). Each
// waiting caller returns once its batch has run, on whichever thread ran it.
//
// The PostgreSQL store runs its finish-and-claim statements through one: a
// statement for several nodes costs PostgreSQL less per node than one
// statement each (executor start-up, commit and round trip once per batch),
// and the callers were waiting anyway (docs/measurements/dispatch.md, "Finishes
// and claims in batches").
//
// Thread-safe. `run` must not throw.
#ifndef DENSEGATE_RESULTS_STORE_INTERNAL_BATCH_TURN_H_
#define DENSEGATE_RESULTS_STORE_INTERNAL_BATCH_TURN_H_

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/types/span.h"

namespace densegate::results::internal {

template <typename Item>
class BatchTurn {
 public:
  // `max_in_flight` < 1: no limit and no batching (each caller runs alone at
  // once). `on_wait`, if set, is called (without the lock held) each time a
  // caller has to wait; tests use it.
  BatchTurn(int max_in_flight, int max_batch,
            std::function<void()> on_wait = nullptr)
      : max_in_flight_(max_in_flight),
        max_batch_(std::max(1, max_batch)),
        on_wait_(std::move(on_wait)) {}

  BatchTurn(const BatchTurn&) = delete;
  BatchTurn& operator=(const BatchTurn&) = delete;

  // Returns once `run` has been called on a batch holding `item`, here or on
  // another caller's thread; `item` must stay valid until then. The batch
  // keeps arrival order.
  void Run(Item* item, absl::FunctionRef<void(absl::Span<Item* const>)> run) {
    if (max_in_flight_ < 1) {
      Item* const one[] = {item};
      run(one);
      return;
    }
    auto me = std::make_shared<Waiter>();
    me->item = item;
    std::unique_lock<std::mutex> lock(mu_);
    queue_.push_back(me);
    bool waited = false;
    while (!me->done) {
      if (in_flight_ < max_in_flight_ && queue_.front() == me) {
        RunBatch(lock, run);
        return;
      }
      if (!waited && on_wait_) {
        waited = true;
        lock.unlock();
        on_wait_();
        lock.lock();
        continue;
      }
      me->cv.wait(lock);
    }
  }

 private:
  // A caller in the queue. Shared: whoever ends its batch keeps it alive
  // while notifying after letting go of `mu_` (so that the woken thread does
  // not wake into a held lock), even if the caller has already returned.
  struct Waiter {
    Item* item = nullptr;
    bool done = false;
    std::condition_variable cv;
  };

  // Runs the batch led by the caller at the head of the queue; `lock` is
  // held on entry and released on return.
  void RunBatch(std::unique_lock<std::mutex>& lock,
                absl::FunctionRef<void(absl::Span<Item* const>)> run) {
    const size_t n = std::min(queue_.size(), static_cast<size_t>(max_batch_));
    std::vector<std::shared_ptr<Waiter>> batch(queue_.begin(),
                                               queue_.begin() + n);
    queue_.erase(queue_.begin(), queue_.begin() + n);
    ++in_flight_;
    // More than a batch was waiting and another may run at once: its
    // leader need not wait for this one to end.
    std::shared_ptr<Waiter> also =
        !queue_.empty() && in_flight_ < max_in_flight_ ? queue_.front()
                                                       : nullptr;
    lock.unlock();
    if (also != nullptr) also->cv.notify_one();
    std::vector<Item*> items;
    items.reserve(n);
    for (const auto& w : batch) items.push_back(w->item);
    run(items);
    lock.lock();
    --in_flight_;
    for (const auto& w : batch) w->done = true;
    // The next batch's leader: the caller now at the head of the queue.
    std::shared_ptr<Waiter> next = queue_.empty() ? nullptr : queue_.front();
    lock.unlock();
    for (size_t i = 1; i < batch.size(); ++i) batch[i]->cv.notify_one();
    if (next != nullptr) next->cv.notify_one();
  }

  const int max_in_flight_;
  const int max_batch_;
  const std::function<void()> on_wait_;
  // std::mutex (not absl::Mutex) so that ThreadSanitizer sees it.
  std::mutex mu_;
  int in_flight_ = 0;
  // Waiting callers in arrival order, each with its own condition variable,
  // so that a batch's end wakes only its own callers and the next leader.
  std::deque<std::shared_ptr<Waiter>> queue_;
};

}  // namespace densegate::results::internal

#endif  // DENSEGATE_RESULTS_STORE_INTERNAL_BATCH_TURN_H_
