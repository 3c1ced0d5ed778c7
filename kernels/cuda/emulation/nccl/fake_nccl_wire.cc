// The fake NCCL's sockets (fake_nccl_wire.h): connecting a communicator's ranks, and moving an op's messages.
#include "kernels/cuda/emulation/nccl/fake_nccl_wire.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace fake_nccl {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kHelloMagic = 0x6c6d666eu;  // "lmfn"
constexpr int kPollMs = 20;

struct Hello {
  uint32_t magic;
  int32_t rank;
};

// The abstract socket address of `rank` in communicator `name` (empty when the name is too long).
bool Address(const std::string& name, int rank, sockaddr_un* address, socklen_t* length) {
  const std::string path = "lmf-fake-nccl/" + name + "/" + std::to_string(rank);
  std::memset(address, 0, sizeof(*address));
  address->sun_family = AF_UNIX;
  if (path.size() + 1 > sizeof(address->sun_path)) return false;
  std::memcpy(address->sun_path + 1, path.data(), path.size());  // sun_path[0] == 0: the abstract namespace
  *length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + path.size());
  return true;
}

std::string Errno(const char* call) { return std::string(call) + ": " + std::strerror(errno); }

// Reads or writes all of `bytes` on a blocking socket, waiting at most until `deadline`.
bool MoveAll(int fd, char* data, size_t bytes, bool write, Clock::time_point deadline) {
  size_t done = 0;
  while (done < bytes) {
    pollfd p{fd, static_cast<short>(write ? POLLOUT : POLLIN), 0};
    if (Clock::now() >= deadline || ::poll(&p, 1, kPollMs) < 0) return false;
    if (p.revents == 0) continue;
    const ssize_t n = write ? ::send(fd, data + done, bytes - done, MSG_NOSIGNAL | MSG_DONTWAIT)
                            : ::recv(fd, data + done, bytes - done, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return false;
    if (n > 0) done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

Mesh::~Mesh() {
  for (int fd : fds_)
    if (fd >= 0) ::close(fd);
}

WireError Mesh::Connect(const std::string& name, int rank, int nranks, std::chrono::seconds limit,
                        const std::function<bool()>& stop, std::string* error) {
  rank_ = rank, nranks_ = nranks;
  fds_.assign(nranks, -1);
  const Clock::time_point deadline = Clock::now() + limit;
  sockaddr_un address;
  socklen_t length;
  if (!Address(name, rank, &address, &length)) {
    *error = "the communicator's name '" + name + "' is too long for a socket address";
    return WireError::kSystem;
  }
  const int listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listener < 0 || ::bind(listener, reinterpret_cast<sockaddr*>(&address), length) != 0 ||
      ::listen(listener, nranks) != 0) {
    *error = "rank " + std::to_string(rank) + " cannot listen (" + Errno(listener < 0 ? "socket" : "bind") +
             "; was this rank's id and rank used twice?)";
    if (listener >= 0) ::close(listener);
    return WireError::kSystem;
  }
  auto fail = [&](WireError why, std::string text) {
    ::close(listener);
    *error = std::move(text);
    return why;
  };
  // To each lower rank: connect (it may not listen yet) and say who this is.
  for (int peer = 0; peer < rank; ++peer) {
    sockaddr_un to;
    Address(name, peer, &to, &length);
    for (;;) {
      if (stop()) return fail(WireError::kStopped, "aborted while connecting");
      if (Clock::now() >= deadline)
        return fail(WireError::kPeerGone, "rank " + std::to_string(peer) + " did not listen within " +
                                              std::to_string(limit.count()) + " s");
      const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&to), length) == 0) {
        Hello hello{kHelloMagic, rank};
        if (!MoveAll(fd, reinterpret_cast<char*>(&hello), sizeof(hello), true, deadline)) {
          ::close(fd);
          return fail(WireError::kPeerGone,
                      "rank " + std::to_string(peer) + " closed the connection at once");
        }
        fds_[peer] = fd;
        break;
      }
      if (fd >= 0) ::close(fd);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  // From each higher rank: accept, and learn which it is.
  for (int accepted = 0; accepted < nranks - 1 - rank;) {
    if (stop()) return fail(WireError::kStopped, "aborted while connecting");
    if (Clock::now() >= deadline)
      return fail(WireError::kPeerGone, std::to_string(nranks - 1 - rank - accepted) +
                                            " higher rank(s) did not " + "connect within " +
                                            std::to_string(limit.count()) + " s");
    pollfd p{listener, POLLIN, 0};
    if (::poll(&p, 1, kPollMs) <= 0) continue;
    const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    Hello hello{};
    if (!MoveAll(fd, reinterpret_cast<char*>(&hello), sizeof(hello), false, deadline) ||
        hello.magic != kHelloMagic || hello.rank <= rank || hello.rank >= nranks || fds_[hello.rank] >= 0) {
      ::close(fd);
      return fail(WireError::kSystem, "a connection that is not a higher rank of this communicator (rank " +
                                          std::to_string(hello.rank) + ")");
    }
    fds_[hello.rank] = fd;
    ++accepted;
  }
  ::close(listener);
  // LMF_FAKE_NCCL_SOCKET_BYTES: each connection's socket buffers (Linux doubles the value and keeps at least
  // a few KiB), so that tests of small messages see sends wait for their receives.
  const char* socket_bytes = std::getenv("LMF_FAKE_NCCL_SOCKET_BYTES");
  const int buffer = socket_bytes != nullptr ? std::atoi(socket_bytes) : 0;
  for (int fd : fds_) {
    if (fd < 0) continue;
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    if (buffer > 0) {
      ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buffer, sizeof(buffer));
      ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buffer, sizeof(buffer));
    }
  }
  return WireError::kNone;
}

