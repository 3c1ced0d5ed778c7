// Implementation of dtype names, the CPU allocator, the CPU context and the tensor type.
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "kernels/core/allocator.h"
#include "kernels/core/context.h"
#include "kernels/core/dtype.h"
#include "kernels/core/tensor.h"
#include "kernels/cpu/isa.h"

namespace lmf::kernels {

const char* DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    case DType::kF8E4M3: return "f8e4m3";
    case DType::kF8E5M2: return "f8e5m2";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kU8: return "u8";
  }
  return "?";
}

std::ostream& operator<<(std::ostream& os, const Device& d) {
  if (d.type == DeviceType::kCpu) return os << "cpu";
  return os << "cuda:" << d.index;
}

// ---- CpuAllocator

void* CpuAllocator::Allocate(size_t bytes) {
  // aligned_alloc needs a size that is a multiple of the alignment; round up (and make 0 bytes one line).
  const size_t rounded = bytes == 0 ? kAlignment : (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded);
  LMF_CHECK(p != nullptr) << "CpuAllocator: out of memory allocating " << bytes << " bytes";
  __atomic_add_fetch(&in_use_, bytes, __ATOMIC_RELAXED);
  return p;
}

void CpuAllocator::Deallocate(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  std::free(ptr);
  __atomic_sub_fetch(&in_use_, bytes, __ATOMIC_RELAXED);
}

size_t CpuAllocator::bytes_in_use() const { return __atomic_load_n(&in_use_, __ATOMIC_RELAXED); }

CpuAllocator& CpuAllocator::Default() {
  static CpuAllocator* allocator = new CpuAllocator();
  return *allocator;
}

// ---- Context

Context Context::Cpu() { return Cpu(&ThreadPool::Default()); }

Context Context::Cpu(ThreadPool* pool) {
  vec::UseAvx512();  // reads LMF_CPU_ISA now, so that a bad value stops a program before its first kernel
  Context ctx;
  ctx.device = Device::Cpu();
  ctx.pool = pool;
  ctx.allocator = &CpuAllocator::Default();
  return ctx;
}

// ---- Shape

Shape::Shape(std::initializer_list<int64_t> dims) {
  LMF_CHECK_LE(static_cast<int>(dims.size()), kMaxDims);
  for (int64_t d : dims) dims_[rank_++] = d;
}

Shape Shape::FromArray(const int64_t* dims, int rank) {
  LMF_CHECK(rank >= 0 && rank <= kMaxDims) << "rank " << rank;
  Shape s;
  for (int i = 0; i < rank; ++i) s.dims_[i] = dims[i];
  s.rank_ = rank;
  return s;
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[i];
  return n;
}

bool Shape::operator==(const Shape& o) const {
  if (rank_ != o.rank_) return false;
  for (int i = 0; i < rank_; ++i)
    if (dims_[i] != o.dims_[i]) return false;
  return true;
}

std::string Shape::ToString() const {
  std::ostringstream os;
  os << "[";
  for (int i = 0; i < rank_; ++i) os << (i ? ", " : "") << dims_[i];
  os << "]";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Shape& s) { return os << s.ToString(); }

