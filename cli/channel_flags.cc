#include "cli/channel_flags.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace densegate::cli {

std::string DefaultCaFile() {
  const char* ca = std::getenv("DENSEGATE_CA");
  return ca != nullptr ? ca : "";
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentials(
    const std::string& ca_file) {
  if (ca_file.empty()) return grpc::InsecureChannelCredentials();
  std::ifstream in(ca_file);
  if (!in) return absl::NotFoundError("--ca: cannot read " + ca_file);
  std::stringstream pem;
  pem << in.rdbuf();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = pem.str();
  return grpc::SslCredentials(ssl);
}

}  // namespace densegate::cli
