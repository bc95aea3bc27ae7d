#include "manifest/campaign_spec.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace densegate {
namespace {

bool IsCampaignId(absl::string_view id) {
  if (id.empty() || id.size() > 64 || id.front() == '-') return false;
  for (char ch : id) {
    if (!absl::ascii_islower(ch) && !absl::ascii_isdigit(ch) && ch != '-') return false;
  }
  return true;
}

// A path inside the repository: relative, without "..".
bool IsRepoPath(absl::string_view path) {
  if (path.empty() || path.front() == '/') return false;
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    if (part == ".." || part.empty()) return false;
  }
  return true;
}

}  // namespace

std::vector<FieldError> CampaignErrors(const v1::Campaign& c) {
  std::vector<FieldError> errors;
  auto error = [&](std::string field, std::string message) {
    errors.push_back({std::move(field), std::move(message)});
  };
  if (!IsCampaignId(c.id())) {
    error("id", "required: 1 to 64 lowercase letters, digits and '-', not starting with '-'");
  }
  if (c.repo().empty()) error("repo", "required: the repository's URL or path");
  if (c.branch().empty()) error("branch", "required: where accepted experiments land");
  if (c.goal().metric().empty()) error("goal.metric", "required: a metric of the manifest");
  if (!(c.goal().min_speedup() > 1) || c.goal().min_speedup() > 1000) {
    error("goal.min_speedup",
          absl::StrCat("must be over 1 (and at most 1000), got ", c.goal().min_speedup()));
  }
  if (c.budget().max_experiments() < 1 || c.budget().max_experiments() > 10000) {
    error("budget.max_experiments",
          absl::StrCat("must be 1 to 10000, got ", c.budget().max_experiments()));
  }
  if (!(c.budget().max_node_hours() >= 0)) {
    error("budget.max_node_hours", "must be >= 0 (0: no limit)");
  }
  if (c.proposers().empty()) error("proposers", "required: at least one proposer");
  if (c.proposers_size() > 16) error("proposers", "at most 16");
  for (int i = 0; i < c.proposers_size(); ++i) {
    const v1::Proposer& p = c.proposers(i);
    const std::string at = absl::StrCat("proposers[", i, "]");
    switch (p.kind_case()) {
      case v1::Proposer::kKnobSearch: {
        const v1::KnobSearch& k = p.knob_search();
        if (!IsRepoPath(k.space())) {
          error(at + ".knob_search.space",
                "required: the search space's file, a path inside the repository");
        }
        if (k.max_points() < 0 || k.max_points() > 1000) {
          error(at + ".knob_search.max_points", "must be 0 (all) to 1000");
        }
        if (k.finalists() < 0 || k.finalists() > 16) {
          error(at + ".knob_search.finalists", "must be 0 (one) to 16");
        }
        break;
      }
      case v1::Proposer::kPatchCatalog:
        if (p.patch_catalog().dir().empty()) {
          error(at + ".patch_catalog.dir", "required: the folder holding catalog.json");
        }
        break;
      case v1::Proposer::kExternalCommand: {
        const v1::ExternalCommand& e = p.external_command();
        if (e.argv().empty() || e.argv(0).empty()) {
          error(at + ".external_command.argv", "required: the command and its arguments");
        }
        if (e.timeout_s() < 0 || e.timeout_s() > 86400) {
          error(at + ".external_command.timeout_s", "must be 0 (600) to 86400");
        }
        if (e.max_proposals() < 0 || e.max_proposals() > 1000) {
          error(at + ".external_command.max_proposals", "must be 0 (10) to 1000");
        }
        break;
      }
      case v1::Proposer::KIND_NOT_SET:
        error(at, "set one of knob_search, patch_catalog, external_command");
        break;
    }
  }
  return errors;
}

absl::Status ValidateCampaign(const v1::Campaign& campaign) {
  std::vector<FieldError> errors = CampaignErrors(campaign);
  if (errors.empty()) return absl::OkStatus();
  std::vector<std::string> lines;
  for (const FieldError& e : errors) lines.push_back(e.ToString());
  return absl::InvalidArgumentError(
      absl::StrCat("campaign ", campaign.id(), ": ", absl::StrJoin(lines, "\n")));
}

absl::StatusOr<v1::Campaign> ParseCampaign(absl::string_view json) {
  v1::Campaign campaign;
  if (std::optional<FieldError> e = ParseJsonMessage(json, &campaign)) {
    return absl::InvalidArgumentError(e->ToString());
  }
  if (absl::Status s = ValidateCampaign(campaign); !s.ok()) return s;
  return campaign;
}

}  // namespace densegate
