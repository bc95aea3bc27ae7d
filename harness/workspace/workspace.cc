#include "harness/workspace/workspace.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <cstdlib>
#include <filesystem>
#include <functional>

#include "absl/strings/match.h"
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

// Gives `path` and everything below it (links themselves, never what they
// point to) to `uid`.
absl::Status GiveTo(const std::string& path, uint32_t uid) {
  if (uid == 0) return absl::OkStatus();
  auto own = [&](const std::string& p) -> absl::Status {
    if (lchown(p.c_str(), uid, uid) != 0) {
      return absl::FailedPreconditionError(
          absl::StrFormat("cannot give %s to uid %d: %s", p, uid, std::strerror(errno)));
    }
    return absl::OkStatus();
  };
  if (absl::Status s = own(path); !s.ok()) return s;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(path, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (absl::Status s = own(it->path().string()); !s.ok()) return s;
  }
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrFormat("cannot walk %s: %s", path, ec.message()));
  }
  return absl::OkStatus();
}

uint32_t OwnerOf(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 ? st.st_uid : 0;
}

// Where an arm's Bazel keeps its output base: named in the arm's .bazelrc,
// so that the candidate's can start as a copy of the baseline's.
std::string BazelOutputBase(const std::string& cache) { return cache + "/bazel-output-base"; }

// Copies the baseline's output base to `to` (files, directories and links,
// modes and times; never what a link points to), given to `uid`, without
// its server's state and lock. Nothing there when the baseline has not
// built yet.
absl::Status SeedOutputBase(const std::string& from, const std::string& to, uint32_t uid) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(from, ec)) return absl::OkStatus();
  auto failed = [&](const fs::path& p) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "cannot copy the baseline's build state %s to %s: %s", p.string(), to, ec.message()));
  };
  fs::create_directory(to, from, ec);
  if (ec) return failed(from);
  for (auto it = fs::recursive_directory_iterator(from, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    // Lexical: fs::relative would follow a link (e.g. install -> /usr/...).
    const fs::path rel = it->path().lexically_relative(from);
    const std::string top = rel.begin()->string();
    if (top == "server" || top == "lock" || absl::StartsWith(top, "java.log")) {
      if (it->is_directory(ec)) it.disable_recursion_pending();
      continue;
    }
    const fs::path dst = fs::path(to) / rel;
    const fs::file_status st = it->symlink_status(ec);
    if (fs::is_symlink(st)) {
      fs::copy_symlink(it->path(), dst, ec);
    } else if (fs::is_directory(st)) {
      fs::create_directory(dst, it->path(), ec);
    } else if (fs::is_regular_file(st)) {
      fs::copy_file(it->path(), dst, ec);
      if (!ec) {
        const fs::file_time_type written = fs::last_write_time(it->path(), ec);
        if (!ec) fs::last_write_time(dst, written, ec);
      }
    } else {
      continue;  // Sockets and pipes belong to a running server.
    }
    if (ec) return failed(it->path());
  }
  if (ec) return failed(from);
  return GiveTo(to, uid);
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

absl::StatusOr<std::string> Workspace::GitInWorktree(const std::string& mirror,
                                                     const std::string& dir,
                                                     const std::vector<std::string>& args) {
  // The mirror knows its worktrees: worktrees/<name>/gitdir names each one's
  // .git file. The worktree's own .git is whatever the last run left there.
  std::error_code ec;
  std::string admin;
  for (const auto& entry : std::filesystem::directory_iterator(mirror + "/worktrees", ec)) {
    std::ifstream in(entry.path() / "gitdir");
    std::string line;
    std::getline(in, line);
    if (line == dir + "/.git") admin = entry.path().string();
  }
  if (admin.empty()) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s is not a worktree of %s", dir, mirror));
  }
  std::filesystem::remove_all(dir + "/.git", ec);
  {
    std::ofstream git_file(dir + "/.git", std::ios::trunc);
    git_file << "gitdir: " << admin << "\n";
    if (!git_file) {
      return absl::FailedPreconditionError(absl::StrFormat("cannot restore %s/.git", dir));
    }
  }
  std::vector<std::string> full = {"--git-dir=" + admin, "--work-tree=" + dir};
  full.insert(full.end(), args.begin(), args.end());
  return git_->Run(dir, full);
}

absl::Status Workspace::CheckoutAt(const std::string& mirror, const std::string& dir,
                                   const std::string& sha) {
  if (access(dir.c_str(), F_OK) != 0) {
    // Forget a worktree whose directory is gone, so its name frees up.
    (void)git_->Run(mirror, {"worktree", "prune"});
    absl::StatusOr<std::string> added =
        git_->Run(mirror, {"worktree", "add", "-q", "--detach", "--force", dir, sha});
    return added.status();
  }
  for (std::vector<std::string> args :
       {std::vector<std::string>{"checkout", "-q", "--detach", "--force", sha},
        std::vector<std::string>{"clean", "-q", "-ffdx"}}) {
    absl::StatusOr<std::string> r = GitInWorktree(mirror, dir, args);
    if (!r.ok()) return r.status();
  }
  return absl::OkStatus();
}

