// ConcurrencyLimit: at most `max` callers inside at once; the others wait
// their turn, first come first served. The PostgreSQL store runs its
// claims through one: claimers all race for the rows at the head of the
// queue, and PostgreSQL spent about half the CPU per dispatch with two
// claims in flight as with eight skipping and re-checking each other's locks
// (docs/measurements/dispatch.md, "Claims take turns").
//
// Thread-safe. Reentrancy is the caller's concern: a thread that enters
// twice without leaving counts twice.
#ifndef DENSEGATE_RESULTS_STORE_INTERNAL_CONCURRENCY_LIMIT_H_
#define DENSEGATE_RESULTS_STORE_INTERNAL_CONCURRENCY_LIMIT_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>

namespace densegate::results::internal {

class ConcurrencyLimit {
 public:
  // `max` < 1: no limit. `on_wait`, if set, is called (without the lock
  // held) each time a caller has to wait; tests use it.
  explicit ConcurrencyLimit(int max, std::function<void()> on_wait = nullptr);

  ConcurrencyLimit(const ConcurrencyLimit&) = delete;
  ConcurrencyLimit& operator=(const ConcurrencyLimit&) = delete;

  // Inside from construction until destruction.
  class Turn {
   public:
    explicit Turn(ConcurrencyLimit& limit);
    ~Turn();
    Turn(const Turn&) = delete;
    Turn& operator=(const Turn&) = delete;

   private:
    ConcurrencyLimit& limit_;
  };

 private:
  // A caller waiting its turn; Leave hands its place to the first one and
  // notifies it after letting go of `mu_`, so that the woken thread does not
  // wake into a held lock and sleep again (docs/measurements/dispatch.md, "Claims
  // take turns"). Shared: Leave's reference keeps the condition variable alive
  // while it notifies, even if the waiter has already seen `admitted` and
  // returned.
  struct Waiter {
    std::condition_variable admitted_cv;
    bool admitted = false;
  };

  void Enter();
  void Leave();

  const int max_;
  const std::function<void()> on_wait_;
  // std::mutex (not absl::Mutex) so that ThreadSanitizer sees it.
  std::mutex mu_;
  int inside_ = 0;
  // In arrival order. Each waiter has its own condition variable, so that a
  // turn wakes one thread, not all of them.
  std::deque<std::shared_ptr<Waiter>> waiting_;
};

}  // namespace densegate::results::internal

#endif  // DENSEGATE_RESULTS_STORE_INTERNAL_CONCURRENCY_LIMIT_H_
