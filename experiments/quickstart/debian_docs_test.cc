// The Debian documentation corpus (--data=debian-docs): which files it takes from a folder, its refusal
// when there is too little text, and the quickstart on the machine's own /usr/share/doc: it builds the
// corpus, a tokenizer and token files, and trains a small sweep (3 runs) to a report that names its data.
#include "experiments/quickstart/debian_docs.h"

#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "base/file.h"
#include "experiments/quickstart/quickstart.h"
#include "gtest/gtest.h"

namespace lmf::quickstart {
namespace {

std::string TmpDir() { return std::getenv("TEST_TMPDIR"); }

std::string Prose(int sentences) {
  std::string text;
  for (int i = 0; i < sentences; ++i) text += "This package provides a small tool. See the manual for more.\n";
  return text;
}

TEST(DebianDocs, TakesPlainTextDocumentsInPathOrderAndSkipsTheRest) {
  const std::string root = TmpDir() + "/doc";
  ASSERT_TRUE(MakeDirs(root + "/alpha").ok());
  ASSERT_TRUE(MakeDirs(root + "/beta").ok());
  ASSERT_TRUE(WriteFileAtomically(root + "/beta/README", "BETA " + Prose(10)).ok());
  ASSERT_TRUE(WriteFileAtomically(root + "/alpha/guide.md", "ALPHA " + Prose(10)).ok());
  ASSERT_TRUE(WriteFileAtomically(root + "/alpha/notes.txt", std::string("binary\0data", 11) + Prose(10)).ok());
  ASSERT_TRUE(WriteFileAtomically(root + "/alpha/NEWS.gz", Prose(10)).ok());       // compressed: not read
  ASSERT_TRUE(WriteFileAtomically(root + "/alpha/LICENSE.txt", Prose(10)).ok());   // license text
  ASSERT_TRUE(WriteFileAtomically(root + "/alpha/changelog", Prose(10)).ok());     // not a document name
  ASSERT_TRUE(WriteFileAtomically(root + "/beta/FAQ", "short").ok());              // a stub
  DocsCorpusOptions options;
  options.root = root;
  options.min_bytes = 600;
  const std::string out = TmpDir() + "/docs.txt";
  absl::StatusOr<DocsCorpus> corpus = WriteDebianDocsCorpus(options, out);
  ASSERT_TRUE(corpus.ok()) << corpus.status();
  EXPECT_EQ(corpus->files, 2);
  EXPECT_EQ(corpus->skipped, 2);  // the binary notes.txt and the stub FAQ
  absl::StatusOr<std::string> text = ReadFile(out);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "ALPHA " + Prose(10) + "<|endoftext|>\nBETA " + Prose(10) + "<|endoftext|>\n");
}

TEST(DebianDocs, TooLittleTextIsRefusedSayingHowToGetMore) {
  const std::string root = TmpDir() + "/small";
  ASSERT_TRUE(MakeDirs(root + "/pkg").ok());
  ASSERT_TRUE(WriteFileAtomically(root + "/pkg/README", Prose(10)).ok());
  DocsCorpusOptions options;
  options.root = root;
  absl::StatusOr<DocsCorpus> corpus = WriteDebianDocsCorpus(options, TmpDir() + "/small.txt");
  ASSERT_FALSE(corpus.ok());
  EXPECT_EQ(corpus.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StartsWith(corpus.status().message(), "--data=debian-docs: " + root + " holds 0.00 MB of "
                                                          "plain-text documentation in 1 files"))
      << corpus.status();
  EXPECT_NE(corpus.status().message().find("apt-get install"), std::string::npos) << corpus.status();
  EXPECT_FALSE(FileExists(TmpDir() + "/small.txt"));
  options.root = TmpDir() + "/missing";
  EXPECT_EQ(WriteDebianDocsCorpus(options, TmpDir() + "/x.txt").status().code(), absl::StatusCode::kNotFound);
}

TEST(DebianDocs, TheQuickstartTrainsOnTheMachinesDocumentation) {
  QuickstartOptions o;
  o.out_dir = TmpDir() + "/qs";
  o.data = {kDebianDocsData};
  o.corpus_bytes = 4 << 20;  // enough validation text (the last 2%) for the runs' 16384 evaluation tokens
  o.vocab_size = 384;
  o.budgets = {3e10};
  o.models_per_budget = 3;
  o.target_flops = 1e13;
  o.train_command = {std::string(std::getenv("TEST_SRCDIR")) + "/lmforge/experiments/quickstart/quickstart",
                     "--train_one"};
  std::string said;
  o.progress = [&](const std::string& line) { said += line + "\n"; };
  absl::StatusOr<QuickstartResult> result = RunQuickstart(o);
  if (!result.ok() && result.status().code() == absl::StatusCode::kFailedPrecondition &&
      absl::StartsWith(result.status().message(), "--data=debian-docs")) {
    GTEST_SKIP() << "this machine has too little documentation: " << result.status();
  }
  ASSERT_TRUE(result.ok()) << result.status() << "\n" << said;
  EXPECT_EQ(result->finished_runs, 3) << said;
  EXPECT_EQ(result->failed_runs, 0) << said;
  EXPECT_NE(said.find("debian-docs: "), std::string::npos) << said;
  absl::StatusOr<uint64_t> size = FileSize(o.out_dir + "/data/debian-docs.txt");
  ASSERT_TRUE(size.ok());
  EXPECT_GE(*size, uint64_t{4} << 20);
  absl::StatusOr<std::string> report = ReadFile(result->report);
  ASSERT_TRUE(report.ok());
  EXPECT_NE(report->find("**Data:** Real English: the plain-text documentation of the Debian packages"),
            std::string::npos)
      << *report;
  EXPECT_EQ(report->find("SYNTHETIC"), std::string::npos);
}

}  // namespace
}  // namespace lmf::quickstart
