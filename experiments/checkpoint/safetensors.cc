// safetensors reading and writing (see safetensors.h).
#include "experiments/checkpoint/safetensors.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/check.h"
#include "base/json.h"

namespace lmf::experiments {
namespace {

// The safetensors library refuses headers above 100 MB; so do we (a corrupt length would otherwise make
// us read garbage as JSON).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct DtypeInfo {
  SafetensorsDtype dtype;
  const char* name;
  size_t bytes;
};
constexpr DtypeInfo kDtypes[] = {
    {SafetensorsDtype::kF64, "F64", 8}, {SafetensorsDtype::kF32, "F32", 4}, {SafetensorsDtype::kF16, "F16", 2},
    {SafetensorsDtype::kBF16, "BF16", 2}, {SafetensorsDtype::kI64, "I64", 8}, {SafetensorsDtype::kI32, "I32", 4},
    {SafetensorsDtype::kI16, "I16", 2}, {SafetensorsDtype::kI8, "I8", 1}, {SafetensorsDtype::kU8, "U8", 1},
    {SafetensorsDtype::kBool, "BOOL", 1},
};

const DtypeInfo& Info(SafetensorsDtype dtype) {
  for (const DtypeInfo& info : kDtypes) {
    if (info.dtype == dtype) return info;
  }
  LMF_CHECK(false) << "unknown dtype " << static_cast<int>(dtype);
  return kDtypes[0];
}

int64_t Numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeString(const std::vector<int64_t>& shape) { return absl::StrCat("[", absl::StrJoin(shape, ", "), "]"); }

}  // namespace

const char* DtypeName(SafetensorsDtype dtype) { return Info(dtype).name; }
size_t DtypeBytes(SafetensorsDtype dtype) { return Info(dtype).bytes; }

int64_t SafetensorsTensor::numel() const { return Numel(shape); }

uint16_t FloatToBf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  if (std::isnan(value)) return static_cast<uint16_t>((bits >> 16) | 0x40);  // keep it a (quiet) NaN
  const uint32_t rounding = 0x7FFF + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float Bf16ToFloat(uint16_t value) {
  const uint32_t bits = static_cast<uint32_t>(value) << 16;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

float F16ToFloat(uint16_t value) {
  const uint32_t sign = static_cast<uint32_t>(value & 0x8000) << 16;
  const uint32_t exponent = (value >> 10) & 0x1F;
  const uint32_t mantissa = value & 0x3FF;
  float magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -24);  // subnormal
  } else if (exponent == 31) {
    magnitude = mantissa == 0 ? INFINITY : NAN;
  } else {
    magnitude = std::ldexp(static_cast<float>(mantissa | 0x400), static_cast<int>(exponent) - 25);
  }
  uint32_t bits;
  std::memcpy(&bits, &magnitude, 4);
  bits |= sign;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

void SafetensorsWriter::Add(const std::string& name, SafetensorsDtype dtype, std::vector<int64_t> shape,
                            const void* data) {
  LMF_CHECK(name != "__metadata__") << "reserved tensor name";
  LMF_CHECK(tensors_.count(name) == 0) << "tensor " << name << " added twice";
  for (int64_t d : shape) LMF_CHECK_GE(d, 0);
  const size_t bytes = static_cast<size_t>(Numel(shape)) * DtypeBytes(dtype);
  tensors_[name] = Entry{dtype, std::move(shape), data, bytes};
}

std::string SafetensorsWriter::Header() const {
  std::string json = "{";
  if (!metadata_.empty()) {
    json += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [key, value] : metadata_) {
      if (!first) json += ",";
      first = false;
      absl::StrAppend(&json, JsonQuote(key), ":", JsonQuote(value));
    }
    json += "}";
  }
  uint64_t offset = 0;
  for (const auto& [name, entry] : tensors_) {
    if (json.size() > 1) json += ",";
    absl::StrAppend(&json, JsonQuote(name), ":{\"dtype\":\"", DtypeName(entry.dtype), "\",\"shape\":[",
                    absl::StrJoin(entry.shape, ","), "],\"data_offsets\":[", offset, ",", offset + entry.bytes,
                    "]}");
    offset += entry.bytes;
  }
  json += "}";
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string header(8, '\0');
  const uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) header[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return header + json;
}

