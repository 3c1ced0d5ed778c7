// The peers the flags choose (the current PyTorch in each mode, then Debian's 1.13 unless it is the same
// python), a bad mode named in the error, the default python's order ($LMF_TORCH_PYTHON first), and the peer
// table's ratios, names and failures.
#include "kernels/testing/torch_peers.h"

#include <cstdlib>

#include "absl/flags/flag.h"
#include "gtest/gtest.h"

namespace lmf::kernels::testing {
namespace {

TEST(TorchPeers, FlagsGiveEachModeThenDebianEager) {
  absl::SetFlag(&FLAGS_torch_python, "/venv/bin/python");
  absl::SetFlag(&FLAGS_torch_modes, "eager,compile,bf16");
  absl::SetFlag(&FLAGS_debian_python, "/usr/bin/python3");
  absl::StatusOr<std::vector<TorchPeerSpec>> specs = TorchPeerSpecsFromFlags();
  ASSERT_TRUE(specs.ok()) << specs.status();
  ASSERT_EQ(specs->size(), 4u);
  EXPECT_EQ((*specs)[0].python, "/venv/bin/python");
  EXPECT_EQ((*specs)[0].mode, "eager");
  EXPECT_EQ((*specs)[1].mode, "compile");
  EXPECT_EQ((*specs)[2].mode, "bf16");
  EXPECT_EQ((*specs)[3].python, "/usr/bin/python3");
  EXPECT_EQ((*specs)[3].mode, "eager");
}

TEST(TorchPeers, DebianLeftOutWhenEmptyOrTheSamePython) {
  absl::SetFlag(&FLAGS_torch_modes, "eager");
  absl::SetFlag(&FLAGS_torch_python, "/usr/bin/python3");
  absl::SetFlag(&FLAGS_debian_python, "/usr/bin/python3");
  EXPECT_EQ(TorchPeerSpecsFromFlags()->size(), 1u);
  absl::SetFlag(&FLAGS_torch_python, "/venv/bin/python");
  absl::SetFlag(&FLAGS_debian_python, "");
  EXPECT_EQ(TorchPeerSpecsFromFlags()->size(), 1u);
}

TEST(TorchPeers, UnknownModeIsNamed) {
  absl::SetFlag(&FLAGS_torch_modes, "eager,fp16");
  absl::StatusOr<std::vector<TorchPeerSpec>> specs = TorchPeerSpecsFromFlags();
  ASSERT_FALSE(specs.ok());
  EXPECT_NE(std::string(specs.status().message()).find("'fp16'"), std::string::npos) << specs.status();
  absl::SetFlag(&FLAGS_torch_modes, "eager,compile,bf16");
}

TEST(TorchPeers, EnvironmentChoosesThePython) {
  ASSERT_EQ(setenv("LMF_TORCH_PYTHON", "/opt/torch/bin/python", 1), 0);
  EXPECT_EQ(CurrentTorchPython(), "/opt/torch/bin/python");
  ASSERT_EQ(setenv("LMF_TORCH_PYTHON", "", 1), 0);
  ASSERT_EQ(setenv("HOME", "/nonexistent-home", 1), 0);
  EXPECT_EQ(CurrentTorchPython(), kDebianPython);  // no venv under that HOME
}

TEST(TorchPeers, TableHasRatiosNamesAndFailures) {
  CpuPeer ok;
  ok.ms = {{"a_fwd", 30.0}};
  ok.description = "W some warning\npeer PyTorch 2.15.0 eager fp32, 2 threads";
  std::vector<TorchPeerRun> peers = {{{"/venv/bin/python", "eager"}, ok},
                                     {{"/usr/bin/python3", "compile"}, absl::UnavailableError("no torch.compile")}};
  EXPECT_EQ(peers[0].Name(), "PyTorch 2.15.0 eager fp32, 2 threads");
  EXPECT_EQ(peers[1].Name(), "/usr/bin/python3 compile");
  const std::string table = FormatPeerTable(peers, {{"a_fwd", 10.0}, {"a_bwd", 20.0}});
  EXPECT_NE(table.find("3.00x"), std::string::npos) << table;
  EXPECT_NE(table.find("n/a"), std::string::npos) << table;
  EXPECT_NE(table.find("peer 1: PyTorch 2.15.0 eager fp32"), std::string::npos) << table;
  EXPECT_NE(table.find("peer 2: /usr/bin/python3 compile: unavailable: no torch.compile"), std::string::npos)
      << table;
}

}  // namespace
}  // namespace lmf::kernels::testing
