// .npz reading: the zip central directory (with zip64 extra fields) locates each stored member; members
// must be stored (method 0), as numpy.savez writes them. Each member is parsed as .npy (format 1.0-3.0).
#include "kernels/testing/npz.h"

#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/file.h"

namespace lmf::kernels::testing {
namespace {

uint64_t ReadLE(const std::string& s, size_t pos, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(s[pos + i]);
  return v;
}

size_t ElementSize(const std::string& dtype) {
  if (dtype.size() != 2) return 0;
  const char kind = dtype[0];
  const int size = dtype[1] - '0';
  if ((kind == 'f' && (size == 4 || size == 8)) || (kind == 'i' && (size == 4 || size == 8)) ||
      ((kind == 'u' || kind == 'b') && size == 1)) {
    return static_cast<size_t>(size);
  }
  return 0;
}

// Finds the value text after 'key': in a .npy header dict.
absl::StatusOr<std::string> HeaderField(const std::string& header, const std::string& key, const std::string& what) {
  const std::string needle = "'" + key + "':";
  const size_t pos = header.find(needle);
  if (pos == std::string::npos) return absl::InvalidArgumentError(absl::StrCat(what, ": .npy header lacks '", key, "': ", header));
  size_t start = pos + needle.size();
  while (start < header.size() && header[start] == ' ') ++start;
  size_t end = start;
  if (header[start] == '(') {
    end = header.find(')', start);
    if (end == std::string::npos) return absl::InvalidArgumentError(absl::StrCat(what, ": bad shape in .npy header"));
    return header.substr(start, end - start + 1);
  }
  while (end < header.size() && header[end] != ',' && header[end] != '}') ++end;
  return header.substr(start, end - start);
}

}  // namespace

int64_t NpyArray::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string NpyArray::ShapeString() const { return absl::StrCat("(", absl::StrJoin(shape, ", "), ")"); }

template <typename Out>
static std::vector<Out> Convert(const NpyArray& a, bool allow_float) {
  const int64_t n = a.numel();
  std::vector<Out> out(n);
  const char* p = a.bytes.data();
  for (int64_t i = 0; i < n; ++i) {
    if (a.dtype == "f4" && allow_float) {
      float v;
      std::memcpy(&v, p + 4 * i, 4);
      out[i] = static_cast<Out>(v);
    } else if (a.dtype == "f8" && allow_float) {
      double v;
      std::memcpy(&v, p + 8 * i, 8);
      out[i] = static_cast<Out>(v);
    } else if (a.dtype == "i8") {
      int64_t v;
      std::memcpy(&v, p + 8 * i, 8);
      out[i] = static_cast<Out>(v);
    } else if (a.dtype == "i4") {
      int32_t v;
      std::memcpy(&v, p + 4 * i, 4);
      out[i] = static_cast<Out>(v);
    } else if (a.dtype == "u1" || a.dtype == "b1") {
      out[i] = static_cast<Out>(static_cast<uint8_t>(p[i]));
    } else {
      return {};
    }
  }
  return out;
}

std::vector<float> NpyArray::ToFloat() const { return Convert<float>(*this, true); }
std::vector<double> NpyArray::ToDouble() const { return Convert<double>(*this, true); }
std::vector<int32_t> NpyArray::ToInt32() const { return Convert<int32_t>(*this, false); }
std::vector<int64_t> NpyArray::ToInt64() const { return Convert<int64_t>(*this, false); }

absl::StatusOr<NpyArray> ParseNpy(const std::string& blob, const std::string& what) {
  if (blob.size() < 10 || blob.compare(0, 6, "\x93NUMPY") != 0)
    return absl::InvalidArgumentError(absl::StrCat(what, ": not a .npy array (bad magic)"));
  const int major = static_cast<uint8_t>(blob[6]);
  size_t header_len, header_start;
  if (major == 1) {
    header_len = ReadLE(blob, 8, 2);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (blob.size() < 12) return absl::InvalidArgumentError(absl::StrCat(what, ": truncated .npy header"));
    header_len = ReadLE(blob, 8, 4);
    header_start = 12;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(what, ": unsupported .npy version ", major));
  }
  if (header_start + header_len > blob.size()) return absl::InvalidArgumentError(absl::StrCat(what, ": truncated .npy header"));
  const std::string header = blob.substr(header_start, header_len);
  NpyArray a;
  auto descr = HeaderField(header, "descr", what);
  if (!descr.ok()) return descr.status();
  std::string d(absl::StripSuffix(absl::StripPrefix(*descr, "'"), "'"));
  if (!d.empty() && (d[0] == '<' || d[0] == '|')) d = d.substr(1);
  if (!d.empty() && d[0] == '>') return absl::InvalidArgumentError(absl::StrCat(what, ": big-endian arrays are not supported"));
  if (d == "?") d = "b1";
  if (ElementSize(d) == 0)
    return absl::InvalidArgumentError(absl::StrCat(what, ": unsupported dtype '", *descr, "' (want f4, f8, i4, i8, u1, bool)"));
  a.dtype = d;
  auto fortran = HeaderField(header, "fortran_order", what);
  if (!fortran.ok()) return fortran.status();
  if (absl::StrContains(*fortran, "True")) return absl::InvalidArgumentError(absl::StrCat(what, ": Fortran-order arrays are not supported"));
  auto shape = HeaderField(header, "shape", what);
  if (!shape.ok()) return shape.status();
  std::string inner(absl::StripSuffix(absl::StripPrefix(*shape, "("), ")"));
  for (absl::string_view part : absl::StrSplit(inner, ',', absl::SkipWhitespace())) {
    int64_t dim;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &dim) || dim < 0)
      return absl::InvalidArgumentError(absl::StrCat(what, ": bad shape ", *shape));
    a.shape.push_back(dim);
  }
  const size_t data_start = header_start + header_len;
  const size_t want = static_cast<size_t>(a.numel()) * ElementSize(d);
  if (blob.size() - data_start < want)
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", blob.size() - data_start, " data bytes, shape ", a.ShapeString(), " needs ", want));
  a.bytes = blob.substr(data_start, want);
  return a;
}

