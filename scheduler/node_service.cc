// The node service (v1::NodeService): registration and calibration,
// long-poll synchronization, heartbeats, the report stream, and finishing a
// lease (the verdict decided again here). Only node tokens (or admin).
#include <iostream>
#include <optional>
#include <set>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "scheduler/internal/rpc_util.h"
#include "results/feedback/bundle.h"
#include "results/gate/gate.h"
#include "results/verdict/verdict.h"
#include "scheduler/scheduler.h"

namespace densegate::scheduler {

using grpc::ServerContext;
using grpc::Status;
using grpc::StatusCode;
using internal::Distrusted;
using internal::Hex;
using internal::Invalid;
using internal::Now;
using internal::Terminal;

class Scheduler::NodeServiceImpl final : public v1::NodeService::Service {
 public:
  explicit NodeServiceImpl(Scheduler* s) : s_(s) {}

  Status RegisterNode(ServerContext* ctx, const v1::RegisterNodeRequest* req,
                      v1::RegisterNodeResponse* resp) override {
    Principal who;
    if (Status st = s_->auth_.Authorize(ctx, {Role::kNode}, &who); !st.ok()) return st;
    if (req->name().empty()) return Invalid("name is required");
    if (req->dimensions().fingerprint().empty()) return Invalid("dimensions.fingerprint is required");
    if (who.role == Role::kNode && req->name() != who.name) {
      return Status(grpc::StatusCode::PERMISSION_DENIED,
                    absl::StrFormat("this token is node %s's: it may not register as %s",
                                    who.name, req->name()));
    }
    absl::StatusOr<v1::Node> node = s_->store_->RegisterNode(req->name(), req->dimensions());
    if (!node.ok()) return ToGrpc(node.status());
    if (node->state() == v1::DISTRUSTED) return ToGrpc(Distrusted(*node));
    {
      absl::MutexLock l(&s_->mu_);
      s_->node_names_[node->id()] = node->name();
    }
    if (node->state() == v1::CALIBRATING) {
      // A new (or changed) node measures its own noise before gate work.
      absl::StatusOr<int64_t> job = s_->store_->EnqueueCalibration(node->id(), s_->options_.max_attempts);
      if (!job.ok() && job.status().code() != absl::StatusCode::kAlreadyExists) {
        return ToGrpc(job.status());
      }
    }
    resp->set_node_id(node->id());
    resp->set_heartbeat_interval_s(s_->options_.heartbeat_interval_s);
    resp->set_feedback_max_bytes(s_->options_.feedback.max_bytes);
    return Status::OK;
  }

  Status UploadFeedback(ServerContext* ctx, grpc::ServerReader<v1::UploadFeedbackRequest>* reader,
                        v1::UploadFeedbackResponse* resp) override {
    Principal who;
    if (Status st = s_->auth_.Authorize(ctx, {Role::kNode}, &who); !st.ok()) return st;
    v1::UploadFeedbackRequest req;
    if (!reader->Read(&req)) return Invalid("empty upload");
    if (req.node_id().empty() || req.lease_id().empty()) {
      return Invalid("the first message names node_id and lease_id");
    }
    if (Status st = s_->CheckActsAs(who, req.node_id()); !st.ok()) return st;
    const results::LeaseRef lease{req.lease_id(), req.node_id()};
    // Before taking any of the bundle: the lease must be live (renewed
    // here, as a heartbeat would), and the node not uploading already.
    absl::StatusOr<results::LeaseRenewal> live =
        s_->store_->RenewLease(lease, s_->options_.lease_duration);
    if (!live.ok()) return ToGrpc(live.status());
    if (live->cancel) {
      return Status(StatusCode::FAILED_PRECONDITION,
                    absl::StrCat("lease ", lease.lease_id, " is over: ", live->cancel_reason));
    }
    {
      absl::MutexLock l(&s_->mu_);
      if (!s_->uploading_.insert(lease.node_id).second) {
        return Status(StatusCode::RESOURCE_EXHAUSTED,
                      "this node is uploading a feedback bundle already");
      }
    }
    absl::Cleanup done = [this, &lease] {
      absl::MutexLock l(&s_->mu_);
      s_->uploading_.erase(lease.node_id);
    };
    results::BundleAssembler assembler(s_->options_.feedback.max_bytes);
    if (req.omitted_size() > results::kMaxBundleFiles) {
      return Invalid(absl::StrCat("omitted names over ", results::kMaxBundleFiles, " paths"));
    }
    *assembler.bundle().mutable_omitted() = req.omitted();
    do {
      if (!req.has_file()) continue;
      // Over the cap: refused as soon as it shows, not after all of it.
      if (absl::Status st = assembler.Add(req.file()); !st.ok()) return ToGrpc(st);
    } while (reader->Read(&req));
    const v1::FeedbackBundle& bundle = assembler.bundle();
    absl::Status st = s_->store_->PutFeedback(lease, bundle, results::BundleSummary(bundle),
                                              s_->options_.feedback);
    if (!st.ok()) return ToGrpc(st);
    resp->set_files(bundle.files_size());
    resp->set_bytes(assembler.bytes());
    return Status::OK;
  }

