// Checkpoint folders: round trip, keep-last-N, and that an interrupted or damaged checkpoint never
// replaces the previous good one (a killed save's .partial folder; a truncated or corrupted file).
#include "experiments/checkpoint/checkpoint.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/damaged_copies.h"
#include "base/file.h"
#include "gtest/gtest.h"

namespace lmf::experiments {
namespace {

std::string FreshDir(const std::string& name) {
  const std::string dir = std::string(getenv("TEST_TMPDIR")) + "/" + name;
  EXPECT_TRUE(MakeDirs(dir).ok());
  return dir;
}

struct Fixture {
  std::vector<float> w = {1.5f, -2.0f, 0.25f, 8.0f, -0.0f, 3.0f};
  std::vector<float> m = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f};
  std::vector<float> v = {1e-8f, 2e-8f, 3e-8f, 4e-8f, 5e-8f, 6e-8f};

  CheckpointContents Contents(int64_t step) const {
    CheckpointContents c;
    c.model = {{"layers.0.ffn.w1.weight", {2, 3}, w.data()}};
    c.optimizer = {{"layers.0.ffn.w1.weight.exp_avg", {2, 3}, m.data()},
                   {"layers.0.ffn.w1.weight.exp_avg_sq", {2, 3}, v.data()}};
    c.state.set_step(step);
    c.state.set_tokens(step * 128);
    c.state.set_sampler_seed(7);
    c.state.set_sampler_windows_drawn(step * 4);
    c.state.set_optimizer_step(step);
    c.config_text = "name: \"tiny\"\n";
    return c;
  }
};

TEST(Checkpoint, SavesAndLoadsEverything) {
  const std::string dir = FreshDir("roundtrip");
  Fixture f;
  auto path = SaveCheckpoint(dir, f.Contents(100), 3);
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(*path, dir + "/step_00000100");
  auto loaded = LoadCheckpoint(*path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->state.step(), 100);
  EXPECT_EQ(loaded->state.sampler_windows_drawn(), 400u);
  EXPECT_EQ(loaded->state.files_size(), 3);
  EXPECT_EQ(loaded->config_text, "name: \"tiny\"\n");
  auto w = loaded->model.ReadFloat("layers.0.ffn.w1.weight", {2, 3});
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(std::memcmp(w->data(), f.w.data(), 24), 0);
  auto v = loaded->optimizer->ReadFloat("layers.0.ffn.w1.weight.exp_avg_sq", {2, 3});
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(std::memcmp(v->data(), f.v.data(), 24), 0);
}

TEST(Checkpoint, KeepsOnlyTheNewestN) {
  const std::string dir = FreshDir("keep");
  Fixture f;
  for (int64_t step : {10, 20, 30, 40, 50}) ASSERT_TRUE(SaveCheckpoint(dir, f.Contents(step), 2).ok());
  EXPECT_EQ(ListCheckpointSteps(dir), (std::vector<int64_t>{40, 50}));
  auto latest = LatestCheckpoint(dir);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(*latest, dir + "/step_00000050");
}

TEST(Checkpoint, PinnedStepsAreKeptAndNotCounted) {
  const std::string dir = FreshDir("pinned");
  Fixture f;
  for (int64_t step : {10, 20, 30, 40, 50})
    ASSERT_TRUE(SaveCheckpoint(dir, f.Contents(step), 2, {20, 30}).ok());
  EXPECT_EQ(ListCheckpointSteps(dir), (std::vector<int64_t>{20, 30, 40, 50}));
}

void Truncate(const std::string& path, off_t bytes) { ASSERT_EQ(::truncate(path.c_str(), bytes), 0) << path; }

// A resumed run (keep 1) saves step 15 while the damaged step 20 it skipped is still there: step 15 is the
// only one it can resume from again, so it stays; the damaged folder after it is not pruned either.
TEST(Checkpoint, TheCheckpointJustWrittenIsNeverPruned) {
  const std::string dir = FreshDir("just_written");
  Fixture f;
  for (int64_t step : {10, 15, 20}) ASSERT_TRUE(SaveCheckpoint(dir, f.Contents(step), 1, {10}).ok());
  ASSERT_EQ(ListCheckpointSteps(dir), (std::vector<int64_t>{10, 20}));
  Truncate(dir + "/step_00000020/optimizer.safetensors", 100);
  ASSERT_TRUE(SaveCheckpoint(dir, f.Contents(15), 1, {10}).ok());
  EXPECT_EQ(ListCheckpointSteps(dir), (std::vector<int64_t>{10, 15, 20}));
  auto latest = LatestCheckpoint(dir);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, dir + "/step_00000015");
}

