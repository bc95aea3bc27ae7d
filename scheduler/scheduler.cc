#include "scheduler/scheduler.h"

#include <sys/stat.h>

#include <algorithm>
#include <functional>
#include <iostream>
#include <optional>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/util/time_util.h"
#include "harness/workspace/git.h"
#include "proto/manifest.h"
#include "results/report/report.h"
#include "results/verdict/verdict.h"

namespace densegate::scheduler {
namespace {

using grpc::ServerContext;
using grpc::Status;
using grpc::StatusCode;

Status Invalid(const std::string& message) {
  return Status(StatusCode::INVALID_ARGUMENT, message);
}

bool Terminal(v1::EvaluationState s) {
  return s == v1::FINISHED || s == v1::CANCELLED || s == v1::DEAD;
}

google::protobuf::Timestamp Now() {
  return google::protobuf::util::TimeUtil::NanosecondsToTimestamp(absl::ToUnixNanos(absl::Now()));
}

std::string Hex(const std::string& text) {
  return absl::StrFormat("%016x", std::hash<std::string>{}(text));
}

// Why a DISTRUSTED node is refused, for its operator.
absl::Status Distrusted(const v1::Node& node) {
  return absl::FailedPreconditionError(absl::StrFormat(
      "node %s is distrusted: a verdict it sent contradicted its own samples (the audit "
      "log's verdict.contradicted entries say how), and it gets no more work. Once the "
      "machine is fixed, revoke this node's token and register it under a new name",
      node.name()));
}

}  // namespace

Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return Status::OK;
  return Status(static_cast<StatusCode>(s.code()), std::string(s.message()));
}

// ---------------------------------------------------------------------------
// Client service.

class Scheduler::ClientService final : public v1::Densegate::Service {
 public:
  explicit ClientService(Scheduler* s) : s_(s) {}

  Status Submit(ServerContext* ctx, const v1::SubmitRequest* req,
                v1::SubmitResponse* resp) override {
    Principal who;
    if (Status st = s_->auth_.Authorize(ctx, {Role::kCi, Role::kAgent}, &who); !st.ok()) return st;
    if (req->repo().empty()) return Invalid("repo is required");
    if (req->baseline_ref().empty()) return Invalid("baseline_ref is required");
    if (req->candidate_ref().empty()) return Invalid("candidate_ref is required");
    if (req->kind() != v1::CI && req->kind() != v1::EXPERIMENT) {
      return Invalid("kind must be CI or EXPERIMENT");
    }
    if (req->claims_size() > 64 || req->hypothesis().size() > 16384) {
      return Invalid("too many claims or a hypothesis over 16 KiB");
    }
    for (const v1::Claim& c : req->claims()) {
      if (c.metric().empty() || !(c.min_speedup() > 0)) {
        return Invalid("each claim needs a metric and a min_speedup > 0");
      }
    }
    if (req->metric_scope_size() > 64) return Invalid("metric_scope names over 64 metrics");
    if (!req->metric_scope().empty() && !req->target_branch().empty()) {
      return Invalid(
          "an evaluation with a metric_scope measures only some metrics, so it cannot target a "
          "branch: submit it without one");
    }
    if (who.role == Role::kAgent && req->kind() != v1::EXPERIMENT) {
      return Status(StatusCode::PERMISSION_DENIED, "an agent token submits experiments only");
    }
    if (req->protected_path_override() && who.role != Role::kAdmin) {
      return Status(StatusCode::PERMISSION_DENIED,
                    "only an admin token may override protected paths");
    }
    if (!req->target_branch().empty() && who.role == Role::kAgent) {
      return Status(StatusCode::PERMISSION_DENIED,
                    "an agent token cannot merge: submit without a target branch");
    }
    absl::StatusOr<results::SubmitResult> r = s_->Enqueue(*req, who.name);
    if (!r.ok()) return ToGrpc(r.status());
    *resp->mutable_evaluation() = r->evaluation;
    resp->set_deduplicated(r->deduplicated);
    return Status::OK;
  }

  Status GetEvaluation(ServerContext* ctx, const v1::GetEvaluationRequest* req,
                       v1::Evaluation* resp) override {
    Principal who;
    if (Status st = Read(ctx, &who); !st.ok()) return st;
    if (req->id().empty()) return Invalid("id is required");
    absl::StatusOr<v1::Evaluation> e = s_->store_->GetEvaluation(req->id());
    if (!e.ok()) return ToGrpc(e.status());
    *resp = *e;
    // Queued when the verdict landed; queued now if that was missed. If it
    // cannot be (its repository is gone), the first part's verdict stands.
    absl::StatusOr<std::string> second = s_->ContinueIfDue(*e);
    if (second.ok()) {
      resp->set_continued_by(*second);
    } else {
      std::cerr << "scheduler: cannot queue the second part of " << e->id() << ": "
                << second.status() << "\n";
    }
    return Status::OK;
  }

