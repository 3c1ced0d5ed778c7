// TensorBoard event files: `events.out.tfevents.<unix seconds>.<host>` in a run's folder, read by
// `tensorboard --logdir <run>`. Each record is TFRecord-framed:
//   uint64 length | uint32 masked CRC-32C of the length bytes | data | uint32 masked CRC-32C of data
// (all little-endian) and holds one serialized Event: first {file_version: "brain.Event:2"}, then
// scalar and histogram summaries. Records are flushed as written, so a killed run's file stays readable up to its
// last complete record.
#ifndef LMFORGE_EXPERIMENTS_METRICS_TENSORBOARD_WRITER_H_
#define LMFORGE_EXPERIMENTS_METRICS_TENSORBOARD_WRITER_H_

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace lmf::experiments {

// The TFRecord framing of one record.
std::string FrameTfRecord(std::string_view data);

// Splits a TFRecord stream back into records, checking both CRCs; a torn last record is an error.
absl::StatusOr<std::vector<std::string>> ReadTfRecords(std::string_view stream, const std::string& source);

class TensorBoardWriter {
 public:
  // Creates a new event file in `dir` and writes the file_version record.
  static absl::StatusOr<TensorBoardWriter> Create(const std::string& dir);
  TensorBoardWriter(TensorBoardWriter&& other) noexcept;
  TensorBoardWriter& operator=(TensorBoardWriter&& other) noexcept;
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;
  ~TensorBoardWriter();

  // One event with a scalar per (tag, value) at `step`.
  absl::Status WriteScalars(int64_t step, const std::vector<std::pair<std::string, double>>& scalars);
  // One event with a histogram per (tag, counts) at `step`: the indices 0 .. n-1, index i occurring
  // counts[i] times (a mixture of experts' tokens per expert; TensorBoard's histograms tab draws the load
  // over the expert index). Bucket i is (i - 0.5, i + 0.5].
  absl::Status WriteIndexHistograms(int64_t step,
                                    const std::vector<std::pair<std::string, std::vector<double>>>& histograms);
  // A SessionLog START at `step`: TensorBoard discards the earlier events of steps >= step, so a resumed
  // run's curves replace what the killed run logged after its last checkpoint.
  absl::Status WriteRestart(int64_t step);

  const std::string& path() const { return path_; }

 private:
  TensorBoardWriter() = default;
  absl::Status WriteEvent(const std::string& serialized);
  FILE* file_ = nullptr;
  std::string path_;
};

}  // namespace lmf::experiments

#endif  // LMFORGE_EXPERIMENTS_METRICS_TENSORBOARD_WRITER_H_