// keep 2: the damaged step 20 does not count, so the intact step 10 is kept beside the new step 30; once an
// intact step 40 follows, both older folders go.
TEST(Checkpoint, ADamagedCheckpointDoesNotCountTowardKeep) {
  const std::string dir = FreshDir("damaged_keep");
  Fixture f;
  for (int64_t step : {10, 20}) ASSERT_TRUE(SaveCheckpoint(dir, f.Contents(step), 2).ok());
  Truncate(dir + "/step_00000020/model.safetensors", 10);
  ASSERT_TRUE(SaveCheckpoint(dir, f.Contents(30), 2).ok());
  EXPECT_EQ(ListCheckpointSteps(dir), (std::vector<int64_t>{10, 20, 30}));
  ASSERT_TRUE(SaveCheckpoint(dir, f.Contents(40), 2).ok());
  EXPECT_EQ(ListCheckpointSteps(dir), (std::vector<int64_t>{30, 40}));
}

TEST(Checkpoint, DamagedFoldersAfterAStepAreMovedAside) {
  const std::string dir = FreshDir("move_aside");
  Fixture f;
  for (int64_t step : {10, 20, 30}) ASSERT_TRUE(SaveCheckpoint(dir, f.Contents(step), 3).ok());
  Truncate(dir + "/step_00000030/optimizer.safetensors", 100);
  auto moved = MoveAsideDamagedCheckpoints(dir, 10);
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(*moved, (std::vector<std::string>{dir + "/damaged/step_00000030"}));  // step 20 is intact
  EXPECT_EQ(ListCheckpointSteps(dir), (std::vector<int64_t>{10, 20}));
  EXPECT_TRUE(FileExists(dir + "/damaged/step_00000030/model.safetensors"));
  // A second damaged step 30 does not replace the first one set aside.
  ASSERT_TRUE(SaveCheckpoint(dir, f.Contents(30), 3).ok());
  Truncate(dir + "/step_00000030/config.textproto", 1);
  moved = MoveAsideDamagedCheckpoints(dir, 20);
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(*moved, (std::vector<std::string>{dir + "/damaged/step_00000030.2"}));
  EXPECT_EQ(ListCheckpointSteps(dir), (std::vector<int64_t>{10, 20}));
  // Nothing damaged: nothing moved, and no damaged folder at or before the step is touched.
  Truncate(dir + "/step_00000010/config.textproto", 1);
  moved = MoveAsideDamagedCheckpoints(dir, 20);
  ASSERT_TRUE(moved.ok());
  EXPECT_TRUE(moved->empty());
  EXPECT_EQ(ListCheckpointSteps(dir), (std::vector<int64_t>{10, 20}));
}

// Damage is what verification finds wrong with the folder itself (a CRC or size mismatch, a file missing);
// an error that says nothing of it (a read error, a permission: ErrnoError's codes for EIO, EACCES) is not,
// and a caller must not set the checkpoint aside or retrain it for one.
TEST(Checkpoint, OnlyDamageCountsAsDamage) {
  const std::string dir = FreshDir("damage_kinds");
  Fixture f;
  auto path = SaveCheckpoint(dir, f.Contents(10), 3);
  ASSERT_TRUE(path.ok());
  Truncate(*path + "/optimizer.safetensors", 100);
  EXPECT_TRUE(IsCheckpointDamage(VerifyCheckpoint(*path)));  // DataLoss
  ASSERT_EQ(::unlink((*path + "/optimizer.safetensors").c_str()), 0);
  EXPECT_TRUE(IsCheckpointDamage(VerifyCheckpoint(*path)));  // NotFound
  // A checkpoint file that is a folder, and a step folder that is a file, are damage too.
  ASSERT_EQ(::mkdir((*path + "/optimizer.safetensors").c_str(), 0755), 0);
  EXPECT_TRUE(IsCheckpointDamage(VerifyCheckpoint(*path))) << VerifyCheckpoint(*path);
  ASSERT_TRUE(WriteFileAtomically(dir + "/step_00000020", "not a folder").ok());
  EXPECT_TRUE(IsCheckpointDamage(VerifyCheckpoint(dir + "/step_00000020"))) << VerifyCheckpoint(dir + "/step_00000020");
  EXPECT_FALSE(IsCheckpointDamage(absl::InternalError("model.safetensors: read failed: Input/output error")));
  EXPECT_FALSE(IsCheckpointDamage(absl::PermissionDeniedError("model.safetensors: open failed: Permission denied")));
  EXPECT_FALSE(IsCheckpointDamage(absl::OkStatus()));
}

