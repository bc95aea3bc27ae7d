// What the PostgreSQL driver's two kinds of connection share: the libpqxx
// pool (pg_driver.h) and the pipelined connection (pg_pipeline.h) turn
// parameters into text the same way, map SQLSTATEs to the same
// absl::Status codes, and set up each new session alike.
//
// Internal to results/store. Stateless; thread-safe.
#ifndef DENSEGATE_RESULTS_STORE_INTERNAL_PG_COMMON_H_
#define DENSEGATE_RESULTS_STORE_INTERNAL_PG_COMMON_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "results/store/internal/sql.h"

namespace densegate::results::internal {

// Run on every new session. The store's statements are short and keyed on
// indexes: plan each once per connection. In the default mode PostgreSQL
// re-plans these CTE statements on every execution, and planning then
// costs more than running them. (Plans are rebuilt when ANALYZE changes
// table statistics.)
inline constexpr char kPgSessionSetup[] =
    "SET plan_cache_mode = force_generic_plan";

// Each parameter as PostgreSQL's text form; nullopt for NULL. A text value
// holding a NUL byte is InvalidArgument (`op` names the call).
absl::StatusOr<std::vector<std::optional<std::string>>> PgParamTexts(
    absl::string_view op, absl::Span<const SqlValue> params);

// What libpq takes for `texts`: a pointer to each, nullptr for NULL; valid
// while `texts` is unchanged.
std::vector<const char*> PgParamPointers(
    const std::vector<std::optional<std::string>>& texts);

// A server error as a status: connection states are Unavailable (see
// PgLostConnection), unique violations AlreadyExists, foreign keys and the
// immutability trigger FailedPrecondition, other integrity and data errors
// InvalidArgument, serialization failures and deadlocks Aborted, resource
// errors Unavailable, anything else Internal.
absl::Status PgServerError(absl::string_view op, absl::string_view sqlstate,
                           absl::string_view what);

// SQLSTATE classes that mean the session is gone.
bool IsPgConnectionState(absl::string_view sqlstate);

// The connection went while a transaction ran: it was rolled back.
absl::Status PgLostConnection(absl::string_view op, absl::string_view what);

// The connection went while a statement ran in autocommit mode: the server
// may have committed it.
absl::Status PgLostConnectionInDoubt(absl::string_view op,
                                     absl::string_view what);

// Could not connect: InvalidArgument for a malformed URL, else Unavailable.
absl::Status PgConnectError(absl::string_view op, absl::string_view url,
                            absl::string_view what);

// The URL with any password replaced by "***", for messages.
std::string RedactUrl(absl::string_view url);

// `what` without trailing whitespace (libpq's messages end in a newline).
std::string PgClean(absl::string_view what);

}  // namespace densegate::results::internal

#endif  // DENSEGATE_RESULTS_STORE_INTERNAL_PG_COMMON_H_
