#include "scheduler/merge_queue.h"

#include <sys/stat.h>

#include <algorithm>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "manifest/manifest.h"
#include "results/report/report.h"

namespace densegate::scheduler {
namespace {

// Commits and notes made by the scheduler carry this identity.
const std::vector<std::string> kIdentity = {"-c", "user.name=densegate", "-c",
                                            "user.email=densegate@localhost"};

std::vector<std::string> WithIdentity(std::vector<std::string> args) {
  args.insert(args.begin(), kIdentity.begin(), kIdentity.end());
  return args;
}

std::string Short(const std::string& sha) { return sha.substr(0, 12); }

}  // namespace

std::string MergeNote(const v1::Evaluation& accepted, const std::string& original_id) {
  const v1::Verdict& v = accepted.verdict();
  std::string note =
      absl::StrFormat("densegate: %s (policy %s), evaluation %s",
                      absl::AsciiStrToLower(v1::Decision_Name(v.decision())),
                      v.policy() == v1::NO_REGRESSION ? "no-regression" : "gain", accepted.id());
  if (!original_id.empty()) {
    absl::StrAppend(&note, ", re-measure of ", original_id, " against the moved tip");
  }
  absl::StrAppend(&note, "\n");
  for (const v1::MetricComparison& m : v.metrics()) {
    absl::StrAppend(&note, m.metric(), ": ", results::SpeedupText(m), "\n");
  }
  for (const v1::ClaimResult& c : v.claims()) {
    absl::StrAppendFormat(&note, "claim %s >= %.2fx: %s\n", c.metric(), c.claimed(),
                          c.verified() ? "verified" : "not verified");
  }
  return note;
}

MergeQueue::MergeQueue(results::Store* store, const platform::Git* git, Remeasure remeasure,
                       std::vector<std::string> approval_branches)
    : store_(store),
      git_(git),
      remeasure_(std::move(remeasure)),
      approval_branches_(std::move(approval_branches)) {}

absl::Status MergeQueue::Enqueue(const v1::Evaluation& evaluation) {
  if (evaluation.verdict().decision() != v1::ACCEPT ||
      evaluation.candidate().target_branch().empty()) {
    return absl::OkStatus();
  }
  absl::StatusOr<results::MergeEntry> e = store_->EnqueueMerge(evaluation.id(), "scheduler");
  if (absl::IsAlreadyExists(e.status())) return absl::OkStatus();
  return e.status();
}

int MergeQueue::Advance() {
  absl::StatusOr<std::vector<results::MergeEntry>> live = store_->ListMergeQueue({});
  if (!live.ok()) return 0;
  int changed = 0;
  // One entry per branch at a time: a later entry waits until the one ahead
  // of it has landed or failed, and is then measured against the new tip.
  std::set<std::pair<std::string, std::string>> busy;
  for (const results::MergeEntry& entry : *live) {
    // Waiting for a person holds up no one: the entries behind it go on.
    if (entry.status.state() == v1::AWAITING_APPROVAL) continue;
    if (!busy.insert({entry.repo, entry.target_branch}).second) continue;
    (void)Step(entry);
    absl::StatusOr<results::MergeEntry> after = store_->GetMergeEntry(entry.evaluation_id);
    if (after.ok() && after->status.state() != entry.status.state()) {
      ++changed;
      // Landed or failed: the next entry of this branch may go now.
      if (after->status.state() == v1::MERGED || after->status.state() == v1::MERGE_FAILED) {
        busy.erase({entry.repo, entry.target_branch});
      }
    }
  }
  return changed;
}

absl::Status MergeQueue::Fail(const std::string& evaluation_id, const std::string& why) {
  v1::MergeStatus s;
  s.set_state(v1::MERGE_FAILED);
  s.set_message(why);
  return store_->UpdateMerge(evaluation_id, s, "scheduler").status();
}

absl::Status MergeQueue::Step(const results::MergeEntry& entry) {
  absl::StatusOr<v1::Evaluation> original = store_->GetEvaluation(entry.evaluation_id);
  if (!original.ok()) return original.status();
  const v1::Candidate& cand = original->candidate();
  const std::string& repo = cand.repo();
  const std::string& branch = entry.target_branch;
  struct stat st;
  if (::stat(repo.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Fail(entry.evaluation_id,
                absl::StrFormat("merges go into a local repository; %s is not a directory", repo));
  }
  absl::StatusOr<std::string> tip = git_->ResolveCommit(repo, "refs/heads/" + branch);
  if (!tip.ok()) {
    return Fail(entry.evaluation_id,
                absl::StrFormat("branch %s does not exist in %s", branch, repo));
  }

  // The evaluation whose verdict would land, and the commit it measured.
  const v1::Evaluation* measured = &*original;
  v1::Evaluation remeasure;
  std::string target = cand.candidate_sha();
  std::string measured_base = cand.baseline_sha();
  if (entry.status.state() == v1::REMEASURING) {
    absl::StatusOr<v1::Evaluation> r =
        store_->GetEvaluation(entry.status.remeasure_evaluation_id());
    if (!r.ok()) return r.status();
    if (r->state() == v1::QUEUED || r->state() == v1::RUNNING) return absl::OkStatus();
    if (r->state() != v1::FINISHED || r->verdict().decision() != v1::ACCEPT) {
      std::string outcome = r->state() == v1::FINISHED
                                ? absl::AsciiStrToLower(v1::Decision_Name(r->verdict().decision()))
                                : absl::AsciiStrToLower(v1::EvaluationState_Name(r->state()));
      std::vector<std::string> reasons;
      for (const v1::Reason& reason : r->verdict().reasons()) reasons.push_back(reason.message());
      return Fail(entry.evaluation_id,
                  absl::StrFormat("%s against %s at %s (evaluation %s): %s%s%s",
                                  r->candidate().confirms().empty() ? "re-measured"
                                                                    : "confirmed afresh",
                                  branch, Short(r->candidate().baseline_sha()), r->id(), outcome,
                                  reasons.empty() ? "" : ": ", absl::StrJoin(reasons, "; ")));
    }
    remeasure = *r;
    measured = &remeasure;
    target = r->candidate().candidate_sha();
    measured_base = r->candidate().baseline_sha();
  }

  // A campaign's experiment lands only on a fresh evaluation's agreement.
  const bool confirm = measured == &*original && cand.kind() == v1::EXPERIMENT &&
                       !cand.campaign().empty();
  const bool hold = cand.kind() == v1::EXPERIMENT && entry.status.approved_by().empty() &&
                    std::find(approval_branches_.begin(), approval_branches_.end(), branch) !=
                        approval_branches_.end();
  if (*tip == measured_base && !confirm && hold) {
    // Measured, confirmed where it had to be: now a person's say.
    v1::MergeStatus s = entry.status;
    s.set_state(v1::AWAITING_APPROVAL);
    s.set_message(absl::StrFormat(
        "%s's policy wants a person's approval: densegate approve %s, or densegate decline %s "
        "--reason TEXT (roles maintainer, admin)",
        branch, entry.evaluation_id, entry.evaluation_id));
    return store_->UpdateMerge(entry.evaluation_id, s, "scheduler").status();
  }
  if (*tip == measured_base && !confirm) {
    // Measured against the current tip: land it.
    return LandOnTip(entry, *measured, measured != &*original, *tip, target);
  }

  // The tip moved since the measurement: merge the candidate onto it in a
  // scratch commit and measure that against the tip. (An unconfirmed
  // experiment on an unmoved tip is measured as it is.)
  absl::StatusOr<std::string> scratch = cand.candidate_sha();
  if (*tip != measured_base) {
    scratch = MergeCommit(
        repo, branch, *tip, cand.candidate_sha(),
        absl::StrFormat("Merge %s into %s for re-measurement (densegate evaluation %s)",
                        Short(cand.candidate_sha()), branch, entry.evaluation_id));
  }
  if (absl::IsAborted(scratch.status())) {
    return Fail(entry.evaluation_id, std::string(scratch.status().message()));
  }
  if (!scratch.ok()) return scratch.status();
  const std::string& scratch_sha = *scratch;
  // A ref keeps the scratch commit alive and fetchable by nodes.
  absl::StatusOr<std::string> kept = git_->Run(
      repo, {"update-ref", "refs/densegate/remeasure/" + entry.evaluation_id, scratch_sha});
  if (!kept.ok()) return kept.status();
  absl::StatusOr<std::string> id = remeasure_(*original, *tip, scratch_sha, confirm);
  if (!id.ok()) {
    // E.g. the baseline manifest at the new tip is invalid: nothing can land.
    if (absl::IsFailedPrecondition(id.status()) || absl::IsInvalidArgument(id.status())) {
      return Fail(entry.evaluation_id, absl::StrCat("cannot re-measure against ", branch, " at ",
                                                    Short(*tip), ": ", id.status().message()));
    }
    return id.status();
  }
  v1::MergeStatus s;
  s.set_state(v1::REMEASURING);
  s.set_remeasure_evaluation_id(*id);
  if (confirm) {
    s.set_message(absl::StrFormat(
        "a campaign's experiment: confirming %s against %s at %s with a fresh evaluation",
        Short(scratch_sha), branch, Short(*tip)));
  } else {
    s.set_message(absl::StrFormat(
        "%s moved to %s since the measurement; re-measuring %s against it", branch, Short(*tip),
        Short(scratch_sha)));
  }
  return store_->UpdateMerge(entry.evaluation_id, s, "scheduler").status();
}

absl::Status MergeQueue::LandOnTip(const results::MergeEntry& entry,
                                   const v1::Evaluation& measured, bool remeasured,
                                   const std::string& tip, std::string target) {
  const v1::Candidate& cand = measured.candidate();
  const std::string& repo = cand.repo();
  const std::string& branch = entry.target_branch;
  v1::MergeStyle style = v1::FAST_FORWARD;
  if (absl::StatusOr<std::string> text = git_->ShowFile(repo, tip, kManifestFileName);
      text.ok()) {
    std::vector<ManifestError> errors;
    if (absl::StatusOr<v1::Manifest> m = ParseManifest(*text, &errors); m.ok()) {
      style = m->merge().style();
    }
  }
  const bool descends = git_->Run(repo, {"merge-base", "--is-ancestor", tip, target}).ok();
  if (style == v1::MERGE_COMMIT || !descends) {
    absl::StatusOr<std::string> commit = MergeCommit(
        repo, branch, tip, target,
        absl::StrFormat("Merge %s into %s (densegate evaluation %s)", Short(target), branch,
                        entry.evaluation_id));
    if (absl::IsAborted(commit.status())) {
      return Fail(entry.evaluation_id, std::string(commit.status().message()));
    }
    if (!commit.ok()) return commit.status();
    target = *commit;
  }
  absl::StatusOr<std::string> landed =
      Land(measured, repo, branch, tip, target,
           MergeNote(measured, remeasured ? entry.evaluation_id : ""));
  // The tip moved under us: the next Advance sees the new tip.
  if (!landed.ok()) return landed.status();
  v1::MergeStatus s;
  s.set_state(v1::MERGED);
  s.set_merged_sha(target);
  s.set_message(*landed);
  return store_->UpdateMerge(entry.evaluation_id, s, "scheduler").status();
}

absl::StatusOr<std::string> MergeQueue::MergeCommit(const std::string& repo,
                                                    const std::string& branch,
                                                    const std::string& tip,
                                                    const std::string& other,
                                                    const std::string& message) {
  absl::StatusOr<std::string> tree =
      git_->Run(repo, {"merge-tree", "--write-tree", "--no-messages", tip, other});
  if (!tree.ok()) {
    // Name what both sides changed since they parted.
    std::string both;
    if (absl::StatusOr<std::string> base = git_->Run(repo, {"merge-base", tip, other});
        base.ok()) {
      std::string b(absl::StripAsciiWhitespace(*base));
      absl::StatusOr<std::vector<std::string>> ours = git_->ChangedPaths(repo, b, tip);
      absl::StatusOr<std::vector<std::string>> theirs = git_->ChangedPaths(repo, b, other);
      if (ours.ok() && theirs.ok()) {
        std::vector<std::string> common;
        std::sort(ours->begin(), ours->end());
        std::sort(theirs->begin(), theirs->end());
        std::set_intersection(ours->begin(), ours->end(), theirs->begin(), theirs->end(),
                              std::back_inserter(common));
        both = absl::StrJoin(common, ", ");
      }
    }
    return absl::AbortedError(absl::StrFormat("conflicts with %s at %s%s; the branch is untouched",
                                              branch, Short(tip),
                                              both.empty() ? "" : " in " + both));
  }
  absl::StatusOr<std::string> commit = git_->Run(
      repo, WithIdentity({"commit-tree", std::string(absl::StripAsciiWhitespace(*tree)), "-p", tip,
                          "-p", other, "-m", message}));
  if (!commit.ok()) return commit.status();
  return std::string(absl::StripAsciiWhitespace(*commit));
}

absl::StatusOr<std::string> MergeQueue::Land(const v1::Evaluation& measured,
                                             const std::string& repo, const std::string& branch,
                                             const std::string& tip, const std::string& target,
                                             const std::string& note) {
  // Moves the branch only if it is still at `tip`.
  absl::StatusOr<std::string> moved = git_->Run(
      repo, {"update-ref", "-m", "densegate: land evaluation " + measured.id(),
             "refs/heads/" + branch, target, tip});
  if (!moved.ok()) return moved.status();
  std::string message = absl::StrFormat("%s moved from %s to %s", branch, Short(tip),
                                        Short(target));
  absl::StatusOr<std::string> noted =
      git_->Run(repo, WithIdentity({"notes", "--ref=densegate", "add", "-f", "-m", note, target}));
  if (!noted.ok()) {
    absl::StrAppend(&message, "; the git note could not be written: ", noted.status().message());
  }
  return message;
}

}  // namespace densegate::scheduler
