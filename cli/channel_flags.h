// Channel credentials from --ca (or $DENSEGATE_CA): TLS trusting that PEM
// bundle when given, plaintext otherwise. Shared by the client commands and
// `densegate node`.
#ifndef DENSEGATE_CLI_CHANNEL_FLAGS_H_
#define DENSEGATE_CLI_CHANNEL_FLAGS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"

namespace densegate::cli {

// Default for --ca: $DENSEGATE_CA or empty.
std::string DefaultCaFile();

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentials(
    const std::string& ca_file);

}  // namespace densegate::cli

#endif  // DENSEGATE_CLI_CHANNEL_FLAGS_H_
