// GlooGroup: Gloo's TCP device, file-store rendezvous (a full-mesh connect that can be aborted) and
// collectives, with Gloo's exceptions turned into absl::Status that say which rank and which collective
// failed.
#include "distributed/gloo_group.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/file.h"
#include "gloo/allreduce.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/common/error.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/file_store.h"
#include "gloo/transport/context.h"
#include "gloo/transport/pair.h"
#include "gloo/transport/tcp/device.h"

#if defined(LMF_SANITIZER_BUILD)
// ThreadSanitizer (--config=tsan) sees only instrumented code: Gloo is the system library, built without it,
// and its transport threads drop their references to a buffer (an atomic decrement TSan cannot see) that the
// process then deletes. Races inside Gloo are not this project's to check; everything else stays checked.
// Here rather than in a test, so that every binary with Gloo has it: the trainer's data-parallel ranks are
// the `train` or `sweep` binary. (Defined but never called under --config=asan.)
extern "C" const char* __tsan_default_suppressions() { return "race:libgloo.so\n"; }
#endif

namespace lmf::distributed {
namespace {

constexpr std::chrono::milliseconds kAbortPollInterval{100};

// Gloo's file store, whose waits for keys ask `abort` every kAbortPollInterval whether to give up, throwing
// its answer. (Like FileStore's own wait it looks for the keys every 10 ms; unlike it, it times out to the
// millisecond, not in whole seconds.)
class AbortableFileStore : public gloo::rendezvous::FileStore {
 public:
  AbortableFileStore(const std::string& path, std::function<std::string()> abort)
      : FileStore(path), abort_(std::move(abort)) {}

  void wait(const std::vector<std::string>& keys) override { wait(keys, kDefaultTimeout); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    const auto start = std::chrono::steady_clock::now();
    auto next_ask = start + kAbortPollInterval;
    while (!check(keys)) {
      const auto now = std::chrono::steady_clock::now();
      if (timeout != gloo::kNoTimeout && now - start >= timeout) {
        throw gloo::IoException(absl::StrCat("Wait timeout for key(s): ", absl::StrJoin(keys, ", "),
                                             " after ", timeout.count(), " ms"));
      }
      if (now >= next_ask) {
        if (std::string why = abort_(); !why.empty()) throw std::runtime_error(why);
        next_ask = now + kAbortPollInterval;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

 private:
  std::function<std::string()> abort_;
};

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
    } else {
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

// Gloo's rendezvous context with its full-mesh connect done here, step by step as Gloo does it (create a
// pair per peer, publish their addresses under this rank's key, then for each peer in rank order wait for
// its key and connect), so that `abort` is asked while connecting the pairs too, not only while waiting for
// keys. Every rank of a GlooGroup connects this way.
class AbortableContext : public gloo::rendezvous::Context {
 public:
  AbortableContext(int rank, int size) : gloo::rendezvous::Context(rank, size) {}

  void ConnectFullMesh(gloo::rendezvous::Store& store, const std::shared_ptr<gloo::transport::Device>& device,
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
    for (int peer = 0; peer < size; ++peer) {
      if (peer == rank) continue;
      store.wait({std::to_string(peer)}, getTimeout());
      std::vector<char> peer_addresses = store.get(std::to_string(peer));
      ConnectPair(*pairs->getPair(peer), extractAddress(peer_addresses, peer), peer, getTimeout(), abort);
    }
    device_ = device;
    transportContext_ = std::move(pairs);
  }
};

}  // namespace

GlooGroup::GlooGroup(int rank, int world_size, std::shared_ptr<gloo::Context> context)
    : rank_(rank), world_size_(world_size), context_(std::move(context)) {}

GlooGroup::~GlooGroup() = default;

absl::StatusOr<std::unique_ptr<GlooGroup>> GlooGroup::Connect(const GlooGroupOptions& options) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("gloo group: rank ", options.rank, " is not in [0, world_size=", options.world_size, ")"));
  }
  if (options.rendezvous_dir.empty()) {
    return absl::InvalidArgumentError("gloo group: rendezvous_dir is empty; give a folder all ranks share");
  }
  if (absl::Status s = MakeDirs(options.rendezvous_dir); !s.ok()) return s;
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.hostname;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    const std::function<std::string()> abort =
        options.abort_connect ? options.abort_connect : [] { return std::string(); };
    AbortableFileStore store(options.rendezvous_dir, abort);
    auto context = std::make_shared<AbortableContext>(options.rank, options.world_size);
    context->setTimeout(options.connect_timeout);
    context->ConnectFullMesh(store, device, abort);
    context->setTimeout(options.timeout);
    return std::unique_ptr<GlooGroup>(new GlooGroup(options.rank, options.world_size, std::move(context)));
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("gloo group: rank ", options.rank, " of ", options.world_size,
                                               " could not connect via ", options.rendezvous_dir, ": ",
                                               e.what()));
  }
}

template <typename T>
absl::Status GlooGroup::AllReduceSumImpl(T* data, size_t n) {
  if (n == 0) return absl::OkStatus();
  try {
    gloo::AllreduceOptions opts(context_);
    opts.setOutput(data, n);
    opts.setReduceFunction(
        static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<T>));
    gloo::allreduce(opts);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("gloo all-reduce failed on rank ", rank_, ": ", e.what()));
  }
  return absl::OkStatus();
}

absl::Status GlooGroup::AllReduceSum(float* data, size_t n) { return AllReduceSumImpl(data, n); }
absl::Status GlooGroup::AllReduceSum(double* data, size_t n) { return AllReduceSumImpl(data, n); }

absl::Status GlooGroup::Broadcast(float* data, size_t n, int root) {
  if (root < 0 || root >= world_size_) {
    return absl::InvalidArgumentError(absl::StrCat("gloo broadcast: root ", root, " out of range"));
  }
  try {
    gloo::BroadcastOptions opts(context_);
    opts.setOutput(data, n);
    opts.setRoot(root);
    gloo::broadcast(opts);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("gloo broadcast failed on rank ", rank_, ": ", e.what()));
  }
  return absl::OkStatus();
}

absl::Status GlooGroup::Barrier() {
  try {
    gloo::BarrierOptions opts(context_);
    gloo::barrier(opts);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("gloo barrier failed on rank ", rank_, ": ", e.what()));
  }
  return absl::OkStatus();
}

}  // namespace lmf::distributed
