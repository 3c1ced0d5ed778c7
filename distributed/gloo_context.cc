// RendezvousStore and MeshContext (see gloo_context.h).
#include "distributed/gloo_context.h"

#include <algorithm>
#include <cctype>
#include <exception>
#include <future>
#include <stdexcept>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gloo/common/error.h"
#include "gloo/transport/context.h"
#include "gloo/transport/pair.h"
#include "gloo/transport/tcp/address.h"
#include "gloo/transport/unbound_buffer.h"

namespace lmf::distributed {
namespace {

constexpr auto kAbortPollInterval = RendezvousStore::kAbortPollInterval;
// The slot of CloseAll's receive: no sender ever uses it (Gloo's collectives' slots start with 0x01-0x08,
// GlooGroup's sends and recvs with 0x50).
constexpr uint64_t kCloseAllSlot = uint64_t{0xA0} << 56;

// Connects one pair to its peer's `address`. Gloo's Pair::connect blocks: the side with the lower address
// listens until the peer connects, for up to five times the timeout, and a peer that died after publishing
// its address never does. So the connect runs on a thread of its own while this one asks `abort` every
// kAbortPollInterval and watches `timeout`; either closes the pair (Gloo's connect then returns) and throws.
void ConnectPair(gloo::transport::Pair& pair, const std::vector<char>& address, int peer,
                 std::chrono::milliseconds timeout, const std::function<std::string()>& abort) {
  std::promise<void> done;
  std::future<void> connected = done.get_future();
  std::thread connector([&pair, &address, &done] {
    try {
      pair.connect(address);
      done.set_value();
    } catch (...) {
      done.set_exception(std::current_exception());
    }
  });
  const auto start = std::chrono::steady_clock::now();
  std::string why;
  while (connected.wait_for(kAbortPollInterval) != std::future_status::ready) {
    if (timeout != gloo::kNoTimeout && std::chrono::steady_clock::now() - start >= timeout) {
      why = absl::StrCat("Connect timeout: rank ", peer, " did not connect within ", timeout.count(), " ms");
    } else if (abort) {
      why = abort();
    }
    if (!why.empty()) {
      pair.close();
      break;
    }
  }
  connector.join();
  if (!why.empty()) throw std::runtime_error(why);
  connected.get();  // the connect's own error, if it failed
}

}  // namespace

void RendezvousStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  const auto start = std::chrono::steady_clock::now();
  auto next_ask = start + kAbortPollInterval;
  const auto all_set = [&] {
    return std::all_of(keys.begin(), keys.end(), [&](const std::string& key) { return Has(key); });
  };
  while (!all_set()) {
    const auto now = std::chrono::steady_clock::now();
    if (timeout != gloo::kNoTimeout && now - start >= timeout) {
      throw gloo::IoException(absl::StrCat("Wait timeout for key(s): ", absl::StrJoin(keys, ", "), " after ",
                                           timeout.count(), " ms"));
    }
    if (now >= next_ask) {
      std::function<std::string()> abort;
      {
        std::lock_guard<std::mutex> lock(mu_);
        abort = abort_;
      }
      if (abort) {
        if (std::string why = abort(); !why.empty()) throw std::runtime_error(why);
      }
      next_ask = now + kAbortPollInterval;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void RendezvousStore::StopAsking() {
  std::lock_guard<std::mutex> lock(mu_);
  abort_ = nullptr;
}

FileRendezvousStore::FileRendezvousStore(const std::string& path, std::function<std::string()> abort)
    : RendezvousStore(std::move(abort)), files_(path) {}

void FileRendezvousStore::set(const std::string& key, const std::vector<char>& data) {
  std::lock_guard<std::mutex> lock(mu_);
  files_.set(key, data);
}

std::vector<char> FileRendezvousStore::get(const std::string& key) { return files_.get(key); }

bool FileRendezvousStore::Has(const std::string& key) { return files_.check({key}); }

void MeshContext::ConnectFullMesh(gloo::rendezvous::Store& store,
                                  const std::shared_ptr<gloo::transport::Device>& device,
                                  const std::function<std::string()>& abort) {
  std::shared_ptr<gloo::transport::Context> pairs = device->createContext(rank, size);
  pairs->setTimeout(getTimeout());
  std::vector<char> addresses;  // this rank's pair with each other rank, in rank order
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    const std::vector<char> bytes = pairs->createPair(peer)->address().bytes();
    addresses.insert(addresses.end(), bytes.begin(), bytes.end());
  }
  store.set(std::to_string(rank), addresses);
  peer_addresses_.assign(size, {});
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    store.wait({std::to_string(peer)}, getTimeout());
    std::vector<char> peer_addresses = store.get(std::to_string(peer));
    const std::vector<char> address = extractAddress(peer_addresses, peer);
    peer_addresses_[peer].push_back(gloo::transport::tcp::Address(address).str());
    ConnectPair(*pairs->getPair(peer), address, peer, getTimeout(), abort);
  }
  // Gloo's errors name a connection's far end either as the peer published it (above) or as the socket
  // reports it once connected (for the side that accepted it, the peer's ephemeral port), whichever Gloo set
  // last: each rank publishes its own end of each connection too, and reads its peers'.
  std::vector<std::string> ends(size);
  for (int peer = 0; peer < size; ++peer) {
    if (peer != rank) ends[peer] = pairs->getPair(peer)->address().str();
  }
  const std::string mine = absl::StrJoin(ends, "\n");
  store.set(absl::StrCat("ends.", rank), std::vector<char>(mine.c_str(), mine.c_str() + mine.size() + 1));
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    const std::string key = absl::StrCat("ends.", peer);
    store.wait({key}, getTimeout());
    const std::vector<char> bytes = store.get(key);
    const std::string text(bytes.begin(),
                           std::find(bytes.begin(), bytes.end(), '\0'));  // written with a '\0': never empty
    const std::vector<std::string> theirs = absl::StrSplit(text, '\n');
    if (static_cast<int>(theirs.size()) == size) peer_addresses_[peer].push_back(theirs[rank]);
  }
  device_ = device;
  transportContext_ = std::move(pairs);
}

int MeshContext::PeerNamedIn(const std::string& gloo_error) const {
  for (int peer = 0; peer < static_cast<int>(peer_addresses_.size()); ++peer) {
    for (const std::string& address : peer_addresses_[peer]) {
      for (size_t at = gloo_error.find(address); at != std::string::npos;
           at = gloo_error.find(address, at + 1)) {
        const size_t end = at + address.size();  // a longer port or sequence number is another address
        if (end == gloo_error.size() || !std::isdigit(static_cast<unsigned char>(gloo_error[end])))
          return peer;
      }
    }
  }
  return -1;
}

void MeshContext::CloseAll() {
  if (transportContext_ == nullptr) return;
  char byte = 0;
  std::unique_ptr<gloo::transport::UnboundBuffer> buffer = createUnboundBuffer(&byte, 1);
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    try {
      buffer->recv(peer, kCloseAllSlot);  // throws if this pair has failed already: try the next
    } catch (const std::exception&) {
      continue;
    }
    try {
      // Times out: Gloo then fails every pending op of every pair in the context and closes the pairs.
      buffer->waitRecv(std::chrono::milliseconds(1));
    } catch (const std::exception& e) {
      // Anything but the timeout is this pair failing meanwhile (nothing else closed): try the next.
      if (std::string(e.what()).find("Timed out waiting") == std::string::npos) continue;
    }
    return;
  }
}

}  // namespace lmf::distributed