  Status GetReport(ServerContext* ctx, const v1::GetReportRequest* req,
                   v1::Report* resp) override {
    Principal who;
    if (Status st = Read(ctx, &who); !st.ok()) return st;
    absl::StatusOr<v1::Report> r = s_->RenderReport(*req);
    if (!r.ok()) return ToGrpc(r.status());
    *resp = *r;
    return Status::OK;
  }

  Status ListEvaluations(ServerContext* ctx, const v1::ListEvaluationsRequest* req,
                         v1::ListEvaluationsResponse* resp) override {
    Principal who;
    if (Status st = Read(ctx, &who); !st.ok()) return st;
    absl::StatusOr<v1::ListEvaluationsResponse> r = s_->store_->ListEvaluations(*req);
    if (!r.ok()) return ToGrpc(r.status());
    *resp = *r;
    return Status::OK;
  }

  Status CancelEvaluation(ServerContext* ctx, const v1::CancelEvaluationRequest* req,
                          v1::Evaluation* resp) override {
    Principal who;
    if (Status st = s_->auth_.Authorize(ctx, {Role::kCi, Role::kAgent}, &who); !st.ok()) {
      return st;
    }
    if (req->id().empty()) return Invalid("id is required");
    absl::StatusOr<v1::Evaluation> e = s_->store_->GetEvaluation(req->id());
    if (!e.ok()) return ToGrpc(e.status());
    if (who.role != Role::kAdmin && e->candidate().submitter() != who.name) {
      return Status(StatusCode::PERMISSION_DENIED,
                    "only the submitter or an admin may cancel this evaluation");
    }
    absl::StatusOr<v1::Evaluation> c =
        s_->store_->CancelEvaluation(req->id(), who.name, req->reason());
    if (!c.ok()) return ToGrpc(c.status());
    *resp = *c;
    s_->Notify();
    return Status::OK;
  }

  Status WatchEvaluation(ServerContext* ctx, const v1::WatchEvaluationRequest* req,
                         grpc::ServerWriter<v1::EvaluationEvent>* writer) override {
    Principal who;
    if (Status st = Read(ctx, &who); !st.ok()) return st;
    if (req->id().empty()) return Invalid("id is required");
    int64_t sent = req->after_sequence();
    v1::EvaluationState last_state = v1::EVALUATION_STATE_UNSPECIFIED;
    // The progress log relayed from, and how many of its reports were sent.
    // A watcher that joins a running evaluation starts at its latest report.
    bool looked = false;
    int64_t progress_log = 0, progress_sent = 0;
    while (!ctx->IsCancelled()) {
      absl::StatusOr<v1::Evaluation> e = s_->store_->GetEvaluation(req->id());
      if (!e.ok()) return ToGrpc(e.status());
      absl::StatusOr<std::vector<results::StageRecord>> stages =
          s_->store_->ListStages(req->id());
      if (!stages.ok()) return ToGrpc(stages.status());
      auto event = [&](int64_t seq) {
        v1::EvaluationEvent ev;
        ev.set_evaluation_id(req->id());
        ev.set_sequence(seq);
        *ev.mutable_time() = Now();
        return ev;
      };
      // Stage records are the replayable events: sequence = their index.
      for (int64_t i = sent; i < static_cast<int64_t>(stages->size()); ++i) {
        v1::EvaluationEvent ev = event(i + 1);
        *ev.mutable_stage() = (*stages)[i].stage;
        if (!writer->Write(ev)) return Status::OK;
      }
      sent = std::max<int64_t>(sent, stages->size());
      if (e->state() != last_state) {
        last_state = e->state();
        v1::EvaluationEvent ev = event(sent);
        ev.set_state(last_state);
        if (!writer->Write(ev)) return Status::OK;
      }
      if (Terminal(e->state())) {
        if (e->has_verdict()) {
          v1::EvaluationEvent ev = event(sent);
          *ev.mutable_verdict() = e->verdict();
          writer->Write(ev);
        }
        return Status::OK;
      }
      std::vector<v1::Progress> reports;  // Written after the lock is released.
      {
        absl::MutexLock l(&s_->mu_);
        auto it = s_->progress_.find(req->id());
        if (it != s_->progress_.end()) {
          const ProgressLog& log = it->second;
          if (log.generation != progress_log) {
            progress_log = log.generation;
            progress_sent = looked ? 0 : log.recorded - 1;
          }
          const int64_t first_kept = log.recorded - static_cast<int64_t>(log.recent.size());
          for (int64_t i = std::max(progress_sent, first_kept); i < log.recorded; ++i) {
            reports.push_back(log.recent[i - first_kept]);
          }
          progress_sent = log.recorded;
        }
        looked = true;
      }
      for (v1::Progress& p : reports) {
        v1::EvaluationEvent ev = event(sent);
        *ev.mutable_progress() = std::move(p);
        if (!writer->Write(ev)) return Status::OK;
      }
      if (!s_->WaitForChange(absl::Now() + absl::Seconds(1))) {
        return Status(StatusCode::UNAVAILABLE, "the scheduler is shutting down");
      }
    }
    return Status::OK;
  }

