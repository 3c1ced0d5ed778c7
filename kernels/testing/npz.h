// A reader of .npz files (an uncompressed zip of .npy arrays, as numpy.savez writes them; zip64 records
// supported) for the kernel and model tests: fixtures written by tools/kernels/make_fixtures.py and the
// CS336 snapshots. Supports C-order float32, float64, int64, int32, uint8 and bool arrays. Errors name the
// file and the array.
#ifndef LMFORGE_KERNELS_TESTING_NPZ_H_
#define LMFORGE_KERNELS_TESTING_NPZ_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace lmf::kernels::testing {

struct NpyArray {
  std::string dtype;           // numpy kind and size without byte order: "f4", "f8", "i8", "i4", "u1", "b1"
  std::vector<int64_t> shape;  // empty for a scalar
  std::string bytes;           // raw little-endian element data, C order

  int64_t numel() const;
  // Element values converted to the requested type (floats from any float or integer dtype, integers from
  // integer or bool dtypes).
  std::vector<float> ToFloat() const;
  std::vector<double> ToDouble() const;
  std::vector<int32_t> ToInt32() const;
  std::vector<int64_t> ToInt64() const;
  std::string ShapeString() const;  // e.g. "(4, 12, 64)"
};

// Parses one .npy blob; `what` names it in errors.
absl::StatusOr<NpyArray> ParseNpy(const std::string& blob, const std::string& what);

class NpzFile {
 public:
  static absl::StatusOr<NpzFile> Read(const std::string& path);

  bool Has(const std::string& name) const { return arrays_.count(name) > 0; }
  std::vector<std::string> names() const;
  // The array stored as `name` (with or without the ".npy" suffix), or NotFound naming the file.
  absl::StatusOr<const NpyArray*> Get(const std::string& name) const;
  // Shortcuts that also check the element count when expected_numel >= 0.
  absl::StatusOr<std::vector<float>> Floats(const std::string& name, int64_t expected_numel = -1) const;
  absl::StatusOr<std::vector<int32_t>> Ints(const std::string& name, int64_t expected_numel = -1) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::map<std::string, NpyArray> arrays_;
};

}  // namespace lmf::kernels::testing

#endif  // LMFORGE_KERNELS_TESTING_NPZ_H_
