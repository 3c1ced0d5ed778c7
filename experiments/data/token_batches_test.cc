// Training windows (shifted targets, seeded, resumable, in range), validation order, and the errors for a
// file that does not fit the run: vocab, tokenizer hash, truncation, too small for a window or a budget.
#include "experiments/data/token_batches.h"

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <numeric>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tokenizer/token_file.h"

namespace lmf::experiments {
namespace {

constexpr uint64_t kHash = 0x1234abcd5678ef00ull;

// A token file of ids 0, 1, 2, ... (mod vocab) in the test's temp folder.
std::string WriteTokens(const std::string& name, uint64_t n, uint32_t vocab = 1000, uint64_t hash = kHash) {
  const std::string path = std::string(getenv("TEST_TMPDIR")) + "/" + name;
  auto writer = tokenizer::TokenFileWriter::Create(path, vocab, hash);
  EXPECT_TRUE(writer.ok()) << writer.status();
  std::vector<uint32_t> ids(n);
  for (uint64_t i = 0; i < n; ++i) ids[i] = static_cast<uint32_t>(i % vocab);
  EXPECT_TRUE(writer->Append(ids.data(), ids.size()).ok());
  EXPECT_TRUE(writer->Commit().ok());
  return path;
}

TokenFileExpectations Expect(int64_t batch, int64_t context, int64_t vocab = 1000) {
  TokenFileExpectations e;
  e.model_vocab_size = vocab;
  e.batch_size = batch;
  e.context_length = context;
  return e;
}

TEST(TrainBatchSampler, TargetsAreInputsShiftedByOne) {
  const std::string path = WriteTokens("shift.tok", 500);
  auto sampler = TrainBatchSampler::Open(path, Expect(3, 8), 42);
  ASSERT_TRUE(sampler.ok()) << sampler.status();
  std::vector<int32_t> x(24), y(24);
  ASSERT_TRUE(sampler->Next(x.data(), y.data()).ok());
  for (int b = 0; b < 3; ++b) {
    for (int t = 0; t < 8; ++t) {
      // The file holds i at position i, so a window is consecutive integers.
      EXPECT_EQ(x[b * 8 + t], x[b * 8] + t);
      EXPECT_EQ(y[b * 8 + t], x[b * 8 + t] + 1);
    }
  }
  EXPECT_EQ(sampler->state().windows_drawn, 3u);
}

TEST(TrainBatchSampler, SameSeedSameBatchesOtherSeedOthers) {
  const std::string path = WriteTokens("seed.tok", 5000);
  auto a = TrainBatchSampler::Open(path, Expect(4, 16), 7);
  auto b = TrainBatchSampler::Open(path, Expect(4, 16), 7);
  auto c = TrainBatchSampler::Open(path, Expect(4, 16), 8);
  std::vector<int32_t> xa(64), ya(64), xb(64), yb(64), xc(64), yc(64);
  ASSERT_TRUE(a->Next(xa.data(), ya.data()).ok());
  ASSERT_TRUE(b->Next(xb.data(), yb.data()).ok());
  ASSERT_TRUE(c->Next(xc.data(), yc.data()).ok());
  EXPECT_EQ(xa, xb);
  EXPECT_NE(xa, xc);
}

TEST(TrainBatchSampler, RestoredStateContinuesTheSameStream) {
  const std::string path = WriteTokens("resume.tok", 5000);
  auto full = TrainBatchSampler::Open(path, Expect(2, 16), 99);
  std::vector<int32_t> x(32), y(32);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(full->Next(x.data(), y.data()).ok());
  const SamplerState saved = full->state();
  std::vector<int32_t> expected_x(32), expected_y(32);
  ASSERT_TRUE(full->Next(expected_x.data(), expected_y.data()).ok());

  auto resumed = TrainBatchSampler::Open(path, Expect(2, 16), 12345);
  resumed->Restore(saved);
  ASSERT_TRUE(resumed->Next(x.data(), y.data()).ok());
  EXPECT_EQ(x, expected_x);
  EXPECT_EQ(y, expected_y);
}

TEST(TrainBatchSampler, StartsCoverTheWholeValidRange) {
  // 11 tokens and T = 8: a window needs 9, so the starts are 0, 1, 2 and all three must occur.
  std::set<uint64_t> starts;
  for (uint64_t i = 0; i < 300; ++i) {
    const uint64_t s = TrainBatchSampler::WindowStart(5, i, 11, 8);
    ASSERT_LE(s, 2u);
    starts.insert(s);
  }
  EXPECT_EQ(starts.size(), 3u);
}

// A token file of ids offset + (i mod 400), vocab 1000: the windows of two such files with offsets 0 and 500
// tell their source by their first id.
std::string WriteRange(const std::string& name, uint64_t n, uint32_t offset, uint64_t hash = kHash) {
  const std::string path = std::string(getenv("TEST_TMPDIR")) + "/" + name;
  auto writer = tokenizer::TokenFileWriter::Create(path, 1000, hash);
  EXPECT_TRUE(writer.ok()) << writer.status();
  std::vector<uint32_t> ids(n);
  for (uint64_t i = 0; i < n; ++i) ids[i] = offset + static_cast<uint32_t>(i % 400);
  EXPECT_TRUE(writer->Append(ids.data(), ids.size()).ok());
  EXPECT_TRUE(writer->Commit().ok());
  return path;
}

// A mixture of one file is that file; a 3:1 mixture draws 3/4 of its windows from the first source (4,000
// windows: a binomial standard deviation of 0.0068, so 0.03 is 4.4 of them), resumes on the same stream, and
// refuses a source of another tokenizer naming both files.
TEST(TrainBatchSampler, MixturesDrawFromEachSourceByWeight) {
  const std::string a = WriteRange("mix_a.tok", 5000, 0), b = WriteRange("mix_b.tok", 3000, 500);
  auto single = TrainBatchSampler::Open(a, Expect(4, 16), 7);
  auto one = TrainBatchSampler::Open(std::vector<TrainSource>{{a, 2.5}}, Expect(4, 16), 7);
  ASSERT_TRUE(single.ok() && one.ok());
  std::vector<int32_t> x1(64), y1(64), x2(64), y2(64);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(single->Next(x1.data(), y1.data()).ok());
    ASSERT_TRUE(one->Next(x2.data(), y2.data()).ok());
    EXPECT_EQ(x1, x2);
  }

