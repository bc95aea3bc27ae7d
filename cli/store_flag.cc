#include "cli/store_flag.h"

#include <cstdlib>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace densegate::cli {
namespace {

std::string DefaultDbUrl() {
  if (const char* db = std::getenv("DENSEGATE_DB"); db != nullptr && *db != '\0') return db;
  std::string data;
  if (const char* xdg = std::getenv("XDG_DATA_HOME"); xdg != nullptr && *xdg != '\0') {
    data = xdg;
  } else {
    const char* home = std::getenv("HOME");
    data = absl::StrCat(home != nullptr ? home : ".", "/.local/share");
  }
  return absl::StrCat("sqlite:", data, "/densegate/densegate.db");
}

}  // namespace

void AddDbFlag(CLI::App* cmd, std::string* url) {
  *url = DefaultDbUrl();
  cmd->add_option("--db", *url,
                  "Store URL: sqlite:PATH or postgresql://... (env DENSEGATE_DB)")
      ->capture_default_str();
}

absl::StatusOr<std::unique_ptr<results::Store>> OpenStoreFromFlag(
    const std::string& url, const results::StoreOptions& options) {
  // The default SQLite file lives in a directory that may not exist yet.
  if (absl::StartsWith(url, "sqlite:") && !absl::StartsWith(url, "sqlite::memory:")) {
    std::string path = url.substr(url.rfind(':') + 1);
    if (size_t slash = path.rfind('/'); slash != std::string::npos && slash > 0) {
      std::error_code ignored;  // Opening the store reports what went wrong.
      std::filesystem::create_directories(path.substr(0, slash), ignored);
    }
  }
  return results::OpenStore(url, options);
}

}  // namespace densegate::cli
