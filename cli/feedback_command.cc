// `densegate feedback ID [--out DIR]`: an evaluation's feedback bundle from
// the scheduler (GetFeedback). Without --out, its summary: feedback.json
// with --json (what agents read), a short text otherwise. With --out, the
// whole bundle written under DIR (docs/feedback.md).
#include <iostream>
#include <memory>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cli/client_flags.h"
#include "cli/command.h"
#include "nlohmann/json.hpp"
#include "results/feedback/bundle.h"

namespace densegate::cli {
namespace {

struct FeedbackArgs {
  ClientArgs client;
  std::string id;
  std::string out;
};

// The summary as a person reads it: headline, what moved, why, and the
// first errors of the stages that failed.
void PrintSummary(const v1::FeedbackInfo& info) {
  const nlohmann::json f = nlohmann::json::parse(info.summary_json(), nullptr, false);
  if (f.is_discarded() || !f.is_object()) {
    std::cout << info.summary_json() << "\n";
    return;
  }
  std::cout << info.evaluation_id() << ": " << f.value("decision", "?") << " - "
            << f.value("headline", "") << "\n";
  for (const auto& m : f.value("moved", nlohmann::json::array())) {
    const auto interval = m.value("interval", nlohmann::json::array());
    const bool bounds = interval.is_array() && interval.size() == 2 && interval[0].is_number() &&
                        interval[1].is_number();
    std::cout << absl::StrFormat(
        "  moved  %-36s %.3fx %s %s (%s)\n", m.value("metric", ""), m.value("speedup", 0.0),
        bounds ? absl::StrFormat("[%.3f, %.3f]", interval[0].get<double>(),
                                 interval[1].get<double>())
               : "[?]",
        m.value("change", ""), m.value("component", ""));
  }
  for (const auto& w : f.value("why", nlohmann::json::array())) {
    std::cout << "  why    " << w.value("message", "") << "\n";
  }
  for (const auto& s : f.value("stages", nlohmann::json::array())) {
    if (!s.contains("first_errors")) continue;
    std::cout << "  stage  " << s.value("name", "") << " " << s.value("status", "") << ": "
              << s.value("summary", "") << "\n";
    for (const auto& e : s["first_errors"]) {
      std::cout << "         " << e.value("file", "") << ":" << e.value("line", 0) << ": "
                << e.value("text", "") << "\n";
    }
  }
  std::cout << absl::StrFormat("  %d files, %d bytes", info.files(), info.bytes());
  if (info.has_files_dropped_at()) std::cout << " (files dropped by the retention rule)";
  if (!info.omitted().empty()) std::cout << "; left out: " << absl::StrJoin(info.omitted(), ", ");
  std::cout << "\n";
}

int Feedback(const FeedbackArgs& a) {
  auto stub = Stub(a.client);
  grpc::ClientContext ctx;
  Attach(a.client, &ctx, /*deadline_s=*/300);
  v1::GetFeedbackRequest req;
  req.set_evaluation_id(a.id);
  req.set_summary_only(a.out.empty());
  std::unique_ptr<grpc::ClientReader<v1::FeedbackChunk>> reader = stub->GetFeedback(&ctx, req);
  v1::FeedbackChunk chunk;
  v1::FeedbackInfo info;
  results::BundleAssembler files(INT64_MAX);
  absl::Status bad;
  while (reader->Read(&chunk)) {
    if (chunk.has_info()) info = chunk.info();
    if (chunk.has_file() && bad.ok()) bad = files.Add(chunk.file());
  }
  if (grpc::Status s = reader->Finish(); !s.ok()) return Fail("feedback", s);
  if (!bad.ok()) {
    std::cerr << "densegate feedback: the scheduler sent a bad bundle: " << bad.message() << "\n";
    return kExitInfrastructure;
  }
  if (a.out.empty()) {
    if (a.client.json) {
      std::cout << info.summary_json() << "\n";
      return 0;
    }
    try {
      PrintSummary(info);
    } catch (const nlohmann::json::exception&) {
      // Not the documented schema: show it as it is.
      std::cout << info.summary_json() << "\n";
    }
    return 0;
  }
  v1::FeedbackBundle& bundle = files.bundle();
  if (bundle.files().empty()) {
    // Files dropped by retention: the summary is still worth having.
    v1::FeedbackFile* summary = bundle.add_files();
    summary->set_path(results::kFeedbackSummaryFile);
    summary->set_content(info.summary_json());
  }
  if (absl::Status s = results::WriteBundleDir(bundle, a.out); !s.ok()) {
    std::cerr << "densegate feedback: " << s.message() << "\n";
    return kExitInfrastructure;
  }
  std::cout << a.out << "\n";
  std::cerr << absl::StrFormat("densegate feedback: %d files, %d bytes in %s\n",
                               bundle.files_size(), results::BundleBytes(bundle), a.out);
  if (info.has_files_dropped_at()) {
    std::cerr << "densegate feedback: the retention rule dropped this bundle's files; only "
                 "feedback.json was written\n";
  }
  if (!info.omitted().empty()) {
    std::cerr << "densegate feedback: left out by the node to fit the size cap: "
              << absl::StrJoin(info.omitted(), ", ") << "\n";
  }
  return 0;
}

}  // namespace

void AddFeedbackCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<FeedbackArgs>();
  CLI::App* cmd = app.add_subcommand(
      "feedback",
      "Show an evaluation's feedback (what moved, why, first errors), or write its whole "
      "bundle with --out.");
  AddClientFlags(cmd, &args->client);
  cmd->add_option("id", args->id, "evaluation id")->required();
  cmd->add_option("--out", args->out,
                  "write the bundle here: feedback.json, samples, stages, precision curves, "
                  "traces, logs");
  cmd->callback([args, exit_code] { *exit_code = Feedback(*args); });
}

}  // namespace densegate::cli
