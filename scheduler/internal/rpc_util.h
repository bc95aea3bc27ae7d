// Small helpers shared by the scheduler's source files (scheduler.cc and
// the services, calibration, metrics and progress files beside it). Not
// part of the scheduler's interface.
#ifndef DENSEGATE_SCHEDULER_INTERNAL_RPC_UTIL_H_
#define DENSEGATE_SCHEDULER_INTERNAL_RPC_UTIL_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "google/protobuf/timestamp.pb.h"
#include "google/protobuf/util/time_util.h"
#include "grpcpp/grpcpp.h"
#include "proto/densegate.pb.h"
#include "scheduler/scheduler.h"

namespace densegate::scheduler::internal {

inline grpc::Status Invalid(const std::string& message) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, message);
}

inline bool Terminal(v1::EvaluationState s) {
  return s == v1::FINISHED || s == v1::CANCELLED || s == v1::DEAD;
}

inline google::protobuf::Timestamp ToTimestamp(absl::Time t) {
  return google::protobuf::util::TimeUtil::NanosecondsToTimestamp(absl::ToUnixNanos(t));
}

inline google::protobuf::Timestamp Now() { return ToTimestamp(absl::Now()); }

// A short stable name for a text (candidate and job ids).
inline std::string Hex(const std::string& text) {
  return absl::StrFormat("%016x", std::hash<std::string>{}(text));
}

// Why a DISTRUSTED node is refused, for its operator.
inline absl::Status Distrusted(const v1::Node& node) {
  return absl::FailedPreconditionError(absl::StrFormat(
      "node %s is distrusted: a verdict it sent contradicted its own samples (the audit "
      "log's verdict.contradicted entries say how), and it gets no more work. Once the "
      "machine is fixed, revoke this node's token and register it under a new name",
      node.name()));
}

// The reply to an RPC whose work returned `result`: its value, or its
// status as gRPC's.
template <typename T>
grpc::Status Reply(absl::StatusOr<T> result, T* response) {
  if (!result.ok()) return ToGrpc(result.status());
  *response = *std::move(result);
  return grpc::Status::OK;
}

}  // namespace densegate::scheduler::internal

#endif  // DENSEGATE_SCHEDULER_INTERNAL_RPC_UTIL_H_