std::string SafetensorsWriter::Serialize() const {
  std::string out = Header();
  for (const auto& [name, entry] : tensors_) out.append(static_cast<const char*>(entry.data), entry.bytes);
  return out;
}

absl::Status SafetensorsWriter::Write(const std::string& path) const {
  absl::StatusOr<AtomicFileWriter> file = AtomicFileWriter::Create(path);
  if (!file.ok()) return file.status();
  if (absl::Status s = file->Write(Header()); !s.ok()) return s;
  for (const auto& [name, entry] : tensors_) {
    if (absl::Status s = file->Write(std::string_view(static_cast<const char*>(entry.data), entry.bytes));
        !s.ok()) {
      return s;
    }
  }
  return file->Commit();
}

absl::StatusOr<SafetensorsReader> SafetensorsReader::Open(const std::string& path) {
  absl::StatusOr<MappedFile> map = MappedFile::Open(path);
  if (!map.ok()) return map.status();
  SafetensorsReader reader;
  reader.source_ = path;
  reader.map_ = std::move(*map);
  if (absl::Status s = reader.Parse(reader.map_.view()); !s.ok()) return s;
  return reader;
}

absl::StatusOr<SafetensorsReader> SafetensorsReader::FromBytes(std::string bytes, const std::string& source) {
  SafetensorsReader reader;
  reader.source_ = source;
  reader.owned_ = std::move(bytes);
  if (absl::Status s = reader.Parse(reader.owned_); !s.ok()) return s;
  return reader;
}

