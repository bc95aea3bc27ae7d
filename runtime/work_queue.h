// A blocking multi-producer multi-consumer FIFO that can be closed: the
// queues between the runtime's worker pools. Internal to runtime/.
//
// Thread-safe.
#ifndef DENSEGATE_RUNTIME_WORK_QUEUE_H_
#define DENSEGATE_RUNTIME_WORK_QUEUE_H_

#include <deque>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace densegate::runtime {

template <typename T>
class WorkQueue {
 public:
  // False (and the item dropped back to the caller) once closed.
  bool Push(T& item) {
    absl::MutexLock lock(&mu_);
    if (closed_) return false;
    items_.push_back(std::move(item));
    return true;
  }

  // The next item, waiting for one; nullopt once closed and drained.
  std::optional<T> Pop() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(this, &WorkQueue::ReadyLocked));
    return PopLocked();
  }

  // The next item if there is one now.
  std::optional<T> TryPop() {
    absl::MutexLock lock(&mu_);
    return PopLocked();
  }

  // Wakes every waiting Pop; later pushes fail.
  void Close() {
    absl::MutexLock lock(&mu_);
    closed_ = true;
  }

 private:
  bool ReadyLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return closed_ || !items_.empty();
  }
  std::optional<T> PopLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (items_.empty()) return std::nullopt;
    T item = std::move(items_.front());
    items_.pop_front();
    return item;
  }

  absl::Mutex mu_;
  std::deque<T> items_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace densegate::runtime

#endif  // DENSEGATE_RUNTIME_WORK_QUEUE_H_
