// Writes a safetensors file with our writer plus a JSON file of the values it holds, for
// tools/experiments/check_safetensors.py to load with the PyPI safetensors package and compare:
//   bazel run //experiments/checkpoint:write_safetensors_sample -- /tmp/st
//   python3 tools/experiments/check_safetensors.py check /tmp/st/sample.safetensors /tmp/st/sample.expect.json
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/file.h"
#include "base/flags.h"
#include "base/json.h"
#include "experiments/checkpoint/safetensors.h"

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Writes OUT_DIR/sample.safetensors and OUT_DIR/sample.expect.json, the values it holds, for "
      "tools/experiments/check_safetensors.py.\nusage: write_safetensors_sample OUT_DIR");
  lmf::FlagsOptions flags;
  flags.usage_exit_code = 2;
  flags.positional = {"OUT_DIR"};
  const std::string dir = lmf::ParseFlags(argc, argv, flags).positional[0];
  if (absl::Status s = lmf::MakeDirs(dir); !s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    return 1;
  }
  // Values that exercise float32: negative zero, a subnormal, large and small magnitudes.
  std::vector<float> w(12);
  for (int i = 0; i < 12; ++i) w[i] = std::sin(0.7f * i) * std::pow(10.0f, static_cast<float>(i % 5) - 2);
  w[3] = -0.0f;
  w[7] = 1e-40f;
  std::vector<float> bias = {0.5f, -1.25f, 3.0e38f};
  std::vector<int64_t> step = {123456789012345};

  lmf::experiments::SafetensorsWriter writer;
  writer.AddF32("layers.0.attn.q_proj.weight", {3, 4}, w.data());
  writer.AddF32("layers.0.attn.q_proj.bias", {3}, bias.data());
  writer.Add("step", lmf::experiments::SafetensorsDtype::kI64, {1}, step.data());
  writer.SetMetadata("format", "pt");
  writer.SetMetadata("note", "quote \" backslash \\ newline \n");
  const std::string path = dir + "/sample.safetensors";
  if (absl::Status s = writer.Write(path); !s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    return 1;
  }

  auto floats = [](const std::vector<float>& v) {
    std::vector<std::string> parts;
    for (float x : v) parts.push_back(std::signbit(x) && x == 0 ? "-0.0" : lmf::JsonNumber(x));
    return absl::StrCat("[", absl::StrJoin(parts, ","), "]");
  };
  const std::string expect = absl::StrCat(
      "{\"metadata\":{\"format\":\"pt\",\"note\":", lmf::JsonQuote("quote \" backslash \\ newline \n"),
      "},\"tensors\":{",
      "\"layers.0.attn.q_proj.weight\":{\"dtype\":\"F32\",\"shape\":[3,4],\"values\":", floats(w), "},",
      "\"layers.0.attn.q_proj.bias\":{\"dtype\":\"F32\",\"shape\":[3],\"values\":", floats(bias), "},",
      "\"step\":{\"dtype\":\"I64\",\"shape\":[1],\"values\":[", step[0], "]}}}\n");
  if (absl::Status s = lmf::WriteFileAtomically(dir + "/sample.expect.json", expect); !s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    return 1;
  }
  std::printf("wrote %s and %s/sample.expect.json\n", path.c_str(), dir.c_str());
  return 0;
}