absl::StatusOr<ArmArea> Workspace::PrepareArm(const std::string& slot, const std::string& arm,
                                              const std::string& worktree, uint32_t uid) {
  ArmArea area;
  area.home = absl::StrCat(slot, "/home-", arm);
  area.cache = absl::StrCat(slot, "/cache-", arm);
  for (const std::string& dir : {area.home, area.cache}) {
    if (absl::Status made = MakeDirs(dir); !made.ok()) return made;
  }
  // Emptied, not replaced: a Bazel server left in the baseline's sandbox
  // sees HOME through a bind mount of this very directory, and a new one
  // would leave it a deleted, empty HOME (its output base unreachable). The
  // candidate's sandbox, and its server, end with each evaluation, so its
  // cache goes too.
  const bool candidate = arm == "candidate";
  std::error_code ec;
  for (const std::string& dir : candidate ? std::vector{area.home, area.cache}
                                          : std::vector{area.home}) {
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
      std::filesystem::remove_all(entry.path(), ec);
    }
  }
  if (symlink(area.cache.c_str(), (area.home + "/.cache").c_str()) != 0) {
    return absl::FailedPreconditionError(absl::StrFormat("cannot link %s/.cache", area.home));
  }
  area.writable = {worktree, area.home, area.cache};
  const std::string trusted = TrustedCache(root_);
  if (absl::Status made = MakeDirs(trusted); !made.ok()) return made;
  const std::string build_cache = area.cache + "/densegate";
  if (access(build_cache.c_str(), F_OK) != 0 &&
      symlink(trusted.c_str(), build_cache.c_str()) != 0) {
    return absl::FailedPreconditionError(absl::StrFormat("cannot link %s", build_cache));
  }
  std::ofstream rc(area.home + "/.bazelrc");
  rc << "startup --output_base=" << BazelOutputBase(area.cache) << "\n";
  if (candidate) {
    // Its server lives for one evaluation: a JIT for a short life (C1 only)
    // takes about a third off a one-core build's server start and analysis.
    // Bazel tries to store each action it ran in the disk cache and warns
    // when it cannot; the mount refuses it anyway, so do not ask.
    rc << "startup --host_jvm_args=-XX:TieredStopAtLevel=1\n"
       << "build --noremote_upload_local_results\n";
  }
  if (!rc.flush()) {
    return absl::FailedPreconditionError(absl::StrFormat("cannot write %s/.bazelrc", area.home));
  }
  if (candidate) {
    area.read_only.push_back(trusted);
  } else {
    area.writable.push_back(trusted);
    // Nodes may share one trusted cache through a link: the directory it
    // names is what the baseline user must own.
    std::error_code resolve_error;
    const std::string real = std::filesystem::canonical(trusted, resolve_error).string();
    if (resolve_error) {
      return absl::FailedPreconditionError(
          absl::StrFormat("cannot resolve %s: %s", trusted, resolve_error.message()));
    }
    if (uid != 0 && OwnerOf(real) != uid) {
      if (absl::Status s = GiveTo(real, uid); !s.ok()) return s;
    }
  }
  if (uid != 0) {
    // The worktree's files come from git, run by the node; the cache is
    // walked only when it was someone else's (a first run, a new user).
    for (const std::string& dir : {worktree, area.home}) {
      if (absl::Status s = GiveTo(dir, uid); !s.ok()) return s;
    }
    if (OwnerOf(area.cache) != uid) {
      if (absl::Status s = GiveTo(area.cache, uid); !s.ok()) return s;
    }
  }
  return area;
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
  if (absl::Status made = MakeDirs(slot); !made.ok()) return made;
  absl::Status s = CheckoutAt(c.mirror, c.baseline_dir, c.baseline_sha);
  if (!s.ok()) return s;
  s = CheckoutAt(c.mirror, c.candidate_dir, c.candidate_sha);
  if (!s.ok()) return s;
  absl::StatusOr<ArmArea> baseline = PrepareArm(slot, "baseline", c.baseline_dir, users_.baseline);
  if (!baseline.ok()) return baseline.status();
  absl::StatusOr<ArmArea> candidate =
      PrepareArm(slot, "candidate", c.candidate_dir, users_.candidate);
  if (!candidate.ok()) return candidate.status();
  c.baseline = *std::move(baseline);
  c.candidate = *std::move(candidate);
  return c;
}

absl::Status Workspace::SeedCandidate(const Checkout& checkout) {
  const std::string to = BazelOutputBase(checkout.candidate.cache);
  std::error_code ec;
  std::filesystem::remove_all(to, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrFormat("cannot empty %s: %s", to, ec.message()));
  }
  return SeedOutputBase(BazelOutputBase(checkout.baseline.cache), to, users_.candidate);
}

absl::Status Workspace::Clean(const Checkout& checkout) {
  for (const std::string& dir : {checkout.baseline_dir, checkout.candidate_dir}) {
    absl::StatusOr<std::string> r = GitInWorktree(checkout.mirror, dir, {"clean", "-q", "-ffdx"});
    if (!r.ok()) return r.status();
    r = GitInWorktree(checkout.mirror, dir, {"checkout", "-q", "--force", "--detach", "HEAD"});
    if (!r.ok()) return r.status();
  }
  return absl::OkStatus();
}

}  // namespace densegate::harness