  auto mix = TrainBatchSampler::Open(std::vector<TrainSource>{{a, 3}, {b, 1}}, Expect(4, 16), 11);
  ASSERT_TRUE(mix.ok()) << mix.status();
  int from_a = 0;
  SamplerState saved;
  std::vector<int32_t> x(64), y(64), after_x(64);
  for (int i = 0; i < 1000; ++i) {
    if (i == 500) saved = mix->state();
    ASSERT_TRUE(mix->Next(x.data(), y.data()).ok());
    if (i == 500) after_x = x;
    for (int w = 0; w < 4; ++w) {
      const int32_t first = x[w * 16];
      ASSERT_TRUE(first < 400 || (first >= 500 && first < 900)) << first;
      for (int t = 1; t < 16; ++t) ASSERT_EQ((x[w * 16 + t] < 400), (first < 400));  // one source per window
      from_a += first < 400;
    }
  }
  EXPECT_NEAR(from_a / 4000.0, 0.75, 0.03);
  auto resumed = TrainBatchSampler::Open(std::vector<TrainSource>{{a, 3}, {b, 1}}, Expect(4, 16), 0);
  ASSERT_TRUE(resumed.ok());
  resumed->Restore(saved);
  ASSERT_TRUE(resumed->Next(x.data(), y.data()).ok());
  EXPECT_EQ(x, after_x);

