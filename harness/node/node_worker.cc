#include "harness/node/node_worker.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <iostream>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "harness/evaluator.h"
#include "results/feedback/bundle.h"

namespace densegate::harness {
namespace {

absl::Status FromGrpc(const grpc::Status& s, const std::string& what) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat(what, ": ", s.error_message()));
}

// Stage events, progress and samples go to the scheduler on one report
// stream as they happen; cancellation comes back from the heartbeat thread.
// A stream that a scheduler restart broke is reopened for the next report,
// so a restart costs the stage and progress reports sent while it was down,
// not the evaluation. Samples are what the verdict is recorded with: they
// wait for the scheduler, and one that cannot be delivered, or a stream
// that broke after carrying some, fails the attempt (Close).
class StreamingListener : public EvalListener {
 public:
  using Attach = std::function<void(grpc::ClientContext*)>;
  StreamingListener(v1::NodeService::Stub* stub, grpc::Channel* channel, Attach attach,
                    std::string node_id, std::string lease_id, std::atomic<bool>* cancel)
      : stub_(stub), channel_(channel), attach_(std::move(attach)),
        node_id_(std::move(node_id)), lease_id_(std::move(lease_id)), cancel_(cancel) {
    Open();
  }

  void OnStage(const v1::Stage& stage) override {
    if (stage.status() == v1::STAGE_RUNNING) return;  // Recorded when it ends.
    v1::NodeReport r = Report();
    *r.mutable_stage() = stage;
    Write(r, absl::ZeroDuration());
  }
  void OnProgress(const v1::Progress& progress) override {
    v1::NodeReport r = Report();
    *r.mutable_progress() = progress;
    Write(r, absl::ZeroDuration());
  }
  bool Cancelled() override { return cancel_->load(); }

  void WriteSample(const v1::Sample& s) {
    v1::NodeReport r = Report();
    *r.mutable_sample() = s;
    r.mutable_sample()->set_id(0);
    // As long as a restarted scheduler takes to answer again.
    if (!Write(r, absl::Seconds(30))) {
      std::lock_guard<std::mutex> l(mu_);
      samples_lost_ = "a sample could not be sent: scheduler unreachable";
    }
    std::lock_guard<std::mutex> l(mu_);
    samples_on_stream_ = true;
  }

  // Ends the stream; an error when a sample may not have reached the store.
  grpc::Status Close() {
    std::lock_guard<std::mutex> l(mu_);
    grpc::Status last = grpc::Status::OK;
    if (writer_ != nullptr) {
      writer_->WritesDone();
      last = writer_->Finish();
      writer_.reset();
    }
    if (!samples_lost_.empty()) return grpc::Status(grpc::StatusCode::UNAVAILABLE, samples_lost_);
    if (!last.ok() && samples_on_stream_) return last;
    return grpc::Status::OK;
  }

 private:
  v1::NodeReport Report() const {
    v1::NodeReport r;
    r.set_node_id(node_id_);
    r.set_lease_id(lease_id_);
    return r;
  }
  void Open() {
    ctx_ = std::make_unique<grpc::ClientContext>();
    attach_(ctx_.get());
    writer_ = stub_->ReportStream(ctx_.get(), &resp_);
    samples_on_stream_ = false;
  }
  // Sends `r`, reopening a broken stream once the channel is connected
  // again (waiting at most `wait`). False when `r` was not sent.
  bool Write(const v1::NodeReport& r, absl::Duration wait) {
    std::lock_guard<std::mutex> l(mu_);
    if (writer_ != nullptr && writer_->Write(r)) return true;
    if (writer_ != nullptr) {
      grpc::Status broken = writer_->Finish();
      writer_.reset();
      if (samples_on_stream_ && samples_lost_.empty()) {
        samples_lost_ = "the report stream broke after carrying samples: " +
                        broken.error_message();
      }
    }
    if (!channel_->WaitForConnected(absl::ToChronoTime(absl::Now() + wait))) return false;
    Open();
    return writer_->Write(r);
  }

  v1::NodeService::Stub* stub_;
  grpc::Channel* channel_;
  Attach attach_;
  std::string node_id_, lease_id_;
  std::atomic<bool>* cancel_;
  std::mutex mu_;  // Writes come from the evaluation's threads.
  std::unique_ptr<grpc::ClientContext> ctx_;
  v1::ReportStreamResponse resp_;
  std::unique_ptr<grpc::ClientWriter<v1::NodeReport>> writer_;
  bool samples_on_stream_ = false;  // The open stream carried a sample.
  std::string samples_lost_;
};

}  // namespace