absl::StatusOr<NpzFile> NpzFile::Read(const std::string& path) {
  auto contents = ReadFile(path);
  if (!contents.ok()) return contents.status();
  const std::string& z = *contents;
  // End of central directory: 22 bytes + comment, searched from the end.
  if (z.size() < 22) return absl::InvalidArgumentError(absl::StrCat(path, ": too short for a zip file"));
  size_t eocd = std::string::npos;
  for (size_t i = z.size() - 22 + 1; i-- > 0 && z.size() - i <= 22 + 65535;) {
    if (ReadLE(z, i, 4) == 0x06054b50) {
      eocd = i;
      break;
    }
  }
  if (eocd == std::string::npos) return absl::InvalidArgumentError(absl::StrCat(path, ": not a zip file (no end of central directory)"));
  uint64_t entries = ReadLE(z, eocd + 10, 2);
  uint64_t cd_offset = ReadLE(z, eocd + 16, 4);
  if ((entries == 0xffff || cd_offset == 0xffffffff) && eocd >= 20 && ReadLE(z, eocd - 20, 4) == 0x07064b50) {
    const uint64_t z64 = ReadLE(z, eocd - 20 + 8, 8);
    if (z64 + 56 > z.size() || ReadLE(z, z64, 4) != 0x06064b50)
      return absl::InvalidArgumentError(absl::StrCat(path, ": bad zip64 end of central directory"));
    entries = ReadLE(z, z64 + 32, 8);
    cd_offset = ReadLE(z, z64 + 48, 8);
  }
  NpzFile npz;
  npz.path_ = path;
  size_t pos = cd_offset;
  for (uint64_t e = 0; e < entries; ++e) {
    if (pos + 46 > z.size() || ReadLE(z, pos, 4) != 0x02014b50)
      return absl::InvalidArgumentError(absl::StrCat(path, ": bad zip central directory entry ", e));
    const uint64_t method = ReadLE(z, pos + 10, 2);
    uint64_t comp_size = ReadLE(z, pos + 20, 4);
    uint64_t size = ReadLE(z, pos + 24, 4);
    const size_t name_len = ReadLE(z, pos + 28, 2), extra_len = ReadLE(z, pos + 30, 2), comment_len = ReadLE(z, pos + 32, 2);
    uint64_t local = ReadLE(z, pos + 42, 4);
    const std::string name = z.substr(pos + 46, name_len);
    // zip64 extra field (id 1): the 64-bit values of the fields that are 0xffffffff, in order.
    size_t x = pos + 46 + name_len;
    const size_t x_end = x + extra_len;
    while (x + 4 <= x_end) {
      const uint64_t id = ReadLE(z, x, 2), len = ReadLE(z, x + 2, 2);
      if (id == 1) {
        size_t f = x + 4;
        if (size == 0xffffffff) size = ReadLE(z, f, 8), f += 8;
        if (comp_size == 0xffffffff) comp_size = ReadLE(z, f, 8), f += 8;
        if (local == 0xffffffff) local = ReadLE(z, f, 8), f += 8;
      }
      x += 4 + len;
    }
    pos = x_end + comment_len;
    if (method != 0)
      return absl::InvalidArgumentError(absl::StrCat(path, ": member ", name, " is compressed (method ", method,
                                                     "); write fixtures with numpy.savez, not savez_compressed"));
    if (local + 30 > z.size() || ReadLE(z, local, 4) != 0x04034b50)
      return absl::InvalidArgumentError(absl::StrCat(path, ": bad local header for ", name));
    const size_t data = local + 30 + ReadLE(z, local + 26, 2) + ReadLE(z, local + 28, 2);
    if (data + size > z.size()) return absl::InvalidArgumentError(absl::StrCat(path, ": member ", name, " runs past the end"));
    std::string key(absl::StripSuffix(name, ".npy"));
    auto array = ParseNpy(z.substr(data, size), absl::StrCat(path, ":", key));
    if (!array.ok()) return array.status();
    npz.arrays_[key] = std::move(*array);
  }
  return npz;
}

