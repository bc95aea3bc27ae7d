// Bytes in use and their high-water mark, for one cache or a group of them:
// a gauge forwards every change to its parent, so the engine can report the
// peak of the attention KV caches alone and of everything (KV blocks plus
// KDA states) together.
//
// Owners charge a gauge after they acquire memory and discharge it before
// they free it, so with concurrent owners a gauge (and its peak) never
// exceeds what is really held.
//
// Thread-safe (atomics); the parent must outlive the gauge.
#ifndef DENSEGATE_RUNTIME_MEMORY_GAUGE_H_
#define DENSEGATE_RUNTIME_MEMORY_GAUGE_H_

#include <atomic>
#include <cstdint>

namespace densegate::runtime {

class MemoryGauge {
 public:
  explicit MemoryGauge(MemoryGauge* parent = nullptr) : parent_(parent) {}
  MemoryGauge(const MemoryGauge&) = delete;
  MemoryGauge& operator=(const MemoryGauge&) = delete;

  // `bytes` may be negative (a release).
  void Add(int64_t bytes) {
    const int64_t now = current_.fetch_add(bytes) + bytes;
    int64_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
    }
    if (parent_ != nullptr) parent_->Add(bytes);
  }

  int64_t current() const { return current_.load(); }
  int64_t peak() const { return peak_.load(); }

 private:
  MemoryGauge* const parent_;
  std::atomic<int64_t> current_{0};
  std::atomic<int64_t> peak_{0};
};

}  // namespace densegate::runtime

#endif  // DENSEGATE_RUNTIME_MEMORY_GAUGE_H_