  Status ListNodes(ServerContext* ctx, const v1::ListNodesRequest* req,
                   v1::ListNodesResponse* resp) override {
    Principal who;
    if (Status st = Read(ctx, &who); !st.ok()) return st;
    std::vector<v1::NodeState> states;
    for (int st : req->states()) states.push_back(static_cast<v1::NodeState>(st));
    absl::StatusOr<std::vector<v1::Node>> nodes = s_->store_->ListNodes(states);
    if (!nodes.ok()) return ToGrpc(nodes.status());
    for (v1::Node& n : *nodes) *resp->add_nodes() = std::move(n);
    return Status::OK;
  }

 private:
  Status Read(ServerContext* ctx, Principal* who) {
    return s_->auth_.Authorize(ctx, {Role::kCi, Role::kAgent, Role::kViewer}, who);
  }

  Scheduler* s_;
};

// ---------------------------------------------------------------------------
// Node service.

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
      case v1::FinishLeaseRequest::kVerdict: {
        // The node's sample ids are local to its run: the verdict lists the
        // store's ids of the samples streamed under this lease (after a
        // scheduler restart, all samples of the evaluation).
        v1::Verdict verdict = req->verdict();
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
        if (verdict.evaluation_id().empty()) return Invalid("verdict.evaluation_id is required");
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
          st = s_->store_->FailLease(lease, std::string(decided.status().message())).status();
          if (st.ok()) s_->ForgetLease(lease.lease_id);
          break;
        }
        verdict = *std::move(decided);
        // An active node's next claim goes with the verdict (one store call;
        // on PostgreSQL one round trip). A merge-queue verdict first lets the
        // merge queue queue its re-measure, and a due calibration goes
        // through ClaimFor; so does a node that is not ACTIVE.
        if (req->claim_next() && !merge_queue &&
            !s_->PeriodicCalibrationDue(lease.node_id, /*start=*/false)) {
          const absl::Time start = absl::Now();
          absl::StatusOr<results::NextClaim> claimed =
              s_->store_->FinishLeaseAndClaimNext(lease, verdict, s_->options_.lease_duration);
          st = claimed.status();
          if (claimed.ok() && claimed->node_state == v1::ACTIVE) {
            s_->RecordClaim(absl::ToDoubleSeconds(absl::Now() - start), claimed->lease ? 1 : 0);
            next = std::move(claimed->lease);
            claimed_with_verdict = true;
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
        break;
      }
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
  Scheduler* s_;
};

// ---------------------------------------------------------------------------

Scheduler::Scheduler(results::Store* store, Authenticator auth, harness::ProcessLauncher* launcher,
                     SchedulerOptions options)
    : store_(store),
      auth_(std::move(auth)),
      launcher_(launcher),
      options_(options),
      git_(launcher),
      merges_(store, &git_,
              [this](const v1::Evaluation& original, const std::string& tip,
                     const std::string& candidate) {
                return Remeasure(original, tip, candidate);
              }) {
  client_ = std::make_unique<ClientService>(this);
  node_ = std::make_unique<NodeServiceImpl>(this);
}

Scheduler::~Scheduler() = default;

grpc::Service* Scheduler::client_service() { return client_.get(); }
grpc::Service* Scheduler::node_service() { return node_.get(); }

