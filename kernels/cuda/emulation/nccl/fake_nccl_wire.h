// The fake NCCL's transport (fake_nccl.cc): one communicator rank's connections to the others, a full-duplex
// Unix stream socket per peer in Linux's abstract namespace (named by the communicator's id and the ranks, so
// nothing is left on disk), and the exchange of one op's messages over them. Every message carries a header
// naming the sender's op and its size, so a receiver whose op differs fails, naming both, instead of reading
// the wrong bytes. Part of the CUDA emulation; not a Bazel target.
#ifndef LMFORGE_KERNELS_CUDA_EMULATION_NCCL_FAKE_NCCL_WIRE_H_
#define LMFORGE_KERNELS_CUDA_EMULATION_NCCL_FAKE_NCCL_WIRE_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace fake_nccl {

struct WireHeader {
  uint64_t bytes;  // the payload's
  char what[56];   // the sender's op, e.g. "all-reduce (sum) of 4 x f32", cut to fit, NUL-padded
};

// One message of an op: sent to, or received from, `peer`.
struct Transfer {
  int peer = 0;
  bool send = false;
  std::string what;           // the op, as both sides describe it
  const char* out = nullptr;  // send: the payload
  char* in = nullptr;         // receive: where the payload goes
  size_t bytes = 0;
  // Progress through the header, then the payload.
  size_t moved = 0;
  WireHeader header{};
};

// Why an exchange failed: a peer that closed its side (exited or aborted), a peer whose op differs, or this
// rank's own stop (an abort).
enum class WireError { kNone, kPeerGone, kMismatch, kSystem, kStopped };

class Mesh {
 public:
  Mesh() = default;
  Mesh(const Mesh&) = delete;
  Mesh& operator=(const Mesh&) = delete;
  ~Mesh();

  // Joins the others of communicator `name` as `rank` of `nranks`: listens, connects to each lower rank and
  // accepts each higher one. Gives up, with `error`, when `stop()` turns true or after `limit`.
  WireError Connect(const std::string& name, int rank, int nranks, std::chrono::seconds limit,
                    const std::function<bool()>& stop, std::string* error);

  // Moves every transfer: each peer's sends, and its receives, in list order, all peers at once (so two
  // ranks sending each other more than a socket holds do not wait on each other). Stops, with `error`, at
  // the first failure or when `stop()` turns true.
  WireError Exchange(std::vector<Transfer>& transfers, const std::function<bool()>& stop, std::string* error);

 private:
  int rank_ = 0;
  int nranks_ = 0;
  std::vector<int> fds_;  // per peer rank; -1 for this rank
};

}  // namespace fake_nccl

#endif  // LMFORGE_KERNELS_CUDA_EMULATION_NCCL_FAKE_NCCL_WIRE_H_
