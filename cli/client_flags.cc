#include "cli/client_flags.h"

#include <chrono>
#include <cstdlib>
#include <iostream>

#include "absl/status/statusor.h"
#include "cli/channel_flags.h"
#include "cli/command.h"
#include "google/protobuf/util/json_util.h"

namespace densegate::cli {

void AddClientFlags(CLI::App* cmd, ClientArgs* a) {
  if (const char* s = std::getenv("DENSEGATE_SERVER")) a->server = s;
  if (const char* t = std::getenv("DENSEGATE_TOKEN")) a->token = t;
  a->ca = DefaultCaFile();
  cmd->add_option("--server", a->server, "scheduler address ($DENSEGATE_SERVER)")
      ->capture_default_str();
  cmd->add_option("--token", a->token, "bearer token ($DENSEGATE_TOKEN)");
  cmd->add_option("--ca", a->ca, "CA bundle (PEM) to reach a TLS scheduler ($DENSEGATE_CA)");
  cmd->add_flag("--json", a->json, "print JSON");
}

std::unique_ptr<v1::Densegate::Stub> Stub(const ClientArgs& a) {
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> creds = ChannelCredentials(a.ca);
  if (!creds.ok()) {
    // Surfaces as UNAVAILABLE on the first call, with this message first.
    std::cerr << "densegate: " << creds.status().message() << "\n";
    return v1::Densegate::NewStub(grpc::CreateChannel("unix:/nonexistent", grpc::InsecureChannelCredentials()));
  }
  return v1::Densegate::NewStub(grpc::CreateChannel(a.server, *creds));
}

void Attach(const ClientArgs& a, grpc::ClientContext* ctx, int deadline_s) {
  if (!a.token.empty()) ctx->AddMetadata("authorization", "Bearer " + a.token);
  if (deadline_s > 0) {
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(deadline_s));
  }
}

int Fail(const char* cmd, const grpc::Status& s) {
  std::cerr << "densegate " << cmd << ": " << s.error_message() << " ("
            << (s.error_code() == grpc::StatusCode::UNAVAILABLE ? "is the scheduler running?"
                                                                : "gRPC code " +
                                                                      std::to_string(s.error_code()))
            << ")\n";
  switch (s.error_code()) {
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::NOT_FOUND:
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
    case grpc::StatusCode::ALREADY_EXISTS:
      return kExitUsage;
    default:
      return kExitInfrastructure;
  }
}

std::string Json(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.add_whitespace = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

}  // namespace densegate::cli