absl::StatusOr<results::SubmitResult> Scheduler::Enqueue(const v1::SubmitRequest& req,
                                                         const std::string& submitter,
                                                         const std::string& remeasure_of,
                                                         const v1::Evaluation* first_part) {
  struct stat st;
  if (::stat(req.repo().c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::NotFoundError("repository path does not exist: " + req.repo());
  }
  absl::StatusOr<std::string> base = git_.ResolveCommit(req.repo(), req.baseline_ref());
  if (!base.ok()) return base.status();
  absl::StatusOr<std::string> cand = git_.ResolveCommit(req.repo(), req.candidate_ref());
  if (!cand.ok()) return cand.status();
  absl::StatusOr<std::string> manifest = git_.ShowFile(req.repo(), *base, kManifestFileName);
  if (!manifest.ok()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the baseline commit %s has no %s", base->substr(0, 12), kManifestFileName));
  }
  std::vector<ManifestError> errors;
  absl::StatusOr<v1::Manifest> parsed = ParseManifest(*manifest, &errors);
  if (!parsed.ok()) {
    return absl::FailedPreconditionError(
        "the baseline's manifest is invalid: " +
        (errors.empty() ? std::string("parse error") : errors[0].ToString()));
  }
  // One order and no repeats, so that the same scope is the same candidate.
  std::vector<std::string> scope(req.metric_scope().begin(), req.metric_scope().end());
  std::sort(scope.begin(), scope.end());
  scope.erase(std::unique(scope.begin(), scope.end()), scope.end());
  if (absl::Status s = CheckMetricScope(
          *parsed, scope, std::vector<v1::Claim>(req.claims().begin(), req.claims().end()),
          results::EffectivePolicy(req.policy(), req.kind()));
      !s.ok()) {
    return s;
  }
  // (A second part continues work already admitted.)
  if (req.kind() == v1::EXPERIMENT && first_part == nullptr) {
    v1::ListEvaluationsRequest q;
    q.add_states(v1::QUEUED);
    q.set_kind(v1::EXPERIMENT);
    q.set_submitter(submitter);
    q.set_page_size(options_.max_queued_experiments_per_submitter + 1);
    absl::StatusOr<v1::ListEvaluationsResponse> queued = store_->ListEvaluations(q);
    if (!queued.ok()) return queued.status();
    if (queued->evaluations_size() >= options_.max_queued_experiments_per_submitter) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("%s already has %d experiments queued (the limit)", submitter,
                          queued->evaluations_size()));
    }
  }
  results::SubmitParams p;
  v1::Candidate& c = p.candidate;
  const std::string manifest_hash = Hex(*manifest);
  std::string identity = absl::StrCat(req.repo(), "\n", *base, "\n", *cand, "\n", manifest_hash);
  if (!scope.empty()) absl::StrAppend(&identity, "\nscope ", absl::StrJoin(scope, ","));
  if (!req.precision_change().empty()) {
    absl::StrAppend(&identity, "\nprecision change ", req.precision_change());
  }
  if (first_part != nullptr) absl::StrAppend(&identity, "\ncontinues ", first_part->id());
  c.set_id(Hex(identity));
  c.set_repo(req.repo());
  c.set_target_branch(req.target_branch());
  c.set_baseline_ref(req.baseline_ref());
  c.set_baseline_sha(*base);
  c.set_candidate_ref(req.candidate_ref());
  c.set_candidate_sha(*cand);
  c.set_kind(req.kind());
  c.set_policy(req.policy());
  *c.mutable_claims() = req.claims();
  c.set_hypothesis(req.hypothesis());
  c.set_campaign(req.campaign());
  c.set_submitter(submitter);
  c.set_protected_path_override(req.protected_path_override());
  c.set_override_reason(req.override_reason());
  c.set_precision_change(req.precision_change());
  c.set_manifest_hash(manifest_hash);
  *c.mutable_metric_scope() = {scope.begin(), scope.end()};
  c.set_remeasure_of(remeasure_of);
  p.priority = req.priority();
  p.max_attempts = options_.max_attempts;
  // The repository's noise limit where it is stricter than this
  // scheduler's (which already keeps noisier nodes quarantined): its gate
  // work goes only to nodes calibrated within it.
  double noise_limit = parsed->gate().max_calibration_noise();
  if (!(noise_limit > 0)) noise_limit = options_.max_calibration_noise;
  const double share = std::clamp(options_.second_part_share, 0.0, 0.375);
  if (first_part != nullptr) {
    // A second part: the budget kept for it, the first part's pairs (its
    // prior, AttachPrior) and a calm node of the kind that measured them.
    c.set_continues(first_part->id());
    c.set_error_share(share);
    p.requirements.fingerprint = first_part->verdict().provenance().node_fingerprint();
    noise_limit = std::min(noise_limit, options_.second_part_max_node_noise);
  } else if (share > 0 && share < 1) {
    // (A merge-queue re-measure plans as the evaluation it re-measures did,
    // but is never continued: the merge queue waits for its own verdict.)
    c.set_error_share(1 - share);
  }
  if (noise_limit < options_.max_calibration_noise) {
    p.requirements.max_node_noise = noise_limit;
    absl::MutexLock l(&mu_);
    strictest_noise_limit_ = std::min(strictest_noise_limit_, noise_limit);
  }
  absl::StatusOr<results::SubmitResult> r = store_->Submit(p);
  if (r.ok()) Notify();
  return r;
}

namespace {

// A submission of `c`'s repository, kind, policy, claims, campaign,
// override and precision change for the commits given: what a re-measure
// and a second part keep of the evaluation they follow.
v1::SubmitRequest SubmittedAgain(const v1::Candidate& c, const std::string& baseline_ref,
                                 const std::string& candidate_ref) {
  v1::SubmitRequest req;
  req.set_repo(c.repo());
  req.set_baseline_ref(baseline_ref);
  req.set_candidate_ref(candidate_ref);
  req.set_kind(c.kind());
  req.set_policy(c.policy());
  *req.mutable_claims() = c.claims();
  req.set_campaign(c.campaign());
  req.set_protected_path_override(c.protected_path_override());
  req.set_override_reason(c.override_reason());
  req.set_precision_change(c.precision_change());
  return req;
}

}  // namespace

