#include "demo/scratch_repo.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"

namespace densegate::demo {
namespace {

namespace fs = std::filesystem;

// The workload the demo is proven on; nothing of the service.
const std::vector<std::string> kWorkloadPaths = {"kernels", "runtime", "third_party", "WORKSPACE"};

// Fixed author, so the demo's commits read the same in every report.
std::vector<std::string> As(std::vector<std::string> args) {
  args.insert(args.begin(), {"-c", "user.name=densegate demo", "-c",
                             "user.email=demo@densegate.invalid", "-c", "commit.gpgsign=false"});
  return args;
}

absl::StatusOr<std::string> ReadFile(const fs::path& p) {
  std::ifstream in(p);
  if (!in) return absl::NotFoundError("cannot read " + p.string());
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

absl::Status WriteFile(const fs::path& p, const std::string& content) {
  std::ofstream out(p);
  out << content;
  out.close();
  if (!out) return absl::InternalError("cannot write " + p.string());
  return absl::OkStatus();
}

absl::StatusOr<std::string> Manifest(const ScratchRepoOptions& o) {
  absl::StatusOr<std::string> text = ReadFile(fs::path(o.workload_dir) / "densegate.json");
  if (!text.ok() || !o.quick) return text;
  absl::StatusOr<std::string> quick = ReadFile(fs::path(o.workload_dir) / "quick.json");
  if (!quick.ok()) return quick.status();
  nlohmann::json manifest = nlohmann::json::parse(*text, nullptr, false);
  nlohmann::json patch = nlohmann::json::parse(*quick, nullptr, false);
  if (manifest.is_discarded() || patch.is_discarded()) {
    return absl::InvalidArgumentError("densegate.json or quick.json in " + o.workload_dir +
                                      " is not JSON");
  }
  // A merge patch replaces an array whole: quick.json's "benchmarks" entries
  // instead patch the manifest's benchmark of the same name.
  nlohmann::json benchmarks = nlohmann::json::array();
  if (patch.is_object() && patch.contains("benchmarks")) {
    benchmarks = patch["benchmarks"];
    patch.erase("benchmarks");
  }
  manifest.merge_patch(patch);
  for (const nlohmann::json& entry : benchmarks) {
    const std::string name = entry.is_object() ? entry.value("name", "") : "";
    nlohmann::json* target = nullptr;
    for (nlohmann::json& b : manifest["benchmarks"]) {
      if (b.is_object() && b.value("name", "") == name) target = &b;
    }
    if (target == nullptr) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "quick.json in %s patches benchmark \"%s\", which densegate.json does not declare",
          o.workload_dir, name));
    }
    target->merge_patch(entry);
  }
  return manifest.dump(2) + "\n";
}

absl::Status CopyWorkload(const ScratchRepoOptions& o, const platform::Git& git) {
  std::vector<std::string> args = {"ls-files", "-z", "--"};
  args.insert(args.end(), kWorkloadPaths.begin(), kWorkloadPaths.end());
  absl::StatusOr<std::string> listed = git.Run(o.source_root, args);
  if (!listed.ok()) return listed.status();
  int copied = 0;
  for (absl::string_view file : absl::StrSplit(*listed, '\0', absl::SkipEmpty())) {
    const std::string name(file);
    const fs::path from = fs::path(o.source_root) / name, to = fs::path(o.dir) / name;
    std::error_code ec;
    if (!fs::exists(from)) continue;  // Deleted locally: the checkout wins.
    fs::create_directories(to.parent_path(), ec);
    if (!ec) fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec);
    if (ec) return absl::InternalError(absl::StrFormat("copying %s: %s", from, ec.message()));
    ++copied;
  }
  if (copied == 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s has no tracked workload files (kernels/, runtime/): not a densegate checkout?",
        o.source_root));
  }
  return absl::OkStatus();
}

absl::Status Apply(const platform::Git& git, const std::string& dir, const std::string& patch) {
  absl::StatusOr<std::string> applied = git.Run(dir, {"apply", "--whitespace=nowarn", patch});
  if (!applied.ok()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s no longer applies to the workload (update it against the first version): %s", patch,
        applied.status().message()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ScratchRepo> CreateScratchRepo(const ScratchRepoOptions& o, const Scenario& scenario,
                                              const platform::Git& git) {
  std::error_code ec;
  fs::remove_all(o.dir, ec);
  fs::create_directories(o.dir, ec);
  if (ec) return absl::InternalError(absl::StrFormat("cannot create %s: %s", o.dir, ec.message()));
  if (absl::Status s = CopyWorkload(o, git); !s.ok()) return s;
  absl::StatusOr<std::string> manifest = Manifest(o);
  if (!manifest.ok()) return manifest.status();
  if (absl::Status s = WriteFile(fs::path(o.dir) / "densegate.json", *manifest); !s.ok()) return s;
  absl::StatusOr<std::string> bazelrc = ReadFile(fs::path(o.workload_dir) / "bazelrc");
  if (!bazelrc.ok()) return bazelrc.status();
  if (absl::Status s = WriteFile(fs::path(o.dir) / ".bazelrc", *bazelrc); !s.ok()) return s;

  const std::string branch = scenario.target_branch;
  auto run = [&](const std::vector<std::string>& args) -> absl::Status {
    return git.Run(o.dir, As(args)).status();
  };
  if (absl::Status s = run({"init", "-q", "-b", branch}); !s.ok()) return s;
  if (absl::Status s = Apply(git, o.dir, scenario.first_version_patch); !s.ok()) return s;
  if (absl::Status s = run({"add", "-A"}); !s.ok()) return s;
  if (absl::Status s = run({"commit", "-q", "-m", scenario.first_version_message}); !s.ok()) {
    return s;
  }
  ScratchRepo repo;
  repo.dir = o.dir;
  absl::StatusOr<std::string> sha = git.ResolveCommit(o.dir, "HEAD");
  if (!sha.ok()) return sha.status();
  repo.first_version_sha = *sha;
  // Applies `patch` on HEAD and commits it; returns the commit.
  auto commit_patch = [&](const std::string& patch,
                          const std::string& message) -> absl::StatusOr<std::string> {
    if (absl::Status s = Apply(git, o.dir, patch); !s.ok()) return s;
    if (absl::Status s = run({"add", "-A"}); !s.ok()) return s;
    if (absl::Status s = run({"commit", "-q", "-m", message}); !s.ok()) return s;
    return git.ResolveCommit(o.dir, "HEAD");
  };
  for (const ScenarioCandidate& c : scenario.candidates) {
    if (absl::Status s = run({"checkout", "-q", "-b", c.name, branch}); !s.ok()) return s;
    sha = commit_patch(c.patch, c.message);
    if (!sha.ok()) return sha.status();
    repo.candidate_sha[c.name] = *sha;
  }
  if (scenario.bisection.has_value()) {
    const ScenarioBisection& b = *scenario.bisection;
    if (absl::Status s = run({"checkout", "-q", "-b", b.branch, branch}); !s.ok()) return s;
    for (const ScenarioBisection::Commit& c : b.commits) {
      sha = commit_patch(c.patch, c.message);
      if (!sha.ok()) return sha.status();
      repo.bisection_shas.push_back(*sha);
    }
  }
  if (absl::Status s = run({"checkout", "-q", branch}); !s.ok()) return s;
  return repo;
}

}  // namespace densegate::demo
