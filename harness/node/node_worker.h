// NodeWorker: `densegate node`. Registers this machine with the scheduler,
// then loops: long-poll for a lease (Synchronize), run it, finish it. The
// finish also claims the next job (FinishLeaseRequest.claim_next), so a busy
// node goes from job to job in one round trip and long-polls only when idle.
//
//   * EVALUATION leases run the harness's Evaluator on this node's slot;
//     stage events, progress and the raw samples stream to the scheduler
//     (ReportStream), heartbeats renew the lease every interval, and a
//     heartbeat reply that cancels stops the evaluation at the next stage
//     or benchmark pair. The verdict, or an infrastructure error (which the
//     scheduler retries elsewhere), finishes the lease.
//   * CALIBRATION leases measure this node's timing noise: the coefficient
//     of variation of repeated runs of a fixed CPU- and memory-bound probe.
//     The scheduler quarantines the node when it exceeds the budget.
// One job at a time: benchmarks need the machine to themselves.
//
// Thread-safety: Run on one thread; Stop from any thread.
#ifndef DENSEGATE_HARNESS_NODE_NODE_WORKER_H_
#define DENSEGATE_HARNESS_NODE_NODE_WORKER_H_

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"
#include "harness/process/host_lock.h"
#include "platform/process/launcher.h"
#include "harness/runner/precision_baseline_cache.h"
#include "proto/densegate.grpc.pb.h"

namespace densegate::harness {

struct NodeWorkerOptions {
  std::string server = "127.0.0.1:7433";
  std::string token;  // Bearer token with the node role; empty: none.
  // nullptr: plaintext.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  std::string name;   // Unique per node; default: the host name.
  std::string workspace_root;
  std::vector<int> cpus;  // Measured processes are pinned here.
  // EvaluatorOptions::sandbox_uid, candidate_uid and Provenance.isolation.
  uint32_t sandbox_uid = 59000;
  uint32_t candidate_uid = 0;
  std::string isolation = "bubblewrap";
  // EvaluatorOptions::arm_disk_quota_bytes.
  int64_t arm_disk_quota_bytes = int64_t{32} << 30;
  int64_t arm_max_processes = 8192;  // EvaluatorOptions::arm_max_processes.
  // When other nodes share the machine (not owned): measurements, the A/A
  // calibration included, run alone (see HostLock).
  HostLock* host_lock = nullptr;
  std::string software_version;
  // Stop after this many jobs (0: never); tests and the demo use it.
  int max_jobs = 0;
  // Memory for the baseline halves of precision sweeps kept for later
  // candidates against the same baseline runner (PrecisionBaselineCache;
  // the demo's suite takes 192 MiB per baseline). 0: none kept.
  int64_t precision_cache_bytes = int64_t{1} << 30;
};

// This machine's dimensions: CPU model and cores, memory, and a
// fingerprint of CPU, kernel and compiler.
v1::NodeDimensions DetectDimensions(const std::vector<int>& cpus);

// Robust coefficient of variation (1.4826 MAD / median) of `runs` timings
// of a fixed CPU- and memory-bound probe.
double MeasureCalibrationNoise(int runs);

class NodeWorker {
 public:
  // `launcher` is not owned.
  NodeWorker(NodeWorkerOptions options, platform::ProcessLauncher* launcher);
  ~NodeWorker();

  // Returns when stopped, after max_jobs, or on an error talking to the
  // scheduler that persists past retries (Unavailable).
  absl::Status Run();
  // Finishes the current job, then returns from Run.
  void Stop() { stop_ = true; }

 private:
  // Runs one lease and finishes it. With `claim_next` (and not stopped),
  // the finish also claims the node's next job: returned when there was one.
  absl::StatusOr<std::optional<v1::Lease>> RunLease(const v1::Lease& lease, bool claim_next);
  void Attach(grpc::ClientContext* ctx) const;

  NodeWorkerOptions options_;
  platform::ProcessLauncher* launcher_;
  std::unique_ptr<v1::NodeService::Stub> stub_;
  std::string node_id_;
  int heartbeat_interval_s_ = 10;
  std::atomic<bool> stop_{false};
  PrecisionBaselineCache precision_baselines_;
};

}  // namespace densegate::harness

#endif  // DENSEGATE_HARNESS_NODE_NODE_WORKER_H_