Shape ContiguousStrides(const Shape& shape) {
  Shape strides = shape;
  int64_t s = 1;
  for (int i = shape.rank() - 1; i >= 0; --i) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

// ---- Storage

Storage::Storage(Allocator* allocator, size_t bytes)
    : allocator_(allocator), data_(allocator->Allocate(bytes)), bytes_(bytes) {}

Storage::~Storage() { allocator_->Deallocate(data_, bytes_); }

// ---- Tensor

Tensor Tensor::Empty(const Shape& shape, DType dtype, Allocator* allocator) {
  if (allocator == nullptr) allocator = &CpuAllocator::Default();
  for (int i = 0; i < shape.rank(); ++i) LMF_CHECK_GE(shape[i], 0) << "negative size in " << shape;
  Tensor t;
  t.storage_ = std::make_shared<Storage>(allocator, static_cast<size_t>(shape.numel()) * DTypeSize(dtype));
  t.data_ = t.storage_->data();
  t.dtype_ = dtype;
  t.device_ = allocator->device();
  t.shape_ = shape;
  t.strides_ = ContiguousStrides(shape);
  return t;
}

Tensor Tensor::Zeros(const Shape& shape, DType dtype, Allocator* allocator) {
  Tensor t = Empty(shape, dtype, allocator);
  t.SetZero();
  return t;
}

Tensor Tensor::Wrap(void* data, const Shape& shape, DType dtype, Device device) {
  return WrapStrided(data, shape, ContiguousStrides(shape), dtype, device);
}

Tensor Tensor::WrapStrided(void* data, const Shape& shape, const Shape& strides, DType dtype, Device device) {
  LMF_CHECK(data != nullptr) << "Tensor::Wrap of a null pointer";
  LMF_CHECK_EQ(shape.rank(), strides.rank());
  Tensor t;
  t.data_ = data;
  t.dtype_ = dtype;
  t.device_ = device;
  t.shape_ = shape;
  t.strides_ = strides;
  return t;
}

bool Tensor::is_contiguous() const { return strides_ == ContiguousStrides(shape_) || numel() <= 1; }

void Tensor::CheckElementType(size_t size, bool floating) const {
  LMF_CHECK_EQ(size, DTypeSize(dtype_)) << "element type does not match tensor dtype " << dtype_;
  if (dtype_ == DType::kF32) LMF_CHECK(floating) << "f32 tensor read as an integer type";
  if (dtype_ == DType::kI32 || dtype_ == DType::kI64) LMF_CHECK(!floating) << dtype_ << " tensor read as a float";
}

Tensor Tensor::Slice(int dim, int64_t start, int64_t length) const {
  if (dim < 0) dim += rank();
  LMF_CHECK(dim >= 0 && dim < rank()) << "Slice dim " << dim << " of " << shape_;
  LMF_CHECK(start >= 0 && length >= 0 && start + length <= shape_[dim])
      << "Slice [" << start << ", " << start + length << ") of dim " << dim << " of " << shape_;
  Tensor t = *this;
  t.data_ = static_cast<char*>(data_) + start * strides_[dim] * static_cast<int64_t>(DTypeSize(dtype_));
  t.shape_[dim] = length;
  return t;
}

Tensor Tensor::Reshape(const Shape& shape) const {
  LMF_CHECK(is_contiguous()) << "Reshape of a non-contiguous tensor " << DebugString();
  LMF_CHECK_EQ(shape.numel(), numel()) << "Reshape " << shape_ << " -> " << shape;
  Tensor t = *this;
  t.shape_ = shape;
  t.strides_ = ContiguousStrides(shape);
  return t;
}

Tensor Tensor::Select(int dim, int64_t index) const {
  if (dim < 0) dim += rank();
  LMF_CHECK(dim >= 0 && dim < rank() && index >= 0 && index < shape_[dim])
      << "Select index " << index << " of dim " << dim << " of " << shape_;
  Tensor t = *this;
  t.data_ = static_cast<char*>(data_) + index * strides_[dim] * static_cast<int64_t>(DTypeSize(dtype_));
  int64_t dims[kMaxDims], strides[kMaxDims];
  int r = 0;
  for (int i = 0; i < rank(); ++i) {
    if (i == dim) continue;
    dims[r] = shape_[i];
    strides[r++] = strides_[i];
  }
  t.shape_ = Shape::FromArray(dims, r);
  t.strides_ = Shape::FromArray(strides, r);
  return t;
}

void Tensor::SetZero() const {
  LMF_CHECK(device_.is_cpu()) << "SetZero on " << device_;
  LMF_CHECK(is_contiguous()) << "SetZero of a non-contiguous tensor " << DebugString();
  if (numel() > 0) std::memset(data_, 0, nbytes());
}

void Tensor::CopyFrom(const Tensor& src) const {
  LMF_CHECK(device_.is_cpu() && src.device_.is_cpu()) << "CopyFrom between " << src.device_ << " and " << device_;
  LMF_CHECK(is_contiguous() && src.is_contiguous()) << "CopyFrom needs contiguous tensors";
  LMF_CHECK(shape_ == src.shape_ && dtype_ == src.dtype_)
      << "CopyFrom " << src.DebugString() << " into " << DebugString();
  if (numel() > 0) std::memcpy(data_, src.data_, nbytes());
}

std::string Tensor::DebugString() const {
  std::ostringstream os;
  os << "Tensor(" << dtype_ << ", " << device_ << ", shape " << shape_ << ", strides " << strides_
     << (owns_memory() ? ", owning" : ", view") << ")";
  return os.str();
}

}  // namespace lmf::kernels
