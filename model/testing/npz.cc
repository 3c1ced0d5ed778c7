// .npz reader: walks the zip's local file headers (stored entries only) and parses each .npy header.
#include "model/testing/npz.h"

#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/file.h"

namespace lmf::model::testing {
namespace {

uint32_t Le32(const std::string& s, size_t at) {
  uint32_t v;
  std::memcpy(&v, s.data() + at, 4);
  return v;
}
uint16_t Le16(const std::string& s, size_t at) {
  uint16_t v;
  std::memcpy(&v, s.data() + at, 2);
  return v;
}

// The value after `'key':` in a .npy header dict, up to the next top-level comma.
std::string HeaderField(const std::string& header, const std::string& key) {
  const size_t at = header.find("'" + key + "':");
  if (at == std::string::npos) return "";
  size_t begin = at + key.size() + 3;
  while (begin < header.size() && header[begin] == ' ') ++begin;
  if (header.compare(begin, 1, "(") == 0) {
    const size_t close = header.find(')', begin);
    return close == std::string::npos ? "" : header.substr(begin, close - begin + 1);
  }
  const size_t end = header.find_first_of(",}", begin);
  return header.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

absl::StatusOr<NpyArray> ParseNpy(const std::string& path, const std::string& name, const std::string& npy) {
  const auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": array '", name, "': ", why));
  };
  if (npy.size() < 10 || npy.compare(0, 6, "\x93NUMPY") != 0) return bad("not a .npy entry");
  const int major = static_cast<unsigned char>(npy[6]);
  const size_t header_len = major == 1 ? Le16(npy, 8) : Le32(npy, 8);
  const size_t header_at = major == 1 ? 10 : 12;
  if (header_at + header_len > npy.size()) return bad("header runs past the entry");
  const std::string header = npy.substr(header_at, header_len);
  NpyArray a;
  a.dtype = std::string(absl::StripSuffix(absl::StripPrefix(HeaderField(header, "descr"), "'"), "'"));
  if (HeaderField(header, "fortran_order") != "False") return bad("only C-order arrays are supported");
  std::string shape = HeaderField(header, "shape");
  shape = std::string(absl::StripSuffix(absl::StripPrefix(shape, "("), ")"));
  for (absl::string_view part : absl::StrSplit(shape, ',', absl::SkipWhitespace())) {
    int64_t d;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &d)) return bad(absl::StrCat("bad shape '", shape, "'"));
    a.shape.push_back(d);
  }
  a.bytes = npy.substr(header_at + header_len);
  int64_t item = 0;
  if (a.dtype == "<f4") item = 4;
  if (a.dtype == "<f8" || a.dtype == "<i8") item = 8;
  if (a.dtype == "|u1") item = 1;
  if (item == 0) return bad(absl::StrCat("unsupported dtype ", a.dtype));
  if (static_cast<int64_t>(a.bytes.size()) != a.numel() * item) return bad("data size does not match the shape");
  return a;
}

template <typename Out>
std::vector<Out> Convert(const NpyArray& a) {
  std::vector<Out> out(static_cast<size_t>(a.numel()));
  for (int64_t i = 0; i < a.numel(); ++i) {
    if (a.dtype == "<f4") {
      float v;
      std::memcpy(&v, a.bytes.data() + 4 * i, 4);
      out[i] = static_cast<Out>(v);
    } else if (a.dtype == "<f8") {
      double v;
      std::memcpy(&v, a.bytes.data() + 8 * i, 8);
      out[i] = static_cast<Out>(v);
    } else if (a.dtype == "<i8") {
      int64_t v;
      std::memcpy(&v, a.bytes.data() + 8 * i, 8);
      out[i] = static_cast<Out>(v);
    } else {
      out[i] = static_cast<Out>(static_cast<unsigned char>(a.bytes[i]));
    }
  }
  return out;
}

}  // namespace

int64_t NpyArray::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}
std::vector<float> NpyArray::AsFloats() const { return Convert<float>(*this); }
std::vector<double> NpyArray::AsDoubles() const { return Convert<double>(*this); }
std::vector<int32_t> NpyArray::AsInt32() const { return Convert<int32_t>(*this); }
std::string NpyArray::AsString() const { return bytes; }

absl::StatusOr<std::map<std::string, NpyArray>> ReadNpz(const std::string& path) {
  absl::StatusOr<std::string> contents = ReadFile(path);
  if (!contents.ok()) return contents.status();
  const std::string& zip = *contents;
  std::map<std::string, NpyArray> arrays;
  size_t at = 0;
  while (at + 30 <= zip.size() && Le32(zip, at) == 0x04034b50) {
    const uint16_t flags = Le16(zip, at + 6), method = Le16(zip, at + 8);
    uint64_t size = Le32(zip, at + 18);
    const uint16_t name_len = Le16(zip, at + 26), extra_len = Le16(zip, at + 28);
    std::string name = zip.substr(at + 30, name_len);
    if (method != 0) return absl::InvalidArgumentError(absl::StrCat(path, ": entry '", name, "' is compressed"));
    if (flags & 0x8) return absl::InvalidArgumentError(absl::StrCat(path, ": entry '", name, "' has no sizes"));
    // Zip64: the real sizes sit in the extra field (id 1: uncompressed, compressed).
    if (size == 0xffffffffu) {
      size_t e = at + 30 + name_len;
      const size_t e_end = e + extra_len;
      while (e + 4 <= e_end) {
        const uint16_t id = Le16(zip, e), len = Le16(zip, e + 2);
        if (id == 1) std::memcpy(&size, zip.data() + e + 4, 8);
        e += 4 + len;
      }
    }
    const size_t data_at = at + 30 + name_len + extra_len;
    if (data_at + size > zip.size()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": entry '", name, "' runs past the end"));
    }
    if (absl::EndsWith(name, ".npy")) name.resize(name.size() - 4);
    absl::StatusOr<NpyArray> array = ParseNpy(path, name, zip.substr(data_at, size));
    if (!array.ok()) return array.status();
    arrays[name] = std::move(*array);
    at = data_at + size;
  }
  if (arrays.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": no .npy entries (not an .npz?)"));
  return arrays;
}

}  // namespace lmf::model::testing