  const std::string other = WriteRange("mix_other.tok", 3000, 500, 0xbeefull);
  auto mismatched = TrainBatchSampler::Open(std::vector<TrainSource>{{a, 1}, {other, 1}}, Expect(4, 16), 1);
  EXPECT_EQ(mismatched.status().message(),
            other + ": tokenizer_hash 000000000000beef differs from the mixture's first file " + a +
                " (1234abcd5678ef00): the sources of one mixture must be encoded with one tokenizer");
}

TEST(ValidationBatches, ReadsWindowsInOrder) {
  const std::string path = WriteTokens("val.tok", 200);
  auto val = ValidationBatches::Open(path, Expect(2, 10), 45);  // 45 / 20 = 2 batches
  ASSERT_TRUE(val.ok()) << val.status();
  EXPECT_EQ(val->num_batches(), 2);
  std::vector<int32_t> x(20), y(20);
  ASSERT_TRUE(val->Get(1, x.data(), y.data()).ok());
  // Batch 1 holds windows 2 and 3, starting at ids 20 and 30.
  EXPECT_EQ(x[0], 20);
  EXPECT_EQ(x[10], 30);
  EXPECT_EQ(y[19], 40);
}

TEST(TokenFileChecks, VocabLargerThanModelIsAnError) {
  const std::string path = WriteTokens("vocab.tok", 100, 50257);
  auto sampler = TrainBatchSampler::Open(path, Expect(1, 8, 10000), 1);
  ASSERT_FALSE(sampler.ok());
  EXPECT_EQ(sampler.status().message(),
            path + ": the token file's tokenizer has vocab_size=50257, more than model.vocab_size=10000");
}

// Ids at or above the header's vocab_size (a corrupt file: the writer refuses them) are found when a sampler
// is opened, the first one by position, across the scan's chunks of 2^20 ids; validation batches check the
// prefix they read.
TEST(TokenFileChecks, AnIdOutsideTheVocabularyIsAnErrorAtOpen) {
  const std::string path = WriteTokens("bad_id.tok", 2200000);
  {
    FILE* f = std::fopen(path.c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    const uint16_t bad[2] = {1000, 65535};
    for (int i = 0; i < 2; ++i) {  // two bad ids: the later one at 2,100,000, the first at 1,100,000
      ASSERT_EQ(std::fseek(f, 64 + 2 * (i == 0 ? 2100000 : 1100000), SEEK_SET), 0);
      ASSERT_EQ(std::fwrite(&bad[i], 2, 1, f), 1u);
    }
    std::fclose(f);
  }
  auto sampler = TrainBatchSampler::Open(path, Expect(1, 8), 1);
  ASSERT_FALSE(sampler.ok());
  EXPECT_EQ(sampler.status().message(), path +
                                            ": token id 65535 at position 1100000 is not below the file's "
                                            "vocab_size 1000 (a corrupt token file)");
  // Validation reads (and checks) only its budget's prefix.
  auto val = ValidationBatches::Open(path, Expect(1, 8), 1200000);
  EXPECT_EQ(val.status().message(), sampler.status().message());
  EXPECT_TRUE(ValidationBatches::Open(path, Expect(1, 8), 1000000).ok());
}

TEST(TokenFileChecks, SmallerVocabThanModelIsAccepted) {
  // Models pad their vocabulary (GPT-2: 50257 ids in a 50304-row table).
  const std::string path = WriteTokens("padded.tok", 100, 900);
  EXPECT_TRUE(TrainBatchSampler::Open(path, Expect(1, 8, 1000), 1).ok());
}

TEST(TokenFileChecks, TokenizerHashMismatchIsAnError) {
  const std::string path = WriteTokens("hash.tok", 100);
  TokenFileExpectations expect = Expect(1, 8);
  expect.tokenizer_hash = 0xfeedull;
  auto sampler = TrainBatchSampler::Open(path, expect, 1);
  ASSERT_FALSE(sampler.ok());
  EXPECT_EQ(sampler.status().message(),
            path + ": the token file was written by a different tokenizer (header tokenizer_hash=1234abcd5678ef00, "
                   "data.tokenizer has hash 000000000000feed)");
  expect.tokenizer_hash = kHash;
  EXPECT_TRUE(TrainBatchSampler::Open(path, expect, 1).ok());
}

TEST(TokenFileChecks, TruncatedFileIsAnError) {
  const std::string path = WriteTokens("truncated.tok", 100);
  ASSERT_EQ(truncate(path.c_str(), 64 + 2 * 60), 0);
  auto sampler = TrainBatchSampler::Open(path, Expect(1, 8), 1);
  ASSERT_FALSE(sampler.ok());
  EXPECT_NE(std::string(sampler.status().message()).find("truncated"), std::string::npos) << sampler.status();
  EXPECT_NE(std::string(sampler.status().message()).find(path), std::string::npos);
}

TEST(TokenFileChecks, FileSmallerThanOneBatchIsAnError) {
  const std::string path = WriteTokens("tiny.tok", 32);
  auto sampler = TrainBatchSampler::Open(path, Expect(4, 8), 1);
  ASSERT_FALSE(sampler.ok());
  EXPECT_EQ(sampler.status().message(),
            path + ": 32 tokens are too few for one batch: run.batch_size * model.context_length + 1 = 4 * 8 + 1 = "
                   "33 tokens");
  EXPECT_TRUE(TrainBatchSampler::Open(WriteTokens("enough.tok", 33), Expect(4, 8), 1).ok());
}

// A batch size so large that B * T passes 64 bits (eval --batch_size=4611686018427387904 divided by zero, and
// 576460752303423489 read past its buffers) is the same error as any batch too large for the file, with the
// exact count, under the name the batch size was given by.
TEST(TokenFileChecks, ABatchWhoseTokensPassSixtyFourBitsIsTooLargeForTheFile) {
  const std::string path = WriteTokens("overflow.tok", 100);
  for (const auto& [batch, needs] :
       {std::pair<int64_t, std::string>{int64_t{1} << 62, "18446744073709551617"},
        {576460752303423489, "2305843009213693957"},
        {INT64_MAX, "36893488147419103229"}}) {
    TokenFileExpectations expect = Expect(batch, 4);
    expect.batch_size_source = "--batch_size";
    auto val = ValidationBatches::Open(path, expect, 1000);
    ASSERT_FALSE(val.ok()) << batch;
    EXPECT_EQ(val.status().message(),
              absl::StrCat(path,
                           ": 100 tokens are too few for one batch: --batch_size * model.context_length + "
                           "1 = ",
                           batch, " * 4 + 1 = ", needs, " tokens"));
    EXPECT_FALSE(TrainBatchSampler::Open(path, expect, 1).ok()) << batch;
  }
  EXPECT_TRUE(ValidationBatches::Open(path, Expect(24, 4), 96).ok());  // 24 * 4 + 1 = 97 ids fit
}

TEST(TokenFileChecks, ValidationFileSmallerThanTheBudgetIsAnError) {
  const std::string path = WriteTokens("small_val.tok", 50);
  auto val = ValidationBatches::Open(path, Expect(2, 10), 60);  // 3 batches of 20 need 61 ids
  ASSERT_FALSE(val.ok());
  EXPECT_EQ(val.status().message(),
            path + ": 50 tokens are too few for the validation budget: 3 batches of 2 x 10 tokens need 61 "
                   "(lower run.eval_tokens or use a larger file)");
}

}  // namespace
}  // namespace lmf::experiments
