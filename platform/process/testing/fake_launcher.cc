#include "platform/process/testing/fake_launcher.h"

#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"

namespace densegate::platform {

void FakeLauncher::On(Matcher matches, Reply reply) {
  absl::MutexLock lock(&mu_);
  replies_.emplace_back(std::move(matches), std::move(reply));
}

FakeLauncher::Matcher FakeLauncher::ArgvContains(std::string text) {
  return [text = std::move(text)](const ProcessSpec& spec) {
    return absl::StrContains(absl::StrJoin(spec.argv, " "), text);
  };
}

absl::StatusOr<ProcessResult> FakeLauncher::Run(const ProcessSpec& spec) {
  Reply reply{127, "", "not found\n"};
  {
    absl::MutexLock lock(&mu_);
    runs_.push_back(spec);
    for (const auto& [matches, answer] : replies_) {
      if (matches(spec)) {
        reply = answer;
        break;
      }
    }
  }
  if (!spec.stdout_path.empty()) std::ofstream(spec.stdout_path) << reply.stdout_text;
  if (!spec.stderr_path.empty()) std::ofstream(spec.stderr_path) << reply.stderr_text;
  ProcessResult result;
  result.exit_code = reply.exit_code;
  return result;
}

absl::StatusOr<std::unique_ptr<RunningProcess>> FakeLauncher::Start(const ProcessSpec& spec) {
  return absl::UnimplementedError("FakeLauncher does not start piped processes: " +
                                  absl::StrJoin(spec.argv, " "));
}

std::vector<ProcessSpec> FakeLauncher::runs() const {
  absl::MutexLock lock(&mu_);
  return runs_;
}

}  // namespace densegate::platform
