// The correctness stage: the manifest's suites and the trusted kernel checks.
#include "harness/internal/evaluation.h"

namespace densegate::harness::internal {

// JUnit files named by a correctness suite's results: the *.xml regular
// files under its results directory (for Bazel, under `bazel-testlogs`,
// the link that names it followed; no link the candidate's tests left
// inside is followed or listed). Read in the node's process: nothing is
// written into the candidate's tree.
std::vector<std::string> ResultFiles(const v1::CorrectnessSuite& suite, const std::string& dir) {
  const std::string root = suite.results() == v1::BAZEL_TEST
                               ? dir + "/bazel-testlogs"
                               : dir + "/" + suite.results_path();
  std::vector<std::string> files;
  std::error_code ec;
  auto it = std::filesystem::recursive_directory_iterator(
      root, std::filesystem::directory_options::skip_permission_denied, ec);
  for (; !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    std::error_code type_ec;
    if (it->symlink_status(type_ec).type() == std::filesystem::file_type::regular &&
        it->path().extension() == ".xml") {
      files.push_back(it->path().string());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

KernelCheckSetup Evaluation::CheckSetup(bool candidate, const std::string& log_name) const {
  KernelCheckSetup setup;
  setup.launcher = launcher_;
  setup.reference_dir = checkout_.baseline_dir;
  setup.subject_dir = candidate ? checkout_.candidate_dir : checkout_.baseline_dir;
  setup.reference_confinement = ArmSandbox(false, Access::kMeasure);
  setup.subject_confinement = ArmSandbox(candidate, Access::kMeasure);
  setup.log_prefix = LogPath(log_name);
  setup.cpus = options_.cpus;
  setup.salt = request_.seed;
  return setup;
}

bool Evaluation::KernelChecks(StageRun* run, std::vector<std::string>* failed, int* passed) {
  for (const v1::KernelCheck& check : manifest_.kernel_checks()) {
    Say(v1::CORRECTNESS, "kernel check " + check.name());
    KernelCheckReport r = RunKernelCheck(check, CheckSetup(true, "check-" + check.name()));
    v1::TestCaseResult* t = run->stage().add_tests();
    t->set_suite("kernel_checks");
    t->set_name(check.name());
    t->set_passed(r.outcome == KernelCheckReport::Outcome::kPassed);
    t->set_message(r.message);
    switch (r.outcome) {
      case KernelCheckReport::Outcome::kPassed:
        ++*passed;
        break;
      case KernelCheckReport::Outcome::kIncorrect:
        failed->push_back(absl::StrCat("kernel check ", check.name(), ": ", r.message));
        break;
      case KernelCheckReport::Outcome::kGaming: {
        std::string message = absl::StrCat("kernel check ", check.name(), ": ", r.message);
        failures_.push_back(Reason(v1::GAMING, v1::CORRECTNESS, message));
        run->End(v1::STAGE_FAILED, message);
        return false;
      }
      case KernelCheckReport::Outcome::kInfrastructure:
        infrastructure_ = absl::FailedPreconditionError(
            absl::StrCat("kernel check ", check.name(), ": ", r.message));
        run->End(v1::STAGE_ERROR, r.message);
        return false;
    }
  }
  return true;
}

absl::StatusOr<bool> Evaluation::Correctness() {
  if (manifest_.correctness().empty() && manifest_.kernel_checks().empty()) {
    Skip(v1::CORRECTNESS, "no correctness suites or kernel checks declared", listener_, &stages_);
    return true;
  }
  StageRun run(v1::CORRECTNESS, listener_, &stages_);
  int passed = 0;
  std::vector<std::string> failed;
  if (!KernelChecks(&run, &failed, &passed)) return false;
  // A kernel that computes wrong results decides the stage: the (slower)
  // test suites would only add detail to a rejection.
  static const google::protobuf::RepeatedPtrField<v1::CorrectnessSuite> kNone;
  // Each suite runs on the baseline first, in its arm: what it builds, and
  // the results of the tests whose inputs the candidate left alone, go to
  // the trusted build cache, where the candidate's run finds them (nothing a
  // candidate builds or runs is kept for another evaluation, so without
  // this every candidate built and ran all of its suites' tests from
  // scratch). How the baseline fares is told, and decides nothing.
  std::vector<std::string> baseline_failing;
  for (const v1::CorrectnessSuite& suite : failed.empty() ? manifest_.correctness() : kNone) {
    Say(v1::CORRECTNESS, absl::StrFormat("suite %s on the baseline", suite.name()));
    absl::StatusOr<platform::ProcessResult> r =
        Shell(suite.command(), false, "correctness-baseline-" + suite.name(), suite.timeout_s(),
              ArmSandbox(false, Access::kBuild));
    if (!r.ok()) return r.status();
    if (!r->ok()) baseline_failing.push_back(suite.name());
  }
  const std::string baseline_note =
      baseline_failing.empty()
          ? ""
          : absl::StrFormat(" (the baseline fails %s too)", absl::StrJoin(baseline_failing, ", "));
  for (const v1::CorrectnessSuite& suite : failed.empty() ? manifest_.correctness() : kNone) {
    Say(v1::CORRECTNESS, absl::StrFormat("suite %s on the candidate", suite.name()));
    std::string name = "correctness-" + suite.name();
    absl::StatusOr<platform::ProcessResult> r = Shell(suite.command(), true, name, suite.timeout_s(),
                                            ArmSandbox(true, Access::kBuild));
    if (!r.ok()) return r.status();
    bool cases_failed = false;
    if (suite.results() == v1::JUNIT_XML || suite.results() == v1::BAZEL_TEST) {
      for (const std::string& file : ResultFiles(suite, checkout_.candidate_dir)) {
        absl::StatusOr<std::vector<v1::TestCaseResult>> cases = ParseJUnitXml(platform::ReadOutputFile(file));
        if (!cases.ok()) continue;
        for (v1::TestCaseResult& c : *cases) {
          if (c.passed()) {
            ++passed;
          } else {
            cases_failed = true;
            failed.push_back(absl::StrCat(c.suite(), ".", c.name(),
                                          c.message().empty() ? "" : ": " + c.message()));
          }
          *run.stage().add_tests() = std::move(c);
        }
      }
    }
    if (!r->ok() && !cases_failed) {
      failed.push_back(absl::StrFormat("suite %s: %s\n%s", suite.name(), r->Describe(),
                                       LastLines(platform::ReadOutputFile(LogPath(name + ".err")), 8)));
    } else if (r->ok() && suite.results() == v1::EXIT_CODE) {
      ++passed;
    }
  }
  if (!failed.empty()) {
    // One line per failure, the first few only: the logs hold the rest.
    std::vector<std::string> lines;
    for (size_t i = 0; i < failed.size() && i < 5; ++i) {
      std::string first = failed[i].substr(0, failed[i].find('\n'));
      lines.push_back(first.size() > 240 ? first.substr(0, 240) + "..." : first);
    }
    if (failed.size() > lines.size()) {
      lines.push_back(absl::StrFormat("and %d more (see the correctness logs)",
                                      failed.size() - lines.size()));
    }
    std::string message = absl::StrFormat("%d failing: %s%s", failed.size(),
                                          absl::StrJoin(lines, "; "), baseline_note);
    failures_.push_back(Reason(v1::CORRECTNESS_FAILED, v1::CORRECTNESS, message));
    run.End(v1::STAGE_FAILED, message);
    return false;
  }
  run.End(v1::STAGE_PASSED, absl::StrFormat("%d passed%s", passed, baseline_note));
  return true;
}

}  // namespace densegate::harness::internal
