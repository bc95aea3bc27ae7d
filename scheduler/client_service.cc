// The client service (v1::Densegate): what CI, agents and viewers call.
// Each handler checks the caller's role, then works through the Scheduler.
#include <algorithm>
#include <iostream>
#include <mutex>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "manifest/campaign_spec.h"
#include "results/feedback/bundle.h"
#include "scheduler/internal/rpc_util.h"
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
      if (Status st = AgentMayAimAt(req->target_branch()); !st.ok()) return st;
      if (req->policy() != v1::POLICY_UNSPECIFIED && req->policy() != v1::GAIN) {
        return Status(StatusCode::PERMISSION_DENIED,
                      "an agent's experiment aimed at a branch is judged under policy GAIN");
      }
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
    return internal::Reply(s_->RenderReport(*req), resp);
  }

  Status ListEvaluations(ServerContext* ctx, const v1::ListEvaluationsRequest* req,
                         v1::ListEvaluationsResponse* resp) override {
    Principal who;
    if (Status st = Read(ctx, &who); !st.ok()) return st;
    return internal::Reply(s_->store_->ListEvaluations(*req), resp);
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

  Status CreateCampaign(ServerContext* ctx, const v1::CreateCampaignRequest* req,
                        v1::Campaign* resp) override {
    Principal who;
    if (Status st = s_->auth_.Authorize(ctx, {Role::kAgent}, &who); !st.ok()) return st;
    v1::Campaign c = req->campaign();
    if (absl::Status st = ValidateCampaign(c); !st.ok()) return ToGrpc(st);
    if (who.role == Role::kAgent) {
      if (Status st = AgentMayAimAt(c.branch()); !st.ok()) return st;
    }
    // Recorded as given: the owner and start are the scheduler's to say.
    if (!c.owner().empty() || !c.start_sha().empty() || c.has_created_at()) {
      return Invalid("owner, start_sha and created_at are set by the scheduler");
    }
    const std::string start = c.start_ref().empty() ? c.branch() : c.start_ref();
    absl::StatusOr<std::string> sha = s_->git_.ResolveCommit(c.repo(), start);
    if (!sha.ok()) {
      return Invalid(absl::StrCat("campaign ", c.id(), ": cannot resolve ", start, " in ",
                                  c.repo(), ": ", sha.status().message()));
    }
    c.set_owner(who.name);
    c.set_start_sha(*sha);
    absl::StatusOr<v1::Campaign> stored = s_->store_->PutCampaign(c);
    if (!stored.ok()) return ToGrpc(stored.status());
    *resp = *std::move(stored);
    return Status::OK;
  }

  Status GetCampaign(ServerContext* ctx, const v1::GetCampaignRequest* req,
                     v1::Campaign* resp) override {
    Principal who;
    if (Status st = Read(ctx, &who); !st.ok()) return st;
    absl::StatusOr<v1::Campaign> c = s_->store_->GetCampaign(req->id());
    if (!c.ok()) return ToGrpc(c.status());
    *resp = *std::move(c);
    return Status::OK;
  }

  Status ApproveMerge(ServerContext* ctx, const v1::ApproveMergeRequest* req,
                      v1::Evaluation* resp) override {
    return Decide(ctx, req->evaluation_id(), /*approve=*/true, "", resp);
  }

  Status DeclineMerge(ServerContext* ctx, const v1::DeclineMergeRequest* req,
                      v1::Evaluation* resp) override {
    if (absl::StripAsciiWhitespace(req->reason()).empty()) {
      return Invalid("a decline needs a reason (--reason): it is what the author reads");
    }
    return Decide(ctx, req->evaluation_id(), /*approve=*/false, req->reason(), resp);
  }

  Status GetFeedback(ServerContext* ctx, const v1::GetFeedbackRequest* req,
                     grpc::ServerWriter<v1::FeedbackChunk>* writer) override {
    Principal who;
    if (Status st = Read(ctx, &who); !st.ok()) return st;
    if (req->evaluation_id().empty()) return Invalid("evaluation_id is required");
    absl::StatusOr<results::FeedbackRecord> rec =
        s_->store_->GetFeedback(req->evaluation_id(), !req->summary_only());
    if (!rec.ok()) return ToGrpc(rec.status());
    v1::FeedbackChunk chunk;
    v1::FeedbackInfo* info = chunk.mutable_info();
    info->set_evaluation_id(rec->evaluation_id);
    info->set_summary_json(rec->summary_json);
    info->set_files(rec->files);
    info->set_bytes(rec->bytes);
    *info->mutable_omitted() = rec->bundle.omitted();
    *info->mutable_recorded_at() = internal::ToTimestamp(rec->recorded_at);
    if (rec->files_dropped_at != absl::InfinitePast()) {
      *info->mutable_files_dropped_at() = internal::ToTimestamp(rec->files_dropped_at);
    }
    if (!writer->Write(chunk)) return Status(StatusCode::CANCELLED, "client went away");
    const bool sent = results::ForEachPiece(rec->bundle, [&](const v1::FeedbackFile& piece) {
      *chunk.mutable_file() = piece;
      return writer->Write(chunk);
    });
    return sent ? Status::OK : Status(StatusCode::CANCELLED, "client went away");
  }

 private:
  // A person's approval or decline of an entry AWAITING_APPROVAL.
  Status Decide(ServerContext* ctx, const std::string& id, bool approve,
                const std::string& reason, v1::Evaluation* resp) {
    Principal who;
    if (Status st = s_->auth_.Authorize(ctx, {Role::kMaintainer}, &who); !st.ok()) return st;
    if (id.empty()) return Invalid("evaluation_id is required");
    {
      // Not while the queue advances: it reads the state it moves from.
      std::lock_guard<std::mutex> l(s_->merges_mu_);
      absl::StatusOr<results::MergeEntry> entry = s_->store_->GetMergeEntry(id);
      if (!entry.ok()) return ToGrpc(entry.status());
      if (entry->status.state() != v1::AWAITING_APPROVAL) {
        return Status(StatusCode::FAILED_PRECONDITION,
                      absl::StrCat("evaluation ", id, " is ",
                                   v1::MergeState_Name(entry->status.state()),
                                   ", not AWAITING_APPROVAL"));
      }
      v1::MergeStatus next;
      if (approve) {
        // Back where it was: its confirmation or re-measure, when one ran,
        // is still what it would land on.
        next.set_state(entry->status.remeasure_evaluation_id().empty() ? v1::MERGE_QUEUED
                                                                       : v1::REMEASURING);
        next.set_approved_by(who.name);
        next.set_message("approved by " + who.name);
      } else {
        next.set_state(v1::MERGE_FAILED);
        next.set_message(absl::StrCat("declined by ", who.name, ": ", reason));
      }
      absl::StatusOr<results::MergeEntry> moved = s_->store_->UpdateMerge(id, next, who.name);
      if (!moved.ok()) return ToGrpc(moved.status());
    }
    if (approve) s_->AdvanceMerges();
    absl::StatusOr<v1::Evaluation> e = s_->store_->GetEvaluation(id);
    if (!e.ok()) return ToGrpc(e.status());
    *resp = *std::move(e);
    return Status::OK;
  }

  Status AgentMayAimAt(const std::string& branch) const {
    const std::vector<std::string>& allowed = s_->options_.agent_branches;
    if (std::find(allowed.begin(), allowed.end(), branch) != allowed.end()) return Status::OK;
    return Status(StatusCode::PERMISSION_DENIED,
                  absl::StrCat("an agent token cannot aim at branch '", branch,
                               "': the scheduler's --agent_branches does not list it (submit "
                               "without a target branch to measure only)"));
  }

  Status Read(ServerContext* ctx, Principal* who) {
    return s_->auth_.Authorize(ctx, {Role::kCi, Role::kAgent, Role::kViewer, Role::kMaintainer},
                               who);
  }

  Scheduler* s_;
};

std::unique_ptr<grpc::Service> Scheduler::NewClientService(Scheduler* s) {
  return std::make_unique<ClientService>(s);
}

}  // namespace densegate::scheduler
