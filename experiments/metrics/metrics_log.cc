// metrics.jsonl and console formatting (see metrics_log.h).
#include "experiments/metrics/metrics_log.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/file.h"
#include "base/json.h"

namespace lmf::experiments {
namespace {

std::string Count(double value) {
  if (value >= 1e9) return absl::StrFormat("%.2fG", value / 1e9);
  if (value >= 1e6) return absl::StrFormat("%.2fM", value / 1e6);
  if (value >= 1e3) return absl::StrFormat("%.1fk", value / 1e3);
  return absl::StrFormat("%.0f", value);
}

std::string Numbers(const StepMetrics& m, int64_t total_steps) {
  std::string eta;
  if (m.step > 0 && total_steps > m.step && m.wall_seconds > 0) {
    eta = absl::StrCat(", eta ", FormatDuration(m.wall_seconds / m.step * (total_steps - m.step)));
  }
  return absl::StrFormat("loss %.4f | lr %.2e | gnorm %.3f | %s tok/s | MFU %.1f%% | %s%s", m.loss, m.lr,
                         m.grad_norm, Count(m.tokens_per_second), 100 * m.mfu, FormatDuration(m.wall_seconds),
                         eta);
}

// A validation loss as JSON: a number, or, where it is not finite (JSON has no NaN or infinities), the
// string "nan", "inf" or "-inf", so that a diverged evaluation stays apart from null (not evaluated).
std::string ValLossJson(double value) {
  if (std::isnan(value)) return "\"nan\"";
  if (std::isinf(value)) return value > 0 ? "\"inf\"" : "\"-inf\"";
  return JsonNumber(value);
}

// ,"key":value for a value that is set, else nothing.
std::string Optional(const char* key, const std::optional<double>& value) {
  return value.has_value() ? absl::StrCat(",\"", key, "\":", JsonNumber(*value)) : "";
}

// ,"expert_loads":{"<layer>":[...],...} when there are any, else nothing.
std::string ExpertLoadsJson(const std::vector<std::pair<std::string, std::vector<double>>>& loads) {
  if (loads.empty()) return "";
  std::string out = ",\"expert_loads\":{";
  for (size_t i = 0; i < loads.size(); ++i) {
    absl::StrAppend(&out, i > 0 ? "," : "", JsonQuote(loads[i].first), ":[");
    for (size_t e = 0; e < loads[i].second.size(); ++e) absl::StrAppend(&out, e > 0 ? "," : "", JsonNumber(loads[i].second[e]));
    out += "]";
  }
  return out + "}";
}

}  // namespace

std::string MetricsJsonLine(const StepMetrics& m) {
  return absl::StrCat("{\"step\":", m.step, ",\"tokens\":", m.tokens, ",\"loss\":", JsonNumber(m.loss),
                      ",\"val_loss\":", m.val_loss.has_value() ? ValLossJson(*m.val_loss) : "null",
                      ",\"lr\":", JsonNumber(m.lr), ",\"grad_norm\":", JsonNumber(m.grad_norm),
                      ",\"tokens_per_second\":", JsonNumber(m.tokens_per_second),
                      ",\"mfu\":", JsonNumber(m.mfu), ",\"wall_seconds\":", JsonNumber(m.wall_seconds),
                      Optional("z_loss", m.z_loss), Optional("aux_loss", m.aux_loss),
                      Optional("expert_load_max_over_mean", m.expert_load_max_over_mean),
                      Optional("dropped_share", m.dropped_share), Optional("noise_trace", m.noise_trace),
                      Optional("noise_grad_sq", m.noise_grad_sq), ExpertLoadsJson(m.expert_loads), "}\n");
}

absl::StatusOr<StepMetrics> ParseMetricsJsonLine(const std::string& line) {
  absl::StatusOr<JsonValue> json = ParseJson(line);
  if (!json.ok()) return json.status();
  StepMetrics m;
  auto number = [&](const char* key, double* out) {
    const JsonValue* v = json->Find(key);
    return v != nullptr && v->AsDouble(out);
  };
  auto integer = [&](const char* key, int64_t* out) {
    const JsonValue* v = json->Find(key);
    return v != nullptr && v->AsInt64(out);
  };
  double val = 0;
  // val_loss: null (or missing) when not evaluated, a number, or "nan" / "inf" / "-inf" (ValLossJson).
  const JsonValue* val_loss = json->Find("val_loss");
  const JsonValue::Kind val_kind = val_loss != nullptr ? val_loss->kind : JsonValue::Kind::kNull;
  bool val_loss_ok = val_kind == JsonValue::Kind::kNull;
  if (val_kind == JsonValue::Kind::kNumber && val_loss->AsDouble(&val)) {
    m.val_loss = val;
    val_loss_ok = true;
  } else if (val_kind == JsonValue::Kind::kString) {
    const std::string& text = val_loss->text;
    val_loss_ok = text == "nan" || text == "inf" || text == "-inf";
    if (val_loss_ok) m.val_loss = text == "nan" ? NAN : text == "inf" ? INFINITY : -INFINITY;
  }
  if (number("z_loss", &val)) m.z_loss = val;
  if (number("aux_loss", &val)) m.aux_loss = val;
  if (number("expert_load_max_over_mean", &val)) m.expert_load_max_over_mean = val;
  if (number("dropped_share", &val)) m.dropped_share = val;
  if (number("noise_trace", &val)) m.noise_trace = val;
  if (number("noise_grad_sq", &val)) m.noise_grad_sq = val;
  if (const JsonValue* loads = json->Find("expert_loads"); loads != nullptr) {
    bool loads_ok = loads->kind == JsonValue::Kind::kObject;
    for (const auto& [layer, values] : loads->object) {
      std::vector<double>& parsed = m.expert_loads.emplace_back(layer, std::vector<double>()).second;
      loads_ok = loads_ok && values.kind == JsonValue::Kind::kArray;
      for (const JsonValue& v : values.array) loads_ok = loads_ok && v.AsDouble(&parsed.emplace_back());
    }
    if (!loads_ok) return absl::InvalidArgumentError(absl::StrCat("expert_loads is not {layer: [numbers]}: ", line));
  }
  if (!val_loss_ok || !integer("step", &m.step) || !integer("tokens", &m.tokens) || !number("loss", &m.loss) ||
      !number("lr", &m.lr) || !number("grad_norm", &m.grad_norm) ||
      !number("tokens_per_second", &m.tokens_per_second) || !number("mfu", &m.mfu) ||
      !number("wall_seconds", &m.wall_seconds)) {
    return absl::InvalidArgumentError(absl::StrCat("not a metrics line: ", line));
  }
  return m;
}

absl::StatusOr<std::vector<StepMetrics>> ReadMetricsLog(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  std::vector<StepMetrics> out;
  absl::string_view complete = *text;
  complete = complete.substr(0, complete.rfind('\n') + 1);  // "" when no line is complete
  for (absl::string_view line : absl::StrSplit(complete, '\n', absl::SkipEmpty())) {
    absl::StatusOr<StepMetrics> m = ParseMetricsJsonLine(std::string(line));
    if (!m.ok()) return absl::DataLossError(absl::StrCat(path, ": ", m.status().message()));
    out.push_back(*m);
  }
  return out;
}

absl::Status DropMetricsAfterStep(const std::string& path, int64_t step) {
  if (!FileExists(path)) return absl::OkStatus();
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  std::string kept;
  for (absl::string_view line : absl::StrSplit(*text, '\n', absl::SkipEmpty())) {
    absl::StatusOr<StepMetrics> m = ParseMetricsJsonLine(std::string(line));
    // A torn last line (killed mid-write) does not parse and is dropped with the later steps.
    if (m.ok() && m->step <= step) absl::StrAppend(&kept, line, "\n");
  }
  if (kept == *text) return absl::OkStatus();
  return WriteFileAtomically(path, kept);
}

absl::StatusOr<MetricsLog> MetricsLog::Open(const std::string& path, std::optional<int64_t> resume_step) {
  if (resume_step.has_value()) {
    if (absl::Status s = DropMetricsAfterStep(path, *resume_step); !s.ok()) return s;
  }
  MetricsLog log;
  log.path_ = path;
  log.file_ = std::fopen(path.c_str(), "a");
  if (log.file_ == nullptr) return absl::InternalError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  return log;
}

MetricsLog::MetricsLog(MetricsLog&& other) noexcept
    : file_(std::exchange(other.file_, nullptr)), path_(std::move(other.path_)) {}

MetricsLog& MetricsLog::operator=(MetricsLog&& other) noexcept {
  if (this != &other) {
    if (file_ != nullptr) std::fclose(file_);
    file_ = std::exchange(other.file_, nullptr);
    path_ = std::move(other.path_);
  }
  return *this;
}

MetricsLog::~MetricsLog() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::Status MetricsLog::Append(const StepMetrics& m) {
  const std::string line = MetricsJsonLine(m);
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
    return absl::InternalError(absl::StrCat("cannot write ", path_, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

std::string FormatDuration(double seconds) {
  const int64_t s = static_cast<int64_t>(std::llround(std::max(0.0, seconds)));
  if (s >= 3600) return absl::StrFormat("%dh%02dm%02ds", s / 3600, (s / 60) % 60, s % 60);
  if (s >= 60) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%ds", s);
}

std::string FormatStepLine(const StepMetrics& m, int64_t total_steps) {
  const int digits = static_cast<int>(absl::StrCat(total_steps).size());
  return absl::StrFormat("step %*d/%d | %s", digits, m.step, total_steps, Numbers(m, total_steps));
}

std::string FormatProgressBar(const StepMetrics& m, int64_t total_steps, int width) {
  const double fraction = total_steps > 0 ? std::min(1.0, static_cast<double>(m.step) / total_steps) : 0;
  const int filled = static_cast<int>(fraction * width);
  return absl::StrFormat("[%s%s] %3.0f%% %d/%d | %s", std::string(filled, '#'), std::string(width - filled, '.'),
                         100 * fraction, m.step, total_steps, Numbers(m, total_steps));
}

void ConsoleReporter::Step(const StepMetrics& m) {
  if (bar_) {
    last_bar_ = FormatProgressBar(m, total_steps_, 30);
    const auto now = std::chrono::steady_clock::now();
    if (m.step != total_steps_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    std::fprintf(out_, "\r\x1b[2K%s", last_bar_.c_str());
  } else {
    std::fprintf(out_, "%s\n", FormatStepLine(m, total_steps_).c_str());
  }
  std::fflush(out_);
}

void ConsoleReporter::Message(const std::string& line) {
  if (bar_) {
    std::fprintf(out_, "\r\x1b[2K%s\n%s", line.c_str(), last_bar_.c_str());
  } else {
    std::fprintf(out_, "%s\n", line.c_str());
  }
  std::fflush(out_);
}

void ConsoleReporter::Finish() {
  if (bar_ && !last_bar_.empty()) std::fprintf(out_, "\n");
  std::fflush(out_);
}

}  // namespace lmf::experiments
