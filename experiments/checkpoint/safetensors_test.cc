// safetensors: our writer's exact bytes, round trips of every dtype we use, a file written by the PyPI
// safetensors package (testdata/python_written.safetensors, from tools/experiments/check_safetensors.py
// write-fixture), and the reader's errors for corrupt or truncated files.
#include "experiments/checkpoint/safetensors.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "base/damaged_copies.h"
#include "base/file.h"
#include "gtest/gtest.h"

namespace lmf::experiments {
namespace {

std::string Message(const absl::Status& s) { return std::string(s.message()); }

std::string HeaderOf(const std::string& json) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((json.size() >> (8 * i)) & 0xFF);
  return out + json;
}

TEST(SafetensorsWriter, WritesTheDocumentedLayout) {
  const float a[2] = {1.0f, -2.0f};
  const int64_t b[1] = {7};
  SafetensorsWriter writer;
  writer.AddF32("w", {2}, a);
  writer.Add("n", SafetensorsDtype::kI64, {1, 1}, b);
  writer.SetMetadata("format", "pt");
  const std::string bytes = writer.Serialize();
  const std::string json =
      R"({"__metadata__":{"format":"pt"},"n":{"dtype":"I64","shape":[1,1],"data_offsets":[0,8]},)"
      R"("w":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})";
  std::string padded = json;
  padded.append((8 - json.size() % 8) % 8, ' ');
  ASSERT_EQ(bytes.size(), 8 + padded.size() + 16);
  EXPECT_EQ(bytes.substr(0, 8 + padded.size()), HeaderOf(padded));
  EXPECT_EQ(std::memcmp(bytes.data() + 8 + padded.size(), b, 8), 0);
  EXPECT_EQ(std::memcmp(bytes.data() + 8 + padded.size() + 8, a, 8), 0);
}

TEST(SafetensorsReader, RoundTripsValuesShapesAndMetadata) {
  std::vector<float> w = {0.1f, -0.0f, 1e-40f, 3e38f, -7.5f, 2.0f};
  std::vector<uint16_t> h = {FloatToBf16(1.5f), FloatToBf16(-0.25f)};
  SafetensorsWriter writer;
  writer.AddF32("layers.0.w", {2, 3}, w.data());
  writer.Add("half", SafetensorsDtype::kBF16, {2}, h.data());
  writer.SetMetadata("step", "42");
  const std::string path = std::string(getenv("TEST_TMPDIR")) + "/round.safetensors";
  ASSERT_TRUE(writer.Write(path).ok());
  auto reader = SafetensorsReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ(reader->metadata().at("step"), "42");
  auto back = reader->ReadFloat("layers.0.w", {2, 3});
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(std::memcmp(back->data(), w.data(), w.size() * 4), 0);  // bit-exact, -0 and subnormal included
  auto half = reader->ReadFloat("half");
  ASSERT_TRUE(half.ok());
  EXPECT_EQ((*half)[0], 1.5f);
  EXPECT_EQ((*half)[1], -0.25f);
}

TEST(SafetensorsReader, ReadsAFileWrittenByThePythonPackage) {
  auto reader = SafetensorsReader::Open("experiments/checkpoint/testdata/python_written.safetensors");
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ(reader->metadata().at("written_by"), "check_safetensors.py");
  auto a = reader->ReadFloat("a", {2, 3});
  ASSERT_TRUE(a.ok()) << a.status();
  for (int i = 0; i < 6; ++i) EXPECT_EQ((*a)[i], 0.25f * i - 0.5f);
  auto b = reader->ReadFloat("b", {4});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*b)[0], 1.0f);
  EXPECT_EQ((*b)[1], -2.5f);
  EXPECT_EQ((*b)[2], 65504.0f);
  EXPECT_EQ((*b)[3], std::ldexp(1.0f, -24));  // 6e-8 rounds to the smallest f16 subnormal, 2^-24
  const SafetensorsTensor* c = reader->Find("c");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->dtype, SafetensorsDtype::kI64);
  int64_t c2;
  std::memcpy(&c2, c->bytes.data() + 16, 8);
  EXPECT_EQ(c2, int64_t{1} << 40);
  EXPECT_EQ(reader->Find("empty")->numel(), 0);
  EXPECT_EQ(Message(reader->ReadFloat("c").status()),
            "experiments/checkpoint/testdata/python_written.safetensors: tensor \"c\" is I64, not a floating-point type");
  EXPECT_EQ(Message(reader->ReadFloat("a", {3, 2}).status()),
            "experiments/checkpoint/testdata/python_written.safetensors: tensor \"a\" has shape [2, 3], expected [3, 2]");
  EXPECT_EQ(Message(reader->ReadFloat("zzz").status()),
            "experiments/checkpoint/testdata/python_written.safetensors: no tensor named \"zzz\"");
}

TEST(SafetensorsReader, TruncatedDataIsAnError) {
  const float a[4] = {1, 2, 3, 4};
  SafetensorsWriter writer;
  writer.AddF32("w", {4}, a);
  std::string bytes = writer.Serialize();
  bytes.resize(bytes.size() - 3);
  EXPECT_EQ(Message(SafetensorsReader::FromBytes(bytes, "cut.safetensors").status()),
            "cut.safetensors: not a valid safetensors file: tensor \"w\": data ends at byte 16 but the file holds 13 "
            "data bytes (truncated?)");
  EXPECT_EQ(Message(SafetensorsReader::FromBytes(bytes.substr(0, 20), "cut.safetensors").status()),
            "cut.safetensors: not a valid safetensors file: header length 56 does not fit the file of 20 bytes "
            "(truncated?)");
  EXPECT_EQ(Message(SafetensorsReader::FromBytes("abc", "cut.safetensors").status()),
            "cut.safetensors: not a valid safetensors file: only 3 bytes, less than the 8-byte header length");
}

