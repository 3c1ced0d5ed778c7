// A small reader of .npz files (numpy.savez: an uncompressed zip of .npy arrays) for model/ tests: float32,
// float64, int64 and uint8 arrays in C order, converted on request. Test-only.
#ifndef LMFORGE_MODEL_TESTING_NPZ_H_
#define LMFORGE_MODEL_TESTING_NPZ_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace lmf::model::testing {

struct NpyArray {
  std::string dtype;           // numpy descr, e.g. "<f4", "<f8", "<i8", "|u1"
  std::vector<int64_t> shape;
  std::string bytes;           // raw little-endian data, C order

  int64_t numel() const;
  std::vector<float> AsFloats() const;     // from f4 or f8
  std::vector<double> AsDoubles() const;   // from f4 or f8
  std::vector<int32_t> AsInt32() const;    // from i8 (values must fit)
  std::string AsString() const;            // u1 bytes as text
};

// Every array in the file by its name (without ".npy"). Errors name the file and what was malformed.
absl::StatusOr<std::map<std::string, NpyArray>> ReadNpz(const std::string& path);

}  // namespace lmf::model::testing

#endif  // LMFORGE_MODEL_TESTING_NPZ_H_
