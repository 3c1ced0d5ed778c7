// TensorBoard event files (see tensorboard_writer.h).
#include "experiments/metrics/tensorboard_writer.h"

#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "experiments/crc32c/crc32c.h"
#include "experiments/metrics/tensorboard_event.pb.h"

namespace lmf::experiments {
namespace {

double WallTime() {
  timeval tv;
  ::gettimeofday(&tv, nullptr);
  return static_cast<double>(tv.tv_sec) + 1e-6 * static_cast<double>(tv.tv_usec);
}

void AppendLittleEndian(uint64_t value, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

uint64_t ReadLittleEndian(std::string_view bytes) {
  uint64_t value = 0;
  for (size_t i = 0; i < bytes.size(); ++i) value |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  return value;
}

}  // namespace

std::string FrameTfRecord(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  AppendLittleEndian(data.size(), 8, &out);
  AppendLittleEndian(MaskCrc32c(Crc32c(std::string_view(out.data(), 8))), 4, &out);
  out.append(data.data(), data.size());
  AppendLittleEndian(MaskCrc32c(Crc32c(data)), 4, &out);
  return out;
}

absl::StatusOr<std::vector<std::string>> ReadTfRecords(std::string_view stream, const std::string& source) {
  std::vector<std::string> records;
  size_t pos = 0;
  while (pos < stream.size()) {
    auto error = [&](const std::string& why) {
      return absl::DataLossError(absl::StrCat(source, ": record ", records.size(), " at byte ", pos, ": ", why));
    };
    if (stream.size() - pos < 12) return error("torn length header");
    const std::string_view length_bytes = stream.substr(pos, 8);
    if (ReadLittleEndian(stream.substr(pos + 8, 4)) != MaskCrc32c(Crc32c(length_bytes))) {
      return error("length CRC mismatch");
    }
    const uint64_t length = ReadLittleEndian(length_bytes);
    if (stream.size() - pos - 12 < length + 4) return error("torn data");
    const std::string_view data = stream.substr(pos + 12, length);
    if (ReadLittleEndian(stream.substr(pos + 12 + length, 4)) != MaskCrc32c(Crc32c(data))) {
      return error("data CRC mismatch");
    }
    records.emplace_back(data);
    pos += 16 + length;
  }
  return records;
}

absl::StatusOr<TensorBoardWriter> TensorBoardWriter::Create(const std::string& dir) {
  char host[256] = "localhost";
  ::gethostname(host, sizeof(host) - 1);
  const double now = WallTime();
  TensorBoardWriter writer;
  // The pid keeps two writers started in the same second (a resume right after a crash) apart.
  writer.path_ = absl::StrCat(dir, "/events.out.tfevents.", static_cast<int64_t>(now), ".", host, ".", ::getpid());
  writer.file_ = std::fopen(writer.path_.c_str(), "ab");
  if (writer.file_ == nullptr) {
    return absl::InternalError(absl::StrCat("cannot create ", writer.path_, ": ", std::strerror(errno)));
  }
  tensorboard::Event event;
  event.set_wall_time(now);
  event.set_file_version("brain.Event:2");
  if (absl::Status s = writer.WriteEvent(event.SerializeAsString()); !s.ok()) return s;
  return writer;
}

TensorBoardWriter::TensorBoardWriter(TensorBoardWriter&& other) noexcept
    : file_(std::exchange(other.file_, nullptr)), path_(std::move(other.path_)) {}

TensorBoardWriter& TensorBoardWriter::operator=(TensorBoardWriter&& other) noexcept {
  if (this != &other) {
    if (file_ != nullptr) std::fclose(file_);
    file_ = std::exchange(other.file_, nullptr);
    path_ = std::move(other.path_);
  }
  return *this;
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::Status TensorBoardWriter::WriteEvent(const std::string& serialized) {
  const std::string record = FrameTfRecord(serialized);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() || std::fflush(file_) != 0) {
    return absl::InternalError(absl::StrCat("cannot write ", path_, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status TensorBoardWriter::WriteScalars(int64_t step, const std::vector<std::pair<std::string, double>>& scalars) {
  tensorboard::Event event;
  event.set_wall_time(WallTime());
  event.set_step(step);
  for (const auto& [tag, value] : scalars) {
    tensorboard::SummaryValue* v = event.mutable_summary()->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  return WriteEvent(event.SerializeAsString());
}

absl::Status TensorBoardWriter::WriteIndexHistograms(
    int64_t step, const std::vector<std::pair<std::string, std::vector<double>>>& histograms) {
  tensorboard::Event event;
  event.set_wall_time(WallTime());
  event.set_step(step);
  for (const auto& [tag, counts] : histograms) {
    tensorboard::SummaryValue* v = event.mutable_summary()->add_value();
    v->set_tag(tag);
    tensorboard::HistogramProto* h = v->mutable_histo();
    h->set_min(0);
    h->set_max(counts.empty() ? 0 : static_cast<double>(counts.size() - 1));
    double num = 0, sum = 0, squares = 0;
    for (size_t i = 0; i < counts.size(); ++i) {
      const double x = static_cast<double>(i);
      num += counts[i], sum += counts[i] * x, squares += counts[i] * x * x;
      h->add_bucket_limit(x + 0.5);
      h->add_bucket(counts[i]);
    }
    h->set_num(num);
    h->set_sum(sum);
    h->set_sum_squares(squares);
  }
  return WriteEvent(event.SerializeAsString());
}

absl::Status TensorBoardWriter::WriteRestart(int64_t step) {
  tensorboard::Event event;
  event.set_wall_time(WallTime());
  event.set_step(step);
  event.mutable_session_log()->set_status(tensorboard::SessionLog::START);
  return WriteEvent(event.SerializeAsString());
}

}  // namespace lmf::experiments
