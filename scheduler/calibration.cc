// When a node calibrates again: a quarantined node on a schedule while work
// it may not take waits, and every node once per calibration period.
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "scheduler/internal/rpc_util.h"
#include "scheduler/scheduler.h"

namespace densegate::scheduler {

bool Scheduler::RecalibrationDue(const std::string& node_id) {
  absl::MutexLock l(&mu_);
  absl::Time& last = last_recalibration_[node_id];
  if (absl::Now() - last < options_.recalibration_interval) return false;
  last = absl::Now();
  return true;
}

bool Scheduler::QuarantinedForSomeQueuedWork(const v1::Node& node) {
  {
    absl::MutexLock l(&mu_);
    if (node.calibration_noise() <= strictest_noise_limit_) return false;
  }
  absl::StatusOr<int64_t> waiting = store_->CountQueuedOverNoiseLimit(node.calibration_noise());
  return waiting.ok() && *waiting > 0 && RecalibrationDue(node.id());
}

bool Scheduler::PeriodicCalibrationDue(const std::string& node_id, bool start) {
  absl::MutexLock l(&mu_);
  auto [it, unseen] = last_calibration_.try_emplace(node_id, absl::Now());
  if (unseen || absl::Now() - it->second < options_.calibration_period) return false;
  if (start) it->second = absl::Now();
  return true;
}

}  // namespace densegate::scheduler
