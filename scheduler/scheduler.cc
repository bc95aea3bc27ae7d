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
#include "platform/git/git.h"
#include "manifest/manifest.h"
#include "results/report/report.h"
#include "results/verdict/verdict.h"
#include "scheduler/internal/rpc_util.h"

namespace densegate::scheduler {
using internal::Distrusted;
using internal::Hex;
using internal::Invalid;
using internal::Now;
using internal::Terminal;
using grpc::Status;
using grpc::StatusCode;

Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return Status::OK;
  return Status(static_cast<StatusCode>(s.code()), std::string(s.message()));
}


Scheduler::Scheduler(results::Store* store, Authenticator auth, platform::ProcessLauncher* launcher,
                     SchedulerOptions options)
    : store_(store),
      auth_(std::move(auth)),
      launcher_(launcher),
      options_(options),
      git_(launcher),
      merges_(store, &git_,
              [this](const v1::Evaluation& original, const std::string& tip,
                     const std::string& candidate, bool confirmation) {
                return Remeasure(original, tip, candidate, confirmation);
              },
              options.approval_branches) {
  client_ = NewClientService(this);
  node_ = NewNodeService(this);
}

Scheduler::~Scheduler() = default;

grpc::Service* Scheduler::client_service() { return client_.get(); }
grpc::Service* Scheduler::node_service() { return node_.get(); }

absl::StatusOr<results::SubmitResult> Scheduler::Enqueue(const v1::SubmitRequest& req,
                                                         const std::string& submitter,
                                                         const Lineage& lineage) {
  const v1::Evaluation* first_part = lineage.first_part;
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
  if (!lineage.confirms.empty()) absl::StrAppend(&identity, "\nconfirms ", lineage.confirms);
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
  c.set_remeasure_of(lineage.remeasure_of);
  c.set_confirms(lineage.confirms);
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
  absl::StatusOr<results::SubmitResult> r =
      Enqueue(req, c.submitter(), {.remeasure_of = c.remeasure_of(), .first_part = &first});
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
                                                 const std::string& candidate_sha,
                                                 bool confirmation) {
  const v1::Candidate& c = original.candidate();
  // No target branch: the merge queue lands the result, not this evaluation.
  v1::SubmitRequest req = SubmittedAgain(c, tip_sha, candidate_sha);
  req.set_hypothesis(absl::StrFormat(
      "%s of evaluation %s against %s at %s",
      confirmation ? "fresh confirmation (a campaign's experiment)" : "re-measure", original.id(),
      c.target_branch(), tip_sha.substr(0, 12)));
  Lineage lineage;
  (confirmation ? lineage.confirms : lineage.remeasure_of) = original.id();
  absl::StatusOr<results::SubmitResult> r = Enqueue(req, c.submitter(), lineage);
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
                                    !c.target_branch().empty() || !c.remeasure_of().empty() ||
                                        !c.confirms().empty()};
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

void Scheduler::ReclaimExpiredLeases() {
  absl::StatusOr<std::vector<results::ReclaimedLease>> r = store_->ReclaimExpiredLeases(100);
  if (r.ok() && !r->empty()) {
    for (const results::ReclaimedLease& lease : *r) ForgetLease(lease.lease_id);
    lease_expiries_ += r->size();
    Notify();
  }
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

}  // namespace densegate::scheduler
