#include "results/store/internal/concurrency_limit.h"

#include <memory>
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
  auto me = std::make_shared<Waiter>();
  waiting_.push_back(me);
  if (on_wait_) {
    lock.unlock();
    on_wait_();
    lock.lock();
  }
  // Leave hands over its place: inside_ already counts this caller.
  me->admitted_cv.wait(lock, [&] { return me->admitted; });
}

void ConcurrencyLimit::Leave() {
  if (max_ < 1) return;
  std::shared_ptr<Waiter> next;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (waiting_.empty()) {
      --inside_;
      return;
    }
    next = std::move(waiting_.front());
    waiting_.pop_front();
    next->admitted = true;
  }
  next->admitted_cv.notify_one();
}

}  // namespace densegate::results::internal
