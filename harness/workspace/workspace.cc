#include "harness/workspace/workspace.h"

#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <filesystem>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace densegate::harness {
namespace {

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

absl::Status MakeDirs(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrFormat("cannot create directory %s: %s", path, ec.message()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> Workspace::Mirror(const std::string& repo) {
  std::string mirror = absl::StrFormat("%s/mirrors/%016x.git", root_,
                                       std::hash<std::string>{}(repo));
  if (!IsDirectory(mirror)) {
    absl::Status made = MakeDirs(mirror);
    if (!made.ok()) return made;
    absl::StatusOr<std::string> init = git_->Run(mirror, {"init", "-q", "--bare"});
    if (!init.ok()) return init.status();
  }
  return mirror;
}

absl::Status Workspace::CheckoutAt(const std::string& mirror, const std::string& dir,
                                   const std::string& sha) {
  if (access(absl::StrCat(dir, "/.git").c_str(), F_OK) != 0) {
    absl::StatusOr<std::string> added =
        git_->Run(mirror, {"worktree", "add", "-q", "--detach", "--force", dir, sha});
    return added.status();
  }
  for (std::vector<std::string> args :
       {std::vector<std::string>{"checkout", "-q", "--detach", "--force", sha},
        std::vector<std::string>{"clean", "-q", "-ffdx"}}) {
    absl::StatusOr<std::string> r = git_->Run(dir, args);
    if (!r.ok()) return r.status();
  }
  return absl::OkStatus();
}

absl::StatusOr<Checkout> Workspace::Prepare(const std::string& repo,
                                            const std::string& baseline_ref,
                                            const std::string& candidate_ref) {
  Checkout c;
  bool local = IsDirectory(repo);
  // Git runs in other directories: a relative local path must be absolute.
  char resolved[PATH_MAX];
  c.repo = local && realpath(repo.c_str(), resolved) != nullptr ? std::string(resolved) : repo;
  const std::string& repo_path = c.repo;
  absl::StatusOr<std::string> mirror = Mirror(repo_path);
  if (!mirror.ok()) return mirror.status();
  c.mirror = *mirror;

  std::string resolve_in = local ? repo_path : c.mirror;
  if (!local) {
    absl::StatusOr<std::string> fetched =
        git_->Run(c.mirror, {"fetch", "-q", "--prune", repo_path, "+refs/heads/*:refs/heads/*",
                             "+refs/tags/*:refs/tags/*"});
    if (!fetched.ok()) return fetched.status();
  }
  absl::StatusOr<std::string> base = git_->ResolveCommit(resolve_in, baseline_ref);
  if (!base.ok()) return base.status();
  absl::StatusOr<std::string> cand = git_->ResolveCommit(resolve_in, candidate_ref);
  if (!cand.ok()) return cand.status();
  c.baseline_sha = *base;
  c.candidate_sha = *cand;
  if (local) {
    // Fetch exactly the two commits, and pin them so gc keeps them.
    absl::StatusOr<std::string> fetched = git_->Run(
        c.mirror, {"fetch", "-q", repo_path,
                   absl::StrCat("+", c.baseline_sha, ":refs/densegate/", c.baseline_sha),
                   absl::StrCat("+", c.candidate_sha, ":refs/densegate/", c.candidate_sha)});
    if (!fetched.ok()) return fetched.status();
  }

  // Worktrees belong to one mirror, so each repository gets its own pair.
  std::string slot = absl::StrFormat("%s/slots/%d/%016x", root_, slot_,
                                     std::hash<std::string>{}(repo_path));
  c.baseline_dir = slot + "/baseline";
  c.candidate_dir = slot + "/candidate";
  c.home = slot + "/home";
  std::string shared_cache = root_ + "/shared-cache";
  for (const std::string& dir : {slot, c.home + "/.cache", shared_cache}) {
    absl::Status made = MakeDirs(dir);
    if (!made.ok()) return made;
  }
  std::string link = c.home + "/.cache/densegate";
  if (access(link.c_str(), F_OK) != 0 && symlink(shared_cache.c_str(), link.c_str()) != 0) {
    return absl::FailedPreconditionError(absl::StrFormat("cannot link %s", link));
  }
  absl::Status s = CheckoutAt(c.mirror, c.baseline_dir, c.baseline_sha);
  if (!s.ok()) return s;
  s = CheckoutAt(c.mirror, c.candidate_dir, c.candidate_sha);
  if (!s.ok()) return s;
  return c;
}

absl::Status Workspace::Clean(const Checkout& checkout) {
  for (const std::string& dir : {checkout.baseline_dir, checkout.candidate_dir}) {
    absl::StatusOr<std::string> r = git_->Run(dir, {"clean", "-q", "-ffdx"});
    if (!r.ok()) return r.status();
    r = git_->Run(dir, {"checkout", "-q", "--force", "--detach", "HEAD"});
    if (!r.ok()) return r.status();
  }
  return absl::OkStatus();
}

}  // namespace densegate::harness
