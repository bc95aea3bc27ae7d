// The end of a demo run: each candidate's verdict against the scenario,
// the bisection, and the host state the run measured in.
#include "demo/internal/demo_run.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "demo/expectation.h"
#include "demo/scenario.h"
#include "demo/scratch_repo.h"
#include "platform/process/service_process.h"
#include "grpcpp/grpcpp.h"
#include "platform/process/launcher.h"
#include "platform/git/git.h"
#include "nlohmann/json.hpp"
#include "proto/densegate.grpc.pb.h"
#include "manifest/manifest.h"
#include "results/report/report.h"
#include "results/store/store.h"
#include "scheduler/tokens.h"

namespace densegate::demo::internal {

namespace fs = std::filesystem;

std::string Metrics(const v1::Verdict& v) {
  std::vector<std::string> parts;
  for (const v1::MetricComparison& m : v.metrics()) {
    parts.push_back(absl::StrCat(m.metric(), " ", results::SpeedupText(m)));
  }
  return absl::StrJoin(parts, "; ");
}

int Demo::Verdicts() {
  out_ << "\nverdicts\n";
  out_ << absl::StrFormat("  %-24s %-16s %-26s %-8s %s\n", "candidate", "submitted as",
                          "decision", "merged", "expected");
  int mismatches = 0;
  for (const auto& r : rows_) {
    const ScenarioCandidate& c = *r->candidate;
    const v1::Evaluation& e = r->final;
    std::string miss = Mismatch(c, e);
    std::string expected = miss.empty() ? "ok" : "NO: " + miss;
    if (!miss.empty() && o_.allow_inconclusive) {
      const v1::Evaluation* remeasure = r->remeasure ? &*r->remeasure : nullptr;
      if (const std::string why = InconclusiveOnly(c, e, remeasure); !why.empty()) {
        ++inconclusive_;
        expected = "undecided (allowed): " + why;
        miss.clear();
      }
    }
    if (!miss.empty()) ++mismatches;
    out_ << absl::StrFormat(
        "  %-24s %-16s %-26s %-8s %s\n", c.name,
        absl::StrCat(c.submitter, "/", c.kind == v1::CI ? "ci" : "experiment"), DecisionText(e),
        e.merge().state() == v1::MERGED ? "yes" : "no", expected);
    if (e.has_verdict()) {
      const std::string m = Metrics(e.verdict());
      if (!m.empty()) out_ << "      " << m << "\n";
      for (const v1::Reason& reason : e.verdict().reasons()) {
        if (reason.code() == v1::VERIFIED) continue;
        out_ << "      - " << reason.message() << "\n";
      }
    }
  }
  return mismatches;
}

void Demo::HostState() {
  v1::HostSteadiness host;
  int evaluations = 0;
  for (const auto& r : rows_) {
    for (const v1::Evaluation* e : {&r->final, r->remeasure ? &*r->remeasure : nullptr}) {
      // (Evaluations that measured no pair read no probe.)
      if (e == nullptr || e->verdict().provenance().host().probe_reads() == 0) continue;
      const v1::HostSteadiness& h = e->verdict().provenance().host();
      if (host.probe_reads() == 0 || h.probe_fastest_ms() < host.probe_fastest_ms()) {
        host.set_probe_fastest_ms(h.probe_fastest_ms());
      }
      host.set_probe_slowest_ms(std::max(host.probe_slowest_ms(), h.probe_slowest_ms()));
      host.set_probe_reads(host.probe_reads() + h.probe_reads());
      host.set_pairs_measured_again(host.pairs_measured_again() + h.pairs_measured_again());
      host.set_pairs_kept_unsteady(host.pairs_kept_unsteady() + h.pairs_kept_unsteady());
      host.set_seconds_waited(host.seconds_waited() + h.seconds_waited());
      ++evaluations;
    }
  }
  out_ << "\nhost state\n";
  if (evaluations == 0) {
    out_ << "  machine probe: no pair was measured\n";
  } else {
    out_ << absl::StrFormat(
        "  machine probe %.1f-%.1f ms over %d reads in %d evaluations (a quiet host of the "
        "development VM reads about 5 ms, its slow phases 7-19 ms); %d pair(s) measured again, "
        "%d kept although the probe moved, %.0f s waited for the host to settle\n",
        host.probe_fastest_ms(), host.probe_slowest_ms(), host.probe_reads(), evaluations,
        host.pairs_measured_again(), host.pairs_kept_unsteady(), host.seconds_waited());
  }
  grpc::ClientContext ctx;
  Attach(&ctx, tokens_.admin);
  v1::ListNodesResponse resp;
  if (grpc::Status s = stub_->ListNodes(&ctx, v1::ListNodesRequest(), &resp); !s.ok()) {
    out_ << "  nodes: " << s.error_message() << "\n";
    return;
  }
  for (const v1::Node& n : resp.nodes()) {
    std::string line = absl::StrFormat("  %s %s, A/A calibration noise %.2f%%%s", n.name(),
                                       absl::AsciiStrToLower(v1::NodeState_Name(n.state())),
                                       100 * n.calibration_noise(), OverRepoLimit(n));
    const auto q = quarantines_.find(n.name());
    if (q != quarantines_.end()) {
      std::vector<std::string> noises;
      for (double x : q->second) noises.push_back(absl::StrFormat("%.2f%%", 100 * x));
      absl::StrAppendFormat(&line, "; quarantined %d time(s) before it calibrated calm (%s)",
                            q->second.size(), absl::StrJoin(noises, ", "));
    }
    out_ << line << "\n";
  }
}

void Demo::StartBisect() {
  if (!scenario_.bisection.has_value() || bisect_.joinable()) return;
  const ScenarioBisection& b = *scenario_.bisection;
  bisect_started_at_ = Elapsed(start_);
  platform::ProcessSpec& spec = bisect_spec_;
  spec.argv = {o_.densegate_binary, "bisect", "--server", address_, "--token", tokens_.ci,
               "--repo", repo_.dir, "--metric", b.metric, "--good", repo_.first_version_sha,
               "--bad", repo_.bisection_shas.back(), "--parallel", "2", "--json"};
  spec.stdout_path = o_.out_dir + "/bisect.json";
  spec.stderr_path = o_.out_dir + "/logs/bisect.log";
  spec.isolate_network = false;  // It talks to the scheduler on loopback.
  spec.wall_timeout = std::max(o_.timeout - (absl::Now() - start_), absl::Minutes(2));
  bisect_ = std::thread([this] {
    bisect_result_ = launcher_->Run(bisect_spec_);
    bisect_finished_at_ = Elapsed(start_);
  });
}

bool Demo::FinishBisect() {
  if (!scenario_.bisection.has_value()) return true;
  const ScenarioBisection& b = *scenario_.bisection;
  const std::string expected = repo_.bisection_shas[b.culprit - 1];
  out_ << absl::StrFormat(
      "\nbisection: %s, %d commits pushed off the first version without the gate; densegate "
      "bisect --metric %s --good %s --bad %s (started at %s, when every candidate was "
      "decided)\n",
      b.branch, b.commits.size(), b.metric, repo_.first_version_sha.substr(0, 12),
      repo_.bisection_shas.back().substr(0, 12), bisect_started_at_);
  out_.flush();
  if (bisect_.joinable()) bisect_.join();
  const platform::ProcessSpec& spec = bisect_spec_;
  const absl::StatusOr<platform::ProcessResult>& r = bisect_result_;
  // With --json it writes only errors here; the steps come from its JSON.
  for (absl::string_view line :
       absl::StrSplit(platform::ReadOutputFile(spec.stderr_path), '\n', absl::SkipEmpty())) {
    out_ << "  " << line << "\n";
  }
  if (!r.ok() || !r->ok()) {
    out_ << "  NO: densegate bisect " << (r.ok() ? r->Describe() : std::string(r.status().message()))
         << " (see " << spec.stderr_path << ")\n";
    return false;
  }
  const nlohmann::json result = nlohmann::json::parse(
      platform::ReadOutputFile(spec.stdout_path), nullptr, /*allow_exceptions=*/false);
  const std::string culprit =
      result.is_object() ? result.value("culprit", std::string()) : std::string();
  for (const nlohmann::json& step :
       result.is_object() ? result.value("steps", nlohmann::json::array()) : nlohmann::json()) {
    out_ << absl::StrFormat("  %s  %s  %s\n", step.value("commit", std::string()).substr(0, 12),
                            step.value("text", std::string()), step.value("result", std::string()));
  }
  const bool found = culprit == expected;
  out_ << absl::StrFormat("  culprit %s \"%s\" at %s: %s\n", culprit.substr(0, 12),
                          result.is_object() ? result.value("subject", std::string()) : "",
                          bisect_finished_at_,
                          found ? "ok" : "NO: expected " + expected.substr(0, 12));
  return found;
}

}  // namespace densegate::demo::internal