// Checkpoints that cannot be read (here: no file descriptor left, EMFILE; an I/O or permission error is
// alike) are an error of LatestCheckpoint, neither "no checkpoint" (--resume would start the run over) nor
// damage to skip (resuming from an older one would drop the steps after it).
TEST(Checkpoint, UnreadableCheckpointsAreAnErrorNotSkippedOrMissing) {
  const std::string dir = FreshDir("unreadable");
  Fixture f;
  for (int64_t step : {10, 20}) ASSERT_TRUE(SaveCheckpoint(dir, f.Contents(step), 3).ok());
  struct rlimit old_limit;
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &old_limit), 0);
  std::vector<int> taken;
  absl::StatusOr<std::string> latest;
  {
    struct rlimit low = old_limit;
    low.rlim_cur = 64;
    ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
    for (int fd; (fd = ::dup(1)) >= 0;) taken.push_back(fd);  // every descriptor below the limit in use
    latest = LatestCheckpoint(dir);
    for (int fd : taken) ::close(fd);
    ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &old_limit), 0);
  }
  ASSERT_FALSE(latest.ok()) << *latest;
  EXPECT_FALSE(IsCheckpointDamage(latest.status())) << latest.status();
  EXPECT_FALSE(absl::IsNotFound(latest.status())) << latest.status();
  EXPECT_TRUE(absl::StartsWith(latest.status().message(), "cannot list the checkpoints in " + dir))
      << latest.status();
  latest = LatestCheckpoint(dir);  // readable again
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, dir + "/step_00000020");
}

TEST(Checkpoint, KilledSaveNeverHidesThePreviousCheckpoint) {
  const std::string dir = FreshDir("killed");
  Fixture f;
  ASSERT_TRUE(SaveCheckpoint(dir, f.Contents(10), 3).ok());
  // What a save killed mid-write leaves: the staging folder with a half-written temp file.
  const std::string partial = dir + "/step_00000020.partial";
  ASSERT_EQ(::mkdir(partial.c_str(), 0755), 0);
  ASSERT_TRUE(WriteFileAtomically(partial + "/model.safetensors.tmp.123", std::string(37, 'x')).ok());
  auto latest = LatestCheckpoint(dir);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, dir + "/step_00000010");
  // The next save cleans it up.
  ASSERT_TRUE(SaveCheckpoint(dir, f.Contents(30), 3).ok());
  EXPECT_FALSE(FileExists(partial));
  EXPECT_EQ(ListCheckpointSteps(dir), (std::vector<int64_t>{10, 30}));
}

TEST(Checkpoint, TruncatedFileIsDetectedAndSkipped) {
  const std::string dir = FreshDir("truncated");
  Fixture f;
  ASSERT_TRUE(SaveCheckpoint(dir, f.Contents(10), 3).ok());
  auto newer = SaveCheckpoint(dir, f.Contents(20), 3);
  ASSERT_TRUE(newer.ok());
  const std::string model = *newer + "/model.safetensors";
  auto size = FileSize(model);
  ASSERT_TRUE(size.ok());
  ASSERT_EQ(::truncate(model.c_str(), static_cast<off_t>(*size - 5)), 0);

  auto load = LoadCheckpoint(*newer);
  ASSERT_FALSE(load.ok());
  EXPECT_EQ(load.status().message(), absl::StrCat(model, ": ", *size - 5, " bytes, but the checkpoint recorded ",
                                                  *size, " (truncated or replaced)"));
  std::vector<std::string> skipped;
  auto latest = LatestCheckpoint(dir, &skipped);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(*latest, dir + "/step_00000010");
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_EQ(skipped[0], load.status().message());
}