absl::StatusOr<std::string> Scheduler::ContinueIfDue(const v1::Evaluation& first) {
  if (!results::ContinuationDue(first)) return std::string();
  {
    absl::MutexLock l(&mu_);
    const auto known = second_parts_.find(first.id());
    if (known != second_parts_.end()) return known->second;
  }
  const v1::Candidate& c = first.candidate();
  v1::SubmitRequest req = SubmittedAgain(c, c.baseline_sha(), c.candidate_sha());
  req.set_target_branch(c.target_branch());
  *req.mutable_metric_scope() = c.metric_scope();
  req.set_hypothesis(absl::StrFormat(
      "second part of evaluation %s, which noise left inconclusive on node %s", first.id(),
      first.verdict().provenance().node_id()));
  absl::StatusOr<results::SubmitResult> r = Enqueue(req, c.submitter(), c.remeasure_of(), &first);
  if (!r.ok()) return r.status();
  absl::MutexLock l(&mu_);
  second_parts_[first.id()] = r->evaluation.id();
  return r->evaluation.id();
}

void Scheduler::AttachPrior(v1::Lease* lease) {
  const v1::Candidate& candidate = lease->evaluation().candidate();
  // A second part pools its first part's pairs; a re-measure those of the
  // evaluation it re-measures.
  const std::string& prior_id =
      candidate.continues().empty() ? candidate.remeasure_of() : candidate.continues();
  if (lease->job_kind() != v1::EVALUATION || prior_id.empty()) return;
  // Without them the node measures everything, as for any evaluation.
  absl::StatusOr<v1::Verdict> verdict = store_->GetVerdict(prior_id);
  absl::StatusOr<std::vector<v1::Sample>> samples = store_->ListSamples(prior_id);
  if (!verdict.ok() || !samples.ok()) return;
  v1::PriorMeasurement* prior = lease->mutable_prior();
  prior->set_evaluation_id(prior_id);
  prior->set_node_fingerprint(verdict->provenance().node_fingerprint());
  *prior->mutable_benchmark_inputs() = verdict->provenance().benchmark_inputs();
  // Only those the verdict rests on (a pair measured again was taken back).
  const std::set<int64_t> used(verdict->provenance().sample_ids().begin(),
                               verdict->provenance().sample_ids().end());
  for (const v1::Sample& s : *samples) {
    if (used.count(s.id()) > 0) *prior->add_samples() = s;
  }
}

absl::StatusOr<std::string> Scheduler::Remeasure(const v1::Evaluation& original,
                                                 const std::string& tip_sha,
                                                 const std::string& candidate_sha) {
  const v1::Candidate& c = original.candidate();
  // No target branch: the merge queue lands the result, not this evaluation.
  v1::SubmitRequest req = SubmittedAgain(c, tip_sha, candidate_sha);
  req.set_hypothesis(absl::StrFormat("re-measure of evaluation %s against %s at %s", original.id(),
                                     c.target_branch(), tip_sha.substr(0, 12)));
  absl::StatusOr<results::SubmitResult> r = Enqueue(req, c.submitter(), original.id());
  if (!r.ok()) return r.status();
  return r->evaluation.id();
}

absl::StatusOr<std::optional<v1::Lease>> Scheduler::ClaimFor(const std::string& node_id) {
  absl::StatusOr<v1::Node> node = store_->GetNode(node_id);
  if (!node.ok()) return node.status();
  // Told, not just left waiting: the node gives up and says why.
  if (node->state() == v1::DISTRUSTED) return Distrusted(*node);
  // A calibrating node always has its calibration job queued (so the claim
  // below, calibration first, never hands it gate work), and a quarantined
  // one measures itself again now and then; it gets gate work back once its
  // noise is within the budget.
  if (node->state() == v1::CALIBRATING ||
      (node->state() == v1::QUARANTINED && RecalibrationDue(node->id())) ||
      (node->state() == v1::ACTIVE && PeriodicCalibrationDue(node->id(), /*start=*/true)) ||
      (node->state() == v1::ACTIVE && QuarantinedForSomeQueuedWork(*node))) {
    absl::StatusOr<int64_t> job = store_->EnqueueCalibration(node->id(), options_.max_attempts);
    if (!job.ok() && job.status().code() != absl::StatusCode::kAlreadyExists) {
      return job.status();
    }
    node->set_state(v1::CALIBRATING);
  }
  if (node->state() != v1::ACTIVE && node->state() != v1::CALIBRATING) return std::nullopt;
  results::ClaimRequest claim;
  claim.node_id = node->id();
  claim.dimensions = node->dimensions();
  claim.max_jobs = 1;
  claim.lease_duration = options_.lease_duration;
  const absl::Time claim_start = absl::Now();
  absl::StatusOr<std::vector<v1::Lease>> leases = store_->ClaimJobs(claim);
  if (!leases.ok()) return leases.status();
  RecordClaim(absl::ToDoubleSeconds(absl::Now() - claim_start), leases->size());
  if (leases->empty()) return std::nullopt;
  v1::Lease& lease = leases->front();
  if (node->state() == v1::CALIBRATING && lease.job_kind() != v1::CALIBRATION) {
    // Calibration runs first; an uncalibrated node gets no gate work.
    (void)store_->FailLease({lease.id(), node->id()}, "node not calibrated yet");
    return std::nullopt;
  }
  {
    absl::MutexLock l(&mu_);
    node_noise_[node->id()] = node->calibration_noise();
  }
  Grant(&lease, node->id());
  return std::move(lease);
}

