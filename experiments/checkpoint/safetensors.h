// The safetensors format (Hugging Face), read and written without the Python package, so checkpoint
// weights open in PyTorch (`safetensors.torch.load_file`) and weights written by PyTorch open here:
//   8 bytes  little-endian uint64 N, the header's length
//   N bytes  JSON: {"__metadata__": {str: str}, "<name>": {"dtype": "F32", "shape": [..],
//            "data_offsets": [begin, end]}, ...}, padded with spaces to a multiple of 8
//   rest     the tensors' raw little-endian bytes; offsets are relative to the start of this buffer and
//            the tensors tile it without gaps or overlaps.
// The reader checks all of this and names the file and the tensor in every error.
#ifndef LMFORGE_EXPERIMENTS_CHECKPOINT_SAFETENSORS_H_
#define LMFORGE_EXPERIMENTS_CHECKPOINT_SAFETENSORS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/file.h"

namespace lmf::experiments {

enum class SafetensorsDtype { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool };

const char* DtypeName(SafetensorsDtype dtype);  // "F32", "BF16", ...
size_t DtypeBytes(SafetensorsDtype dtype);

class SafetensorsWriter {
 public:
  // Adds a tensor; `data` (numel * dtype bytes) must stay alive until Write/Serialize. Names are unique
  // (checked) and the file lists them sorted.
  void Add(const std::string& name, SafetensorsDtype dtype, std::vector<int64_t> shape, const void* data);
  void AddF32(const std::string& name, std::vector<int64_t> shape, const float* data) {
    Add(name, SafetensorsDtype::kF32, std::move(shape), data);
  }
  void SetMetadata(const std::string& key, const std::string& value) { metadata_[key] = value; }

  // The header bytes (length prefix, JSON, padding) for the tensors added so far.
  std::string Header() const;
  // Writes the file atomically (base/file.h): a failure leaves any previous file at `path` untouched.
  absl::Status Write(const std::string& path) const;
  // The whole file in memory (tests).
  std::string Serialize() const;

 private:
  struct Entry {
    SafetensorsDtype dtype;
    std::vector<int64_t> shape;
    const void* data;
    size_t bytes;
  };
  std::map<std::string, Entry> tensors_;
  std::map<std::string, std::string> metadata_;
};

struct SafetensorsTensor {
  SafetensorsDtype dtype;
  std::vector<int64_t> shape;
  std::string_view bytes;  // into the reader's buffer
  int64_t numel() const;
};

class SafetensorsReader {
 public:
  // Memory-maps and validates a file.
  static absl::StatusOr<SafetensorsReader> Open(const std::string& path);
  // Validates bytes held in memory; `source` names them in errors.
  static absl::StatusOr<SafetensorsReader> FromBytes(std::string bytes, const std::string& source);

  SafetensorsReader(SafetensorsReader&&) = default;
  SafetensorsReader& operator=(SafetensorsReader&&) = default;

  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::map<std::string, SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsTensor* Find(const std::string& name) const;

  // Tensor `name` as float32 (F32 copied; BF16, F16 and F64 converted), checked against `expected_shape`
  // when that is non-empty. Errors name the file and tensor.
  absl::StatusOr<std::vector<float>> ReadFloat(const std::string& name,
                                               const std::vector<int64_t>& expected_shape = {}) const;
  const std::string& source() const { return source_; }

 private:
  SafetensorsReader() = default;
  absl::Status Parse(std::string_view file);
  std::string source_;
  MappedFile map_;
  std::string owned_;
  std::map<std::string, std::string> metadata_;
  std::map<std::string, SafetensorsTensor> tensors_;
};

// bfloat16 <-> float (round to nearest even; NaN stays NaN).
uint16_t FloatToBf16(float value);
float Bf16ToFloat(uint16_t value);
float F16ToFloat(uint16_t value);

}  // namespace lmf::experiments

#endif  // LMFORGE_EXPERIMENTS_CHECKPOINT_SAFETENSORS_H_
