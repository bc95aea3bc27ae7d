// FakeLauncher: a ProcessLauncher for tests that starts nothing. It records
// every ProcessSpec it is given and answers each Run from the replies it was
// told (the first whose matcher accepts the spec), writing the reply's
// stdout and stderr to the spec's files as a real run would. A command no
// reply matches "exits" 127 with "not found" on stderr.
//
// Thread-safety: Run and runs() may be called from several threads.
#ifndef DENSEGATE_PLATFORM_PROCESS_TESTING_FAKE_LAUNCHER_H_
#define DENSEGATE_PLATFORM_PROCESS_TESTING_FAKE_LAUNCHER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "platform/process/launcher.h"

namespace densegate::platform {

class FakeLauncher : public ProcessLauncher {
 public:
  struct Reply {
    int exit_code = 0;
    std::string stdout_text;
    std::string stderr_text;
  };
  using Matcher = std::function<bool(const ProcessSpec&)>;

  // Answers the specs `matches` accepts with `reply`, before any reply
  // added later.
  void On(Matcher matches, Reply reply);
  // Matches a spec whose argv, joined by spaces, contains `text`.
  static Matcher ArgvContains(std::string text);

  absl::StatusOr<ProcessResult> Run(const ProcessSpec& spec) override;
  // Not faked: a test that needs piped processes uses the real launcher.
  absl::StatusOr<std::unique_ptr<RunningProcess>> Start(const ProcessSpec& spec) override;
  // Every spec Run was given, in order.
  std::vector<ProcessSpec> runs() const;

 private:
  mutable absl::Mutex mu_;
  std::vector<std::pair<Matcher, Reply>> replies_ ABSL_GUARDED_BY(mu_);
  std::vector<ProcessSpec> runs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace densegate::platform

#endif  // DENSEGATE_PLATFORM_PROCESS_TESTING_FAKE_LAUNCHER_H_
