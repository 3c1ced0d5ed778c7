// Gloo plumbing under GlooGroup (gloo_group.h): the store its ranks meet through, and a Gloo context
// whose full-mesh connect can be aborted, which knows each peer's address (Gloo's connection errors name
// addresses; GlooGroup names ranks) and which can close all of its connections at once.
#ifndef LMFORGE_DISTRIBUTED_GLOO_CONTEXT_H_
#define LMFORGE_DISTRIBUTED_GLOO_CONTEXT_H_

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/file_store.h"
#include "gloo/rendezvous/store.h"
#include "gloo/transport/device.h"

namespace lmf::distributed {

// The key-value store a group and its subgroups meet through: Gloo's Store interface, plus `Has` and waits
// for keys that ask `abort` every kAbortPollInterval whether to give up, throwing its answer (they look for
// the keys every 10 ms and time out to the millisecond). Two kinds: a folder every rank can see
// (FileRendezvousStore, below) and a TCP server one rank runs (TcpRendezvousStore, tcp_store.h).
class RendezvousStore : public gloo::rendezvous::Store {
 public:
  static constexpr std::chrono::milliseconds kAbortPollInterval{100};

  // `abort` may be empty (never give up before the timeout).
  explicit RendezvousStore(std::function<std::string()> abort) : abort_(std::move(abort)) {}

  void wait(const std::vector<std::string>& keys) override { wait(keys, kDefaultTimeout); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

  // Whether `key` is set, without waiting (throws gloo::IoException where the store cannot be read).
  virtual bool Has(const std::string& key) = 0;
  // From now on waits only time out (`abort` may refer to things that are gone after a connect).
  void StopAsking();

 private:
  std::mutex mu_;
  std::function<std::string()> abort_;
};

// Gloo's file store: one file per key in a flat folder.
class FileRendezvousStore : public RendezvousStore {
 public:
  FileRendezvousStore(const std::string& path, std::function<std::string()> abort);

  // Thread-safe (FileStore's bookkeeping of the keys it wrote is not).
  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  bool Has(const std::string& key) override;

 private:
  class Files : public gloo::rendezvous::FileStore {
   public:
    using FileStore::check;
    using FileStore::FileStore;
  };
  std::mutex mu_;
  Files files_;
};

// Gloo's rendezvous context with its full-mesh connect done here, step by step as Gloo does it (create a pair
// per peer, publish their addresses under this rank's key, then for each peer in rank order wait for its key
// and connect), so that `abort` is asked while connecting the pairs too, not only while waiting for keys;
// then the ranks exchange the ends of their connections (key ends.<rank>), to name peers in Gloo's errors.
class MeshContext : public gloo::rendezvous::Context {
 public:
  MeshContext(int rank, int size) : gloo::rendezvous::Context(rank, size) {}

  // Throws Gloo's exceptions, or std::runtime_error with `abort`'s answer or a connect timeout naming the
  // rank. Uses getTimeout() for each wait; `abort` may be empty.
  void ConnectFullMesh(gloo::rendezvous::Store& store, const std::shared_ptr<gloo::transport::Device>& device,
                       const std::function<std::string()>& abort);

  // The rank whose address `gloo_error` names (Gloo's connection errors do: "Connection closed by peer
  // [127.0.0.1]:5555"), or -1.
  int PeerNamedIn(const std::string& gloo_error) const;

  // Fails every op pending on this context's connections and closes them all, so that each peer's reads and
  // writes on them end. Gloo does this itself when an op times out; this is how a failure that is not a
  // timeout gets the same effect (through Gloo's public API: a receive that cannot complete, waited for 1
  // ms).
  void CloseAll();

 private:
  // Gloo's texts for each peer's end of its connection with this rank (as published, as connected).
  std::vector<std::vector<std::string>> peer_addresses_;
};

}  // namespace lmf::distributed

#endif  // LMFORGE_DISTRIBUTED_GLOO_CONTEXT_H_
