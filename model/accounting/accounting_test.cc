// Tests of the config-only accounting: GPT-2 small's well-known parameter count, the CS336 TinyStories
// model's, and the FLOP formula against a hand count.
#include "model/accounting/accounting.h"

#include "gtest/gtest.h"

namespace lmf::model {
namespace {

TEST(AccountingTest, Gpt2SmallHas124MParameters) {
  // The published GPT-2 small (vocab 50257, context 1024) has 124,439,808 parameters, tied head.
  const ParameterCounts p = CountParameters(Gpt2Config(50257, 1024, 768, 12, 12));
  EXPECT_EQ(p.total(), 124439808);
  EXPECT_EQ(p.token_embedding, 50257 * 768);
  EXPECT_EQ(p.position_embedding, 1024 * 768);
  EXPECT_EQ(p.lm_head, 0);
  EXPECT_EQ(p.non_embedding(), 124439808 - 50257 * 768 - 1024 * 768);
}

TEST(AccountingTest, Cs336TinyStoriesModelCount) {
  // 4 layers of (2 RMSNorm gains + 4 C^2 attention + 3 C d_ff SwiGLU), embeddings, final norm, untied head.
  const ModelConfig c = Cs336Config(10000, 256, 512, 4, 16, 1344);
  const int64_t block = 2 * 512 + 4 * 512 * 512 + 3 * 512 * 1344;
  const ParameterCounts p = CountParameters(c);
  EXPECT_EQ(p.blocks, 4 * block);
  EXPECT_EQ(p.total(), 10000 * 512 + 4 * block + 512 + 10000 * 512);
  EXPECT_EQ(p.non_embedding(), 4 * block + 512 + 10000 * 512);
}

TEST(AccountingTest, GroupedQueryAttentionShrinksKeyValueProjections) {
  ModelConfig c = Cs336Config(1000, 64, 256, 2, 8, 512);
  const int64_t mha = CountParameters(c).blocks;
  c.n_kv_heads = 2;  // k and v shrink from 256x256 to 64x256 each, per layer
  EXPECT_EQ(mha - CountParameters(c).blocks, 2 * 2 * (256 * 256 - 64 * 256));
}

TEST(AccountingTest, FlopsPerTokenByHand) {
  const ModelConfig c = Gpt2Config(50304, 1024, 768, 12, 12);
  const FlopsPerToken f = CountFlopsPerToken(c, 256);
  const double weights = 12.0 * (4 * 768 * 768 + 2 * 768 * 3072) + 50304.0 * 768;
  EXPECT_DOUBLE_EQ(f.matmul_forward, 2 * weights);
  EXPECT_DOUBLE_EQ(f.attention_forward, 2.0 * 12 * 768 * 257);
  EXPECT_DOUBLE_EQ(f.training(), 3 * (2 * weights + 2.0 * 12 * 768 * 257));
  // Close to the 6N rule for short sequences.
  EXPECT_NEAR(f.training() / (6.0 * weights), 1.0, 0.05);
}

TEST(AccountingTest, ActivationBytesGrowWithWidthAndVocab) {
  const ModelConfig small = Cs336Config(1000, 64, 128, 2, 4, 256);
  ModelConfig wider = small;
  wider.d_ff = 512;  // SwiGLU keeps three d_ff-wide tensors per token
  EXPECT_EQ(CountActivationBytesPerToken(wider).per_block - CountActivationBytesPerToken(small).per_block,
            4 * 3 * 256);
  ModelConfig bigger_vocab = small;
  bigger_vocab.vocab_size = 2000;
  EXPECT_EQ(CountActivationBytesPerToken(bigger_vocab).total() - CountActivationBytesPerToken(small).total(),
            4 * 1000);
}

// With bf16 activations every stored tensor halves except the fp32 statistics (norm mean/rstd, attention and
// loss log-sum-exps) and the int32 ids and targets.
TEST(AccountingTest, Bf16ActivationsHalveEverythingButStatisticsAndIds) {
  ModelConfig c = Gpt2Config(1000, 64, 128, 2, 4);  // LayerNorm: mean and rstd per norm
  const ActivationBytesPerToken f32 = CountActivationBytesPerToken(c);
  const ActivationBytesPerToken bf16 = CountActivationBytesPerToken(c, kernels::DType::kBF16);
  const int64_t block_statistics = 2 * 2 + 4;  // two LayerNorms' mean and rstd, one lse per head
  EXPECT_EQ(f32.per_block - bf16.per_block, (f32.per_block - 4 * block_statistics) / 2);
  const int64_t head_statistics_and_ids = 2 + 1 + 2;  // final norm mean/rstd, loss lse (fp32); ids, targets
  EXPECT_EQ(f32.final_and_head - bf16.final_and_head, (f32.final_and_head - 4 * head_statistics_and_ids) / 2);
}

}  // namespace
}  // namespace lmf::model
