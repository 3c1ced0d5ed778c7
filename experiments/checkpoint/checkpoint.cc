// Checkpoint folders (see checkpoint.h): staged writes, digests, verification, pruning.
#include "experiments/checkpoint/checkpoint.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <string_view>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/file.h"
#include "experiments/crc32c/crc32c.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"

namespace lmf::experiments {
namespace {

constexpr char kModelFile[] = "model.safetensors";
constexpr char kOptimizerFile[] = "optimizer.safetensors";
constexpr char kConfigFile[] = "config.textproto";
constexpr char kStateFile[] = "trainer_state.textproto";
constexpr char kPartialSuffix[] = ".partial";
constexpr char kDamagedFolder[] = "damaged";

absl::Status ErrnoError(const std::string& what, const std::string& path) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

// The names in a folder, or none when it cannot be read (a missing checkpoints folder holds none).
std::vector<std::string> ListDir(const std::string& dir) {
  return ListFolder(dir).value_or(std::vector<std::string>{});
}

// Parses "step_00000100" (exactly 8+ digits after step_) into 100.
bool ParseStepFolder(const std::string& name, int64_t* step) {
  if (!absl::StartsWith(name, "step_") || name.size() < 13) return false;
  const std::string digits = name.substr(5);
  for (char c : digits) {
    if (c < '0' || c > '9') return false;
  }
  return absl::SimpleAtoi(digits, step);
}

absl::StatusOr<checkpoint::FileDigest> Digest(const std::string& dir, const std::string& name) {
  absl::StatusOr<MappedFile> map = MappedFile::Open(dir + "/" + name);
  if (!map.ok()) return map.status();
  checkpoint::FileDigest digest;
  digest.set_name(name);
  digest.set_bytes(map->size());
  digest.set_crc32c(Crc32c(map->view()));
  return digest;
}

absl::Status WriteTensors(const std::vector<NamedTensor>& tensors, const std::string& path) {
  SafetensorsWriter writer;
  for (const NamedTensor& t : tensors) writer.AddF32(t.name, t.shape, t.data);
  writer.SetMetadata("format", "pt");
  return writer.Write(path);
}

// Keeps the parser's first error (with its line and column) for the status, instead of protobuf's log line.
class FirstError : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column, const std::string& message) override {
    if (error_.empty()) error_ = absl::StrCat(line + 1, ":", column + 1, ": ", message);
  }
  const std::string& error() const { return error_; }

 private:
  std::string error_;
};

// The state file's first line: a textproto comment (older readers skip it) holding the CRC-32C of the rest
// of the file. First, not last, so that a file cut short anywhere fails the check instead of looking like
// one written before the line existed.
constexpr char kStateCrcPrefix[] = "# CRC-32C of the lines below: ";

absl::StatusOr<checkpoint::TrainerState> ReadState(const std::string& path) {
  const std::string file = absl::StrCat(path, "/", kStateFile);
  absl::StatusOr<std::string> text = ReadFile(file);
  if (!text.ok()) return text.status();
  // A file written before the line existed starts with a field (TextFormat writes no comments), so a first
  // line that is a comment must be this one: prefix, 8 hex digits, newline. Checking only for "# CRC-32C"
  // read a file whose first bytes were damaged ("# CRC-32]") as an old one, and its damage went unseen.
  if (absl::StartsWith(*text, "#")) {
    const size_t prefix = sizeof(kStateCrcPrefix) - 1;
    uint32_t recorded = 0;
    if (text->size() < prefix + 9 || !absl::StartsWith(*text, kStateCrcPrefix) ||
        (*text)[prefix + 8] != '\n' ||
        !absl::SimpleHexAtoi(absl::string_view(text->data() + prefix, 8), &recorded)) {
      return absl::DataLossError(
          absl::StrCat(file, ": the first line is not \"", kStateCrcPrefix, "<8 hex digits>\" (corrupt)"));
    }
    const uint32_t actual = Crc32c(std::string_view(*text).substr(prefix + 9));
    if (actual != recorded) {
      return absl::DataLossError(
          absl::StrFormat("%s: CRC-32C %08x of the lines below the first does not match the %08x it records "
                          "(edited or corrupt)",
                          file, actual, recorded));
    }
  }
  checkpoint::TrainerState state;
  FirstError errors;
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(*text, &state)) {
    return absl::DataLossError(absl::StrCat(file, ":", errors.error(), " (corrupt)"));
  }
  // The folder's name says which step it holds (a folder of another name, e.g. one set aside, is not
  // checked).
  std::string folder = path;
  while (folder.size() > 1 && folder.back() == '/') folder.pop_back();
  int64_t named_step;
  if (ParseStepFolder(folder.substr(folder.rfind('/') + 1), &named_step) && named_step != state.step()) {
    return absl::DataLossError(absl::StrCat(file, ": step ", state.step(), " is not the step of its folder, ",
                                            named_step, " (edited or misplaced)"));
  }
  return state;
}

