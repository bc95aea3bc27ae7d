// Reading a protobuf message from its JSON form with errors a person can
// act on: the field path of the problem ("benchmarks[1].metrics"), what
// was wrong, and for an unknown field the fields that message has. The
// manifest (densegate.json) and the agent's campaign file are read with it.
//
// Thread-safety: a pure function.
#ifndef DENSEGATE_MANIFEST_JSON_MESSAGE_H_
#define DENSEGATE_MANIFEST_JSON_MESSAGE_H_

#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"

namespace densegate {

// One problem in a message. `field` is a path into the message using proto
// field names ("precision[0].lengths[2]"), or empty for the whole file.
struct FieldError {
  std::string field;
  std::string message;

  std::string ToString() const;
};

// Parses `json` into `out`: syntax errors with line and column, unknown
// fields refused. nullopt when it parsed.
std::optional<FieldError> ParseJsonMessage(absl::string_view json,
                                           google::protobuf::Message* out);

}  // namespace densegate

#endif  // DENSEGATE_MANIFEST_JSON_MESSAGE_H_
