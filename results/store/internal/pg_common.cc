#include "results/store/internal/pg_common.h"

#include "absl/strings/ascii.h"
#include "absl/strings/strip.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace densegate::results::internal {

absl::StatusOr<std::vector<std::optional<std::string>>> PgParamTexts(
    absl::string_view op, absl::Span<const SqlValue> params) {
  std::vector<std::optional<std::string>> out(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const SqlValue& v = params[i];
    switch (v.kind()) {
      case SqlValue::Kind::kNull:
        break;
      case SqlValue::Kind::kInt:
        out[i] = absl::StrCat(v.int_value());
        break;
      case SqlValue::Kind::kDouble:
        out[i] = DoubleToSqlText(v.double_value());
        break;
      case SqlValue::Kind::kText:
        if (v.text().find('\0') != std::string::npos) {
          return absl::InvalidArgumentError(
              absl::StrCat(op,
                           ": a text value contains a NUL byte, which "
                           "PostgreSQL text cannot hold"));
        }
        out[i] = v.text();
        break;
      case SqlValue::Kind::kBytes:
        out[i] = absl::StrCat("\\x", HexEncode(v.text()));
        break;
    }
  }
  return out;
}

std::vector<const char*> PgParamPointers(
    const std::vector<std::optional<std::string>>& texts) {
  std::vector<const char*> out(texts.size(), nullptr);
  for (size_t i = 0; i < texts.size(); ++i) {
    if (texts[i].has_value()) out[i] = texts[i]->c_str();
  }
  return out;
}

std::string PgClean(absl::string_view what) {
  return std::string(absl::StripTrailingAsciiWhitespace(what));
}

bool IsPgConnectionState(absl::string_view sqlstate) {
  return absl::StartsWith(sqlstate, "08") || sqlstate == "57P01" ||
         sqlstate == "57P02" || sqlstate == "57P03";
}

absl::Status PgLostConnection(absl::string_view op, absl::string_view what) {
  return absl::UnavailableError(absl::StrCat(
      op, ": the connection to PostgreSQL was lost (", PgClean(what),
      "); the transaction was rolled back, nothing was written. Retry: the "
      "store reconnects on the next call"));
}

absl::Status PgLostConnectionInDoubt(absl::string_view op,
                                     absl::string_view what) {
  return absl::UnavailableError(absl::StrCat(
      op, ": the connection to PostgreSQL was lost (", PgClean(what),
      ") while its single statement ran; it may or may not have taken "
      "effect (retrying is safe: a repeated call reports what already "
      "happened). The store reconnects on the next call"));
}

absl::Status PgServerError(absl::string_view op, absl::string_view sqlstate,
                           absl::string_view what) {
  std::string msg =
      absl::StrCat(op, ": PostgreSQL error ", sqlstate, ": ", PgClean(what));
  if (IsPgConnectionState(sqlstate)) return PgLostConnection(op, what);
  if (sqlstate == "23505") return absl::AlreadyExistsError(msg);
  if (sqlstate == "23503" || sqlstate == "P0001") {
    return absl::FailedPreconditionError(msg);
  }
  if (absl::StartsWith(sqlstate, "23") || absl::StartsWith(sqlstate, "22")) {
    return absl::InvalidArgumentError(msg);
  }
  if (sqlstate == "40001" || sqlstate == "40P01") {
    return absl::AbortedError(absl::StrCat(msg, "; retry the call"));
  }
  if (absl::StartsWith(sqlstate, "53")) {
    return absl::UnavailableError(absl::StrCat(msg, "; retry later"));
  }
  return absl::InternalError(msg);
}

absl::Status PgConnectError(absl::string_view op, absl::string_view url,
                            absl::string_view what) {
  const std::string cleaned = PgClean(what);
  std::string msg = absl::StrCat(op, ": cannot connect to PostgreSQL at ",
                                 RedactUrl(url), ": ", cleaned);
  if (absl::StrContains(cleaned, "invalid URI") ||
      absl::StrContains(cleaned, "invalid connection option") ||
      absl::StrContains(cleaned, "missing \"=\"")) {
    return absl::InvalidArgumentError(msg);
  }
  return absl::UnavailableError(absl::StrCat(
      msg,
      ". Is the server running and reachable? The store retries on the next "
      "call"));
}

std::string RedactUrl(absl::string_view url) {
  std::string out(url);
  size_t scheme = out.find("://");
  if (scheme != std::string::npos) {
    size_t at = out.find('@', scheme + 3);
    size_t colon = out.find(':', scheme + 3);
    if (at != std::string::npos && colon != std::string::npos && colon < at) {
      out.replace(colon + 1, at - colon - 1, "***");
    }
  }
  size_t pw = out.find("password=");
  if (pw != std::string::npos) {
    size_t end = out.find_first_of(" &", pw);
    out.replace(pw + 9,
                end == std::string::npos ? std::string::npos : end - pw - 9,
                "***");
  }
  return out;
}

}  // namespace densegate::results::internal