WireError Mesh::Exchange(std::vector<Transfer>& transfers, const std::function<bool()>& stop,
                         std::string* error) {
  constexpr size_t kHeader = sizeof(WireHeader);
  // Each peer's next unfinished send and receive (indices into `transfers`, in list order).
  std::vector<std::vector<size_t>> sends(nranks_), receives(nranks_);
  for (size_t i = transfers.size(); i-- > 0;) {
    Transfer& t = transfers[i];
    t.moved = 0;
    if (t.send) {
      std::memset(&t.header, 0, sizeof(t.header));
      t.header.bytes = t.bytes;
      std::memcpy(t.header.what, t.what.data(), std::min(t.what.size(), sizeof(t.header.what) - 1));
    }
    (t.send ? sends : receives)[t.peer].push_back(i);  // reversed: the next one is at the back
  }
  auto gone = [&](int peer, const Transfer& t) {
    *error = "rank " + std::to_string(peer) + " closed its connection (it exited or aborted) with '" +
             t.what + "' " + (t.send ? "to send to it" : "to receive from it");
    return WireError::kPeerGone;
  };
  for (;;) {
    std::vector<pollfd> polls;
    for (int peer = 0; peer < nranks_; ++peer) {
      const short events =
          static_cast<short>((sends[peer].empty() ? 0 : POLLOUT) | (receives[peer].empty() ? 0 : POLLIN));
      if (events != 0) polls.push_back(pollfd{fds_[peer], events, 0});
    }
    if (polls.empty()) return WireError::kNone;
    if (stop()) {
      *error = "aborted";
      return WireError::kStopped;
    }
    if (::poll(polls.data(), polls.size(), kPollMs) < 0 && errno != EINTR) {
      *error = Errno("poll");
      return WireError::kSystem;
    }
    for (const pollfd& p : polls) {
      const int peer = static_cast<int>(std::find(fds_.begin(), fds_.end(), p.fd) - fds_.begin());
      if (p.revents == 0) continue;
      // Sends: header, then payload, as far as the socket takes them.
      while (!sends[peer].empty()) {
        Transfer& t = transfers[sends[peer].back()];
        const bool in_header = t.moved < kHeader;
        const char* from =
            in_header ? reinterpret_cast<const char*>(&t.header) + t.moved : t.out + (t.moved - kHeader);
        const size_t left = in_header ? kHeader - t.moved : t.bytes - (t.moved - kHeader);
        const ssize_t n = left == 0 ? 0 : ::send(p.fd, from, left, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) break;
        if (n < 0) return gone(peer, t);
        t.moved += static_cast<size_t>(n);
        if (t.moved == kHeader + t.bytes) sends[peer].pop_back();
      }
      // Receives: the header (checked against this rank's op), then the payload.
      while (!receives[peer].empty()) {
        Transfer& t = transfers[receives[peer].back()];
        const bool in_header = t.moved < kHeader;
        char* to = in_header ? reinterpret_cast<char*>(&t.header) + t.moved : t.in + (t.moved - kHeader);
        const size_t left = in_header ? kHeader - t.moved : t.bytes - (t.moved - kHeader);
        const ssize_t n = left == 0 ? 0 : ::recv(p.fd, to, left, MSG_DONTWAIT);
        if (left > 0 && n == 0) return gone(peer, t);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) break;
        if (n < 0) return gone(peer, t);
        t.moved += static_cast<size_t>(n);
        if (in_header && t.moved == kHeader) {
          std::string theirs(t.header.what, strnlen(t.header.what, sizeof(t.header.what)));
          const std::string mine = t.what.substr(0, sizeof(t.header.what) - 1);
          if (theirs != mine || t.header.bytes != t.bytes) {
            *error = "rank " + std::to_string(peer) + " sent " + std::to_string(t.header.bytes) +
                     " bytes of '" + theirs + "' where this rank expected " + std::to_string(t.bytes) +
                     " bytes of '" + t.what + "' (the ranks issued different ops)";
            return WireError::kMismatch;
          }
        }
        if (t.moved == kHeader + t.bytes) receives[peer].pop_back();
      }
    }
  }
}

}  // namespace fake_nccl
