// Tensor: a typed, strided view of memory on one device, optionally owning that memory.
//
// - Shape and strides are in elements (not bytes), up to kMaxDims dimensions, row-major by default.
// - An owning tensor (Tensor::Empty / Zeros) holds its block through a shared reference to a Storage that
//   returns the block to its Allocator when the last tensor referring to it goes away; views made from it
//   (Slice, Reshape, View) share that reference and keep the block alive.
// - A non-owning tensor (Tensor::Wrap) describes memory someone else owns (a memory-mapped checkpoint, a
//   buffer inside an arena); the caller keeps that memory alive.
// Kernels do not take Tensors: they take plain params structs with pointers, shapes and strides (see the
// op headers); Tensor is what modules use to own and describe memory and to fill those structs.
#ifndef LMFORGE_KERNELS_CORE_TENSOR_H_
#define LMFORGE_KERNELS_CORE_TENSOR_H_

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <ostream>
#include <string>

#include "base/check.h"
#include "kernels/core/allocator.h"
#include "kernels/core/dtype.h"

namespace lmf::kernels {

constexpr int kMaxDims = 8;

// A small fixed-capacity list of dimension sizes (or strides).
class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  static Shape FromArray(const int64_t* dims, int rank);

  int rank() const { return rank_; }
  int64_t operator[](int i) const { return dims_[i]; }
  int64_t& operator[](int i) { return dims_[i]; }
  const int64_t* data() const { return dims_; }
  // Product of the sizes (1 for rank 0).
  int64_t numel() const;
  bool operator==(const Shape& o) const;
  bool operator!=(const Shape& o) const { return !(*this == o); }
  std::string ToString() const;  // e.g. "[4, 64, 768]"

 private:
  int64_t dims_[kMaxDims] = {};
  int rank_ = 0;
};

std::ostream& operator<<(std::ostream& os, const Shape& s);

// Row-major (C-order) strides of a shape, in elements.
Shape ContiguousStrides(const Shape& shape);

// The memory block behind owning tensors.
class Storage {
 public:
  Storage(Allocator* allocator, size_t bytes);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Allocator* allocator() const { return allocator_; }

 private:
  Allocator* allocator_;
  void* data_;
  size_t bytes_;
};

class Tensor {
 public:
  Tensor() = default;  // an empty, rank-0, data-less tensor; defined() is false

  // New contiguous tensors owning fresh memory from `allocator` (default: the CPU allocator). Empty leaves
  // the contents uninitialised; Zeros fills them with zero bytes (CPU only).
  static Tensor Empty(const Shape& shape, DType dtype, Allocator* allocator = nullptr);
  static Tensor Zeros(const Shape& shape, DType dtype, Allocator* allocator = nullptr);
  // A non-owning contiguous view of memory owned elsewhere.
  static Tensor Wrap(void* data, const Shape& shape, DType dtype, Device device = Device::Cpu());
  // A non-owning view with explicit strides (elements).
  static Tensor WrapStrided(void* data, const Shape& shape, const Shape& strides, DType dtype,
                            Device device = Device::Cpu());

  bool defined() const { return data_ != nullptr; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int rank() const { return shape_.rank(); }
  int64_t dim(int i) const { return shape_[i < 0 ? i + rank() : i]; }
  int64_t stride(int i) const { return strides_[i < 0 ? i + rank() : i]; }
  int64_t numel() const { return shape_.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype_); }
  bool is_contiguous() const;
  // True when this tensor keeps its memory alive (made by Empty/Zeros or a view of such a tensor).
  bool owns_memory() const { return storage_ != nullptr; }

  void* data() const { return data_; }
  // Typed access; checks that T matches the dtype's size and kind (f32 <-> float, i32 <-> int32_t, ...).
  template <typename T>
  T* data() const {
    CheckElementType(sizeof(T), IsFloatingType<T>());
    return static_cast<T*>(data_);
  }

  // Views sharing this tensor's memory (and ownership, if any).
  // Elements [start, start+length) of dimension `dim`.
  Tensor Slice(int dim, int64_t start, int64_t length) const;
  // Same elements, new shape; requires a contiguous tensor and an equal element count.
  Tensor Reshape(const Shape& shape) const;
  // Dimension `dim` fixed at `index`; the rank drops by one.
  Tensor Select(int dim, int64_t index) const;

  // Sets every byte to zero (contiguous CPU tensors).
  void SetZero() const;
  // Copies `src` (same shape and dtype, both contiguous, both on the CPU) into this tensor.
  void CopyFrom(const Tensor& src) const;

  std::string DebugString() const;  // dtype, device, shape, strides

 private:
  template <typename T>
  static constexpr bool IsFloatingType() {
    return static_cast<T>(0.5) != static_cast<T>(0);
  }
  void CheckElementType(size_t size, bool floating) const;

  std::shared_ptr<Storage> storage_;
  void* data_ = nullptr;
  DType dtype_ = DType::kF32;
  Device device_ = Device::Cpu();
  Shape shape_;
  Shape strides_;
};

}  // namespace lmf::kernels

#endif  // LMFORGE_KERNELS_CORE_TENSOR_H_
