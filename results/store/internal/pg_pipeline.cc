#include "results/store/internal/pg_pipeline.h"

#include <poll.h>
#include <postgresql/libpq-fe.h>

#include <cstdlib>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "results/store/internal/pg_common.h"

namespace densegate::results::internal {

PgPipeline::PgPipeline(std::string url, const DriverHooks* hooks)
    : url_(std::move(url)), hooks_(hooks) {}

PgPipeline::~PgPipeline() {
  if (conn_ != nullptr) PQfinish(conn_);
}

absl::Status PgPipeline::ConnectLocked(absl::string_view op) {
  PGconn* conn = PQconnectdb(url_.c_str());
  if (conn == nullptr) {
    return PgConnectError(op, url_, "out of memory");
  }
  if (PQstatus(conn) != CONNECTION_OK) {
    absl::Status s = PgConnectError(op, url_, PQerrorMessage(conn));
    PQfinish(conn);
    return s;
  }
  PGresult* setup = PQexec(conn, kPgSessionSetup);
  const bool set = PQresultStatus(setup) == PGRES_COMMAND_OK;
  PQclear(setup);
  if (!set || PQenterPipelineMode(conn) != 1) {
    absl::Status s = PgLostConnection(op, PQerrorMessage(conn));
    PQfinish(conn);
    return s;
  }
  conn_ = conn;
  prepared_.clear();
  return absl::OkStatus();
}

absl::StatusOr<SqlResult> PgPipeline::Exec(absl::string_view op,
                                           absl::string_view sql,
                                           absl::Span<const SqlValue> params) {
  absl::StatusOr<std::vector<std::optional<std::string>>> texts =
      PgParamTexts(op, params);
  if (!texts.ok()) return texts.status();
  const std::vector<const char*> values = PgParamPointers(*texts);
  std::unique_lock<std::mutex> lock(mu_);
  if (conn_ == nullptr) {
    if (absl::Status s = ConnectLocked(op); !s.ok()) return s;
  }
  if (hooks_ != nullptr && hooks_->before_statement) {
    lock.unlock();
    hooks_->before_statement(op, 0);
    lock.lock();
    if (conn_ == nullptr) {
      if (absl::Status s = ConnectLocked(op); !s.ok()) return s;
    }
  }
  auto request = std::make_shared<Request>();
  request->op = std::string(op);
  const std::string key(sql);
  auto it = prepared_.find(key);
  bool sent = true;
  if (it == prepared_.end()) {
    it = prepared_.emplace(key, absl::StrCat("dgp", next_name_++)).first;
    request->prepared_here = key;
    sent =
        PQsendPrepare(conn_, it->second.c_str(), key.c_str(), 0, nullptr) == 1;
  }
  sent = sent &&
         PQsendQueryPrepared(conn_, it->second.c_str(),
                             static_cast<int>(values.size()), values.data(),
                             nullptr, nullptr, 0) == 1 &&
         PQpipelineSync(conn_) == 1;
  in_flight_.push_back(request);
  if (!sent) {
    // The connection is unusable; only a reader may close it while it reads.
    const std::string what = PQerrorMessage(conn_);
    done_cv_.wait(lock, [this] { return !reading_; });
    if (!request->done) LoseConnectionLocked(what);
  }
  while (!request->done) {
    if (reading_) {
      done_cv_.wait(lock);
      continue;
    }
    reading_ = true;
    ReadLocked(lock);
    reading_ = false;
    done_cv_.notify_all();
  }
  return *std::move(request->result);
}

void PgPipeline::ReadLocked(std::unique_lock<std::mutex>& lock) {
  const size_t before = in_flight_.size();
  while (conn_ != nullptr && in_flight_.size() == before) {
    if (PQconsumeInput(conn_) != 1) {
      LoseConnectionLocked(PQerrorMessage(conn_));
      return;
    }
    // Whatever has arrived. A NULL ends one statement's results; two in a
    // row mean libpq has nothing more without reading the socket.
    int nulls = 0;
    while (!in_flight_.empty() && !PQisBusy(conn_) && nulls < 2) {
      PGresult* result = PQgetResult(conn_);
      if (result == nullptr) {
        ++nulls;
        continue;
      }
      nulls = 0;
      TakeResultLocked(result);
    }
    if (in_flight_.size() != before || in_flight_.empty()) return;
    const int fd = PQsocket(conn_);
    // Other callers may send meanwhile; only this thread reads, and conn_
    // stays open while it does (a sender that finds it broken waits for the
    // reader before closing it).
    lock.unlock();
    pollfd p{fd, POLLIN, 0};
    (void)poll(&p, 1, -1);
    lock.lock();
  }
}

void PgPipeline::TakeResultLocked(PGresult* result) {
  Request& request = *in_flight_.front();
  switch (PQresultStatus(result)) {
    case PGRES_PIPELINE_SYNC:
      // The end of this request: its statement's result, or an error.
      if (!request.result.has_value()) request.result = SqlResult();
      request.done = true;
      in_flight_.pop_front();
      break;
    case PGRES_TUPLES_OK:
    case PGRES_COMMAND_OK:
      // The prepare's result (no columns) is followed by the statement's.
      if (!request.result.has_value() || request.result->ok()) {
        SqlResult out;
        const char* affected = PQcmdTuples(result);
        if (affected != nullptr && *affected != '\0') {
          out.affected = std::strtoll(affected, nullptr, 10);
        }
        const int rows = PQntuples(result), columns = PQnfields(result);
        out.rows.reserve(rows);
        for (int r = 0; r < rows; ++r) {
          std::vector<SqlValue> values;
          values.reserve(columns);
          for (int c = 0; c < columns; ++c) {
            if (PQgetisnull(result, r, c)) {
              values.emplace_back();
            } else {
              values.emplace_back(std::string(PQgetvalue(result, r, c),
                                              PQgetlength(result, r, c)));
            }
          }
          out.rows.emplace_back(std::move(values));
        }
        request.result = std::move(out);
      }
      break;
    case PGRES_PIPELINE_ABORTED:
      // The statement after a failed prepare: the prepare's error stands.
      break;
    default: {
      const char* state = PQresultErrorField(result, PG_DIAG_SQLSTATE);
      if (!request.result.has_value() || request.result->ok()) {
        request.result = PgServerError(request.op, state ? state : "",
                                       PQresultErrorMessage(result));
      }
      // A statement that failed to prepare is not there to reuse.
      if (!request.prepared_here.empty()) {
        prepared_.erase(request.prepared_here);
      }
      break;
    }
  }
  PQclear(result);
}

void PgPipeline::DropIdleConnection() {
  std::lock_guard<std::mutex> lock(mu_);
  if (conn_ == nullptr || !in_flight_.empty() || reading_) return;
  PQfinish(conn_);
  conn_ = nullptr;
  prepared_.clear();
}

void PgPipeline::LoseConnectionLocked(absl::string_view what) {
  const std::string message(what);
  for (const std::shared_ptr<Request>& request : in_flight_) {
    request->result = PgLostConnectionInDoubt(request->op, message);
    request->done = true;
  }
  in_flight_.clear();
  if (conn_ != nullptr) PQfinish(conn_);
  conn_ = nullptr;
  prepared_.clear();
}

}  // namespace densegate::results::internal
