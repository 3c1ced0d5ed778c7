// RendezvousFolder and the ready marks (see rendezvous.h).
#include "distributed/rendezvous.h"

#include <unistd.h>

#include <chrono>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/file.h"

namespace lmf::distributed {

absl::StatusOr<std::unique_ptr<RendezvousFolder>> RendezvousFolder::Create(const std::string& parent,
                                                                           const std::string& prefix) {
  // A pid alone can recur, and a folder a killed launch left is not always removed.
  const std::string path = absl::StrCat(parent, "/", prefix, ::getpid(), "-",
                                        std::chrono::duration_cast<std::chrono::nanoseconds>(
                                            std::chrono::system_clock::now().time_since_epoch())
                                            .count());
  if (FileExists(path)) return absl::AlreadyExistsError(absl::StrCat(path, " exists already"));
  if (absl::Status s = MakeDirs(path); !s.ok()) return s;
  return std::unique_ptr<RendezvousFolder>(new RendezvousFolder(path));
}

RendezvousFolder::~RendezvousFolder() { (void)RemoveFlatFolder(path_); }

absl::Status RemoveStaleRendezvousFolders(const std::string& parent, const std::string& prefix) {
  absl::StatusOr<std::vector<std::string>> names = ListFolder(parent);
  if (!names.ok()) return absl::OkStatus();
  for (const std::string& name : *names) {
    if (!absl::StartsWith(name, prefix)) continue;
    if (absl::Status s = RemoveFlatFolder(parent + "/" + name); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status MarkReady(const std::string& folder, int rank) {
  return WriteFileAtomically(absl::StrCat(folder, "/ready.", rank), "");
}

bool IsReady(const std::string& folder, int rank) {
  return FileExists(absl::StrCat(folder, "/ready.", rank));
}

}  // namespace lmf::distributed
