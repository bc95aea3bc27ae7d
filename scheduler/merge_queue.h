// MergeQueue: lands accepted candidates on their target branch, one entry at
// a time per branch, only ever as measured.
//
// An ACCEPTed evaluation whose candidate names a target branch enters the
// store's merge queue (results/store). For each entry, in queue order:
//   * the branch tip is still the baseline that was measured: the branch
//     moves to the candidate (fast-forward) or to a merge commit of it, per
//     the baseline manifest's merge.style;
//   * the tip moved: the candidate is merged onto the new tip in a scratch
//     commit (git merge-tree; a conflict fails the entry) kept under
//     refs/densegate/remeasure/<id>, and that commit is evaluated against the
//     tip (REMEASURING). An ACCEPT lands it (measured again if the tip moved
//     meanwhile); any other outcome fails the entry with its reasons;
//   * an experiment aimed at a branch whose policy wants a person's say
//     (approval_branches) waits, measured and confirmed, in
//     AWAITING_APPROVAL until a maintainer approves (then it goes on as
//     below: re-measured if the tip moved) or declines it (MERGE_FAILED).
//     A waiting entry does not hold up the branch's other entries;
//   * a campaign's experiment (kind EXPERIMENT with a campaign) never lands
//     on the verdict that accepted it: the best of many tries is the one
//     most likely to have been lucky. It is first evaluated again from
//     scratch (Candidate.confirms: no pairs pooled, new seeds; on the
//     moved tip when it moved), and that confirmation must accept too
//     (agent/README.md, "False merges").
// The branch is only ever moved with `git update-ref NEW OLD`, so a push
// that raced the merge makes it fail rather than lose work. The landed
// commit gets a note under refs/notes/densegate: decision, speedups with
// intervals, the evaluation (and re-measure) ids. A failed entry leaves the
// branch untouched and records why.
//
// Merges go into local repository paths (the submitted repo); a URL fails
// the entry.
//
// Thread-safety: Enqueue from any thread; Advance from one thread at a time.
#ifndef DENSEGATE_SCHEDULER_MERGE_QUEUE_H_
#define DENSEGATE_SCHEDULER_MERGE_QUEUE_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "platform/git/git.h"
#include "proto/densegate.pb.h"
#include "results/store/store.h"

namespace densegate::scheduler {

class MergeQueue {
 public:
  // Queues an evaluation of `candidate` (baseline `tip_sha`, candidate
  // `candidate_sha`) that re-measures `original` (or, `confirmation`,
  // confirms it afresh); returns its id.
  using Remeasure = std::function<absl::StatusOr<std::string>(
      const v1::Evaluation& original, const std::string& tip_sha,
      const std::string& candidate_sha, bool confirmation)>;

  // `store` and `git` are not owned and must outlive this. An experiment
  // aimed at one of `approval_branches` waits for a person's approval
  // (AWAITING_APPROVAL) before it lands.
  MergeQueue(results::Store* store, const platform::Git* git, Remeasure remeasure,
             std::vector<std::string> approval_branches = {});

  // Queues `evaluation` when it was accepted and targets a branch; a no-op
  // otherwise or when it is already queued.
  absl::Status Enqueue(const v1::Evaluation& evaluation);

  // Moves every live entry as far as it can go now (lands, starts or
  // finishes a re-measure, fails); returns how many changed state.
  int Advance();

 private:
  // One live entry; the store is updated inside.
  absl::Status Step(const results::MergeEntry& entry);
  // A commit with parents (tip, other) holding their merge; Aborted, naming
  // the files both sides changed, when they conflict.
  absl::StatusOr<std::string> MergeCommit(const std::string& repo, const std::string& branch,
                                          const std::string& tip, const std::string& other,
                                          const std::string& message);
  // Lands `target` on the entry's branch at `tip` (fast-forward, or a merge
  // commit per the manifest at the tip) on `measured`'s verdict (a
  // re-measure's or confirmation's when `remeasured`).
  absl::Status LandOnTip(const results::MergeEntry& entry, const v1::Evaluation& measured,
                         bool remeasured, const std::string& tip, std::string target);
  // Moves `branch` of `repo` from `tip` to `target` and notes it.
  absl::StatusOr<std::string> Land(const v1::Evaluation& measured, const std::string& repo,
                                   const std::string& branch, const std::string& tip,
                                   const std::string& target, const std::string& note);
  absl::Status Fail(const std::string& evaluation_id, const std::string& why);

  results::Store* store_;
  const platform::Git* git_;
  Remeasure remeasure_;
  std::vector<std::string> approval_branches_;
};

// The note attached to a landed commit: decision, policy, each metric's
// speedup with its interval, claims, evaluation ids.
std::string MergeNote(const v1::Evaluation& accepted, const std::string& original_id);

}  // namespace densegate::scheduler

#endif  // DENSEGATE_SCHEDULER_MERGE_QUEUE_H_