  Status Synchronize(ServerContext* ctx, const v1::SynchronizeRequest* req,
                     v1::SynchronizeResponse* resp) override {
    Principal who;
    if (Status st = s_->auth_.Authorize(ctx, {Role::kNode}, &who); !st.ok()) return st;
    if (req->node_id().empty()) return Invalid("node_id is required");
    if (Status st = s_->CheckActsAs(who, req->node_id()); !st.ok()) return st;
    const absl::Duration wait =
        std::min(absl::Seconds(std::max(0, req->wait_s())), s_->options_.max_sync_wait);
    const absl::Time deadline = absl::Now() + wait;
    while (true) {
      absl::StatusOr<std::optional<v1::Lease>> lease = s_->ClaimFor(req->node_id());
      if (!lease.ok()) return ToGrpc(lease.status());
      if (lease->has_value()) {
        *resp->mutable_lease() = *std::move(*lease);
        return Status::OK;
      }
      if (ctx->IsCancelled() || absl::Now() >= deadline) return Status::OK;
      if (!s_->WaitForChange(deadline)) return Status::OK;
    }
  }

  Status Heartbeat(ServerContext* ctx, const v1::HeartbeatRequest* req,
                   v1::HeartbeatResponse* resp) override {
    Principal who;
    if (Status st = s_->auth_.Authorize(ctx, {Role::kNode}, &who); !st.ok()) return st;
    if (req->node_id().empty()) return Invalid("node_id is required");
    if (Status st = s_->CheckActsAs(who, req->node_id()); !st.ok()) return st;
    if (req->lease_id().empty()) {
      return ToGrpc(s_->store_->RecordNodeHeartbeat(req->node_id()));
    }
    absl::StatusOr<results::LeaseRenewal> r =
        s_->store_->RenewLease({req->lease_id(), req->node_id()}, s_->options_.lease_duration);
    if (!r.ok()) return ToGrpc(r.status());
    if (r->cancel) s_->ForgetLease(req->lease_id());
    resp->set_cancel(r->cancel);
    resp->set_cancel_reason(r->cancel_reason);
    if (!r->cancel) {
      *resp->mutable_lease_expires_at() =
          google::protobuf::util::TimeUtil::NanosecondsToTimestamp(absl::ToUnixNanos(r->expires_at));
    }
    return Status::OK;
  }

  Status ReportStream(ServerContext* ctx, grpc::ServerReader<v1::NodeReport>* reader,
                      v1::ReportStreamResponse* resp) override {
    Principal who;
    if (Status st = s_->auth_.Authorize(ctx, {Role::kNode}, &who); !st.ok()) return st;
    v1::NodeReport report;
    int64_t accepted = 0;
    while (reader->Read(&report)) {
      if (Status st = s_->CheckActsAs(who, report.node_id()); !st.ok()) return st;
      results::LeaseRef lease{report.lease_id(), report.node_id()};
      absl::Status st;
      switch (report.report_case()) {
        case v1::NodeReport::kStage:
          st = s_->store_->RecordStage(lease, report.stage());
          break;
        case v1::NodeReport::kProgress:
          s_->RecordProgress(report.lease_id(), report.progress());
          break;
        case v1::NodeReport::kSample: {
          absl::StatusOr<std::vector<int64_t>> ids =
              s_->store_->AppendSamples(lease, {report.sample()});
          st = ids.status();
          if (ids.ok()) {
            // A lease granted before a restart is not here: its verdict
            // names all samples of the evaluation.
            absl::MutexLock l(&s_->mu_);
            auto it = s_->granted_leases_.find(report.lease_id());
            if (it != s_->granted_leases_.end()) {
              it->second.sample_ids.insert(it->second.sample_ids.end(), ids->begin(), ids->end());
            }
          }
          break;
        }
        default:
          st = absl::InvalidArgumentError("empty report");
      }
      if (!st.ok()) return ToGrpc(st);
      ++accepted;
      s_->Notify();
    }
    resp->set_accepted(accepted);
    return Status::OK;
  }

