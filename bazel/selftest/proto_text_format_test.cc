// Checks lmf_proto_library end to end: generated C++ from two .proto files (one importing the other)
// compiles, links against the system protobuf, and parses and rejects text format as expected.
#include <string>

#include "bazel/selftest/selftest.pb.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace {

TEST(ProtoTextFormat, ParsesAllFieldKinds) {
  lmforge::selftest::BuildProbe probe;
  const std::string text = R"pb(
    name: "tiny"
    sizes: [ 64, 128 ]
    backend: BACKEND_CUDA
    scalars { key: "lr" value: 3e-4 }
  )pb";
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &probe));
  EXPECT_EQ(probe.name(), "tiny");
  ASSERT_EQ(probe.sizes_size(), 2);
  EXPECT_EQ(probe.sizes(1), 128);
  EXPECT_EQ(probe.backend(), lmforge::selftest::BACKEND_CUDA);
  EXPECT_DOUBLE_EQ(probe.scalars().at("lr"), 3e-4);
}

TEST(ProtoTextFormat, RejectsUnknownField) {
  lmforge::selftest::BuildProbe probe;
  EXPECT_FALSE(google::protobuf::TextFormat::ParseFromString("no_such_field: 1", &probe));
}

TEST(ProtoTextFormat, RoundTripsThroughText) {
  lmforge::selftest::BuildProbe probe;
  probe.set_name("round");
  probe.add_sizes(7);
  std::string text;
  ASSERT_TRUE(google::protobuf::TextFormat::PrintToString(probe, &text));
  lmforge::selftest::BuildProbe back;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &back));
  EXPECT_EQ(back.name(), "round");
  EXPECT_EQ(back.sizes(0), 7);
}

}  // namespace