absl::Status SafetensorsReader::Parse(std::string_view file) {
  auto error = [&](const std::string& why) {
    return absl::DataLossError(absl::StrCat(source_, ": not a valid safetensors file: ", why));
  };
  if (file.size() < 8) return error(absl::StrCat("only ", file.size(), " bytes, less than the 8-byte header length"));
  uint64_t header_bytes = 0;
  for (int i = 0; i < 8; ++i) header_bytes |= static_cast<uint64_t>(static_cast<unsigned char>(file[i])) << (8 * i);
  if (header_bytes > kMaxHeaderBytes || header_bytes > file.size() - 8) {
    return error(absl::StrCat("header length ", header_bytes, " does not fit the file of ", file.size(),
                              " bytes (truncated?)"));
  }
  absl::StatusOr<JsonValue> header = ParseJson(file.substr(8, header_bytes));
  if (!header.ok()) return error(absl::StrCat("header: ", header.status().message()));
  if (header->kind != JsonValue::Kind::kObject) return error("header is not a JSON object");
  const std::string_view data = file.substr(8 + header_bytes);

  struct Span {
    uint64_t begin, end;
    std::string name;
  };
  std::vector<Span> spans;
  for (const auto& [name, value] : header->object) {
    if (name == "__metadata__") {
      if (value.kind != JsonValue::Kind::kObject) return error("__metadata__ is not an object");
      for (const auto& [key, item] : value.object) {
        if (item.kind != JsonValue::Kind::kString) return error(absl::StrCat("__metadata__ \"", key, "\" is not a string"));
        metadata_[key] = item.text;
      }
      continue;
    }
    const std::string& tensor_name = name;  // lambdas cannot capture structured bindings before C++20
    auto tensor_error = [&](const std::string& why) {
      return error(absl::StrCat("tensor \"", tensor_name, "\": ", why));
    };
    const JsonValue* dtype = value.Find("dtype");
    const JsonValue* shape = value.Find("shape");
    const JsonValue* offsets = value.Find("data_offsets");
    if (dtype == nullptr || shape == nullptr || offsets == nullptr) {
      return tensor_error("needs dtype, shape and data_offsets");
    }
    SafetensorsTensor tensor;
    bool known = false;
    for (const DtypeInfo& info : kDtypes) {
      if (dtype->kind == JsonValue::Kind::kString && dtype->text == info.name) {
        tensor.dtype = info.dtype;
        known = true;
      }
    }
    if (!known) return tensor_error(absl::StrCat("unsupported dtype \"", dtype->text, "\""));
    if (shape->kind != JsonValue::Kind::kArray) return tensor_error("shape is not an array");
    for (const JsonValue& dim : shape->array) {
      int64_t d;
      if (!dim.AsInt64(&d) || d < 0) return tensor_error("shape holds a value that is not a size");
      tensor.shape.push_back(d);
    }
    uint64_t begin, end;
    if (offsets->kind != JsonValue::Kind::kArray || offsets->array.size() != 2 ||
        !offsets->array[0].AsUint64(&begin) || !offsets->array[1].AsUint64(&end) || begin > end) {
      return tensor_error("data_offsets is not [begin, end] with begin <= end");
    }
    const uint64_t expected = static_cast<uint64_t>(tensor.numel()) * DtypeBytes(tensor.dtype);
    if (end - begin != expected) {
      return tensor_error(absl::StrCat("data_offsets span ", end - begin, " bytes but ", DtypeName(tensor.dtype),
                                       " ", ShapeString(tensor.shape), " needs ", expected));
    }
    if (end > data.size()) {
      return tensor_error(absl::StrCat("data ends at byte ", end, " but the file holds ", data.size(),
                                       " data bytes (truncated?)"));
    }
    tensor.bytes = data.substr(begin, end - begin);
    spans.push_back({begin, end, name});
    tensors_[name] = std::move(tensor);
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  for (const Span& span : spans) {
    if (span.begin != covered) {
      return error(absl::StrCat("tensor \"", span.name, "\" starts at byte ", span.begin, " where byte ", covered,
                                " was expected (tensors must tile the data without gaps or overlaps)"));
    }
    covered = span.end;
  }
  if (covered != data.size()) {
    return error(absl::StrCat("the tensors cover ", covered, " data bytes but the file holds ", data.size()));
  }
  return absl::OkStatus();
}

const SafetensorsTensor* SafetensorsReader::Find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

absl::StatusOr<std::vector<float>> SafetensorsReader::ReadFloat(const std::string& name,
                                                                const std::vector<int64_t>& expected_shape) const {
  const SafetensorsTensor* tensor = Find(name);
  if (tensor == nullptr) return absl::NotFoundError(absl::StrCat(source_, ": no tensor named \"", name, "\""));
  if (!expected_shape.empty() && tensor->shape != expected_shape) {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": tensor \"", name, "\" has shape ",
                                                   ShapeString(tensor->shape), ", expected ",
                                                   ShapeString(expected_shape)));
  }
  const size_t n = static_cast<size_t>(tensor->numel());
  std::vector<float> out(n);
  const char* p = tensor->bytes.data();
  switch (tensor->dtype) {
    case SafetensorsDtype::kF32:
      std::memcpy(out.data(), p, n * 4);
      break;
    case SafetensorsDtype::kF64:
      for (size_t i = 0; i < n; ++i) {
        double v;
        std::memcpy(&v, p + 8 * i, 8);
        out[i] = static_cast<float>(v);
      }
      break;
    case SafetensorsDtype::kBF16:
    case SafetensorsDtype::kF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t v;
        std::memcpy(&v, p + 2 * i, 2);
        out[i] = tensor->dtype == SafetensorsDtype::kBF16 ? Bf16ToFloat(v) : F16ToFloat(v);
      }
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(source_, ": tensor \"", name, "\" is ", DtypeName(tensor->dtype),
                                                     ", not a floating-point type"));
  }
  return out;
}

}  // namespace lmf::experiments
