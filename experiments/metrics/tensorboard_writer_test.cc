// TensorBoard event files: the Event encoding against bytes hand-encoded from TensorFlow's field numbers,
// TFRecord framing and its CRCs, and a written file read back record by record.
#include "experiments/metrics/tensorboard_writer.h"

#include <string>
#include <vector>

#include "base/file.h"
#include "experiments/crc32c/crc32c.h"
#include "experiments/metrics/tensorboard_event.pb.h"
#include "gtest/gtest.h"

namespace lmf::experiments {
namespace {

TEST(TensorBoardEvent, EncodesWithTensorFlowFieldNumbers) {
  tensorboard::Event event;
  event.set_step(5);
  tensorboard::SummaryValue* v = event.mutable_summary()->add_value();
  v->set_tag("loss");
  v->set_simple_value(1.5f);
  // Event.step = 2 (varint), Event.summary = 5 (length-delimited) { Summary.value = 1 { Value.tag = 1,
  // Value.simple_value = 2 (fixed32, 1.5f = 0x3fc00000) } }.
  const std::string expected("\x10\x05"
                             "\x2a\x0d"
                             "\x0a\x0b"
                             "\x0a\x04loss"
                             "\x15\x00\x00\xc0\x3f",
                             17);
  EXPECT_EQ(event.SerializeAsString(), expected);

  tensorboard::Event version;
  version.set_file_version("brain.Event:2");
  EXPECT_EQ(version.SerializeAsString(), std::string("\x1a\x0d") + "brain.Event:2");

  tensorboard::Event restart;
  restart.mutable_session_log()->set_status(tensorboard::SessionLog::START);
  EXPECT_EQ(restart.SerializeAsString(), std::string("\x3a\x02\x08\x01", 4));  // field 7 { status = 1 }
}

TEST(TensorBoardEvent, HistogramIsSummaryValueFieldFive) {
  tensorboard::SummaryValue v;
  v.set_tag("h");
  v.mutable_histo()->set_num(2.0);  // HistogramProto.num = 3 (double 2.0 = 0x4000000000000000)
  EXPECT_EQ(v.SerializeAsString(), std::string("\x0a\x01h\x2a\x09\x19\x00\x00\x00\x00\x00\x00\x00\x40", 14));
}

TEST(TensorBoardEvent, ZeroScalarIsStillWritten) {
  tensorboard::SummaryValue v;
  v.set_tag("lr");
  v.set_simple_value(0.0f);
  EXPECT_EQ(v.SerializeAsString(), std::string("\x0a\x02lr\x15\x00\x00\x00\x00", 9));
}

TEST(TfRecord, FramesWithMaskedCrcs) {
  const std::string framed = FrameTfRecord("abc");
  ASSERT_EQ(framed.size(), 8u + 4 + 3 + 4);
  EXPECT_EQ(framed.substr(0, 8), std::string("\x03\0\0\0\0\0\0\0", 8));
  const uint32_t length_crc = MaskCrc32c(Crc32c(framed.substr(0, 8)));
  const uint32_t data_crc = MaskCrc32c(Crc32c("abc"));
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(static_cast<unsigned char>(framed[8 + i]), (length_crc >> (8 * i)) & 0xFF);
    EXPECT_EQ(static_cast<unsigned char>(framed[15 + i]), (data_crc >> (8 * i)) & 0xFF);
  }
  EXPECT_EQ(framed.substr(12, 3), "abc");
}

TEST(TfRecord, ReaderRejectsCorruptionAndTears) {
  const std::string two = FrameTfRecord("first") + FrameTfRecord("second");
  auto records = ReadTfRecords(two, "f");
  ASSERT_TRUE(records.ok());
  EXPECT_EQ(*records, (std::vector<std::string>{"first", "second"}));
  std::string flipped = two;
  flipped[14] ^= 1;
  EXPECT_EQ(ReadTfRecords(flipped, "f").status().message(), "f: record 0 at byte 0: data CRC mismatch");
  EXPECT_EQ(ReadTfRecords(two.substr(0, two.size() - 2), "f").status().message(),
            "f: record 1 at byte 21: torn data");
}

TEST(TensorBoardWriter, WritesVersionThenScalarEvents) {
  const std::string dir = std::string(getenv("TEST_TMPDIR")) + "/tb";
  ASSERT_TRUE(MakeDirs(dir).ok());
  auto writer = TensorBoardWriter::Create(dir);
  ASSERT_TRUE(writer.ok()) << writer.status();
  EXPECT_NE(writer->path().find("/events.out.tfevents."), std::string::npos);
  ASSERT_TRUE(writer->WriteScalars(10, {{"train/loss", 2.5}, {"train/lr", 1e-3}}).ok());
  ASSERT_TRUE(writer->WriteRestart(5).ok());
  ASSERT_TRUE(writer->WriteIndexHistograms(11, {{"moe/expert_load/layers.1.ffn", {3, 0, 5}}}).ok());
  const std::string path = writer->path();
  auto bytes = ReadFile(path);
  ASSERT_TRUE(bytes.ok());
  auto records = ReadTfRecords(*bytes, path);
  ASSERT_TRUE(records.ok()) << records.status();
  ASSERT_EQ(records->size(), 4u);
  tensorboard::Event histogram;
  ASSERT_TRUE(histogram.ParseFromString((*records)[3]));
  EXPECT_EQ(histogram.step(), 11);
  ASSERT_EQ(histogram.summary().value_size(), 1);
  const tensorboard::HistogramProto& h = histogram.summary().value(0).histo();
  EXPECT_EQ(histogram.summary().value(0).tag(), "moe/expert_load/layers.1.ffn");
  // Index 0 three times, index 2 five times: num 8, sum 10, sum of squares 20, buckets around 0, 1, 2.
  EXPECT_EQ(h.min(), 0);
  EXPECT_EQ(h.max(), 2);
  EXPECT_EQ(h.num(), 8);
  EXPECT_EQ(h.sum(), 10);
  EXPECT_EQ(h.sum_squares(), 20);
  EXPECT_EQ(std::vector<double>(h.bucket_limit().begin(), h.bucket_limit().end()), (std::vector<double>{0.5, 1.5, 2.5}));
  EXPECT_EQ(std::vector<double>(h.bucket().begin(), h.bucket().end()), (std::vector<double>{3, 0, 5}));
  tensorboard::Event first, second, third;
  ASSERT_TRUE(first.ParseFromString((*records)[0]));
  EXPECT_EQ(first.file_version(), "brain.Event:2");
  EXPECT_GT(first.wall_time(), 1.6e9);
  ASSERT_TRUE(second.ParseFromString((*records)[1]));
  EXPECT_EQ(second.step(), 10);
  ASSERT_EQ(second.summary().value_size(), 2);
  EXPECT_EQ(second.summary().value(0).tag(), "train/loss");
  EXPECT_EQ(second.summary().value(0).simple_value(), 2.5f);
  EXPECT_EQ(second.summary().value(1).simple_value(), 1e-3f);
  ASSERT_TRUE(third.ParseFromString((*records)[2]));
  EXPECT_EQ(third.session_log().status(), tensorboard::SessionLog::START);
  EXPECT_EQ(third.step(), 5);
}

}  // namespace
}  // namespace lmf::experiments
