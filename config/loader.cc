// Config loading (see loader.h): parse with a collector that keeps the first error's position, then
// overrides, validation and default resolution by reflection.
#include "config/loader.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "config/overrides.h"
#include "config/validation.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/message_differencer.h"

namespace lmf::config {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

class FirstErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  explicit FirstErrorCollector(const std::string& source) : source_(source) {}
  void AddError(int line, google::protobuf::io::ColumnNumber column, const std::string& message) override {
    if (error_.empty()) error_ = absl::StrCat(source_, ":", line + 1, ":", column + 1, ": ", message);
  }
  void AddWarning(int, google::protobuf::io::ColumnNumber, const std::string&) override {}
  const std::string& error() const { return error_; }

 private:
  std::string source_;
  std::string error_;
};

void SetToDefault(const FieldDescriptor* field, Message* message) {
  const Reflection* r = message->GetReflection();
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32: r->SetInt32(message, field, field->default_value_int32()); break;
    case FieldDescriptor::CPPTYPE_INT64: r->SetInt64(message, field, field->default_value_int64()); break;
    case FieldDescriptor::CPPTYPE_UINT32: r->SetUInt32(message, field, field->default_value_uint32()); break;
    case FieldDescriptor::CPPTYPE_UINT64: r->SetUInt64(message, field, field->default_value_uint64()); break;
    case FieldDescriptor::CPPTYPE_DOUBLE: r->SetDouble(message, field, field->default_value_double()); break;
    case FieldDescriptor::CPPTYPE_FLOAT: r->SetFloat(message, field, field->default_value_float()); break;
    case FieldDescriptor::CPPTYPE_BOOL: r->SetBool(message, field, field->default_value_bool()); break;
    case FieldDescriptor::CPPTYPE_STRING: r->SetString(message, field, field->default_value_string()); break;
    case FieldDescriptor::CPPTYPE_ENUM: r->SetEnum(message, field, field->default_value_enum()); break;
    case FieldDescriptor::CPPTYPE_MESSAGE: break;
  }
}

// Sets every unset field that has an explicit default; creates unset singular sub-messages outside oneofs
// and recurses into every present sub-message.
void ResolveMessageDefaults(Message* message) {
  const auto* descriptor = message->GetDescriptor();
  const Reflection* r = message->GetReflection();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const FieldDescriptor* field = descriptor->field(i);
    if (field->is_repeated()) continue;
    const bool in_oneof = field->containing_oneof() != nullptr;
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (r->HasField(*message, field) || !in_oneof) ResolveMessageDefaults(r->MutableMessage(message, field));
    } else if (!in_oneof && !r->HasField(*message, field) && field->has_default_value()) {
      SetToDefault(field, message);
    }
  }
}

std::string JoinPath(const std::string& base, const std::string& path) {
  if (path.empty() || path[0] == '/' || base.empty()) return path;
  return absl::StrCat(base, "/", path);
}

}  // namespace

absl::Status ParseTextProto(std::string_view text, const std::string& source, google::protobuf::Message* message) {
  FirstErrorCollector collector(source);
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&collector);
  if (!parser.ParseFromString(std::string(text), message)) {
    return absl::InvalidArgumentError(collector.error().empty() ? absl::StrCat(source, ": cannot parse")
                                                                : collector.error());
  }
  return absl::OkStatus();
}

absl::StatusOr<Experiment> ParseExperimentText(std::string_view text, const std::string& source) {
  Experiment experiment;
  if (absl::Status s = ParseTextProto(text, source, &experiment); !s.ok()) return s;
  return experiment;
}

absl::StatusOr<Experiment> ParseStoredExperiment(std::string_view text, const std::string& source) {
  absl::StatusOr<Experiment> experiment = ParseExperimentText(text, source);
  if (experiment.ok()) ResolveDefaults(&*experiment);
  return experiment;
}

absl::StatusOr<Experiment> LoadExperimentText(std::string_view text, const std::string& source,
                                                      const std::vector<std::string>& overrides) {
  absl::StatusOr<Experiment> experiment = ParseExperimentText(text, source);
  if (!experiment.ok()) return experiment.status();
  for (const std::string& assignment : overrides) {
    absl::Status status = ApplyOverride(assignment, &*experiment);
    if (!status.ok()) return status;
  }
  absl::Status valid = ValidateExperiment(*experiment, source);
  if (!valid.ok()) return valid;
  ResolveDefaults(&*experiment);
  return experiment;
}

absl::StatusOr<Experiment> LoadExperiment(const std::string& path,
                                                  const std::vector<std::string>& overrides) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  return LoadExperimentText(*text, path, overrides);
}

void ResolveDefaults(Experiment* experiment) {
  ResolveMessageDefaults(experiment);
  ModelConfig* model = experiment->mutable_model();
  if (!model->has_n_kv_heads()) model->set_n_kv_heads(model->n_heads());
  if (model->attention().variant_case() == AttentionConfig::VARIANT_NOT_SET) {
    model->mutable_attention()->mutable_causal();
  }
  if (experiment->optimizer().algorithm_case() == OptimizerConfig::ALGORITHM_NOT_SET) {
    ResolveMessageDefaults(experiment->mutable_optimizer()->mutable_adamw());
  }
}

std::string ConfigDifference(const google::protobuf::Message& before,
                             const google::protobuf::Message& after) {
  std::string report;
  google::protobuf::util::MessageDifferencer differencer;
  differencer.ReportDifferencesToString(&report);
  if (differencer.Compare(before, after)) return "";
  const size_t end = report.find('\n');
  return report.substr(0, end);
}

std::string ExperimentToText(const Experiment& experiment) {
  std::string text;
  google::protobuf::TextFormat::PrintToString(experiment, &text);
  return text;
}

absl::Status WriteExperiment(const Experiment& experiment, const std::string& path) {
  return WriteFileAtomically(path, ExperimentToText(experiment));
}

void MakePathsAbsolute(const std::string& base_dir, Experiment* experiment) {
  DataConfig* data = experiment->mutable_data();
  if (data->has_train_tokens()) data->set_train_tokens(JoinPath(base_dir, data->train_tokens()));
  for (TokenSource& source : *data->mutable_train_mixture()) {
    if (source.has_path()) source.set_path(JoinPath(base_dir, source.path()));
  }
  if (data->has_val_tokens()) data->set_val_tokens(JoinPath(base_dir, data->val_tokens()));
  if (data->has_tokenizer()) data->set_tokenizer(JoinPath(base_dir, data->tokenizer()));
  RunConfig* run = experiment->mutable_run();
  if (run->has_output_dir()) run->set_output_dir(JoinPath(base_dir, run->output_dir()));
  if (run->has_init_from()) run->set_init_from(JoinPath(base_dir, run->init_from()));
}

}  // namespace lmf::config
