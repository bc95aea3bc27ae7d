// DG_RETURN_IF_ERROR / DG_ASSIGN_OR_RETURN: early returns for absl::Status
// and absl::StatusOr, the service's one copy (Debian's Abseil ships none).
// The workload (runtime/, kernels/) keeps its own under other prefixes.
#ifndef DENSEGATE_PLATFORM_STATUS_MACROS_H_
#define DENSEGATE_PLATFORM_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define DG_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::absl::Status dg_status_ = (expr);      \
    if (!dg_status_.ok()) return dg_status_; \
  } while (0)

#define DG_CONCAT_INNER_(a, b) a##b
#define DG_CONCAT_(a, b) DG_CONCAT_INNER_(a, b)

#define DG_ASSIGN_OR_RETURN(lhs, expr) \
  DG_ASSIGN_OR_RETURN_IMPL_(DG_CONCAT_(dg_statusor_, __LINE__), lhs, expr)

#define DG_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = *std::move(tmp)

#endif  // DENSEGATE_PLATFORM_STATUS_MACROS_H_