TEST(Checkpoint, CorruptedByteFailsTheCrc) {
  const std::string dir = FreshDir("corrupt");
  Fixture f;
  auto path = SaveCheckpoint(dir, f.Contents(10), 3);
  ASSERT_TRUE(path.ok());
  const std::string optimizer = *path + "/optimizer.safetensors";
  auto bytes = ReadFile(optimizer);
  ASSERT_TRUE(bytes.ok());
  std::string damaged = *bytes;
  damaged[damaged.size() - 1] ^= 0x01;
  ASSERT_TRUE(WriteFileAtomically(optimizer, damaged).ok());
  auto load = LoadCheckpoint(*path);
  ASSERT_FALSE(load.ok());
  EXPECT_NE(std::string(load.status().message()).find("optimizer.safetensors: CRC-32C"), std::string::npos)
      << load.status();
  EXPECT_EQ(LatestCheckpoint(dir).status().code(), absl::StatusCode::kNotFound);
}

// trainer_state.textproto carries the CRC-32C of its own text on its first line: an edited step or sampler
// position, or a file cut short after its digests, is refused naming the file, as LatestCheckpoint skips it.
TEST(Checkpoint, AnEditedOrTruncatedStateFileIsRefused) {
  const std::string dir = FreshDir("state_crc");
  Fixture f;
  auto path = SaveCheckpoint(dir, f.Contents(10), 3);
  ASSERT_TRUE(path.ok());
  const std::string state_file = *path + "/trainer_state.textproto";
  auto original = ReadFile(state_file);
  ASSERT_TRUE(original.ok());
  ASSERT_TRUE(absl::StartsWith(*original, "# CRC-32C of the lines below: ")) << *original;
  const std::string crc_error = state_file + ": CRC-32C ";
  auto expect_refused = [&](const std::string& text, const std::string& message_start) {
    ASSERT_TRUE(WriteFileAtomically(state_file, text).ok());
    auto load = LoadCheckpoint(*path);
    ASSERT_FALSE(load.ok()) << text;
    EXPECT_EQ(load.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_TRUE(absl::StartsWith(load.status().message(), message_start)) << load.status();
    EXPECT_EQ(LatestCheckpoint(dir).status().code(), absl::StatusCode::kNotFound);
  };
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string text = *original;
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return text.replace(at, from.size(), to);
  };
  expect_refused(replaced("step: 10\n", "step: 18\n"), crc_error);
  expect_refused(replaced("sampler_windows_drawn: 40\n", "sampler_windows_drawn: 41\n"), crc_error);
  expect_refused(original->substr(0, original->rfind("files {")), crc_error);  // cut after a digest
  expect_refused(replaced("# CRC-32C of the lines below: ", "# CRC-32C of the lines below: zz"),
                 state_file + ": the first line is not \"# CRC-32C of the lines below: <8 hex digits>\"");
  ASSERT_TRUE(WriteFileAtomically(state_file, *original).ok());
  EXPECT_TRUE(LoadCheckpoint(*path).ok());
}

// A state file whose checksum is right but whose step is not its folder's (copied into the wrong folder, or
// written to match an edit) is refused too.
TEST(Checkpoint, TheStateStepMustBeTheFolders) {
  const std::string dir = FreshDir("state_step");
  Fixture f;
  auto path = SaveCheckpoint(dir, f.Contents(10), 3);
  ASSERT_TRUE(path.ok());
  auto loaded = LoadCheckpoint(*path);
  ASSERT_TRUE(loaded.ok());
  checkpoint::TrainerState state = loaded->state;
  state.set_step(18);
  const std::string state_file = *path + "/trainer_state.textproto";
  ASSERT_TRUE(WriteFileAtomically(state_file, StateFileText(state)).ok());
  auto load = LoadCheckpoint(*path);
  ASSERT_FALSE(load.ok());
  EXPECT_EQ(load.status().message(),
            state_file + ": step 18 is not the step of its folder, 10 (edited or misplaced)");
  // Given by a path with a trailing slash, the folder is still the one checked.
  EXPECT_FALSE(LoadCheckpoint(*path + "/").ok());
}