void Scheduler::Grant(v1::Lease* lease, const std::string& node_id) {
  lease->set_heartbeat_interval_s(options_.heartbeat_interval_s);
  {
    absl::MutexLock l(&mu_);
    const auto noise = node_noise_.find(node_id);
    if (noise != node_noise_.end()) lease->set_node_calibration_noise(noise->second);
  }
  if (lease->job_kind() == v1::EVALUATION) {
    const v1::Candidate& c = lease->evaluation().candidate();
    absl::MutexLock l(&mu_);
    granted_leases_[lease->id()] = {lease->evaluation().id(), c, {},
                                    !c.target_branch().empty() || !c.remeasure_of().empty()};
  }
  AttachPrior(lease);
}

void Scheduler::AdvanceMerges() {
  std::lock_guard<std::mutex> l(merges_mu_);
  if (!merges_swept_) {
    // Accepted evaluations whose enqueue a crash may have lost.
    v1::ListEvaluationsRequest q;
    q.add_states(v1::FINISHED);
    q.set_page_size(1000);
    if (absl::StatusOr<v1::ListEvaluationsResponse> done = store_->ListEvaluations(q); done.ok()) {
      for (const v1::Evaluation& e : done->evaluations()) {
        if (e.merge().state() == v1::NOT_MERGING ||
            e.merge().state() == v1::MERGE_STATE_UNSPECIFIED) {
          (void)merges_.Enqueue(e);
        }
      }
      merges_swept_ = true;
    }
  }
  if (merges_.Advance() > 0) Notify();
}

absl::StatusOr<v1::Report> Scheduler::RenderReport(const v1::GetReportRequest& request) {
  results::ReportRequest r;
  r.repo = request.repo();
  r.branch = request.branch();
  if (request.has_since()) {
    r.since = absl::FromUnixNanos(
        google::protobuf::util::TimeUtil::TimestampToNanoseconds(request.since()));
  }
  absl::StatusOr<nlohmann::json> data = results::BuildReport(*store_, r, absl::Now());
  if (!data.ok()) return data.status();
  v1::Report report;
  report.set_format(request.format() == v1::REPORT_FORMAT_UNSPECIFIED ? v1::HTML
                                                                       : request.format());
  switch (report.format()) {
    case v1::MARKDOWN:
      report.set_content_type("text/markdown; charset=utf-8");
      report.set_content(results::RenderMarkdown(*data));
      break;
    case v1::JSON:
      report.set_content_type("application/json");
      report.set_content(data->dump(2));
      break;
    default:
      report.set_content_type("text/html; charset=utf-8");
      report.set_content(results::RenderHtml(*data));
  }
  *report.mutable_generated_at() = Now();
  return report;
}

HttpResponse Scheduler::ReportPage(const HttpRequest& request) {
  auto query = [&](const char* key) {
    auto it = request.query.find(key);
    return it == request.query.end() ? std::string() : it->second;
  };
  const std::string token = query("token");
  absl::StatusOr<Principal> who = auth_.AuthorizeBearer(
      token.empty() ? request.authorization : "Bearer " + token,
      {Role::kViewer, Role::kCi, Role::kAgent});
  if (!who.ok()) {
    return {absl::IsPermissionDenied(who.status()) ? 403 : 401, "text/plain; charset=utf-8",
            absl::StrCat(who.status().message(), "\n")};
  }
  v1::GetReportRequest r;
  r.set_repo(query("repo"));
  r.set_branch(query("branch"));
  const std::string format = query("format");
  if (format == "md") {
    r.set_format(v1::MARKDOWN);
  } else if (format == "json") {
    r.set_format(v1::JSON);
  } else if (!format.empty() && format != "html") {
    return {400, "text/plain; charset=utf-8", "format must be html, md or json\n"};
  }
  absl::StatusOr<v1::Report> report = RenderReport(r);
  if (!report.ok()) {
    return {500, "text/plain; charset=utf-8", absl::StrCat(report.status().message(), "\n")};
  }
  return {200, report->content_type(), report->content()};
}

void Scheduler::ReclaimExpiredLeases() {
  absl::StatusOr<std::vector<results::ReclaimedLease>> r = store_->ReclaimExpiredLeases(100);
  if (r.ok() && !r->empty()) {
    for (const results::ReclaimedLease& lease : *r) ForgetLease(lease.lease_id);
    lease_expiries_ += r->size();
    Notify();
  }
}

void Scheduler::RecordClaim(double seconds, size_t leases) {
  ++claims_;
  dispatches_ += leases;
  claim_latency_us_sum_ += static_cast<int64_t>(seconds * 1e6);
  size_t b = 0;
  while (b < std::size(kLatencyBuckets) && seconds > kLatencyBuckets[b]) ++b;
  ++claim_latency_buckets_[b];
}

