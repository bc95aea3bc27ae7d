#include "results/store/internal/sql.h"

#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace densegate::results::internal {
namespace {

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

absl::StatusOr<SqlResult> SqlDriver::ExecPipelined(
    absl::string_view op, absl::string_view sql,
    absl::Span<const SqlValue> params) {
  SqlResult out;
  absl::Status status =
      Transact(op, TxMode::kSingleStatement, [&](SqlTx& tx) -> absl::Status {
        absl::StatusOr<SqlResult> r = tx.Exec(sql, params);
        if (!r.ok()) return r.status();
        out = *std::move(r);
        return absl::OkStatus();
      });
  if (!status.ok()) return status;
  return out;
}

bool SqlRow::IsNull(int i) const {
  return values_.at(i).kind() == SqlValue::Kind::kNull;
}

int64_t SqlRow::Int(int i) const {
  const SqlValue& v = values_.at(i);
  switch (v.kind()) {
    case SqlValue::Kind::kNull:
      return 0;
    case SqlValue::Kind::kInt:
      return v.int_value();
    case SqlValue::Kind::kDouble:
      return static_cast<int64_t>(v.double_value());
    case SqlValue::Kind::kText:
    case SqlValue::Kind::kBytes: {
      int64_t out = 0;
      if (!absl::SimpleAtoi(v.text(), &out)) {
        double d = 0;
        if (absl::SimpleAtod(v.text(), &d)) return static_cast<int64_t>(d);
      }
      return out;
    }
  }
  return 0;
}

double SqlRow::Double(int i) const {
  const SqlValue& v = values_.at(i);
  switch (v.kind()) {
    case SqlValue::Kind::kNull:
      return 0;
    case SqlValue::Kind::kInt:
      return static_cast<double>(v.int_value());
    case SqlValue::Kind::kDouble:
      return v.double_value();
    case SqlValue::Kind::kText:
    case SqlValue::Kind::kBytes: {
      const std::string& t = v.text();
      if (t == "NaN") return std::numeric_limits<double>::quiet_NaN();
      if (t == "Infinity") return std::numeric_limits<double>::infinity();
      if (t == "-Infinity") return -std::numeric_limits<double>::infinity();
      double out = 0;
      (void)absl::SimpleAtod(t, &out);
      return out;
    }
  }
  return 0;
}

std::string SqlRow::Text(int i) const {
  const SqlValue& v = values_.at(i);
  switch (v.kind()) {
    case SqlValue::Kind::kNull:
      return "";
    case SqlValue::Kind::kInt:
      return absl::StrCat(v.int_value());
    case SqlValue::Kind::kDouble:
      return DoubleToSqlText(v.double_value());
    case SqlValue::Kind::kText:
    case SqlValue::Kind::kBytes:
      return v.text();
  }
  return "";
}

std::string SqlRow::Bytes(int i) const {
  const SqlValue& v = values_.at(i);
  if (v.kind() != SqlValue::Kind::kText) return Text(i);
  const std::string& t = v.text();
  if (t.size() < 2 || t[0] != '\\' || t[1] != 'x' || t.size() % 2 != 0) {
    return t;
  }
  std::string out;
  out.reserve((t.size() - 2) / 2);
  for (size_t k = 2; k + 1 < t.size(); k += 2) {
    int hi = HexDigit(t[k]);
    int lo = HexDigit(t[k + 1]);
    if (hi < 0 || lo < 0) return t;
    out.push_back(static_cast<char>(hi * 16 + lo));
  }
  return out;
}

std::string HexEncode(absl::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

std::string DoubleToSqlText(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return absl::StrFormat("%.17g", v);
}

}  // namespace densegate::results::internal