// The files `use` reads: all three, or the weights and config alone.
bool Needed(const std::string& name, CheckpointUse use) {
  return use == CheckpointUse::kResume || name != kOptimizerFile;
}

absl::Status Verify(const std::string& path, const checkpoint::TrainerState& state, CheckpointUse use) {
  for (const char* required : {kModelFile, kOptimizerFile, kConfigFile}) {
    if (!Needed(required, use)) continue;
    bool listed = false;
    for (const auto& f : state.files()) listed |= f.name() == required;
    if (!listed)
      return absl::DataLossError(absl::StrCat(path, ": ", kStateFile, " has no digest for ", required));
  }
  for (const checkpoint::FileDigest& expected : state.files()) {
    if (!Needed(expected.name(), use)) continue;
    absl::StatusOr<checkpoint::FileDigest> actual = Digest(path, expected.name());
    if (!actual.ok()) return actual.status();
    if (actual->bytes() != expected.bytes()) {
      return absl::DataLossError(absl::StrCat(path, "/", expected.name(), ": ", actual->bytes(),
                                              " bytes, but the checkpoint recorded ", expected.bytes(),
                                              " (truncated or replaced)"));
    }
    if (actual->crc32c() != expected.crc32c()) {
      return absl::DataLossError(
          absl::StrFormat("%s/%s: CRC-32C %08x does not match the recorded %08x (corrupt)", path,
                          expected.name(), actual->crc32c(), expected.crc32c()));
    }
  }
  return absl::OkStatus();
}

// Reads the state file and verifies the folder's files against it. Whatever is wrong with the folder itself
// comes back as DataLoss or NotFound (IsCheckpointDamage): a step folder that is a file, or a checkpoint
// file that is a folder, device or socket (OpenRegularFile's InvalidArgument), is damage as much as a bad
// CRC is; a read or permission error is returned as it is.
absl::Status VerifyFolder(const std::string& path, CheckpointUse use = CheckpointUse::kResume) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
    return absl::DataLossError(absl::StrCat(path, ": not a folder (a checkpoint is a folder of files)"));
  }
  absl::StatusOr<checkpoint::TrainerState> state = ReadState(path);
  absl::Status status = state.ok() ? Verify(path, *state, use) : state.status();
  if (absl::IsInvalidArgument(status)) return absl::DataLossError(status.message());
  return status;
}

// Folders this process wrote or verified, each by the name, size, inode and modification time of its files:
// pruning then reads each older checkpoint's bytes once per process instead of at every save (with GPT-2
// small and keep 3, 3 GB per save). Any rewrite, truncation or replacement of a file changes its identity,
// so the folder is verified again; only damage that keeps size and times (bit rot) goes unseen here, and
// LatestCheckpoint, which --resume, eval and generate use, always verifies in full.
std::optional<std::string> FolderIdentity(const std::string& path) {
  std::string identity = path;
  for (const std::string& name : ListDir(path)) {
    struct stat st;
    if (::stat((path + "/" + name).c_str(), &st) != 0) return std::nullopt;
    absl::StrAppend(&identity, "|", name, ":", st.st_size, ":", st.st_ino, ":", st.st_mtim.tv_sec, ".",
                    st.st_mtim.tv_nsec);
  }
  return identity;
}

// Each folder identity seen whole: true where it verified, false where it did not (a damaged folder kept
// between the kept ones is not read again at every save either).
std::mutex verified_mu;
std::map<std::string, bool>& Verified() {
  static auto* verified = new std::map<std::string, bool>();
  return *verified;
}

void Remember(const std::string& path, bool intact) {
  if (std::optional<std::string> id = FolderIdentity(path)) {
    std::lock_guard<std::mutex> lock(verified_mu);
    Verified()[*id] = intact;
  }
}

