// Scratch: the backward's temporaries, kept between steps.
#include "model/layers/layer.h"

#include <algorithm>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "kernels/core/dispatch.h"

namespace lmf::model {

kernels::Tensor Scratch::Take(const kernels::Shape& shape, kernels::DType dtype) {
  const int64_t bytes = shape.numel() * static_cast<int64_t>(kernels::DTypeSize(dtype));
  // The smallest free buffer that holds it.
  Buffer* best = nullptr;
  for (Buffer& buffer : buffers_) {
    if (buffer.taken || buffer.memory.numel() < bytes) continue;
    if (best == nullptr || buffer.memory.numel() < best->memory.numel()) best = &buffer;
  }
  if (best == nullptr) {
    // Free buffers too small for this request are dropped rather than kept beside the new one, so memory
    // follows the largest shapes in use instead of growing with every shape ever seen.
    buffers_.erase(std::remove_if(buffers_.begin(), buffers_.end(), [](const Buffer& b) { return !b.taken; }),
                   buffers_.end());
    buffers_.push_back(Buffer{kernels::Tensor::Empty({std::max<int64_t>(bytes, 1)}, kernels::DType::kU8,
                                                     allocator_),
                              false});
    best = &buffers_.back();
  }
  best->taken = true;
  return kernels::Tensor::Wrap(best->memory.data(), shape, dtype, best->memory.device());
}

void Scratch::Reset() {
  for (Buffer& buffer : buffers_) buffer.taken = false;
}

int64_t Scratch::bytes() const {
  int64_t total = 0;
  for (const Buffer& buffer : buffers_) total += buffer.memory.numel();
  return total;
}

std::string DeviceName(kernels::Device device) {
  std::ostringstream os;
  os << device;
  return os.str();
}

std::string PrecisionName(kernels::DType dtype) { return absl::AsciiStrToUpper(kernels::DTypeName(dtype)); }

absl::Status CheckOpsSupported(const std::vector<const char*>& ops, kernels::Device device, kernels::DType dtype) {
  for (const char* op : ops) {
    if (!kernels::BackendSupports(op, device, dtype)) {
      return absl::InvalidArgumentError(absl::StrCat("LanguageModel: no backend in this binary runs op '", op,
                                                     "' on ", DeviceName(device), " with ",
                                                     PrecisionName(dtype), " activations"));
    }
  }
  return absl::OkStatus();
}

}  // namespace lmf::model
