// What every client command of the scheduler API shares: --server, --token,
// --ca and --json (with $DENSEGATE_SERVER / $DENSEGATE_TOKEN /
// $DENSEGATE_CA), the stub and call metadata built from them, and how a
// failed call is reported and mapped to an exit code.
//
// Thread-safety: used from main's thread only.
#ifndef DENSEGATE_CLI_CLIENT_FLAGS_H_
#define DENSEGATE_CLI_CLIENT_FLAGS_H_

#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "google/protobuf/message.h"
#include "grpcpp/grpcpp.h"
#include "proto/densegate.grpc.pb.h"

namespace densegate::cli {

struct ClientArgs {
  std::string server = "127.0.0.1:7433";
  std::string token;
  std::string ca;
  bool json = false;
};

void AddClientFlags(CLI::App* cmd, ClientArgs* a);

std::unique_ptr<v1::Densegate::Stub> Stub(const ClientArgs& a);

// The token, and a deadline `deadline_s` from now (0: none).
void Attach(const ClientArgs& a, grpc::ClientContext* ctx, int deadline_s = 30);

// Prints "densegate CMD: why" and returns the exit code for `s`: usage (2)
// for what the caller got wrong, infrastructure (4) otherwise.
int Fail(const char* cmd, const grpc::Status& s);

// The message as indented JSON.
std::string Json(const google::protobuf::Message& m);

}  // namespace densegate::cli

#endif  // DENSEGATE_CLI_CLIENT_FLAGS_H_