NodeWorker::NodeWorker(NodeWorkerOptions options, JobRunner* runner)
    : options_(std::move(options)), runner_(runner) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(16 << 20);
  // A restarted scheduler is found within seconds: gRPC's reconnect
  // backoff otherwise grows to two minutes while the node's calls wait.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 500);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 5000);
  channel_ = grpc::CreateCustomChannel(
      options_.server,
      options_.credentials ? options_.credentials : grpc::InsecureChannelCredentials(), args);
  stub_ = v1::NodeService::NewStub(channel_);
  if (options_.name.empty()) {
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    options_.name = host;
  }
}

NodeWorker::~NodeWorker() = default;

void NodeWorker::Attach(grpc::ClientContext* ctx) const {
  if (!options_.token.empty()) ctx->AddMetadata("authorization", "Bearer " + options_.token);
}

void NodeWorker::Stop() {
  stop_ = true;
  absl::MutexLock l(&poll_mu_);
  if (poll_ != nullptr) poll_->TryCancel();
}

absl::Status NodeWorker::Run() {
  v1::RegisterNodeRequest reg;
  reg.set_name(options_.name);
  *reg.mutable_dimensions() = runner_->Dimensions();
  v1::RegisterNodeResponse registered;
  {
    grpc::ClientContext ctx;
    Attach(&ctx);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    ctx.set_wait_for_ready(true);
    if (auto s = FromGrpc(stub_->RegisterNode(&ctx, reg, &registered), "register");
        !s.ok()) {
      return s;
    }
  }
  node_id_ = registered.node_id();
  heartbeat_interval_s_ = std::max(1, registered.heartbeat_interval_s());
  // A scheduler that names no cap gets the default one.
  feedback_max_bytes_ = registered.feedback_max_bytes() > 0 ? registered.feedback_max_bytes()
                                                            : results::kDefaultFeedbackMaxBytes;
  int jobs = 0;
  int failures = 0;
  // A lease the last finish claimed runs even after Stop: it was claimed
  // only while not stopping, and dropping it would cost it an attempt.
  std::optional<v1::Lease> next;
  while (next.has_value() || !stop_) {
    v1::Lease lease;
    if (next.has_value()) {
      lease = *std::move(next);
      next.reset();
    } else {
      v1::SynchronizeRequest req;
      req.set_node_id(node_id_);
      req.set_wait_s(5);
      v1::SynchronizeResponse resp;
      grpc::ClientContext ctx;
      Attach(&ctx);
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
      ctx.set_wait_for_ready(true);
      {
        absl::MutexLock l(&poll_mu_);
        if (stop_) break;
        poll_ = &ctx;
      }
      grpc::Status s = stub_->Synchronize(&ctx, req, &resp);
      {
        absl::MutexLock l(&poll_mu_);
        poll_ = nullptr;
      }
      if (stop_) break;
      if (!s.ok()) {
        // The scheduler may be restarting: retry for a while.
        if (++failures > 30) return FromGrpc(s, "synchronize");
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        continue;
      }
      failures = 0;
      if (!resp.has_lease()) continue;
      lease = resp.lease();
    }
    const bool more = options_.max_jobs <= 0 || ++jobs < options_.max_jobs;
    absl::StatusOr<std::optional<v1::Lease>> claimed = RunLease(lease, more);
    if (!claimed.ok()) return claimed.status();
    next = *std::move(claimed);
    if (!more) break;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<v1::Lease>> NodeWorker::RunLease(const v1::Lease& lease,
                                                              bool claim_next) {
  v1::FinishLeaseRequest finish;
  finish.set_node_id(node_id_);
  finish.set_lease_id(lease.id());
  if (lease.job_kind() == v1::CALIBRATION) {
    finish.set_calibration_noise(runner_->MeasureNoise());
  } else {
    std::atomic<bool> cancel{false};
    StreamingListener listener(
        stub_.get(), channel_.get(), [this](grpc::ClientContext* ctx) { Attach(ctx); }, node_id_,
        lease.id(), &cancel);
    // Heartbeats renew the lease while the evaluation runs.
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::thread heartbeat([&] {
      std::unique_lock<std::mutex> l(mu);
      while (!cv.wait_for(l, std::chrono::seconds(heartbeat_interval_s_), [&] { return done; })) {
        l.unlock();
        v1::HeartbeatRequest hb;
        hb.set_node_id(node_id_);
        hb.set_lease_id(lease.id());
        v1::HeartbeatResponse r;
        grpc::ClientContext ctx;
        Attach(&ctx);
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
        if (stub_->Heartbeat(&ctx, hb, &r).ok() && r.cancel()) cancel = true;
        l.lock();
      }
    });
    const v1::Candidate& c = lease.evaluation().candidate();
    EvalRequest request;
    request.evaluation_id = lease.evaluation().id();
    request.repo = c.repo();
    request.baseline_ref = c.baseline_sha();
    request.candidate_ref = c.candidate_sha();
    request.policy = c.policy();
    request.claims.assign(c.claims().begin(), c.claims().end());
    request.metric_scope.assign(c.metric_scope().begin(), c.metric_scope().end());
    request.prior = lease.prior();
    request.protected_path_override = c.protected_path_override();
    request.override_reason = c.override_reason();
    request.precision_change = c.precision_change();
    request.seed = std::hash<std::string>{}(lease.id());
    request.node_noise = lease.node_calibration_noise();
    request.error_share = c.error_share();
    request.continues = c.continues();
    absl::StatusOr<EvalOutcome> outcome =
        runner_->Evaluate(node_id_, request, feedback_max_bytes_, &listener);
    if (outcome.ok() && outcome->infrastructure_error.ok()) {
      for (const v1::Sample& s : outcome->samples) listener.WriteSample(s);
    }
    grpc::Status stream_status = listener.Close();
    // While heartbeats still renew the lease: a slow upload must not let
    // it expire under the verdict.
    if (!cancel && outcome.ok() && !outcome->feedback.files().empty()) {
      UploadFeedback(lease, outcome->feedback);
    }
    {
      std::lock_guard<std::mutex> l(mu);
      done = true;
    }
    cv.notify_all();
    heartbeat.join();
    if (cancel) return std::nullopt;  // The scheduler dropped the lease.
    if (!outcome.ok()) {
      // Bad refs or manifest surfaced only now: not retryable elsewhere
      // either, but it is not the candidate's verdict; report it.
      finish.set_infrastructure_error(std::string(outcome.status().message()));
    } else if (!outcome->infrastructure_error.ok()) {
      finish.set_infrastructure_error(std::string(outcome->infrastructure_error.message()));
    } else if (!stream_status.ok()) {
      finish.set_infrastructure_error("stage and sample stream failed: " +
                                      stream_status.error_message());
    } else {
      *finish.mutable_verdict() = outcome->verdict;
      finish.mutable_verdict()->set_evaluation_id(lease.evaluation().id());
    }
  }
  finish.set_claim_next(claim_next && !stop_);
  v1::FinishLeaseResponse done_resp;
  for (int attempt = 0; attempt < 20; ++attempt) {
    grpc::ClientContext ctx;
    Attach(&ctx);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    ctx.set_wait_for_ready(true);
    grpc::Status s = stub_->FinishLease(&ctx, finish, &done_resp);
    if (s.ok() || s.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
      // FAILED_PRECONDITION: the lease expired or was cancelled meanwhile;
      // the job was requeued or dropped, and this result must not count.
      if (s.ok() && done_resp.has_next_lease()) return done_resp.next_lease();
      return std::nullopt;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  return absl::UnavailableError("cannot finish lease " + lease.id() + ": scheduler unreachable");
}

void NodeWorker::UploadFeedback(const v1::Lease& lease, const v1::FeedbackBundle& bundle) {
  // Before the lease ends: the store takes a bundle under a live lease only.
  // A bundle that cannot be stored costs the feedback, never the verdict.
  for (int attempt = 0; attempt < 3; ++attempt) {
    grpc::ClientContext ctx;
    Attach(&ctx);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    v1::UploadFeedbackResponse resp;
    std::unique_ptr<grpc::ClientWriter<v1::UploadFeedbackRequest>> writer =
        stub_->UploadFeedback(&ctx, &resp);
    v1::UploadFeedbackRequest req;
    req.set_node_id(node_id_);
    req.set_lease_id(lease.id());
    *req.mutable_omitted() = bundle.omitted();
    results::ForEachPiece(bundle, [&](const v1::FeedbackFile& piece) {
      *req.mutable_file() = piece;
      const bool sent = writer->Write(req);
      req.Clear();
      return sent;
    });
    writer->WritesDone();
    grpc::Status s = writer->Finish();
    if (s.ok()) return;
    std::cerr << "node " << options_.name << ": feedback of lease " << lease.id()
              << " not stored: " << s.error_message() << "\n";
    // Worth another try: the scheduler restarting, or the database breaking
    // a deadlock between two branches' retention updates.
    if (s.error_code() != grpc::StatusCode::UNAVAILABLE &&
        s.error_code() != grpc::StatusCode::ABORTED) {
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

}  // namespace densegate::harness
