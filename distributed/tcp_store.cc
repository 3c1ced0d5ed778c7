// TcpStoreServer and TcpRendezvousStore (see tcp_store.h).
#include "distributed/tcp_store.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "gloo/common/error.h"

namespace lmf::distributed {
namespace {

void PutLength(std::string* out, uint32_t n) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((n >> (8 * i)) & 0xff));
}

uint32_t GetLength(const char* p) {
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n |= uint32_t{static_cast<unsigned char>(p[i])} << (8 * i);
  return n;
}

// The first IPv4 address of `host` (a name or a dotted address), for `port`.
absl::StatusOr<sockaddr_in> Resolve(const std::string& host, int port) {
  addrinfo hints = {};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int e = ::getaddrinfo(host.c_str(), nullptr, &hints, &found); e != 0 || found == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve the store's host \"", host, "\": ", ::gai_strerror(e)));
  }
  sockaddr_in address = *reinterpret_cast<sockaddr_in*>(found->ai_addr);
  ::freeaddrinfo(found);
  address.sin_port = htons(static_cast<uint16_t>(port));
  return address;
}

// Writes all of `bytes`; false on an error (a closed peer: no SIGPIPE).
bool WriteAll(int fd, const char* bytes, size_t n) {
  while (n > 0) {
    const ssize_t w = ::send(fd, bytes, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    bytes += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// Reads exactly n bytes before `deadline`; false on an error, a closed peer or the deadline.
bool ReadAll(int fd, char* out, size_t n, std::chrono::steady_clock::time_point deadline) {
  while (n > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p = {fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return false;
    const ssize_t r = ::recv(fd, out, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    out += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// One request from `buffer`'s front, if it holds a whole one: answers it on `fd` and drops it from `buffer`.
// Returns false where the client must be dropped (a malformed request, or one that cannot be answered).
bool ServeOne(int fd, std::string& buffer, std::map<std::string, std::string>& values, bool* consumed) {
  *consumed = false;
  if (buffer.size() < 5) return true;
  const char op = buffer[0];
  if (op != 'S' && op != 'G' && op != 'H') return false;
  const uint32_t key_bytes = GetLength(buffer.data() + 1);
  if (key_bytes > TcpStoreServer::kMaxKeyBytes) return false;
  size_t end = 5 + size_t{key_bytes};
  if (buffer.size() < end) return true;
  std::string key = buffer.substr(5, key_bytes);
  std::string answer;
  if (op == 'S') {
    if (buffer.size() < end + 4) return true;
    const uint32_t value_bytes = GetLength(buffer.data() + end);
    if (value_bytes > TcpStoreServer::kMaxValueBytes) return false;
    if (buffer.size() < end + 4 + value_bytes) return true;
    values[key] = buffer.substr(end + 4, value_bytes);
    end += 4 + size_t{value_bytes};
    answer.push_back(1);
  } else {
    const auto found = values.find(key);
    answer.push_back(found != values.end() ? 1 : 0);
    if (op == 'G' && found != values.end()) {
      PutLength(&answer, static_cast<uint32_t>(found->second.size()));
      answer += found->second;
    }
  }
  buffer.erase(0, end);
  *consumed = true;
  return WriteAll(fd, answer.data(), answer.size());
}

}  // namespace

absl::StatusOr<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Start(const std::string& host, int port) {
  absl::StatusOr<sockaddr_in> address = Resolve(host, port);
  if (!address.ok()) return address.status();
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("tcp store: socket: ", std::strerror(errno)));
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&*address), sizeof(*address)) != 0 || ::listen(fd, 128) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    return absl::UnavailableError(absl::StrCat("tcp store: cannot listen on ", host, ":", port, ": ", why,
                                               port != 0 ? " (another run may use this port: pick another)" : ""));
  }
  sockaddr_in bound = {};
  socklen_t length = sizeof(bound);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length);
  int wake[2];
  if (::pipe2(wake, O_CLOEXEC) != 0) {
    ::close(fd);
    return absl::InternalError(absl::StrCat("tcp store: pipe: ", std::strerror(errno)));
  }
  std::unique_ptr<TcpStoreServer> server(new TcpStoreServer(fd, wake[0], wake[1], ntohs(bound.sin_port)));
  server->thread_ = std::thread([s = server.get()] { s->Serve(); });
  return server;
}

TcpStoreServer::TcpStoreServer(int listen_fd, int wake_read, int wake_write, int port)
    : listen_fd_(listen_fd), wake_read_(wake_read), wake_write_(wake_write), port_(port) {}

TcpStoreServer::~TcpStoreServer() {
  const char byte = 0;
  while (::write(wake_write_, &byte, 1) < 0 && errno == EINTR) {
  }
  thread_.join();
  ::close(listen_fd_);
  ::close(wake_read_);
  ::close(wake_write_);
}

// Every connection on one thread: the requests are tiny and rare (a group's addresses, failure notes).
void TcpStoreServer::Serve() {
  std::map<std::string, std::string> values;
  std::map<int, std::string> clients;  // each connection's bytes not yet served
  for (;;) {
    std::vector<pollfd> polled = {{wake_read_, POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    for (const auto& [fd, pending] : clients) polled.push_back({fd, POLLIN, 0});
    if (::poll(polled.data(), polled.size(), -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (polled[0].revents != 0) break;
    if (polled[1].revents & POLLIN) {
      const int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client >= 0) clients[client];
    }
    for (size_t i = 2; i < polled.size(); ++i) {
      if (polled[i].revents == 0) continue;
      const int fd = polled[i].fd;
      char chunk[65536];
      const ssize_t r = ::recv(fd, chunk, sizeof(chunk), 0);
      bool keep = r > 0 || (r < 0 && errno == EINTR);
      if (r > 0) {
        std::string& buffer = clients[fd];
        buffer.append(chunk, static_cast<size_t>(r));
        for (bool consumed = true; keep && consumed;) keep = ServeOne(fd, buffer, values, &consumed);
      }
      if (!keep) {
        ::close(fd);
        clients.erase(fd);
      }
    }
  }
  for (const auto& [fd, pending] : clients) ::close(fd);
}

absl::StatusOr<std::unique_ptr<TcpRendezvousStore>> TcpRendezvousStore::Connect(
    const std::string& host, int port, std::chrono::milliseconds connect_timeout,
    std::function<std::string()> abort) {
  const std::string name = absl::StrCat(host, ":", port);
  absl::StatusOr<sockaddr_in> address = Resolve(host, port);
  if (!address.ok()) return address.status();
  const auto deadline = std::chrono::steady_clock::now() + connect_timeout;
  std::string last_error;
  for (;;) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return absl::InternalError(absl::StrCat("tcp store: socket: ", std::strerror(errno)));
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&*address), sizeof(*address)) == 0) {
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      return std::unique_ptr<TcpRendezvousStore>(new TcpRendezvousStore(fd, name, std::move(abort)));
    }
    last_error = std::strerror(errno);
    ::close(fd);
    if (abort) {
      if (std::string why = abort(); !why.empty()) return absl::UnavailableError(why);
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return absl::UnavailableError(absl::StrCat("the TCP store at ", name, " (MASTER_ADDR:MASTER_PORT) did not accept a ",
                                                 "connection within ", connect_timeout.count(), " ms: ", last_error,
                                                 " (rank 0 serves it: is it running, and is the address right?)"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

TcpRendezvousStore::~TcpRendezvousStore() { ::close(fd_); }

bool TcpRendezvousStore::Request(const std::string& request, bool with_value, std::vector<char>* value) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto deadline = std::chrono::steady_clock::now() + kRequestTimeout;
  char status = 0;
  if (!WriteAll(fd_, request.data(), request.size()) || !ReadAll(fd_, &status, 1, deadline)) {
    throw gloo::IoException(absl::StrCat("the TCP store at ", address_,
                                         " did not answer (its rank 0 exited or the network failed)"));
  }
  if (status != 1 || !with_value) return status == 1;
  char length[4];
  if (!ReadAll(fd_, length, 4, deadline)) throw gloo::IoException(absl::StrCat("the TCP store at ", address_, " closed mid-answer"));
  value->assign(GetLength(length), 0);
  if (!ReadAll(fd_, value->data(), value->size(), deadline))
    throw gloo::IoException(absl::StrCat("the TCP store at ", address_, " closed mid-answer"));
  return true;
}

void TcpRendezvousStore::set(const std::string& key, const std::vector<char>& data) {
  if (key.size() > TcpStoreServer::kMaxKeyBytes || data.size() > TcpStoreServer::kMaxValueBytes)
    throw gloo::IoException(absl::StrCat("tcp store: key \"", key, "\" or its ", data.size(), "-byte value is too long"));
  std::string request = "S";
  PutLength(&request, static_cast<uint32_t>(key.size()));
  request += key;
  PutLength(&request, static_cast<uint32_t>(data.size()));
  request.append(data.begin(), data.end());
  Request(request, false, nullptr);
}

std::vector<char> TcpRendezvousStore::get(const std::string& key) {
  wait({key});
  std::string request = "G";
  PutLength(&request, static_cast<uint32_t>(key.size()));
  request += key;
  std::vector<char> value;
  if (!Request(request, true, &value)) throw gloo::IoException(absl::StrCat("tcp store: key \"", key, "\" vanished"));
  return value;
}

bool TcpRendezvousStore::Has(const std::string& key) {
  std::string request = "H";
  PutLength(&request, static_cast<uint32_t>(key.size()));
  request += key;
  return Request(request, false, nullptr);
}

std::string RendezvousStoreName(const std::string& rendezvous_dir, const std::string& store_host, int store_port) {
  return store_host.empty() ? rendezvous_dir : absl::StrCat("the TCP store at ", store_host, ":", store_port);
}

absl::StatusOr<OpenedStore> OpenRendezvousStore(const std::string& rendezvous_dir, const std::string& store_host,
                                                int store_port, int rank, std::chrono::milliseconds connect_timeout,
                                                std::function<std::string()> abort) {
  OpenedStore opened;
  if (store_host.empty()) {
    if (rendezvous_dir.empty())
      return absl::InvalidArgumentError("rendezvous_dir and store_host are empty; give a folder all ranks share");
    if (absl::Status s = MakeDirs(rendezvous_dir); !s.ok()) return s;
    opened.store = std::make_shared<FileRendezvousStore>(rendezvous_dir, std::move(abort));
    return opened;
  }
  if (store_port < 1 || store_port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("store_port=", store_port, ": expected a TCP port from 1 to 65535"));
  }
  if (rank == 0) {
    absl::StatusOr<std::unique_ptr<TcpStoreServer>> server = TcpStoreServer::Start(store_host, store_port);
    if (!server.ok()) return server.status();
    opened.server = *std::move(server);
  }
  absl::StatusOr<std::unique_ptr<TcpRendezvousStore>> client =
      TcpRendezvousStore::Connect(store_host, store_port, connect_timeout, std::move(abort));
  if (!client.ok()) return client.status();
  opened.store = *std::move(client);
  return opened;
}

}  // namespace lmf::distributed
