// --set overrides by reflection over the config's descriptors (see overrides.h).
#include "config/overrides.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/descriptor.h"

namespace lmf::config {
namespace {

using google::protobuf::EnumDescriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// The configs' convention: value 0 named *_UNSPECIFIED means "not set" and cannot be set; a real value 0
// (run.parallel.schedule's ONE_F_ONE_B) can.
bool IsUnspecified(const google::protobuf::EnumValueDescriptor& value) {
  return value.number() == 0 && absl::EndsWith(value.name(), "UNSPECIFIED");
}

std::string EnumNames(const EnumDescriptor* type) {
  std::vector<std::string> names;
  for (int i = 0; i < type->value_count(); ++i) {
    if (!IsUnspecified(*type->value(i))) names.push_back(type->value(i)->name());
  }
  return absl::StrJoin(names, ", ");
}

// Sets `field` of `message` from `text` (appends, for a repeated field); on failure returns what the field
// expects.
absl::Status SetScalar(const FieldDescriptor* field, const std::string& text, const std::string& path,
                       Message* message) {
  const Reflection* reflection = message->GetReflection();
  auto expected = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(path, " expects ", what, ", got \"", text, "\""));
  };
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32: {
      int32_t v;
      if (!absl::SimpleAtoi(text, &v)) return expected("a 32-bit integer");
      field->is_repeated() ? reflection->AddInt32(message, field, v)
                           : reflection->SetInt32(message, field, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_INT64: {
      int64_t v;
      if (!absl::SimpleAtoi(text, &v)) return expected("an integer");
      field->is_repeated() ? reflection->AddInt64(message, field, v)
                           : reflection->SetInt64(message, field, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_UINT32: {
      uint32_t v;
      if (!absl::SimpleAtoi(text, &v)) return expected("a non-negative 32-bit integer");
      field->is_repeated() ? reflection->AddUInt32(message, field, v)
                           : reflection->SetUInt32(message, field, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_UINT64: {
      uint64_t v;
      if (!absl::SimpleAtoi(text, &v)) return expected("a non-negative integer");
      field->is_repeated() ? reflection->AddUInt64(message, field, v)
                           : reflection->SetUInt64(message, field, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_DOUBLE:
    case FieldDescriptor::CPPTYPE_FLOAT: {
      double v;
      if (!absl::SimpleAtod(text, &v) || !std::isfinite(v)) return expected("a finite number");
      if (field->cpp_type() == FieldDescriptor::CPPTYPE_DOUBLE) {
        field->is_repeated() ? reflection->AddDouble(message, field, v)
                             : reflection->SetDouble(message, field, v);
      } else {
        field->is_repeated() ? reflection->AddFloat(message, field, static_cast<float>(v))
                             : reflection->SetFloat(message, field, static_cast<float>(v));
      }
      break;
    }
    case FieldDescriptor::CPPTYPE_BOOL: {
      bool v;
      if (!absl::SimpleAtob(text, &v)) return expected("true or false");
      field->is_repeated() ? reflection->AddBool(message, field, v) : reflection->SetBool(message, field, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_STRING:
      reflection->SetString(message, field, text);  // repeated strings are refused by the caller
      break;
    case FieldDescriptor::CPPTYPE_ENUM: {
      const auto* value = field->enum_type()->FindValueByName(text);
      if (value == nullptr || IsUnspecified(*value)) {
        return expected(absl::StrCat("one of ", EnumNames(field->enum_type())));
      }
      field->is_repeated() ? reflection->AddEnum(message, field, value)
                           : reflection->SetEnum(message, field, value);
      break;
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return absl::InvalidArgumentError(
          absl::StrCat(path, " is a message; --set takes one of its fields (", path, ".<field>=value)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ApplyOverride(const std::string& assignment, Message* message) {
  auto fail = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("--set=", assignment, ": ", why));
  };
  const size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) return fail("expected --set=field.path=value");
  const std::string path = assignment.substr(0, eq);
  const std::string value = assignment.substr(eq + 1);
  const std::vector<std::string> names = absl::StrSplit(path, '.');

  Message* current = message;
  std::string walked;
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string parent = walked.empty() ? current->GetDescriptor()->name() : walked;
    const FieldDescriptor* field = current->GetDescriptor()->FindFieldByName(names[i]);
    walked = walked.empty() ? names[i] : absl::StrCat(walked, ".", names[i]);
    if (field == nullptr) return fail(absl::StrCat(parent, " has no field \"", names[i], "\""));
    const bool last = i + 1 == names.size();
    if (field->is_repeated() && !last && field->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) {
      return fail(
          absl::StrCat(walked, " is a list, not a message, so it has no field \"", names[i + 1], "\""));
    }
    if (field->is_repeated() && (!last || field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE ||
                                 field->cpp_type() == FieldDescriptor::CPPTYPE_STRING)) {
      return fail(absl::StrCat(walked,
                               " is a repeated field of messages or strings; --set takes single fields and "
                               "lists of numbers, booleans or enums (edit the config file for this one)"));
    }
    if (last && field->is_repeated()) {
      // A list replaces the field's values: "run.checkpoint_steps=100,200"; an empty one clears it.
      current->GetReflection()->ClearField(current, field);
      if (value.empty()) return absl::OkStatus();
      for (const absl::string_view item : absl::StrSplit(value, ',')) {
        absl::Status status = SetScalar(field, std::string(item), walked, current);
        if (!status.ok()) return fail(std::string(status.message()));
      }
      return absl::OkStatus();
    }
    if (last) {
      absl::Status status = SetScalar(field, value, walked, current);
      if (!status.ok()) return fail(std::string(status.message()));
      return absl::OkStatus();
    }
    if (field->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) {
      return fail(absl::StrCat(walked, " is not a message, so it has no field \"", names[i + 1], "\""));
    }
    current = current->GetReflection()->MutableMessage(current, field);
  }
  return fail("expected --set=field.path=value");
}

}  // namespace lmf::config