std::string Scheduler::RenderMetrics() {
  std::string out;
  auto line = [&](const std::string& text) { absl::StrAppend(&out, text, "\n"); };
  line("# HELP densegate_jobs Jobs in the store by state.");
  line("# TYPE densegate_jobs gauge");
  if (absl::StatusOr<results::QueueCounts> c = store_->CountJobs(); c.ok()) {
    line(absl::StrCat("densegate_jobs{state=\"queued\"} ", c->queued));
    line(absl::StrCat("densegate_jobs{state=\"leased\"} ", c->leased));
    line(absl::StrCat("densegate_jobs{state=\"done\"} ", c->done));
    line(absl::StrCat("densegate_jobs{state=\"cancelled\"} ", c->cancelled));
    line(absl::StrCat("densegate_jobs{state=\"dead\"} ", c->dead));
    line("# HELP densegate_queue_depth Queued jobs by class (claim order: calibration, ci, "
         "experiment), priority within the class, and required accelerator kind.");
    line("# TYPE densegate_queue_depth gauge");
    for (const results::QueueCounts::Group& g : c->queued_by_group) {
      line(absl::StrFormat(
          "densegate_queue_depth{class=\"%s\",priority=\"%d\",accelerator_kind=\"%s\"} %d",
          g.job_class, g.priority, g.accelerator_kind.empty() ? "any" : g.accelerator_kind,
          g.count));
    }
  }
  line("# HELP densegate_queued_evaluations Queued evaluations by kind (counted up to 1000).");
  line("# TYPE densegate_queued_evaluations gauge");
  for (v1::CandidateKind kind : {v1::CI, v1::EXPERIMENT}) {
    v1::ListEvaluationsRequest q;
    q.add_states(v1::QUEUED);
    q.set_kind(kind);
    q.set_page_size(1000);
    absl::StatusOr<v1::ListEvaluationsResponse> r = store_->ListEvaluations(q);
    if (r.ok()) {
      line(absl::StrCat("densegate_queued_evaluations{kind=\"",
                        absl::AsciiStrToLower(v1::CandidateKind_Name(kind)), "\"} ",
                        r->evaluations_size()));
    }
  }
  line("# HELP densegate_nodes Registered nodes by state.");
  line("# TYPE densegate_nodes gauge");
  if (absl::StatusOr<std::vector<v1::Node>> nodes = store_->ListNodes({}); nodes.ok()) {
    std::map<std::string, int> by_state;
    for (v1::NodeState st : {v1::CALIBRATING, v1::ACTIVE, v1::QUARANTINED, v1::DRAINING,
                             v1::OFFLINE, v1::DISTRUSTED}) {
      by_state[absl::AsciiStrToLower(v1::NodeState_Name(st))] = 0;
    }
    for (const v1::Node& n : *nodes) ++by_state[absl::AsciiStrToLower(v1::NodeState_Name(n.state()))];
    for (const auto& [st, n] : by_state) {
      line(absl::StrCat("densegate_nodes{state=\"", st, "\"} ", n));
    }
  }
  line("# HELP densegate_dispatches_total Leases handed to nodes since start.");
  line("# TYPE densegate_dispatches_total counter");
  line(absl::StrCat("densegate_dispatches_total ", dispatches_.load()));
  line("# HELP densegate_lease_expiries_total Leases expired (heartbeats stopped) since start.");
  line("# TYPE densegate_lease_expiries_total counter");
  line(absl::StrCat("densegate_lease_expiries_total ", lease_expiries_.load()));
  line("# HELP densegate_calibrations_total A/A calibrations finished since start.");
  line("# TYPE densegate_calibrations_total counter");
  line(absl::StrCat("densegate_calibrations_total ", calibrations_.load()));
  line("# HELP densegate_verdicts_total Verdicts written since start, by decision.");
  line("# TYPE densegate_verdicts_total counter");
  for (v1::Decision d : {v1::ACCEPT, v1::REJECT, v1::INCONCLUSIVE}) {
    line(absl::StrCat("densegate_verdicts_total{decision=\"",
                      absl::AsciiStrToLower(v1::Decision_Name(d)), "\"} ", verdicts_[d].load()));
  }
  line(
      "# HELP densegate_claim_latency_seconds Store claim latency, including the "
      "wait for a turn (--max_concurrent_claims) and, for a claim that goes with a "
      "verdict, writing the verdict.");
  line("# TYPE densegate_claim_latency_seconds histogram");
  int64_t cumulative = 0;
  for (size_t b = 0; b <= std::size(kLatencyBuckets); ++b) {
    cumulative += claim_latency_buckets_[b].load();
    std::string le = b < std::size(kLatencyBuckets) ? absl::StrCat(kLatencyBuckets[b]) : "+Inf";
    line(absl::StrCat("densegate_claim_latency_seconds_bucket{le=\"", le, "\"} ", cumulative));
  }
  line(absl::StrCat("densegate_claim_latency_seconds_sum ", claim_latency_us_sum_.load() / 1e6));
  line(absl::StrCat("densegate_claim_latency_seconds_count ", claims_.load()));
  const results::FinishBatchCounts batches = store_->finish_batch_counts();
  line(
      "# HELP densegate_finish_statements_total PostgreSQL: statements that finished leases "
      "and claimed the nodes' next jobs, each serving the nodes that waited for a claim turn "
      "together.");
  line("# TYPE densegate_finish_statements_total counter");
  line(absl::StrCat("densegate_finish_statements_total ", batches.statements));
  line(
      "# HELP densegate_finish_statement_leases_total PostgreSQL: leases those statements "
      "finished (divided by the statements: nodes served per statement).");
  line("# TYPE densegate_finish_statement_leases_total counter");
  line(absl::StrCat("densegate_finish_statement_leases_total ", batches.leases));
  return out;
}

