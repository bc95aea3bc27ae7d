#include "results/store/internal/concurrency_limit.h"

#include <utility>

namespace densegate::results::internal {

ConcurrencyLimit::ConcurrencyLimit(int max, std::function<void()> on_wait)
    : max_(max), on_wait_(std::move(on_wait)) {}

ConcurrencyLimit::Turn::Turn(ConcurrencyLimit& limit) : limit_(limit) {
  limit_.Enter();
}

ConcurrencyLimit::Turn::~Turn() { limit_.Leave(); }

void ConcurrencyLimit::Enter() {
  if (max_ < 1) return;
  std::unique_lock<std::mutex> lock(mu_);
  if (inside_ < max_ && waiting_.empty()) {
    ++inside_;
    return;
  }
  Waiter me;
  waiting_.push_back(&me);
  if (on_wait_) {
    lock.unlock();
    on_wait_();
    lock.lock();
  }
  // Leave hands over its place: inside_ already counts this caller.
  me.admitted_cv.wait(lock, [&] { return me.admitted; });
}

void ConcurrencyLimit::Leave() {
  if (max_ < 1) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (waiting_.empty()) {
    --inside_;
    return;
  }
  Waiter* next = waiting_.front();
  waiting_.pop_front();
  next->admitted = true;
  // Under the lock: `next` lives on its thread's stack until it sees
  // `admitted`, which it cannot before the lock is released.
  next->admitted_cv.notify_one();
}

}  // namespace densegate::results::internal
