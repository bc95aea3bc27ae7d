// Early-return helpers for absl::Status / absl::StatusOr (the runtime's own
// copy: Debian's Abseil ships no status macros). Internal to runtime/.
#ifndef DENSEGATE_RUNTIME_STATUS_MACROS_H_
#define DENSEGATE_RUNTIME_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"

#define DG_RETURN_IF_ERROR(expr)                              \
  do {                                                        \
    if (absl::Status dg_status_ = (expr); !dg_status_.ok()) { \
      return dg_status_;                                      \
    }                                                         \
  } while (0)

#define DG_CONCAT_INNER_(a, b) a##b
#define DG_CONCAT_(a, b) DG_CONCAT_INNER_(a, b)

// DG_ASSIGN_OR_RETURN(T x, StatusOrExpr): declares x or returns the error.
#define DG_ASSIGN_OR_RETURN(lhs, expr) \
  DG_ASSIGN_OR_RETURN_IMPL_(DG_CONCAT_(dg_statusor_, __LINE__), lhs, expr)
#define DG_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(*tmp)

#endif  // DENSEGATE_RUNTIME_STATUS_MACROS_H_
