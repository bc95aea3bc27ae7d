// The preflight stage: what the candidate changed, and whether it may.
#include "harness/internal/evaluation.h"

namespace densegate::harness::internal {

absl::StatusOr<bool> Evaluation::Preflight() {
  StageRun run(v1::PREFLIGHT, listener_, &stages_);
  absl::StatusOr<Checkout> checkout =
      Workspace(options_.workspace_root, options_.slot, &git_, Users())
          .Prepare(request_.repo, request_.baseline_ref, request_.candidate_ref);
  if (!checkout.ok()) {
    run.End(v1::STAGE_ERROR, std::string(checkout.status().message()));
    return checkout.status();
  }
  checkout_ = *checkout;
  absl::StatusOr<std::string> text =
      git_.ShowFile(checkout_.mirror, checkout_.baseline_sha, kManifestFileName);
  if (!text.ok()) {
    run.End(v1::STAGE_ERROR, "no densegate.json in the baseline commit");
    return absl::NotFoundError(absl::StrFormat(
        "the baseline commit %s of %s has no %s at its root: add a manifest (see "
        "README, \"The manifest\") to the baseline first",
        checkout_.baseline_sha.substr(0, 12), request_.repo, kManifestFileName));
  }
  std::vector<ManifestError> errors;
  absl::StatusOr<v1::Manifest> manifest = ParseManifest(*text, &errors);
  if (manifest.ok()) {
    absl::StatusOr<std::vector<std::string>> files =
        git_.ListFiles(checkout_.mirror, checkout_.baseline_sha);
    if (!files.ok()) return files.status();
    errors = ValidateManifest(*manifest, GitTree(*files));
  }
  if (!errors.empty()) {
    std::vector<std::string> lines;
    for (const auto& e : errors) lines.push_back(e.ToString());
    run.End(v1::STAGE_ERROR, "invalid manifest in the baseline");
    return absl::InvalidArgumentError(absl::StrFormat(
        "the baseline's %s is invalid; fix it there first:\n  %s", kManifestFileName,
        absl::StrJoin(lines, "\n  ")));
  }
  manifest_ = *manifest;
  manifest_hash_ = absl::StrFormat("%016x", std::hash<std::string>{}(*text));
  absl::StatusOr<results::GateParameters> params =
      results::ResolveGateParameters(manifest_.gate());
  if (!params.ok()) return params.status();
  // Everything the gate needs besides the samples is known from here on,
  // for both the early-exit and the benchmark paths.
  gate_input_.policy = request_.policy == v1::POLICY_UNSPECIFIED ? v1::GAIN : request_.policy;
  gate_input_.params = results::PartParameters(*params, request_.error_share,
                                               !request_.continues.empty());
  gate_input_.claims = request_.claims;
  gate_input_.seed = request_.seed;
  if (absl::Status s =
          CheckMetricScope(manifest_, request_.metric_scope, request_.claims, gate_input_.policy);
      !s.ok()) {
    run.End(v1::STAGE_ERROR, "invalid metric scope");
    return s;
  }

  absl::StatusOr<std::vector<std::string>> changed =
      git_.ChangedPaths(checkout_.mirror, checkout_.baseline_sha, checkout_.candidate_sha);
  if (!changed.ok()) return changed.status();
  std::vector<std::string> hits;
  for (const std::string& path : *changed) {
    for (const std::string& p : manifest_.protected_paths()) {
      if (IsUnderPath(path, p)) {
        hits.push_back(path);
        break;
      }
    }
  }
  if (!hits.empty() && !request_.protected_path_override) {
    std::string message = absl::StrFormat(
        "the candidate changes protected paths: %s (protected by the baseline's "
        "manifest; an admin override is needed)",
        absl::StrJoin(hits, ", "));
    failures_.push_back(Reason(v1::PROTECTED_PATH, v1::PREFLIGHT, message));
    run.End(v1::STAGE_FAILED, message);
    return false;
  }
  run.End(v1::STAGE_PASSED,
          hits.empty() ? absl::StrFormat("%d files changed, none protected", changed->size())
                       : absl::StrFormat("protected paths changed under override (%s): %s",
                                         request_.override_reason, absl::StrJoin(hits, ", ")));
  return true;
}

}  // namespace densegate::harness::internal
