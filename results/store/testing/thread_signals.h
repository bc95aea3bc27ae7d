// Signals between a test and the threads it starts: a one-shot Event and a
// Counter the test can wait on (for instance, for the n-th caller to start
// waiting). On std primitives, so that ThreadSanitizer sees them (Debian's
// Abseil is not instrumented).
//
// Test-only. Thread-safe.
#ifndef DENSEGATE_RESULTS_STORE_TESTING_THREAD_SIGNALS_H_
#define DENSEGATE_RESULTS_STORE_TESTING_THREAD_SIGNALS_H_

#include <condition_variable>
#include <functional>
#include <mutex>

namespace densegate::results::testing {

class Event {
 public:
  void Set() {
    std::lock_guard<std::mutex> lock(mu_);
    set_ = true;
    cv_.notify_all();
  }
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return set_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool set_ = false;
};

class Counter {
 public:
  void Add() {
    std::lock_guard<std::mutex> lock(mu_);
    ++n_;
    changed_.notify_all();
  }
  // Add, as a callback (e.g. a limiter's on_wait hook).
  std::function<void()> Hook() {
    return [this] { Add(); };
  }
  void AwaitAtLeast(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    changed_.wait(lock, [&] { return n_ >= n; });
  }
  int value() {
    std::lock_guard<std::mutex> lock(mu_);
    return n_;
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  int n_ = 0;
};

}  // namespace densegate::results::testing

#endif  // DENSEGATE_RESULTS_STORE_TESTING_THREAD_SIGNALS_H_
