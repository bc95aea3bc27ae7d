#include "platform/git/git.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace densegate::platform {
namespace {

std::vector<std::string> SplitNul(const std::string& text) {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(text, '\0', absl::SkipEmpty())) {
    out.emplace_back(part);
  }
  return out;
}

}  // namespace

absl::StatusOr<std::string> Git::Run(absl::string_view dir,
                                     const std::vector<std::string>& args) const {
  char out_tmpl[] = "/tmp/densegate-git-out.XXXXXX";
  char err_tmpl[] = "/tmp/densegate-git-err.XXXXXX";
  int out_fd = mkstemp(out_tmpl), err_fd = mkstemp(err_tmpl);
  if (out_fd < 0 || err_fd < 0) {
    return absl::UnavailableError("cannot create temporary files for git output");
  }
  close(out_fd);
  close(err_fd);
  ProcessSpec spec;
  // Worktrees belong to the arms' sandbox users; the node's git reads them
  // anyway (Workspace never lets git trust a worktree's own .git file).
  spec.argv = {"git", "-c", "safe.directory=*", "-C", std::string(dir)};
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  spec.stdout_path = out_tmpl;
  spec.stderr_path = err_tmpl;
  spec.isolate_network = false;  // Fetching a remote repository needs it.
  spec.wall_timeout = absl::Minutes(10);
  // Git must not prompt (no terminal) nor read the user's config for hooks.
  spec.env = {{"GIT_TERMINAL_PROMPT", "0"}, {"GIT_CONFIG_NOSYSTEM", "1"}};
  absl::StatusOr<ProcessResult> r = launcher_->Run(spec);
  std::string out = ReadOutputFile(out_tmpl), err = ReadOutputFile(err_tmpl);
  unlink(out_tmpl);
  unlink(err_tmpl);
  if (!r.ok()) return r.status();
  if (!r->ok()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "git %s (in %s) failed: %s%s", absl::StrJoin(args, " "), dir, r->Describe(),
        err.empty() ? "" : absl::StrCat(": ", absl::StripAsciiWhitespace(err))));
  }
  return out;
}

absl::StatusOr<std::string> Git::ResolveCommit(absl::string_view repo,
                                               absl::string_view ref) const {
  absl::StatusOr<std::string> sha =
      Run(repo, {"rev-parse", "--verify", "--quiet", absl::StrCat(ref, "^{commit}")});
  if (!sha.ok()) {
    return absl::NotFoundError(absl::StrFormat(
        "ref \"%s\" does not name a commit in %s", ref, repo));
  }
  return std::string(absl::StripAsciiWhitespace(*sha));
}

absl::StatusOr<std::string> Git::ShowFile(absl::string_view repo,
                                          absl::string_view commit,
                                          absl::string_view path) const {
  absl::StatusOr<std::string> files =
      Run(repo, {"ls-tree", "-z", "--name-only", std::string(commit), "--", std::string(path)});
  if (!files.ok()) return files.status();
  if (files->empty()) {
    return absl::NotFoundError(absl::StrFormat("%s has no %s at commit %s", repo, path,
                                               commit.substr(0, 12)));
  }
  return Run(repo, {"show", absl::StrCat(commit, ":", path)});
}

absl::StatusOr<std::vector<std::string>> Git::ChangedPaths(absl::string_view repo,
                                                           absl::string_view from,
                                                           absl::string_view to) const {
  // --no-renames lists a rename as delete + add: both paths count.
  absl::StatusOr<std::string> out = Run(
      repo, {"diff", "--name-only", "--no-renames", "-z", std::string(from), std::string(to)});
  if (!out.ok()) return out.status();
  return SplitNul(*out);
}

absl::StatusOr<std::vector<std::string>> Git::ListFiles(absl::string_view repo,
                                                        absl::string_view commit) const {
  absl::StatusOr<std::string> out =
      Run(repo, {"ls-tree", "-r", "-z", "--name-only", std::string(commit)});
  if (!out.ok()) return out.status();
  return SplitNul(*out);
}

}  // namespace densegate::platform