std::vector<std::string> NpzFile::names() const {
  std::vector<std::string> out;
  for (const auto& [name, _] : arrays_) out.push_back(name);
  return out;
}

absl::StatusOr<const NpyArray*> NpzFile::Get(const std::string& name) const {
  const std::string key(absl::StripSuffix(name, ".npy"));
  auto it = arrays_.find(key);
  if (it == arrays_.end())
    return absl::NotFoundError(absl::StrCat(path_, ": no array '", key, "' (has: ", absl::StrJoin(names(), ", "), ")"));
  return &it->second;
}

absl::StatusOr<std::vector<float>> NpzFile::Floats(const std::string& name, int64_t expected_numel) const {
  auto a = Get(name);
  if (!a.ok()) return a.status();
  if (expected_numel >= 0 && (*a)->numel() != expected_numel)
    return absl::InvalidArgumentError(absl::StrCat(path_, ":", name, " has shape ", (*a)->ShapeString(), ", expected ", expected_numel, " elements"));
  if ((*a)->dtype[0] != 'f' && (*a)->dtype[0] != 'i')
    return absl::InvalidArgumentError(absl::StrCat(path_, ":", name, " has dtype ", (*a)->dtype, ", expected a number"));
  return (*a)->ToFloat();
}

absl::StatusOr<std::vector<int32_t>> NpzFile::Ints(const std::string& name, int64_t expected_numel) const {
  auto a = Get(name);
  if (!a.ok()) return a.status();
  if (expected_numel >= 0 && (*a)->numel() != expected_numel)
    return absl::InvalidArgumentError(absl::StrCat(path_, ":", name, " has shape ", (*a)->ShapeString(), ", expected ", expected_numel, " elements"));
  if ((*a)->dtype[0] == 'f') return absl::InvalidArgumentError(absl::StrCat(path_, ":", name, " is ", (*a)->dtype, ", expected integers"));
  return (*a)->ToInt32();
}

}  // namespace lmf::kernels::testing