TEST(SafetensorsReader, InconsistentHeadersAreErrors) {
  const std::string data(16, '\0');
  auto error = [&](const std::string& json) {
    return Message(SafetensorsReader::FromBytes(HeaderOf(json) + data, "x").status());
  };
  EXPECT_EQ(error(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})"),
            "x: not a valid safetensors file: tensor \"w\": data_offsets span 16 bytes but F32 [3] needs 12");
  EXPECT_EQ(error(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"v":{"dtype":"F32","shape":[2],)"
                  R"("data_offsets":[4,12]}})"),
            "x: not a valid safetensors file: tensor \"v\" starts at byte 4 where byte 8 was expected (tensors must "
            "tile the data without gaps or overlaps)");
  EXPECT_EQ(error(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})"),
            "x: not a valid safetensors file: the tensors cover 8 data bytes but the file holds 16");
  EXPECT_EQ(error(R"({"w":{"dtype":"Q4","shape":[2],"data_offsets":[0,16]}})"),
            "x: not a valid safetensors file: tensor \"w\": unsupported dtype \"Q4\"");
  EXPECT_EQ(error(R"({"w":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})"),
            "x: not a valid safetensors file: tensor \"w\": shape holds a value that is not a size");
  EXPECT_EQ(error(R"({"w":{"dtype":"F32","shape":[4]}})"),
            "x: not a valid safetensors file: tensor \"w\": needs dtype, shape and data_offsets");
  EXPECT_EQ(error(R"({"__metadata__":{"a":1},"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})"),
            "x: not a valid safetensors file: __metadata__ \"a\" is not a string");
  EXPECT_EQ(error(R"([1,2])"), "x: not a valid safetensors file: header is not a JSON object");
  EXPECT_EQ(error(R"({"w":)"), "x: not a valid safetensors file: header: JSON at byte 5: unexpected end of input");
}

TEST(SafetensorsWriter, FailedWriteLeavesThePreviousFile) {
  const std::string path = std::string(getenv("TEST_TMPDIR")) + "/keep.safetensors";
  const float a[1] = {1};
  SafetensorsWriter first;
  first.AddF32("w", {1}, a);
  ASSERT_TRUE(first.Write(path).ok());
  SafetensorsWriter second;
  second.AddF32("w", {1}, a);
  EXPECT_FALSE(second.Write(std::string(getenv("TEST_TMPDIR")) + "/no/such/dir/x.safetensors").ok());
  EXPECT_TRUE(SafetensorsReader::Open(path).ok());
}

TEST(Bfloat16, RoundsToNearestEven) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3F80);
  // 1 + 2^-8 lies halfway between bf16 1.0 and 1 + 2^-7: ties go to the even mantissa (1.0).
  EXPECT_EQ(FloatToBf16(1.00390625f), 0x3F80);
  // 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): rounds up.
  EXPECT_EQ(FloatToBf16(1.01171875f), 0x3F82);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(NAN))));
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(-3.0f)), -3.0f);
}

// Every truncation and 4000 seeded edits of a file with each float dtype and an integer one: an error that
// names the file, or a reader whose tensors each read as floats or give such an error. Never a crash (or,
// under --config=asan, a read outside the file).
TEST(SafetensorsReader, DamagedFilesGiveErrorsNamingTheFileOrReadableTensors) {
  const float f32[6] = {0.5f, -1.0f, 2.0f, 3.5f, -0.0f, 1e-3f};
  const uint16_t bf16[4] = {FloatToBf16(1.5f), FloatToBf16(-2.0f), FloatToBf16(0.0f), FloatToBf16(7.0f)};
  const uint16_t f16[2] = {0x3c00, 0xc000};  // 1, -2
  const double f64[2] = {0.25, -8.0};
  const int64_t i64[1] = {42};
  SafetensorsWriter writer;
  writer.AddF32("layers.0.w", {2, 3}, f32);
  writer.Add("half", SafetensorsDtype::kBF16, {2, 2}, bf16);
  writer.Add("f16", SafetensorsDtype::kF16, {2}, f16);
  writer.Add("f64", SafetensorsDtype::kF64, {1, 2}, f64);
  writer.Add("step", SafetensorsDtype::kI64, {1}, i64);
  writer.SetMetadata("format", "pt");
  int errors = 0, opened = 0;
  for (const std::string& bad : DamagedCopies(writer.Serialize(), /*seed=*/3, /*edits=*/4000)) {
    absl::StatusOr<SafetensorsReader> reader = SafetensorsReader::FromBytes(bad, "x.safetensors");
    if (!reader.ok()) {
      ++errors;
      EXPECT_TRUE(absl::StartsWith(reader.status().message(), "x.safetensors: ")) << reader.status() << "\n"
                                                                                  << Escaped(bad);
      continue;
    }
    ++opened;
    for (const auto& [name, tensor] : reader->tensors()) {
      absl::StatusOr<std::vector<float>> values = reader->ReadFloat(name);
      if (values.ok()) {
        EXPECT_EQ(static_cast<int64_t>(values->size()), tensor.numel()) << name << "\n" << Escaped(bad);
      } else {
        EXPECT_TRUE(absl::StartsWith(values.status().message(), "x.safetensors")) << values.status();
      }
    }
  }
  EXPECT_GT(errors, 1000);
  EXPECT_GT(opened, 100);  // edits of the tensors' bytes keep the file valid
}

}  // namespace
}  // namespace lmf::experiments
