// LaunchedRankFromEnvironment and JoinLaunchedGroup (see launched_rank.h).
#include "distributed/launched_rank.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace lmf::distributed {
namespace {

// The names of one launcher's variables.
struct Names {
  const char* rank;
  const char* world;
  const char* local_rank;
  const char* local_world;
  const char* launcher;
};

constexpr Names kTorchrun = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "RANK/WORLD_SIZE"};
constexpr Names kMpirun = {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                           "OMPI_COMM_WORLD_LOCAL_SIZE", "mpirun"};

absl::StatusOr<LaunchedRank> FromNames(const Names& names) {
  const std::string because = absl::StrCat(", although ", names.rank, " is");
  LaunchedRank launched;
  launched.launcher = names.launcher;
  absl::StatusOr<int> world = IntFromEnvironment(names.world, 1, INT_MAX, std::nullopt, because);
  if (!world.ok()) return world.status();
  launched.world_size = *world;
  absl::StatusOr<int> rank = IntFromEnvironment(names.rank, 0, *world - 1, std::nullopt, because);
  if (!rank.ok()) return rank.status();
  launched.rank = *rank;
  // Without the local variables: one machine.
  absl::StatusOr<int> local_world = IntFromEnvironment(names.local_world, 1, *world, *world, because);
  if (!local_world.ok()) return local_world.status();
  launched.local_world_size = *local_world;
  absl::StatusOr<int> local_rank = IntFromEnvironment(names.local_rank, 0, *local_world - 1,
                                                      *local_world == *world ? *rank : 0, because);
  if (!local_rank.ok()) return local_rank.status();
  launched.local_rank = *local_rank;
  const std::string pass_them = names.launcher == kMpirun.launcher
                                    ? " (pass them: mpirun -x MASTER_ADDR=<rank 0's host> -x MASTER_PORT=<a free port>)"
                                    : " (the launcher sets it beside RANK)";
  const char* addr = std::getenv("MASTER_ADDR");
  if (addr == nullptr || addr[0] == '\0') {
    return absl::InvalidArgumentError(absl::StrCat("MASTER_ADDR is not set", because, pass_them));
  }
  launched.master_addr = addr;
  absl::StatusOr<int> port = IntFromEnvironment("MASTER_PORT", 1, 65535, std::nullopt, because + pass_them);
  if (!port.ok()) return port.status();
  launched.master_port = *port;
  return launched;
}

// The address of this machine that its packets to `host` leave from (a UDP socket "connected" to it sends
// nothing); "127.0.0.1" for a loopback host or where that cannot be found.
std::string AddressToward(const std::string& host) {
  addrinfo hints = {};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), "9", &hints, &found) != 0 || found == nullptr) return "127.0.0.1";
  std::string address = "127.0.0.1";
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && ::connect(fd, found->ai_addr, found->ai_addrlen) == 0) {
    sockaddr_in local = {};
    socklen_t length = sizeof(local);
    char text[INET_ADDRSTRLEN] = "";
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0 &&
        ::inet_ntop(AF_INET, &local.sin_addr, text, sizeof(text)) != nullptr) {
      address = text;
    }
  }
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(found);
  return address;
}

}  // namespace

absl::StatusOr<int> IntFromEnvironment(const char* name, int min, int max, std::optional<int> fallback,
                                       const std::string& why_required) {
  const char* value = std::getenv(name);
  if (value == nullptr) {
    if (fallback.has_value()) return *fallback;
    return absl::InvalidArgumentError(absl::StrCat(name, " is not set", why_required));
  }
  int parsed = 0;
  if (!absl::SimpleAtoi(value, &parsed) || parsed < min || parsed > max) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, "=\"", value, "\": expected a whole number from ", min, " to ", max));
  }
  return parsed;
}

absl::StatusOr<int> FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address = {};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    const std::string why = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    return absl::InternalError(absl::StrCat("cannot find a free port on 127.0.0.1: ", why));
  }
  ::close(fd);
  return ntohs(address.sin_port);
}

absl::StatusOr<std::optional<LaunchedRank>> LaunchedRankFromEnvironment() {
  for (const Names* names : {&kTorchrun, &kMpirun}) {
    if (std::getenv(names->rank) == nullptr && std::getenv(names->world) == nullptr) continue;
    absl::StatusOr<LaunchedRank> launched = FromNames(*names);
    if (!launched.ok()) return launched.status();
    return std::optional<LaunchedRank>(*std::move(launched));
  }
  return std::nullopt;
}

std::vector<std::pair<std::string, std::string>> LaunchedRankEnvironment(const LaunchedRank& rank) {
  return {{"RANK", std::to_string(rank.rank)},
          {"WORLD_SIZE", std::to_string(rank.world_size)},
          {"LOCAL_RANK", std::to_string(rank.local_rank)},
          {"LOCAL_WORLD_SIZE", std::to_string(rank.local_world_size)},
          {"MASTER_ADDR", rank.master_addr},
          {"MASTER_PORT", std::to_string(rank.master_port)}};
}

absl::StatusOr<std::unique_ptr<GlooGroup>> JoinLaunchedGroup(const LaunchedRank& rank,
                                                             std::chrono::milliseconds timeout,
                                                             std::chrono::milliseconds connect_timeout) {
  GlooGroupOptions options;
  options.rank = rank.rank;
  options.world_size = rank.world_size;
  options.store_host = rank.master_addr;
  options.store_port = rank.master_port;
  options.hostname = AddressToward(rank.master_addr);
  options.timeout = timeout;
  options.connect_timeout = connect_timeout;
  absl::StatusOr<std::unique_ptr<GlooGroup>> group = GlooGroup::Connect(options);
  if (!group.ok()) {
    return absl::Status(group.status().code(),
                        absl::StrCat(rank.launcher, " rank ", rank.rank, " of ", rank.world_size, " (MASTER_ADDR=",
                                     rank.master_addr, ", MASTER_PORT=", rank.master_port,
                                     "): ", group.status().message()));
  }
  return group;
}

}  // namespace lmf::distributed
