// PgPipeline: one PostgreSQL connection in libpq's pipeline mode, shared by
// threads that each run one statement in autocommit mode. A caller's
// statement is sent at once, queued behind any the server is still running,
// and the caller waits for its own result. PostgreSQL runs them one after
// another, so the next starts the moment the one before ends, instead of
// after its result has reached its caller and the next caller has sent
// (a round trip and a wake-up on each side); and the statements never run
// side by side, so they never contend for the same rows. Each statement is
// followed by a sync: it is its own transaction, and one's error does not
// affect the next.
//
// The store sends its claim and finish-and-claim statements through one
// (docs/measurements/dispatch.md, "Finishes and claims in a pipeline").
//
// A lost connection fails every statement in flight with Unavailable
// (whether each took effect is unknown); the next call reconnects.
//
// Thread-safe. Connects on first use. At most a few statements are meant to
// be in flight (the store's claim turn bounds them): a caller sends while
// holding the connection, in blocking mode, which would stall if the server
// stopped reading while its results filled the socket.
#ifndef DENSEGATE_RESULTS_STORE_INTERNAL_PG_PIPELINE_H_
#define DENSEGATE_RESULTS_STORE_INTERNAL_PG_PIPELINE_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "results/store/internal/sql.h"

typedef struct pg_conn PGconn;
typedef struct pg_result PGresult;

namespace densegate::results::internal {

class PgPipeline {
 public:
  // `url`: a libpq connection URI or keyword/value string. `hooks` (may be
  // null) must outlive this: before_statement(op, 0) is called before each
  // statement is sent.
  PgPipeline(std::string url, const DriverHooks* hooks);
  ~PgPipeline();

  PgPipeline(const PgPipeline&) = delete;
  PgPipeline& operator=(const PgPipeline&) = delete;

  // Runs `sql` (prepared once per connection) with `params`, atomic by
  // itself; `op` names the call in errors.
  absl::StatusOr<SqlResult> Exec(absl::string_view op, absl::string_view sql,
                                 absl::Span<const SqlValue> params);

  // Closes the connection if no statement is in flight, so that the next
  // call opens a new one: for when another connection to the same server
  // was found dead (a restart kills them all).
  void DropIdleConnection();

 private:
  // A statement sent and not yet answered.
  struct Request {
    std::string op;
    // The text it was prepared from, if this request prepared it.
    std::string prepared_here;
    std::optional<absl::StatusOr<SqlResult>> result;
    bool done = false;
  };

  absl::Status ConnectLocked(absl::string_view op);
  // Reads results until at least one more request is done or the
  // connection is lost; lets go of `lock` while waiting for the socket.
  void ReadLocked(std::unique_lock<std::mutex>& lock);
  // Files one result under the oldest request in flight.
  void TakeResultLocked(PGresult* result);
  // Fails every request in flight and closes the connection.
  void LoseConnectionLocked(absl::string_view what);

  const std::string url_;
  const DriverHooks* const hooks_;

  // std::mutex so that ThreadSanitizer sees it. Guards everything below;
  // every libpq call on conn_ is made holding it.
  std::mutex mu_;
  std::condition_variable done_cv_;
  PGconn* conn_ = nullptr;
  // Statement text -> prepared statement name, on conn_.
  absl::flat_hash_map<std::string, std::string> prepared_;
  int64_t next_name_ = 0;
  std::deque<std::shared_ptr<Request>> in_flight_;
  // Whether a caller is reading results (only one reads at a time).
  bool reading_ = false;
};

}  // namespace densegate::results::internal

#endif  // DENSEGATE_RESULTS_STORE_INTERNAL_PG_PIPELINE_H_
