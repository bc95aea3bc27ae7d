// Collects spans (name, category, start, duration, thread, integer args)
// and writes them as a Chrome trace-event JSON file ("X" complete events
// plus thread names), which Perfetto and chrome://tracing open. Spans come
// from every stage of the runtime: encode, prefill, transfer, each decode
// step and the per-layer kernels inside them.
//
// Thread-safe. Recording takes a mutex briefly; a null Tracer* is how the
// runtime runs without tracing (see ScopedSpan).
#ifndef DENSEGATE_RUNTIME_TRACER_H_
#define DENSEGATE_RUNTIME_TRACER_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "runtime/clock.h"

namespace densegate::runtime {

using TraceArgs = std::vector<std::pair<std::string, int64_t>>;

class Tracer {
 public:
  // Timestamps are taken from `clock` by the callers; the trace's time 0
  // is `clock`'s time now.
  explicit Tracer(const Clock* clock);
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  // Names the calling thread in the trace ("decode-0").
  void NameThread(absl::string_view name);

  // A span that ran on the calling thread from start_ns to end_ns.
  void AddSpan(absl::string_view name, absl::string_view category,
               int64_t start_ns, int64_t end_ns, TraceArgs args = {});

  size_t num_spans() const;

  // The whole trace as JSON ({"traceEvents": [...]}), timestamps in
  // microseconds from the tracer's creation.
  std::string ToJson() const;
  absl::Status WriteFile(const std::string& path) const;

 private:
  struct Event {
    std::string name;
    std::string category;
    int64_t start_ns;
    int64_t end_ns;
    int tid;
    TraceArgs args;
  };

  const int64_t origin_ns_;
  mutable absl::Mutex mu_;
  std::vector<Event> events_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<int, std::string>> thread_names_ ABSL_GUARDED_BY(mu_);
};

// Records [construction, destruction) as a span when `tracer` is not null,
// and adds the duration to `*counter_ns` when that is not null.
class ScopedSpan {
 public:
  ScopedSpan(Tracer* tracer, const Clock* clock, const char* name,
             const char* category, std::atomic<int64_t>* counter_ns = nullptr,
             TraceArgs args = {});
  ~ScopedSpan();
  ScopedSpan(const ScopedSpan&) = delete;
  ScopedSpan& operator=(const ScopedSpan&) = delete;

  void AddArg(std::string key, int64_t value) {
    args_.emplace_back(std::move(key), value);
  }

 private:
  Tracer* const tracer_;
  const Clock* const clock_;
  const char* const name_;
  const char* const category_;
  std::atomic<int64_t>* const counter_ns_;
  TraceArgs args_;
  const int64_t start_ns_;
};

}  // namespace densegate::runtime

#endif  // DENSEGATE_RUNTIME_TRACER_H_