// Checkpoints written before the checksum line existed (the state file starts with its first field) are read
// as before, so older run folders stay resumable.
TEST(Checkpoint, AStateFileWithoutTheChecksumLineIsReadAsBefore) {
  const std::string dir = FreshDir("state_old");
  Fixture f;
  auto path = SaveCheckpoint(dir, f.Contents(10), 3);
  ASSERT_TRUE(path.ok());
  const std::string state_file = *path + "/trainer_state.textproto";
  auto text = ReadFile(state_file);
  ASSERT_TRUE(text.ok());
  const std::string older = text->substr(text->find('\n') + 1);
  ASSERT_TRUE(absl::StartsWith(older, "step: 10\n")) << older;
  ASSERT_TRUE(WriteFileAtomically(state_file, older).ok());
  auto load = LoadCheckpoint(*path);
  ASSERT_TRUE(load.ok()) << load.status();
  EXPECT_EQ(load->state.sampler_windows_drawn(), 40u);
  auto latest = LatestCheckpoint(dir);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(*latest, *path);
}

// Loaded for its weights (eval, generate), a checkpoint needs no optimizer.safetensors; for --resume it does.
TEST(Checkpoint, TheWeightsAloneNeedNoOptimizerFile) {
  const std::string dir = FreshDir("weights_only");
  Fixture f;
  ASSERT_TRUE(SaveCheckpoint(dir, f.Contents(10), 3).ok());
  auto newer = SaveCheckpoint(dir, f.Contents(20), 3);
  ASSERT_TRUE(newer.ok());
  ASSERT_EQ(::unlink((*newer + "/optimizer.safetensors").c_str()), 0);
  EXPECT_FALSE(LoadCheckpoint(*newer).ok());
  auto weights = LoadCheckpoint(*newer, CheckpointUse::kWeights);
  ASSERT_TRUE(weights.ok()) << weights.status();
  EXPECT_FALSE(weights->optimizer.has_value());
  EXPECT_TRUE(weights->model.ReadFloat("layers.0.ffn.w1.weight", {2, 3}).ok());
  EXPECT_EQ(*LatestCheckpoint(dir), dir + "/step_00000010");
  EXPECT_EQ(*LatestCheckpoint(dir, nullptr, CheckpointUse::kWeights), *newer);
  Truncate(*newer + "/model.safetensors", 8);
  EXPECT_FALSE(LoadCheckpoint(*newer, CheckpointUse::kWeights).ok());
}

TEST(Checkpoint, MissingStateFileMeansIncomplete) {
  const std::string dir = FreshDir("nostate");
  Fixture f;
  auto path = SaveCheckpoint(dir, f.Contents(10), 3);
  ASSERT_TRUE(path.ok());
  ASSERT_EQ(::unlink((*path + "/trainer_state.textproto").c_str()), 0);
  EXPECT_FALSE(LoadCheckpoint(*path).ok());
  EXPECT_EQ(LatestCheckpoint(dir).status().message(), "no complete checkpoint in " + dir);
}

// Every file of a checkpoint, damaged (every truncation, 300 seeded edits each): verification and loading
// report damage (IsCheckpointDamage) naming the folder, never a checkpoint that loads. Never a crash (or,
// under --config=asan, a bad read).
TEST(Checkpoint, EveryDamagedFileIsReportedAsDamage) {
  const std::string dir = FreshDir("damaged_files");
  Fixture f;
  auto path = SaveCheckpoint(dir, f.Contents(10), 3);
  ASSERT_TRUE(path.ok()) << path.status();
  for (const char* name :
       {"trainer_state.textproto", "config.textproto", "model.safetensors", "optimizer.safetensors"}) {
    const std::string file = *path + "/" + name;
    absl::StatusOr<std::string> valid = ReadFile(file);
    ASSERT_TRUE(valid.ok()) << valid.status();
    int damaged = 0;
    for (const std::string& bad : DamagedCopies(*valid, /*seed=*/53, /*edits=*/300, /*max_prefixes=*/256)) {
      if (bad == *valid) continue;  // an edit that put back the same byte
      ++damaged;
      ASSERT_TRUE(WriteFileAtomically(file, bad).ok());
      const absl::Status verified = VerifyCheckpoint(*path);
      EXPECT_TRUE(IsCheckpointDamage(verified)) << name << ": " << verified << "\n" << Escaped(bad);
      EXPECT_TRUE(absl::StrContains(verified.message(), *path)) << name << ": " << verified;
      EXPECT_FALSE(LoadCheckpoint(*path).ok()) << name << "\n" << Escaped(bad);
    }
    EXPECT_GT(damaged, 250) << name;
    ASSERT_TRUE(WriteFileAtomically(file, *valid).ok());
    ASSERT_TRUE(VerifyCheckpoint(*path).ok()) << name;
  }
}

}  // namespace
}  // namespace lmf::experiments
