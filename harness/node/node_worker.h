// NodeWorker: `densegate node`. Registers this machine with the scheduler,
// then loops: long-poll for a lease (Synchronize), run it, finish it. The
// finish also claims the next job (FinishLeaseRequest.claim_next), so a busy
// node goes from job to job in one round trip and long-polls only when idle.
//
//   * EVALUATION leases go to the JobRunner (job_runner.h; on a real node
//     the harness's Evaluator); stage events, progress and the raw samples
//     stream to the scheduler (ReportStream), heartbeats renew the lease
//     every interval, and a heartbeat reply that cancels stops the
//     evaluation at the next stage or benchmark pair. The evaluation's
//     feedback bundle is uploaded (UploadFeedback), then the verdict, or
//     an infrastructure error (which the scheduler retries elsewhere),
//     finishes the lease.
//   * CALIBRATION leases measure this node's timing noise (the runner's
//     MeasureNoise); the scheduler quarantines the node when it exceeds the
//     budget.
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
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "harness/node/job_runner.h"
#include "proto/densegate.grpc.pb.h"

namespace densegate::harness {

struct NodeWorkerOptions {
  std::string server = "127.0.0.1:7433";
  std::string token;  // Bearer token with the node role; empty: none.
  // nullptr: plaintext.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  std::string name;   // Unique per node; default: the host name.
  // Stop after this many jobs (0: never); tests and the demo use it.
  int max_jobs = 0;
};

class NodeWorker {
 public:
  // `runner` is not owned and must outlive the worker.
  NodeWorker(NodeWorkerOptions options, JobRunner* runner);
  ~NodeWorker();

  // Returns when stopped, after max_jobs, or on an error talking to the
  // scheduler that persists past retries (Unavailable).
  absl::Status Run();
  // Finishes the current job, then returns from Run; an idle node's long
  // poll is cancelled (a lease it was being handed at that moment expires
  // and goes to another node).
  void Stop();

 private:
  // Runs one lease and finishes it. With `claim_next` (and not stopped),
  // the finish also claims the node's next job: returned when there was one.
  absl::StatusOr<std::optional<v1::Lease>> RunLease(const v1::Lease& lease, bool claim_next);
  void Attach(grpc::ClientContext* ctx) const;
  // Sends the lease's feedback bundle in pieces; a failure is logged, and
  // the lease is finished all the same.
  void UploadFeedback(const v1::Lease& lease, const v1::FeedbackBundle& bundle);

  NodeWorkerOptions options_;
  JobRunner* runner_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::NodeService::Stub> stub_;
  std::string node_id_;
  int heartbeat_interval_s_ = 10;
  int64_t feedback_max_bytes_ = 0;  // The scheduler's cap, or the default.
  std::atomic<bool> stop_{false};
  absl::Mutex poll_mu_;
  grpc::ClientContext* poll_ ABSL_GUARDED_BY(poll_mu_) = nullptr;  // The long poll.
};

}  // namespace densegate::harness

#endif  // DENSEGATE_HARNESS_NODE_NODE_WORKER_H_
