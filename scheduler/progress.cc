// The progress relay (what watchers of a lease's evaluation are sent) and
// the change counter that long polls wait on.
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "scheduler/internal/rpc_util.h"
#include "scheduler/scheduler.h"

namespace densegate::scheduler {

void Scheduler::ForgetLease(const std::string& lease_id) {
  absl::MutexLock l(&mu_);
  auto it = granted_leases_.find(lease_id);
  if (it == granted_leases_.end()) return;
  progress_.erase(it->second.evaluation_id);
  granted_leases_.erase(it);
}

void Scheduler::RecordProgress(const std::string& lease_id, const v1::Progress& progress) {
  absl::MutexLock l(&mu_);
  auto it = granted_leases_.find(lease_id);
  if (it == granted_leases_.end()) return;
  auto [entry, created] = progress_.try_emplace(it->second.evaluation_id);
  ProgressLog& log = entry->second;
  if (created) log.generation = ++progress_logs_;
  log.recent.push_back(progress);
  if (log.recent.size() > kProgressKept) log.recent.pop_front();
  ++log.recorded;
  ++version_;
}

void Scheduler::Notify() {
  absl::MutexLock l(&mu_);
  ++version_;
}

bool Scheduler::WaitForChange(absl::Time deadline) {
  absl::MutexLock l(&mu_);
  const int64_t seen = version_;
  auto changed = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return version_ != seen || shutdown_; };
  mu_.AwaitWithDeadline(absl::Condition(&changed), deadline);
  return !shutdown_;
}

void Scheduler::Shutdown() {
  absl::MutexLock l(&mu_);
  shutdown_ = true;
}

}  // namespace densegate::scheduler