grpc::Status Scheduler::CheckActsAs(const Principal& who, const std::string& node_id) {
  if (who.role != Role::kNode) return grpc::Status::OK;
  std::string name;
  {
    absl::MutexLock l(&mu_);
    auto it = node_names_.find(node_id);
    if (it != node_names_.end()) name = it->second;
  }
  if (name.empty()) {
    absl::StatusOr<v1::Node> node = store_->GetNode(node_id);
    if (!node.ok()) return ToGrpc(node.status());
    name = node->name();
    absl::MutexLock l(&mu_);
    node_names_[node_id] = name;
  }
  if (name == who.name) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                      absl::StrFormat("this token is node %s's: it may not act as node %s (%s)",
                                      who.name, name, node_id));
}

namespace {

std::vector<bool> ClaimsVerified(const v1::Verdict& v) {
  std::vector<bool> verified;
  for (const v1::ClaimResult& c : v.claims()) verified.push_back(c.verified());
  return verified;
}

}  // namespace

absl::StatusOr<v1::Verdict> Scheduler::DecideHere(const results::LeaseRef& lease,
                                                  const v1::Verdict& reported,
                                                  const v1::Candidate* candidate) {
  v1::Evaluation evaluation;
  if (candidate != nullptr) {
    evaluation.set_id(reported.evaluation_id());
    *evaluation.mutable_candidate() = *candidate;
  } else {
    absl::StatusOr<v1::Evaluation> stored = store_->GetEvaluation(reported.evaluation_id());
    if (!stored.ok()) return stored.status();
    evaluation = *std::move(stored);
  }
  absl::StatusOr<std::vector<v1::Sample>> samples =
      results::NamedSamples(*store_, reported.evaluation_id(), reported.provenance());
  if (!samples.ok()) return samples.status();
  // Where metrics decide, how to decide is the baseline manifest's (its
  // gate, its metrics), as read at submit, never what the node says it is.
  // (A failed stage rejects under any parameters.)
  std::optional<v1::Manifest> manifest;
  if (!results::DecidedByStages(reported)) {
    const v1::Candidate& c = evaluation.candidate();
    absl::StatusOr<std::string> text =
        git_.ShowFile(c.repo(), c.baseline_sha(), kManifestFileName);
    if (!text.ok() || Hex(*text) != c.manifest_hash()) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "cannot decide %s: the baseline's manifest is no longer the one submitted (%s)",
          reported.evaluation_id(), text.ok() ? "another hash" : text.status().message()));
    }
    std::vector<ManifestError> errors;
    absl::StatusOr<v1::Manifest> parsed = ParseManifest(*text, &errors);
    if (!parsed.ok()) return parsed.status();
    manifest = *std::move(parsed);
  }
  absl::StatusOr<v1::Verdict> decided = results::Redecide(
      reported, evaluation, *samples, manifest.has_value() ? &*manifest : nullptr);
  std::vector<std::string> differences =
      decided.ok() ? results::DecisionDifferences(reported, *decided)
                   : std::vector<std::string>{std::string(decided.status().message())};
  if (differences.empty()) return decided;
  // Numbers that differ in their last digits (another build of the same
  // code) are audited; a decision or a claim result that differs is a node
  // that cannot be trusted with the next job.
  const bool contradicts = !decided.ok() || decided->decision() != reported.decision() ||
                           ClaimsVerified(*decided) != ClaimsVerified(reported);
  if (differences.size() > 20) differences.resize(20);
  results::AuditEntry audit;
  audit.actor = "scheduler";
  audit.action = contradicts ? "verdict.contradicted" : "verdict.differs";
  audit.subject = reported.evaluation_id();
  audit.detail = absl::StrFormat("node %s reported %s; the samples decide %s: %s", lease.node_id,
                                 v1::Decision_Name(reported.decision()),
                                 decided.ok() ? v1::Decision_Name(decided->decision())
                                              : std::string("nothing"),
                                 absl::StrJoin(differences, "; "));
  (void)store_->AppendAudit(audit);
  if (contradicts) {
    std::cerr << "scheduler: distrusting node " << lease.node_id << ": " << audit.detail << "\n";
    (void)store_->SetNodeState(lease.node_id, v1::DISTRUSTED);
  }
  if (!decided.ok()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "node %s's verdict cannot be decided from the samples it sent (%s); the node is "
        "distrusted",
        lease.node_id, decided.status().message()));
  }
  return decided;
}

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
