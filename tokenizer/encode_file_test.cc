// Tests of streaming file encoding: with many small chunks the token file holds exactly the ids of
// encoding the whole text at once (and, with GPT-2, tiktoken's ids), and its header names the tokenizer.
#include "tokenizer/encode_file.h"

#include <random>

#include "base/file.h"
#include "base/shared_data.h"
#include "gtest/gtest.h"
#include "tokenizer/gpt2_format.h"
#include "tokenizer/test_util.h"
#include "tokenizer/token_file.h"

namespace lmf::tokenizer {
namespace {

using testing::TempPath;

std::vector<uint32_t> ReadIds(const std::string& path, TokenFileHeader* header) {
  auto r = TokenFileReader::Open(path);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return {};
  *header = r->header();
  std::vector<uint32_t> ids;
  for (uint64_t i = 0; i < r->size(); ++i) ids.push_back(r->at(i));
  return ids;
}

TEST(EncodeFileTest, SmallChunksGiveTheIdsOfTheWholeText) {
  Tokenizer t = testing::MakeTokenizer({{"t", "h"}, {"th", "e"}, {" ", "the"}, {"\n", "\n"}}, {"<|endoftext|>"});
  std::mt19937 rng(9);
  const char* atoms[] = {"the", " the", "\n", "\n\n", " ", "x", "<|endoftext|>", "é", "  "};
  std::string text;
  for (int i = 0; i < 5000; ++i) text += atoms[rng() % 9];
  const std::string input = TempPath("input.txt"), output = TempPath("out.tok");
  ASSERT_TRUE(WriteFileAtomically(input, text).ok());
  ThreadPool pool(3);
  EncodeFileOptions options;
  options.pool = &pool;
  options.chunk_bytes = 64;
  uint64_t last_progress = 0;
  options.progress = [&](uint64_t done, uint64_t total, uint64_t) {
    EXPECT_LE(done, total);
    last_progress = done;
  };
  auto stats = EncodeFilesToTokenFile(t, {input, input}, output, options);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(last_progress, 2 * text.size());
  TokenFileHeader header;
  const std::vector<uint32_t> ids = ReadIds(output, &header);
  std::vector<uint32_t> expected = t.Encode(text);
  const size_t one = expected.size();
  expected.insert(expected.end(), expected.begin(), expected.begin() + one);
  EXPECT_EQ(ids, expected);
  EXPECT_EQ(stats->tokens, expected.size());
  EXPECT_EQ(stats->bytes, 2 * text.size());
  EXPECT_EQ(header.tokenizer_hash, t.Hash());
  EXPECT_EQ(header.vocab_size, t.vocab_size());
  EXPECT_EQ(header.bytes_per_token, 2u);
}

TEST(EncodeFileTest, MissingInputIsAnErrorAndWritesNothing) {
  Tokenizer t = testing::MakeTokenizer({}, {});
  const std::string output = TempPath("never.tok");
  auto stats = EncodeFilesToTokenFile(t, {"/nonexistent/input.txt"}, output, {});
  ASSERT_FALSE(stats.ok());
  EXPECT_NE(stats.status().message().find("/nonexistent/input.txt"), std::string::npos);
  EXPECT_FALSE(FileExists(output));
}

TEST(EncodeFileTest, Gpt2StreamingEncodeMatchesTiktoken) {
  const std::string dir = "cs336/assignment1-basics/tests/fixtures/";
  LMF_SHARED_DATA_OR_SKIP(vocab, dir + "gpt2_vocab.json");
  LMF_SHARED_DATA_OR_SKIP(merges, dir + "gpt2_merges.txt");
  LMF_SHARED_DATA_OR_SKIP(corpus, dir + "tinystories_sample.txt");
  auto t = LoadGpt2(vocab, merges, {"<|endoftext|>"});
  ASSERT_TRUE(t.ok()) << t.status();
  EncodeFileOptions options;
  options.chunk_bytes = 200;
  const std::string output = TempPath("tinystories.tok");
  ASSERT_TRUE(EncodeFilesToTokenFile(*t, {corpus}, output, options).ok());
  TokenFileHeader header;
  const std::vector<uint32_t> ids = ReadIds(output, &header);
  EXPECT_EQ(ids, testing::ParseIds(*ReadFile("tokenizer/testdata/tiktoken_gpt2_tinystories_sample.txt.ids")));
  EXPECT_EQ(header.vocab_size, 50257u);
}

}  // namespace
}  // namespace lmf::tokenizer
