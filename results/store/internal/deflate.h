// zlib's deflate format for the store's large blobs (feedback bundles):
// text and JSON shrink several times, and the database stores bytes.
// Private to results/store.
//
// Thread-safety: free functions.
#ifndef DENSEGATE_RESULTS_STORE_INTERNAL_DEFLATE_H_
#define DENSEGATE_RESULTS_STORE_INTERNAL_DEFLATE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace densegate::results::internal {

// The zlib stream of `data` (level 6).
absl::StatusOr<std::string> Deflate(absl::string_view data);
// The data of a zlib stream; DataLoss when it is not one, or when it would
// expand past `max_bytes`.
absl::StatusOr<std::string> Inflate(absl::string_view stream, int64_t max_bytes);

}  // namespace densegate::results::internal

#endif  // DENSEGATE_RESULTS_STORE_INTERNAL_DEFLATE_H_
