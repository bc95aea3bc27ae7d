#include "results/store/store.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "results/store/postgres_store.h"
#include "results/store/sqlite_store.h"

namespace densegate::results {

absl::StatusOr<std::unique_ptr<Store>> OpenStore(absl::string_view url,
                                                 const StoreOptions& options) {
  if (url.empty()) {
    return absl::InvalidArgumentError(
        "store URL is empty: give a SQLite file path, sqlite:PATH or "
        "postgresql://...");
  }
  if (absl::StartsWith(url, "postgresql://") ||
      absl::StartsWith(url, "postgres://")) {
    return OpenPostgresStore(url, options);
  }
  absl::string_view path = url;
  if (absl::ConsumePrefix(&path, "sqlite://") ||
      absl::ConsumePrefix(&path, "sqlite:")) {
    if (path == ":memory:") return OpenSqliteStore(":memory:", options);
    if (path.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("store URL '", url, "' names no SQLite file"));
    }
    return OpenSqliteStore(path, options);
  }
  if (absl::StrContains(url, "://")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "store URL '", url,
        "' has an unsupported scheme: use postgresql://..., sqlite:PATH or a "
        "file path"));
  }
  return OpenSqliteStore(url, options);
}

}  // namespace densegate::results
