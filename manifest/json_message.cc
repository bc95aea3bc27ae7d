#include "manifest/json_message.h"

#include <regex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"

namespace densegate {
namespace {

namespace pb = ::google::protobuf;

// Protobuf's JSON parser errors, turned into field-path errors.

// "benchmarks[1].metrics" -> descriptor of the message at that path.
const pb::Descriptor* MessageAt(const pb::Descriptor* root, absl::string_view path) {
  const pb::Descriptor* d = root;
  if (path.empty()) return d;
  for (absl::string_view part : absl::StrSplit(path, '.')) {
    std::string name(part.substr(0, part.find('[')));
    const pb::FieldDescriptor* field = d->FindFieldByName(name);
    if (field == nullptr) field = d->FindFieldByCamelcaseName(name);
    if (field == nullptr || field->message_type() == nullptr) return nullptr;
    d = field->message_type();
  }
  return d;
}

std::string FieldNames(const pb::Descriptor* d) {
  std::vector<std::string> names;
  for (int i = 0; i < d->field_count(); ++i) names.push_back(d->field(i)->name());
  return absl::StrJoin(names, ", ");
}

std::string DescribeType(absl::string_view type) {
  constexpr absl::string_view kTypePrefix = "type.googleapis.com/";
  if (absl::ConsumePrefix(&type, kTypePrefix)) {
    const pb::EnumDescriptor* e =
        pb::DescriptorPool::generated_pool()->FindEnumTypeByName(
            std::string(type));
    if (e != nullptr) {
      std::vector<std::string> values;
      for (int i = 1; i < e->value_count(); ++i) values.push_back(e->value(i)->name());
      return absl::StrCat("one of ", absl::StrJoin(values, ", "));
    }
    return std::string(type);
  }
  if (type == "TYPE_DOUBLE" || type == "TYPE_FLOAT") return "a number";
  if (absl::StrContains(type, "INT")) return "an integer";
  if (type == "TYPE_STRING") return "a string";
  if (type == "TYPE_BOOL") return "true or false";
  return std::string(type);
}

FieldError TranslateParseError(const pb::Descriptor* root, absl::string_view message) {
  static const std::regex* unknown_field =
      new std::regex(R"(^(?:\((.*)\) ?)?(\S+): Cannot find field\.?$)");
  static const std::regex* bad_value =
      new std::regex(R"(^\((.*)\): invalid value (.*) for type (\S+)$)");
  std::string text(message);
  std::smatch match;
  if (std::regex_match(text, match, *unknown_field)) {
    std::string parent = match[1];
    std::string field = parent.empty() ? std::string(match[2])
                                       : absl::StrCat(parent, ".", match[2].str());
    std::string hint;
    if (const pb::Descriptor* d = MessageAt(root, parent)) {
      hint = absl::StrCat("; fields of ", d->name(), ": ", FieldNames(d));
    }
    return {field, absl::StrCat("unknown field", hint)};
  }
  if (std::regex_match(text, match, *bad_value)) {
    return {match[1], absl::StrFormat("invalid value %s; expected %s",
                                      match[2].str(), DescribeType(match[3].str()))};
  }
  return {"", text};
}

}  // namespace

std::string FieldError::ToString() const {
  return field.empty() ? message : absl::StrCat(field, ": ", message);
}

std::optional<FieldError> ParseJsonMessage(absl::string_view json, pb::Message* out) {
  // nlohmann first: it reports syntax errors with line and column, which
  // protobuf's parser does not.
  try {
    nlohmann::json syntax_only = nlohmann::json::parse(json.begin(), json.end());
    (void)syntax_only;
  } catch (const nlohmann::json::parse_error& e) {
    std::string what = e.what();
    if (size_t pos = what.find("] "); pos != std::string::npos) {
      what = what.substr(pos + 2);
    }
    return FieldError{"", absl::StrCat("invalid JSON: ", what)};
  }
  pb::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  auto status = pb::util::JsonStringToMessage(pb::StringPiece(json.data(), json.size()), out,
                                              options);
  if (!status.ok()) return TranslateParseError(out->GetDescriptor(), status.message().as_string());
  return std::nullopt;
}

}  // namespace densegate
