#include "runtime/tracer.h"

#include <algorithm>
#include <atomic>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace densegate::runtime {
namespace {

// Small, stable thread ids for the trace (the OS ids are long and reused).
int CurrentTid() {
  static std::atomic<int> next{1};
  thread_local const int tid = next.fetch_add(1);
  return tid;
}

}  // namespace

Tracer::Tracer(const Clock* clock) : origin_ns_(clock->NowNanos()) {}

void Tracer::NameThread(absl::string_view name) {
  absl::MutexLock lock(&mu_);
  thread_names_.emplace_back(CurrentTid(), std::string(name));
}

void Tracer::AddSpan(absl::string_view name, absl::string_view category,
                     int64_t start_ns, int64_t end_ns, TraceArgs args) {
  Event e{std::string(name), std::string(category), start_ns, end_ns,
          CurrentTid(),      std::move(args)};
  absl::MutexLock lock(&mu_);
  events_.push_back(std::move(e));
}

size_t Tracer::num_spans() const {
  absl::MutexLock lock(&mu_);
  return events_.size();
}

std::string Tracer::ToJson() const {
  nlohmann::json events = nlohmann::json::array();
  absl::MutexLock lock(&mu_);
  for (const auto& [tid, name] : thread_names_) {
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", 1},
                      {"tid", tid},
                      {"args", {{"name", name}}}});
  }
  for (const Event& e : events_) {
    nlohmann::json args = nlohmann::json::object();
    for (const auto& [key, value] : e.args) args[key] = value;
    events.push_back({{"name", e.name},
                      {"cat", e.category},
                      {"ph", "X"},
                      {"pid", 1},
                      {"tid", e.tid},
                      {"ts", (e.start_ns - origin_ns_) / 1e3},
                      {"dur", (e.end_ns - e.start_ns) / 1e3},
                      {"args", std::move(args)}});
  }
  nlohmann::json trace = {{"traceEvents", std::move(events)},
                          {"displayTimeUnit", "ms"}};
  return trace.dump();
}

absl::Status Tracer::WriteFile(const std::string& path) const {
  std::ofstream out(path);
  if (!out) {
    return absl::UnavailableError(
        absl::StrCat("cannot open trace file '", path, "' for writing"));
  }
  out << ToJson();
  out.close();
  if (!out) {
    return absl::DataLossError(
        absl::StrCat("writing trace file '", path, "' failed"));
  }
  return absl::OkStatus();
}

ScopedSpan::ScopedSpan(Tracer* tracer, const Clock* clock, const char* name,
                       const char* category, std::atomic<int64_t>* counter_ns,
                       TraceArgs args)
    : tracer_(tracer),
      clock_(clock),
      name_(name),
      category_(category),
      counter_ns_(counter_ns),
      args_(std::move(args)),
      start_ns_(clock->NowNanos()) {}

ScopedSpan::~ScopedSpan() {
  const int64_t end_ns = clock_->NowNanos();
  if (counter_ns_ != nullptr) counter_ns_->fetch_add(end_ns - start_ns_);
  if (tracer_ != nullptr) {
    tracer_->AddSpan(name_, category_, start_ns_, end_ns, std::move(args_));
  }
}

}  // namespace densegate::runtime
