// The folder the processes of one launch meet in: made fresh for each launch (its name unique even when a
// pid recurs) inside a folder the launching process owns, and removed when the launch ends; the folders of
// launches that were killed are removed by that folder's next owner. Ranks join a GlooGroup through it (its
// file store keeps one file per key: a flat folder), and launched workers say there that they are up.
#ifndef LMFORGE_DISTRIBUTED_RENDEZVOUS_H_
#define LMFORGE_DISTRIBUTED_RENDEZVOUS_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace lmf::distributed {

class RendezvousFolder {
 public:
  // Creates <parent>/<prefix><pid>-<nanoseconds since the epoch>; AlreadyExists ("<path> exists already")
  // if something is there.
  static absl::StatusOr<std::unique_ptr<RendezvousFolder>> Create(const std::string& parent,
                                                                  const std::string& prefix);
  RendezvousFolder(const RendezvousFolder&) = delete;
  RendezvousFolder& operator=(const RendezvousFolder&) = delete;
  // Removes the folder and its files.
  ~RendezvousFolder();

  const std::string& path() const { return path_; }

 private:
  explicit RendezvousFolder(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

// Removes every <parent>/<prefix>* folder: those of launches that were killed. Only for a process that owns
// `parent` alone (holds its lock), so that no live launch can be using them.
absl::Status RemoveStaleRendezvousFolders(const std::string& parent, const std::string& prefix);

// A launched worker says it is up (it has checked its inputs and is about to join its group): the file
// <folder>/ready.<rank>, which WorkerProcesses::WaitUntilReady looks for.
absl::Status MarkReady(const std::string& folder, int rank);
bool IsReady(const std::string& folder, int rank);

}  // namespace lmf::distributed

#endif  // LMFORGE_DISTRIBUTED_RENDEZVOUS_H_
