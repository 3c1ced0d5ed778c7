// The .npz reader returns numpy's values, dtypes and shapes for every supported dtype, reads the CS336
// snapshot format, and reports missing files and arrays with their names.
#include "kernels/testing/npz.h"

#include "base/shared_data.h"
#include "gtest/gtest.h"

namespace lmf::kernels::testing {
namespace {

TEST(Npz, ReadsEveryDtypeWithShapes) {
  auto npz = NpzFile::Read("kernels/testdata/npz_reader.npz");
  ASSERT_TRUE(npz.ok()) << npz.status();
  auto f32 = npz->Get("f32");
  ASSERT_TRUE(f32.ok()) << f32.status();
  EXPECT_EQ((*f32)->dtype, "f4");
  EXPECT_EQ((*f32)->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ((*f32)->ToFloat(), (std::vector<float>{0, 0.25f, 0.5f, 0.75f, 1.0f, 1.25f}));
  EXPECT_EQ((*npz->Get("f64"))->ToDouble(), (std::vector<double>{1.5, -2.25}));
  EXPECT_EQ((*npz->Get("i64"))->ToInt64(), (std::vector<int64_t>{-3, 4}));
  EXPECT_EQ((*npz->Get("i64"))->shape, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ((*npz->Get("i32"))->ToInt32(), (std::vector<int32_t>{7, -8, 9}));
  EXPECT_EQ((*npz->Get("b"))->dtype, "b1");
  EXPECT_EQ((*npz->Get("b"))->ToInt32(), (std::vector<int32_t>{1, 0, 1}));
  EXPECT_TRUE((*npz->Get("scalar"))->shape.empty());
  EXPECT_EQ((*npz->Get("scalar"))->ToFloat(), (std::vector<float>{2.5f}));
}

TEST(Npz, ErrorsNameTheFileAndArray) {
  auto missing = NpzFile::Read("kernels/testdata/no_such_file.npz");
  EXPECT_FALSE(missing.ok());
  EXPECT_NE(std::string(missing.status().message()).find("no_such_file.npz"), std::string::npos);
  auto npz = NpzFile::Read("kernels/testdata/npz_reader.npz");
  ASSERT_TRUE(npz.ok());
  auto absent = npz->Get("nope");
  EXPECT_FALSE(absent.ok());
  EXPECT_NE(std::string(absent.status().message()).find("nope"), std::string::npos);
  auto wrong_count = npz->Floats("f32", 5);
  EXPECT_FALSE(wrong_count.ok());
  auto floats_as_ints = npz->Ints("f32");
  EXPECT_FALSE(floats_as_ints.ok());
}

TEST(Npz, RejectsNonNpyData) {
  EXPECT_FALSE(ParseNpy("not an array", "blob").ok());
  EXPECT_FALSE(ParseNpy(std::string("\x93NUMPY\x01\x00\x10\x00{'descr': '<c8', ", 26), "blob").ok());
}

TEST(Npz, ReadsCs336Snapshot) {
  LMF_SHARED_DATA_OR_SKIP(path, "cs336/assignment1-basics/tests/_snapshots/test_rope.npz");
  auto npz = NpzFile::Read(path);
  ASSERT_TRUE(npz.ok()) << npz.status();
  auto a = npz->Get("array");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ((*a)->shape, (std::vector<int64_t>{4, 12, 64}));
}

}  // namespace
}  // namespace lmf::kernels::testing
