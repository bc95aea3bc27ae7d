// Nodes: registration, calibration, state and heartbeats.
#include "results/store/internal/sql_store_impl.h"

namespace densegate::results::internal::sql_store_impl {

absl::StatusOr<v1::Node> SqlStore::RegisterNode(
    absl::string_view name, const v1::NodeDimensions& dims) {
  if (name.empty()) return Invalid("node name is empty");
  if (dims.fingerprint().empty()) {
    return Invalid(
        "dimensions.fingerprint is empty: samples are only comparable "
        "within one fingerprint");
  }
  if (dims.accelerator_count() < 0 || dims.accelerator_memory_bytes() < 0 ||
      dims.cpu_cores() < 0 || dims.memory_bytes() < 0) {
    return Invalid("dimensions have a negative count or size");
  }
  const int64_t now = NowUs();
  v1::Node out;
  DG_RETURN_IF_ERROR(
      Run("RegisterNode", TxMode::kWrite, [&](SqlTx& tx) -> absl::Status {
        const std::string new_id = NewId("node");
        DG_ASSIGN_OR_RETURN(
            SqlResult ins,
            tx.Exec(
                "INSERT INTO nodes (id, name, accelerator_kind, "
                "accelerator_count, accelerator_memory_bytes, fingerprint, "
                "dimensions, state, calibration_noise, last_heartbeat_us, "
                "registered_at_us, updated_at_us) VALUES ($1, $2, $3, $4, "
                "$5, "
                "$6, $7, $8, 0, $9, $9, $9) ON CONFLICT (name) DO NOTHING",
                {new_id, name, dims.accelerator_kind(),
                 dims.accelerator_count(), dims.accelerator_memory_bytes(),
                 dims.fingerprint(), Bytes{dims.SerializeAsString()},
                 static_cast<int>(v1::CALIBRATING), now}));
        std::string id = new_id;
        if (ins.affected == 0) {
          DG_ASSIGN_OR_RETURN(
              SqlResult r,
              tx.Exec(absl::StrCat("SELECT id FROM nodes WHERE name = $1",
                                   dialect_.RowLock()),
                      {name}));
          if (r.rows.empty()) {
            return absl::InternalError(
                absl::StrCat("node ", name, " vanished"));
          }
          id = r.rows[0].Text(0);
          // A new fingerprint (other hardware or toolchain) needs a new
          // calibration.
          DG_RETURN_IF_ERROR(
              tx.Exec(
                    "UPDATE nodes SET accelerator_kind = $2, "
                    "accelerator_count = $3, accelerator_memory_bytes = $4, "
                    "state = CASE WHEN state = $9 THEN state WHEN fingerprint "
                    "<> $5 THEN $8 ELSE state END, "
                    "calibration_noise = CASE WHEN fingerprint <> $5 THEN 0 "
                    "ELSE calibration_noise END, fingerprint = $5, "
                    "dimensions "
                    "= $6, last_heartbeat_us = $7, updated_at_us = $7 WHERE "
                    "id "
                    "= $1",
                    {id, dims.accelerator_kind(), dims.accelerator_count(),
                     dims.accelerator_memory_bytes(), dims.fingerprint(),
                     Bytes{dims.SerializeAsString()}, now,
                     static_cast<int>(v1::CALIBRATING),
                     static_cast<int>(v1::DISTRUSTED)})
                  .status());
        }
        DG_ASSIGN_OR_RETURN(out, LoadNode(tx, id));
        return absl::OkStatus();
      }));
  return out;
}

absl::StatusOr<v1::Node> SqlStore::GetNode(absl::string_view node_id) {
  if (node_id.empty()) return Invalid("node id is empty");
  v1::Node out;
  // One SELECT: on PostgreSQL in autocommit (one round trip instead of
  // three; every Synchronize reads its node).
  const TxMode mode =
      dialect_.OneStatementWrites() ? TxMode::kSingleStatement : TxMode::kRead;
  DG_RETURN_IF_ERROR(
      Run("GetNode", mode, [&](SqlTx& tx) -> absl::Status {
        DG_ASSIGN_OR_RETURN(out, LoadNode(tx, node_id));
        return absl::OkStatus();
      }));
  return out;
}

absl::StatusOr<std::vector<v1::Node>> SqlStore::ListNodes(
    absl::Span<const v1::NodeState> states) {
  std::string sql = absl::StrCat(kNodeSelect, " WHERE 1 = 1");
  std::vector<SqlValue> args;
  if (!states.empty()) {
    std::vector<std::string> ps;
    for (v1::NodeState s : states) {
      if (s == v1::NODE_STATE_UNSPECIFIED)
        return Invalid("states contains NODE_STATE_UNSPECIFIED");
      args.push_back(static_cast<int>(s));
      ps.push_back(absl::StrCat("$", args.size()));
    }
    absl::StrAppend(&sql, " AND n.state IN (", absl::StrJoin(ps, ", "), ")");
  }
  absl::StrAppend(&sql, " ORDER BY n.name");
  std::vector<v1::Node> out;
  DG_RETURN_IF_ERROR(
      Run("ListNodes", TxMode::kRead, [&](SqlTx& tx) -> absl::Status {
        DG_ASSIGN_OR_RETURN(SqlResult r, tx.Exec(sql, args));
        for (const SqlRow& row : r.rows) {
          DG_ASSIGN_OR_RETURN(v1::Node n, NodeFromRow(row));
          out.push_back(std::move(n));
        }
        return absl::OkStatus();
      }));
  return out;
}

absl::Status SqlStore::SetNodeState(absl::string_view node_id,
                          v1::NodeState state) {
  if (node_id.empty()) return Invalid("node id is empty");
  if (state == v1::NODE_STATE_UNSPECIFIED || !v1::NodeState_IsValid(state)) {
    return Invalid("node state is unspecified");
  }
  const int64_t now = NowUs();
  return Run("SetNodeState", TxMode::kWrite, [&](SqlTx& tx) -> absl::Status {
    DG_ASSIGN_OR_RETURN(
        SqlResult r,
        tx.Exec(
            "UPDATE nodes SET state = $2, updated_at_us = $3 WHERE id = $1 "
            "AND (state <> $4 OR $2 = $4)",
            {node_id, static_cast<int>(state), now,
             static_cast<int>(v1::DISTRUSTED)}));
    if (r.affected > 0) return absl::OkStatus();
    DG_ASSIGN_OR_RETURN(
        SqlResult known,
        tx.Exec("SELECT 1 FROM nodes WHERE id = $1", {node_id}));
    if (known.rows.empty()) {
      return absl::NotFoundError(
          absl::StrCat("node ", node_id, " not found"));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "node ", node_id, " is distrusted, which is final"));
  });
}

absl::Status SqlStore::RecordNodeHeartbeat(absl::string_view node_id) {
  if (node_id.empty()) return Invalid("node id is empty");
  const int64_t now = NowUs();
  return Run(
      "RecordNodeHeartbeat", TxMode::kWrite, [&](SqlTx& tx) -> absl::Status {
        DG_ASSIGN_OR_RETURN(
            SqlResult r,
            tx.Exec("UPDATE nodes SET last_heartbeat_us = $2 WHERE id = $1",
                    {node_id, now}));
        if (r.affected == 0) {
          return absl::NotFoundError(
              absl::StrCat("node ", node_id, " not found"));
        }
        return absl::OkStatus();
      });
}

}  // namespace densegate::results::internal::sql_store_impl