// VerifyFolder for pruning, once per folder identity.
bool IntactForPruning(const std::string& path) {
  if (std::optional<std::string> id = FolderIdentity(path)) {
    std::lock_guard<std::mutex> lock(verified_mu);
    if (auto it = Verified().find(*id); it != Verified().end()) return it->second;
  }
  const bool intact = VerifyFolder(path).ok();
  Remember(path, intact);
  return intact;
}

}  // namespace

std::string StateFileText(const checkpoint::TrainerState& state) {
  std::string text;
  google::protobuf::TextFormat::PrintToString(state, &text);
  return absl::StrFormat("%s%08x\n%s", kStateCrcPrefix, Crc32c(text), text);
}

std::string CheckpointPath(const std::string& checkpoints_dir, int64_t step) {
  return absl::StrFormat("%s/step_%08d", checkpoints_dir, step);
}

std::vector<int64_t> ListCheckpointSteps(const std::string& checkpoints_dir) {
  std::vector<int64_t> steps;
  for (const std::string& name : ListDir(checkpoints_dir)) {
    int64_t step;
    if (ParseStepFolder(name, &step)) steps.push_back(step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

absl::StatusOr<std::string> SaveCheckpoint(const std::string& checkpoints_dir,
                                           const CheckpointContents& contents, int keep,
                                           const std::vector<int64_t>& pinned) {
  if (absl::Status s = MakeDirs(checkpoints_dir); !s.ok()) return s;
  // Folders a killed save left behind.
  for (const std::string& name : ListDir(checkpoints_dir)) {
    if (absl::EndsWith(name, kPartialSuffix)) {
      if (absl::Status s = RemoveFlatFolder(checkpoints_dir + "/" + name); !s.ok()) return s;
    }
  }
  const std::string final_path = CheckpointPath(checkpoints_dir, contents.state.step());
  const std::string staging = final_path + kPartialSuffix;
  if (::mkdir(staging.c_str(), 0755) != 0) return ErrnoError("cannot create folder", staging);

  if (absl::Status s = WriteTensors(contents.model, staging + "/" + kModelFile); !s.ok()) return s;
  if (absl::Status s = WriteTensors(contents.optimizer, staging + "/" + kOptimizerFile); !s.ok()) return s;
  if (absl::Status s = WriteFileAtomically(staging + "/" + kConfigFile, contents.config_text); !s.ok())
    return s;
  checkpoint::TrainerState state = contents.state;
  state.clear_files();
  for (const char* name : {kModelFile, kOptimizerFile, kConfigFile}) {
    absl::StatusOr<checkpoint::FileDigest> digest = Digest(staging, name);
    if (!digest.ok()) return digest.status();
    *state.add_files() = *digest;
  }
  if (absl::Status s = WriteFileAtomically(staging + "/" + kStateFile, StateFileText(state)); !s.ok())
    return s;

  // A folder of the same step can only be one that failed verification (resume starts after the newest
  // good one); it is replaced.
  struct stat st;
  if (::stat(final_path.c_str(), &st) == 0) {
    if (absl::Status s = RemoveFlatFolder(final_path); !s.ok()) return s;
  }
  if (::rename(staging.c_str(), final_path.c_str()) != 0) return ErrnoError("cannot rename to", final_path);
  if (absl::Status s = SyncFolder(checkpoints_dir); !s.ok()) return s;
  Remember(final_path, /*intact=*/true);

  // Pruning. The checkpoint just written is kept and is the first of the `keep`. The older unpinned ones
  // are verified newest first until keep - 1 intact ones are found: a damaged one does not count (it could
  // not be resumed), and everything older than the oldest one kept is removed. Folders after the step just
  // written are neither counted nor removed (--resume moves damaged ones aside, MoveAsideDamagedCheckpoints).
  std::vector<int64_t> older;
  for (const int64_t step : ListCheckpointSteps(checkpoints_dir)) {
    if (step < contents.state.step() && std::find(pinned.begin(), pinned.end(), step) == pinned.end())
      older.push_back(step);
  }
  int intact = 1;
  auto it = older.rbegin();
  for (; it != older.rend() && intact < std::max(keep, 1); ++it) {
    if (IntactForPruning(CheckpointPath(checkpoints_dir, *it))) ++intact;
  }
  for (; it != older.rend(); ++it) {
    if (absl::Status s = RemoveFlatFolder(CheckpointPath(checkpoints_dir, *it)); !s.ok()) return s;
  }
  return final_path;
}

absl::Status VerifyCheckpoint(const std::string& path, CheckpointUse use) { return VerifyFolder(path, use); }

bool IsCheckpointDamage(const absl::Status& verify_error) {
  return absl::IsDataLoss(verify_error) || absl::IsNotFound(verify_error);
}

absl::StatusOr<std::string> MoveCheckpointToDamaged(const std::string& checkpoints_dir, int64_t step) {
  const std::string aside_dir = absl::StrCat(checkpoints_dir, "/", kDamagedFolder);
  if (absl::Status s = MakeDirs(aside_dir); !s.ok()) return s;
  const std::string path = CheckpointPath(checkpoints_dir, step);
  const std::string name = path.substr(checkpoints_dir.size() + 1);
  std::string target = absl::StrCat(aside_dir, "/", name);
  for (int n = 2; FileExists(target); ++n) target = absl::StrCat(aside_dir, "/", name, ".", n);
  if (::rename(path.c_str(), target.c_str()) != 0) return ErrnoError("cannot move " + path + " to", target);
  if (absl::Status s = SyncFolder(checkpoints_dir); !s.ok()) return s;
  return target;
}

absl::StatusOr<std::vector<std::string>> MoveAsideDamagedCheckpoints(const std::string& checkpoints_dir,
                                                                     int64_t after_step) {
  std::vector<std::string> moved;
  for (const int64_t step : ListCheckpointSteps(checkpoints_dir)) {
    if (step <= after_step) continue;
    const absl::Status verified = VerifyFolder(CheckpointPath(checkpoints_dir, step));
    if (verified.ok()) continue;
    if (!IsCheckpointDamage(verified)) return verified;  // e.g. a read error: nothing is known of the folder
    absl::StatusOr<std::string> target = MoveCheckpointToDamaged(checkpoints_dir, step);
    if (!target.ok()) return target.status();
    moved.push_back(*target);
  }
  return moved;
}

absl::StatusOr<LoadedCheckpoint> LoadCheckpoint(const std::string& path, CheckpointUse use) {
  absl::StatusOr<checkpoint::TrainerState> state = ReadState(path);
  if (!state.ok()) return state.status();
  if (absl::Status s = Verify(path, *state, use); !s.ok()) return s;
  absl::StatusOr<SafetensorsReader> model = SafetensorsReader::Open(path + "/" + kModelFile);
  if (!model.ok()) return model.status();
  std::optional<SafetensorsReader> optimizer;
  if (use == CheckpointUse::kResume) {
    absl::StatusOr<SafetensorsReader> opened = SafetensorsReader::Open(path + "/" + kOptimizerFile);
    if (!opened.ok()) return opened.status();
    optimizer = *std::move(opened);
  }
  absl::StatusOr<std::string> config = ReadFile(path + "/" + kConfigFile);
  if (!config.ok()) return config.status();
  return LoadedCheckpoint{path, *std::move(state), *std::move(model), std::move(optimizer),
                          *std::move(config)};
}

absl::StatusOr<std::string> LatestCheckpoint(const std::string& checkpoints_dir,
                                             std::vector<std::string>* skipped, CheckpointUse use) {
  // A folder that cannot be listed (as against one that is not there) is an error, not "no checkpoint":
  // --resume would otherwise start the run over.
  if (absl::StatusOr<std::vector<std::string>> names = ListFolder(checkpoints_dir);
      !names.ok() && !absl::IsNotFound(names.status())) {
    return absl::Status(names.status().code(),
                        absl::StrCat("cannot list the checkpoints in ", checkpoints_dir, ": ", names.status().message()));
  }
  std::vector<int64_t> steps = ListCheckpointSteps(checkpoints_dir);
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    const std::string path = CheckpointPath(checkpoints_dir, *it);
    const absl::Status status = VerifyFolder(path, use);
    if (use == CheckpointUse::kResume)
      Remember(path, status.ok());  // verified whole: the first save's pruning needs no second read
    if (status.ok()) return path;
    // A folder that could not be read (an I/O or permission error) is not known to be damaged: resuming
    // from an older checkpoint past it would silently drop its steps.
    if (!IsCheckpointDamage(status)) {
      return absl::Status(status.code(), absl::StrCat("cannot verify the checkpoint ", path, ": ", status.message()));
    }
    if (skipped != nullptr) skipped->push_back(std::string(status.message()));
  }
  return absl::NotFoundError(absl::StrCat("no complete checkpoint in ", checkpoints_dir));
}

}  // namespace lmf::experiments
