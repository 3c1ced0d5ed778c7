// A key-value store over TCP for ranks that share no folder: one process (rank 0) serves it at a host and
// port every rank knows (torchrun's MASTER_ADDR and MASTER_PORT), and every rank, the serving one included,
// is a client. GlooGroup meets through it as through its file store (gloo_context.h): ranks publish their
// Gloo addresses and, after a failure, their failure notes.
//
// Protocol (one request, one answer, on a connection a client keeps): a request is one byte ('S' set,
// 'G' get, 'H' has), the key (4-byte length, bytes) and for a set the value (4-byte length, bytes); the answer
// is one byte (1: done / found, 0: not found) and for a found get the value (4-byte length, bytes). Lengths
// are little-endian. A key is at most kMaxKeyBytes, a value at most kMaxValueBytes; the server drops a client
// that sends more.
#ifndef LMFORGE_DISTRIBUTED_TCP_STORE_H_
#define LMFORGE_DISTRIBUTED_TCP_STORE_H_

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "distributed/gloo_context.h"

namespace lmf::distributed {

class TcpStoreServer {
 public:
  static constexpr uint32_t kMaxKeyBytes = 4096;
  static constexpr uint32_t kMaxValueBytes = 64 << 20;

  // Listens on `host` (a name or address of this machine) at `port`; port 0 picks a free one. Unavailable
  // naming host:port where it cannot (the port is taken: another run uses it).
  static absl::StatusOr<std::unique_ptr<TcpStoreServer>> Start(const std::string& host, int port);
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;
  // Stops serving and closes every connection.
  ~TcpStoreServer();

  int port() const { return port_; }

 private:
  TcpStoreServer(int listen_fd, int wake_read, int wake_write, int port);
  void Serve();

  int listen_fd_, wake_read_, wake_write_, port_;
  std::thread thread_;
};

// A client of a TcpStoreServer. Thread-safe (one request at a time on its connection).
class TcpRendezvousStore : public RendezvousStore {
 public:
  // Each request's answer must come within this; else gloo::IoException naming the server.
  static constexpr std::chrono::milliseconds kRequestTimeout{30000};

  // Connects to host:port, retrying every 100 ms (the serving rank may not listen yet) for up to
  // `connect_timeout`, asking `abort` (may be empty) between tries. Unavailable naming host:port after that.
  static absl::StatusOr<std::unique_ptr<TcpRendezvousStore>> Connect(const std::string& host, int port,
                                                                     std::chrono::milliseconds connect_timeout,
                                                                     std::function<std::string()> abort);
  ~TcpRendezvousStore() override;

  // Throw gloo::IoException naming the server where it cannot be reached or answers wrongly.
  void set(const std::string& key, const std::vector<char>& data) override;
  // Waits for the key (up to Store::kDefaultTimeout), as Gloo's stores do.
  std::vector<char> get(const std::string& key) override;
  bool Has(const std::string& key) override;

 private:
  TcpRendezvousStore(int fd, std::string address, std::function<std::string()> abort)
      : RendezvousStore(std::move(abort)), fd_(fd), address_(std::move(address)) {}
  // Sends `request`, reads the answer's status byte and, when `with_value` and it is 1, the value.
  bool Request(const std::string& request, bool with_value, std::vector<char>* value);

  std::mutex mu_;
  int fd_;
  std::string address_;  // host:port, for errors
};

// Where a group's ranks meet: the folder `rendezvous_dir` when `store_host` is empty (created if missing),
// else the TCP store at store_host:store_port, which rank 0 starts serving here. For errors:
// RendezvousStoreName, the folder or "the TCP store at host:port".
struct OpenedStore {
  std::shared_ptr<RendezvousStore> store;
  std::shared_ptr<TcpStoreServer> server;  // rank 0's, with a TCP store: keep it for the group's life
};
absl::StatusOr<OpenedStore> OpenRendezvousStore(const std::string& rendezvous_dir, const std::string& store_host,
                                                int store_port, int rank, std::chrono::milliseconds connect_timeout,
                                                std::function<std::string()> abort);
std::string RendezvousStoreName(const std::string& rendezvous_dir, const std::string& store_host, int store_port);

}  // namespace lmf::distributed

#endif  // LMFORGE_DISTRIBUTED_TCP_STORE_H_
