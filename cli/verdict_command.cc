// `densegate verdict recompute ID`: recompute a stored verdict from its
// stored samples and policy, and check it is identical.
#include <iostream>

#include "cli/command.h"
#include "cli/store_flag.h"
#include "google/protobuf/util/json_util.h"
#include "results/verdict/verdict.h"

namespace densegate::cli {
namespace {

int Recompute(const std::string& url, const std::string& id, bool json) {
  auto store = OpenStoreFromFlag(url, {.migrate = false});
  if (!store.ok()) {
    std::cerr << "densegate verdict recompute: cannot open " << url << ": "
              << store.status().message() << "\n";
    return kExitInfrastructure;
  }
  auto r = results::RecomputeVerdict(**store, id);
  if (!r.ok()) {
    std::cerr << "densegate verdict recompute " << id << ": " << r.status().message() << "\n";
    return r.status().code() == absl::StatusCode::kNotFound ? kExitUsage : kExitInfrastructure;
  }
  if (json) {
    std::string text;
    google::protobuf::util::JsonPrintOptions options;
    options.preserve_proto_field_names = true;
    (void)google::protobuf::util::MessageToJsonString(r->recomputed, &text, options);
    std::cout << text << "\n";
  }
  if (r->identical()) {
    std::cerr << id << ": recomputed verdict is identical ("
              << v1::Decision_Name(r->recomputed.decision()) << ", "
              << r->recomputed.metrics_size() << " metrics, "
              << r->recomputed.provenance().sample_ids_size() << " samples)\n";
    return kExitAccept;
  }
  std::cerr << id << ": recomputed verdict DIFFERS from the stored one:\n";
  for (const std::string& d : r->differences) std::cerr << "  " << d << "\n";
  return kExitReject;
}

}  // namespace

void AddVerdictCommand(CLI::App& app, int* exit_code) {
  CLI::App* verdict = app.add_subcommand("verdict", "Inspect stored verdicts.");
  verdict->require_subcommand(1);
  CLI::App* recompute = verdict->add_subcommand(
      "recompute",
      "Recompute a stored verdict from its samples and policy; exit 0 when "
      "identical, 1 when it differs.");
  struct Args {
    std::string url, id;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  recompute->add_option("id", args->id, "Evaluation id")->required();
  recompute->add_flag("--json", args->json, "Print the recomputed verdict as JSON");
  AddDbFlag(recompute, &args->url);
  recompute->callback(
      [args, exit_code] { *exit_code = Recompute(args->url, args->id, args->json); });
}

}  // namespace densegate::cli
