// Early-return helpers for absl::Status / absl::StatusOr, the runtime's own
// (RT_: the workload builds without densegate's packages). Internal to
// runtime/.
#ifndef DENSEGATE_RUNTIME_STATUS_MACROS_H_
#define DENSEGATE_RUNTIME_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"

#define RT_RETURN_IF_ERROR(expr)                              \
  do {                                                        \
    if (absl::Status rt_status_ = (expr); !rt_status_.ok()) { \
      return rt_status_;                                      \
    }                                                         \
  } while (0)

#define RT_CONCAT_INNER_(a, b) a##b
#define RT_CONCAT_(a, b) RT_CONCAT_INNER_(a, b)

// RT_ASSIGN_OR_RETURN(T x, StatusOrExpr): declares x or returns the error.
#define RT_ASSIGN_OR_RETURN(lhs, expr) \
  RT_ASSIGN_OR_RETURN_IMPL_(RT_CONCAT_(rt_statusor_, __LINE__), lhs, expr)
#define RT_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(*tmp)

#endif  // DENSEGATE_RUNTIME_STATUS_MACROS_H_
