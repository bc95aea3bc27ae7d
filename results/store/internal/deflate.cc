#include "results/store/internal/deflate.h"

#include <zlib.h>

#include "absl/strings/str_cat.h"

namespace densegate::results::internal {

absl::StatusOr<std::string> Deflate(absl::string_view data) {
  uLongf size = compressBound(static_cast<uLong>(data.size()));
  std::string out(size, '\0');
  const int rc = compress2(reinterpret_cast<Bytef*>(out.data()), &size,
                           reinterpret_cast<const Bytef*>(data.data()),
                           static_cast<uLong>(data.size()), 6);
  if (rc != Z_OK) return absl::InternalError(absl::StrCat("zlib compress2 failed: ", rc));
  out.resize(size);
  return out;
}

absl::StatusOr<std::string> Inflate(absl::string_view stream, int64_t max_bytes) {
  z_stream z{};
  if (inflateInit(&z) != Z_OK) return absl::InternalError("zlib inflateInit failed");
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(stream.data()));
  z.avail_in = static_cast<uInt>(stream.size());
  std::string out;
  char buffer[64 * 1024];
  int rc = Z_OK;
  while (rc == Z_OK) {
    z.next_out = reinterpret_cast<Bytef*>(buffer);
    z.avail_out = sizeof(buffer);
    rc = inflate(&z, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) break;
    out.append(buffer, sizeof(buffer) - z.avail_out);
    if (static_cast<int64_t>(out.size()) > max_bytes) {
      inflateEnd(&z);
      return absl::DataLossError(
          absl::StrCat("stored stream expands past ", max_bytes, " bytes"));
    }
    if (rc == Z_OK && z.avail_in == 0 && z.avail_out != 0) {
      rc = Z_DATA_ERROR;  // Truncated: input ended before the stream did.
    }
  }
  inflateEnd(&z);
  if (rc != Z_STREAM_END) {
    return absl::DataLossError(absl::StrCat("stored stream is not valid zlib data (", rc, ")"));
  }
  return out;
}

}  // namespace densegate::results::internal