  Status FinishLease(ServerContext* ctx, const v1::FinishLeaseRequest* req,
                     v1::FinishLeaseResponse* resp) override {
    Principal who;
    if (Status st = s_->auth_.Authorize(ctx, {Role::kNode}, &who); !st.ok()) return st;
    results::LeaseRef lease{req->lease_id(), req->node_id()};
    if (lease.lease_id.empty() || lease.node_id.empty()) {
      return Invalid("node_id and lease_id are required");
    }
    if (Status st = s_->CheckActsAs(who, lease.node_id); !st.ok()) return st;
    absl::Status st;
    std::optional<v1::Lease> next;
    bool claimed_with_verdict = false;
    switch (req->outcome_case()) {
      case v1::FinishLeaseRequest::kVerdict:
        st = FinishWithVerdict(lease, *req, &next, &claimed_with_verdict);
        break;
      case v1::FinishLeaseRequest::kInfrastructureError:
        st = s_->store_->FailLease(lease, req->infrastructure_error()).status();
        if (st.ok()) s_->ForgetLease(lease.lease_id);
        break;
      case v1::FinishLeaseRequest::kCalibrationNoise: {
        const double noise = req->calibration_noise();
        st = s_->store_->FinishCalibration(
            lease, noise,
            noise <= s_->options_.max_calibration_noise ? v1::ACTIVE : v1::QUARANTINED);
        if (st.ok()) {
          ++s_->calibrations_;
          absl::MutexLock l(&s_->mu_);
          s_->last_calibration_[lease.node_id] = absl::Now();
          s_->node_noise_[lease.node_id] = noise;
        }
        break;
      }
      default:
        return Invalid("an outcome (verdict, infrastructure_error or calibration_noise) is required");
    }
    s_->Notify();
    if (!st.ok()) return ToGrpc(st);
    if (claimed_with_verdict) {
      if (next.has_value()) {
        s_->Grant(&*next, lease.node_id);
        *resp->mutable_next_lease() = *std::move(next);
      }
    } else if (req->claim_next()) {
      // The outcome stands whatever happens here: a failed claim leaves the
      // reply without a lease, and the node's next Synchronize meets it.
      absl::StatusOr<std::optional<v1::Lease>> claimed = s_->ClaimFor(lease.node_id);
      if (claimed.ok() && claimed->has_value()) *resp->mutable_next_lease() = *std::move(*claimed);
    }
    return Status::OK;
  }

 private:
  // The node's verdict: what is stored is the scheduler's decision from the
  // samples streamed under the lease, then what follows from it (a second
  // part, the merge queue). With claim_next, an active node's next lease
  // comes back in *next from the same store call (*claimed_with_verdict).
  absl::Status FinishWithVerdict(const results::LeaseRef& lease, const v1::FinishLeaseRequest& req,
                                 std::optional<v1::Lease>* next, bool* claimed_with_verdict) {
    // The node's sample ids are local to its run: the verdict lists the
    // store's ids of the samples streamed under this lease (after a
    // scheduler restart, all samples of the evaluation).
    v1::Verdict verdict = req.verdict();
    verdict.clear_candidate_id();
    verdict.mutable_provenance()->clear_sample_ids();
    std::vector<int64_t> ids;
    bool known = false;
    bool merge_queue = false;
    std::optional<v1::Candidate> candidate;
    {
      absl::MutexLock l(&s_->mu_);
      auto it = s_->granted_leases_.find(lease.lease_id);
      if (it != s_->granted_leases_.end()) {
        ids = it->second.sample_ids;
        known = true;
        merge_queue = it->second.merge_queue;
        candidate = it->second.candidate;
        if (verdict.evaluation_id().empty()) verdict.set_evaluation_id(it->second.evaluation_id);
      }
    }
    if (verdict.evaluation_id().empty()) {
      return absl::InvalidArgumentError("verdict.evaluation_id is required");
    }
    if (!known) {
      absl::StatusOr<std::vector<v1::Sample>> all = s_->store_->ListSamples(verdict.evaluation_id());
      if (all.ok()) {
        for (const v1::Sample& smp : *all) ids.push_back(smp.id());
      }
    }
    for (int64_t id : ids) verdict.mutable_provenance()->add_sample_ids(id);
    // What is stored is the scheduler's decision from those samples,
    // never the node's own.
    absl::StatusOr<v1::Verdict> decided =
        s_->DecideHere(lease, verdict, candidate.has_value() ? &*candidate : nullptr);
    if (!decided.ok()) {
      absl::Status st =
          s_->store_->FailLease(lease, std::string(decided.status().message())).status();
      if (st.ok()) s_->ForgetLease(lease.lease_id);
      return st;
    }
    verdict = *std::move(decided);
    // An active node's next claim goes with the verdict (one store call;
    // on PostgreSQL one round trip). A merge-queue verdict first lets the
    // merge queue queue its re-measure, and a due calibration goes
    // through ClaimFor; so does a node that is not ACTIVE.
    absl::Status st;
    if (req.claim_next() && !merge_queue &&
        !s_->PeriodicCalibrationDue(lease.node_id, /*start=*/false)) {
      const absl::Time start = absl::Now();
      absl::StatusOr<results::NextClaim> claimed =
          s_->store_->FinishLeaseAndClaimNext(lease, verdict, s_->options_.lease_duration);
      st = claimed.status();
      if (claimed.ok() && claimed->node_state == v1::ACTIVE) {
        s_->RecordClaim(absl::ToDoubleSeconds(absl::Now() - start), claimed->lease ? 1 : 0);
        *next = std::move(claimed->lease);
        *claimed_with_verdict = true;
      }
    } else {
      st = s_->store_->FinishLease(lease, verdict);
    }
    // Kept after a failure: the node may retry (or the lease expires).
    if (st.ok()) s_->ForgetLease(lease.lease_id);
    if (st.ok() && results::InconclusiveForNoise(verdict)) {
      // Noise left it undecided: its second part, when it kept budget
      // for one. Missed here (an error, a crash), GetEvaluation queues it.
      absl::StatusOr<v1::Evaluation> e = s_->store_->GetEvaluation(verdict.evaluation_id());
      if (e.ok()) (void)s_->ContinueIfDue(*e);
    }
    if (st.ok() && verdict.decision() >= 0 && verdict.decision() < 4) {
      ++s_->verdicts_[verdict.decision()];
    }
    // A lease this process granted knows whether its candidate aims at
    // a branch (or re-measures one that does); one granted before a
    // restart is looked up.
    if (st.ok() && verdict.decision() == v1::ACCEPT && (merge_queue || !known)) {
      // Accepted and aimed at a branch: into the merge queue (the
      // merge loop lands it). Missed here (a crash right after the
      // verdict), the sweep at the next start enqueues it.
      absl::StatusOr<v1::Evaluation> e = s_->store_->GetEvaluation(verdict.evaluation_id());
      if (e.ok()) (void)s_->merges_.Enqueue(*e);
    }
    if (st.ok() && merge_queue) {
      // Land it, or queue the re-measure a moved tip needs, before this
      // node claims again (claim_next below, or its next Synchronize):
      // re-measures go ahead of other work, but left to the periodic
      // advance, the node's next claim took the next queued job first.
      s_->AdvanceMerges();
    }
    return st;
  }

  Scheduler* s_;
};

std::unique_ptr<grpc::Service> Scheduler::NewNodeService(Scheduler* s) {
  return std::make_unique<NodeServiceImpl>(s);
}

}  // namespace densegate::scheduler
