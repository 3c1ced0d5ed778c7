// The backend-independent half of Collectives (see collectives.h): every op's arguments are checked here, and
// described, once for all backends, so that a bad call reads the same on Gloo and on NCCL.
#include "distributed/collectives.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace lmf::distributed {
namespace {

class FinishedWork : public Work {
 public:
  explicit FinishedWork(absl::Status status) : status_(std::move(status)) {}
  absl::Status Wait() override { return status_; }

 private:
  absl::Status status_;
};

const char* ReduceName(ReduceOp op) { return op == ReduceOp::kSum ? "sum" : "max"; }

std::string Elements(size_t count, DataType type) { return absl::StrCat(count, " x ", DataTypeName(type)); }

// Whether two buffers share a byte.
bool Overlap(const Buffer& a, const Buffer& b) {
  if (a.bytes() == 0 || b.bytes() == 0) return false;
  const char* a0 = static_cast<const char*>(a.data);
  const char* b0 = static_cast<const char*>(b.data);
  return a0 < b0 + b.bytes() && b0 < a0 + a.bytes();
}

size_t Sum(const std::vector<size_t>& counts) {
  size_t total = 0;
  for (size_t c : counts) total += c;
  return total;
}

}  // namespace

size_t DataTypeSize(DataType type) {
  switch (type) {
    case DataType::kF32:
    case DataType::kI32:
      return 4;
    case DataType::kF64:
    case DataType::kI64:
      return 8;
    case DataType::kBF16:
      return 2;
    case DataType::kU8:
      return 1;
  }
  return 0;
}

const char* DataTypeName(DataType type) {
  switch (type) {
    case DataType::kF32:
      return "f32";
    case DataType::kF64:
      return "f64";
    case DataType::kBF16:
      return "bf16";
    case DataType::kI32:
      return "i32";
    case DataType::kI64:
      return "i64";
    case DataType::kU8:
      return "u8";
  }
  return "?";
}

absl::Status WaitAll(std::vector<std::unique_ptr<Work>>& works) {
  absl::Status first = absl::OkStatus();
  for (std::unique_ptr<Work>& work : works) {
    absl::Status s = work->Wait();
    if (first.ok()) first = s;
  }
  return first;
}

std::unique_ptr<Work> DoneWork(absl::Status status) {
  return std::make_unique<FinishedWork>(std::move(status));
}

Collectives::Collectives(std::string backend, std::string name, int rank, int world_size,
                         std::chrono::milliseconds timeout, std::vector<int> world_ranks)
    : backend_(std::move(backend)),
      name_(std::move(name)),
      rank_(rank),
      world_size_(world_size),
      timeout_(timeout),
      world_ranks_(std::move(world_ranks)) {}

uint64_t Fingerprint(const std::string& text) {
  uint64_t hash = 14695981039346656037ull;
  for (unsigned char c : text) hash = (hash ^ c) * 1099511628211ull;
  return hash;
}

std::string Collectives::PeerName(int rank) const {
  if (world_ranks_.empty() || rank < 0 || rank >= static_cast<int>(world_ranks_.size())) {
    return absl::StrCat("rank ", rank);
  }
  return absl::StrCat("rank ", rank, " (world rank ", world_ranks_[rank], ")");
}

std::string Collectives::GroupContext() const {
  return absl::StrCat(backend_, " group '", name_, "' ", PeerName(rank_), " of ", world_size_);
}

Collectives::Op Collectives::MakeOp(std::string description, const CallOptions& options) const {
  Op op;
  op.context = absl::StrCat(GroupContext(), ": ", description);
  op.description = std::move(description);
  op.timeout = options.timeout.count() > 0 ? options.timeout : timeout_;
  op.stream = options.stream;
  op.after = options.after;
  return op;
}

absl::Status Collectives::CheckCommon(const Op& op, const CallOptions& options,
                                      std::initializer_list<const Buffer*> buffers) const {
  if (options.timeout.count() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(op.context, ": timeout ", options.timeout.count(),
                                                   " ms is negative (0: the group's timeout)"));
  }
  for (const Buffer* buffer : buffers) {
    if (buffer->data == nullptr && buffer->count > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(op.context, ": a buffer of ", buffer->count, " elements has no data pointer"));
    }
    if (absl::Status s = CheckDevice(buffer->device); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(op.context, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

std::unique_ptr<Work> Collectives::Reject(const absl::Status& error) {
  FailAfterIssuedOps(error);
  return DoneWork(error);
}

absl::Status Collectives::CheckPeer(const Op& op, int peer, int tag) const {
  if (peer < 0 || peer >= world_size_ || peer == rank_) {
    return absl::InvalidArgumentError(absl::StrCat(
        op.context, ": peer ", peer, " is not another rank of the group [0, ", world_size_, ")"));
  }
  if (tag < 0 || tag > kMaxTag) {
    return absl::InvalidArgumentError(
        absl::StrCat(op.context, ": tag ", tag, " is not in [0, ", kMaxTag, "]"));
  }
  return absl::OkStatus();
}

std::unique_ptr<Work> Collectives::AllReduceAsync(const Buffer& data, ReduceOp reduce,
                                                  const CallOptions& options) {
  const Op op = MakeOp(
      absl::StrCat("all-reduce (", ReduceName(reduce), ") of ", Elements(data.count, data.type)), options);
  if (absl::Status s = CheckCommon(op, options, {&data}); !s.ok()) return Reject(s);
  return StartAllReduce(op, data, reduce);
}

namespace {

// Several Works as one: Wait waits for every one (even after a failure: each may still use its buffers) and
// returns the first error.
class AllWork : public Work {
 public:
  explicit AllWork(std::vector<std::unique_ptr<Work>> works) : works_(std::move(works)) {}
  absl::Status Wait() override { return WaitAll(works_); }

 private:
  std::vector<std::unique_ptr<Work>> works_;
};

// "3 buffers, 1200 elements in all".
std::string BuffersInAll(const std::vector<Buffer>& data) {
  size_t count = 0;
  for (const Buffer& b : data) count += b.count;
  return absl::StrCat(data.size(), " buffers, ", count, " elements in all");
}

}  // namespace

std::unique_ptr<Work> Collectives::AllReduceManyAsync(const std::vector<Buffer>& data, ReduceOp reduce,
                                                      const CallOptions& options) {
  const Op op = MakeOp(absl::StrCat("all-reduce (", ReduceName(reduce), ") of ", BuffersInAll(data)), options);
  if (absl::Status s = CheckMany(op, options, data); !s.ok()) return Reject(s);
  return StartAllReduceMany(op, data, reduce);
}

std::unique_ptr<Work> Collectives::BroadcastManyAsync(const std::vector<Buffer>& data, const std::vector<int>& roots,
                                                      const CallOptions& options) {
  const Op op = MakeOp(absl::StrCat("broadcast of ", BuffersInAll(data)), options);
  if (absl::Status s = CheckMany(op, options, data); !s.ok()) return Reject(s);
  if (roots.size() != data.size()) {
    return Reject(absl::InvalidArgumentError(
        absl::StrCat(op.context, ": ", roots.size(), " roots for ", data.size(), " buffers")));
  }
  for (size_t i = 0; i < roots.size(); ++i) {
    if (roots[i] < 0 || roots[i] >= world_size_) {
      return Reject(absl::InvalidArgumentError(absl::StrCat(op.context, ": root ", roots[i], " of buffer ", i,
                                                             " is not a rank of the group [0, ", world_size_, ")")));
    }
  }
  return StartBroadcastMany(op, data, roots);
}

absl::Status Collectives::CheckMany(const Op& op, const CallOptions& options, const std::vector<Buffer>& data) const {
  for (size_t i = 0; i < data.size(); ++i) {
    if (absl::Status s = CheckCommon(op, options, {&data[i]}); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(s.message(), " (buffer ", i, ")"));
    }
  }
  std::vector<const Buffer*> sorted;  // by address, to find overlaps in one pass
  for (const Buffer& b : data) sorted.push_back(&b);
  std::sort(sorted.begin(), sorted.end(), [](const Buffer* a, const Buffer* b) { return a->data < b->data; });
  for (size_t i = 1; i < sorted.size(); ++i) {
    if (Overlap(*sorted[i - 1], *sorted[i])) {
      return absl::InvalidArgumentError(absl::StrCat(op.context, ": two of the buffers overlap"));
    }
  }
  return absl::OkStatus();
}

Collectives::Op Collectives::PartOf(const Op& whole, std::string description) const {
  Op part = whole;  // its timeout, stream and `after`
  part.context = absl::StrCat(GroupContext(), ": ", description);
  part.description = std::move(description);
  return part;
}

std::unique_ptr<Work> Collectives::StartAllReduceMany(const Op& op, const std::vector<Buffer>& data,
                                                      ReduceOp reduce) {
  std::vector<std::unique_ptr<Work>> works;
  for (size_t i = 0; i < data.size(); ++i) {
    const Op one = PartOf(op, absl::StrCat("all-reduce (", ReduceName(reduce), ") of ",
                                           Elements(data[i].count, data[i].type), ", buffer ", i, " of ", data.size()));
    works.push_back(StartAllReduce(one, data[i], reduce));
  }
  return std::make_unique<AllWork>(std::move(works));
}

std::unique_ptr<Work> Collectives::StartBroadcastMany(const Op& op, const std::vector<Buffer>& data,
                                                      const std::vector<int>& roots) {
  std::vector<std::unique_ptr<Work>> works;
  for (size_t i = 0; i < data.size(); ++i) {
    const Op one = PartOf(op, absl::StrCat("broadcast of ", Elements(data[i].count, data[i].type), " from rank ",
                                           roots[i], ", buffer ", i, " of ", data.size()));
    works.push_back(StartBroadcast(one, data[i], roots[i]));
  }
  return std::make_unique<AllWork>(std::move(works));
}

std::unique_ptr<Work> Collectives::BroadcastAsync(const Buffer& data, int root, const CallOptions& options) {
  const Op op =
      MakeOp(absl::StrCat("broadcast of ", Elements(data.count, data.type), " from rank ", root), options);
  if (absl::Status s = CheckCommon(op, options, {&data}); !s.ok()) return Reject(s);
  if (root < 0 || root >= world_size_) {
    return Reject(absl::InvalidArgumentError(
        absl::StrCat(op.context, ": root ", root, " is not a rank of the group [0, ", world_size_, ")")));
  }
  return StartBroadcast(op, data, root);
}

std::unique_ptr<Work> Collectives::BarrierAsync(const CallOptions& options) {
  const Op op = MakeOp("barrier", options);
  if (absl::Status s = CheckCommon(op, options, {}); !s.ok()) return Reject(s);
  return StartBarrier(op);
}

absl::Status Collectives::CheckBlocks(const Op& op, const Buffer& input, const Buffer& output,
                                      bool input_is_whole) const {
  auto invalid = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(op.context, ": ", why));
  };
  if (input.type != output.type) {
    return invalid(
        absl::StrCat("the output is ", DataTypeName(output.type), ", the input ", DataTypeName(input.type)));
  }
  const Buffer& whole = input_is_whole ? input : output;
  const Buffer& block = input_is_whole ? output : input;
  const char* whole_name = input_is_whole ? "input" : "output";
  const char* block_name = input_is_whole ? "output" : "input";
  if (whole.count != block.count * world_size_) {
    return invalid(absl::StrCat("the ", whole_name, " must hold world_size ", world_size_, " x ", block_name,
                                " count ", block.count, " = ", block.count * world_size_, " elements, not ",
                                whole.count));
  }
  const bool in_place = block.data == static_cast<char*>(whole.data) + rank_ * block.bytes();
  if (!in_place && Overlap(input, output)) {
    return invalid(absl::StrCat("the ", block_name, " overlaps the ", whole_name,
                                " without being this rank's block of it (in place: ", block_name, " = ",
                                whole_name, " + rank x ", block_name, " count)"));
  }
  return absl::OkStatus();
}

std::unique_ptr<Work> Collectives::ReduceScatterAsync(const Buffer& input, const Buffer& output,
                                                      ReduceOp reduce, const CallOptions& options) {
  const Op op = MakeOp(absl::StrCat("reduce-scatter (", ReduceName(reduce), ") of ",
                                    Elements(input.count, input.type), " into ", output.count, " per rank"),
                       options);
  if (absl::Status s = CheckCommon(op, options, {&input, &output}); !s.ok()) return Reject(s);
  if (absl::Status s = CheckBlocks(op, input, output, /*input_is_whole=*/true); !s.ok()) return Reject(s);
  return StartReduceScatter(op, input, output, reduce);
}

std::unique_ptr<Work> Collectives::AllGatherAsync(const Buffer& input, const Buffer& output,
                                                  const CallOptions& options) {
  const Op op = MakeOp(
      absl::StrCat("all-gather of ", Elements(input.count, input.type), " per rank into ", output.count),
      options);
  if (absl::Status s = CheckCommon(op, options, {&input, &output}); !s.ok()) return Reject(s);
  if (absl::Status s = CheckBlocks(op, input, output, /*input_is_whole=*/false); !s.ok()) return Reject(s);
  return StartAllGather(op, input, output);
}

std::unique_ptr<Work> Collectives::AllToAllAsync(const Buffer& input, const std::vector<size_t>& send_counts,
                                                 const Buffer& output, const std::vector<size_t>& recv_counts,
                                                 const CallOptions& options) {
  const Op op = MakeOp(
      absl::StrCat("all-to-all of ", DataTypeName(input.type), " sending [", absl::StrJoin(send_counts, ", "),
                   "] receiving [", absl::StrJoin(recv_counts, ", "), "]"),
      options);
  if (absl::Status s = CheckCommon(op, options, {&input, &output}); !s.ok()) return Reject(s);
  auto invalid = [&](const std::string& why) {
    return Reject(absl::InvalidArgumentError(absl::StrCat(op.context, ": ", why)));
  };
  if (input.type != output.type) {
    return invalid(
        absl::StrCat("the output is ", DataTypeName(output.type), ", the input ", DataTypeName(input.type)));
  }
  const size_t world = static_cast<size_t>(world_size_);
  if (send_counts.size() != world || recv_counts.size() != world) {
    return invalid(absl::StrCat("send_counts has ", send_counts.size(), " entries and recv_counts ",
                                recv_counts.size(), "; each needs one per rank (", world, ")"));
  }
  if (Sum(send_counts) != input.count) {
    return invalid(absl::StrCat("send_counts sum to ", Sum(send_counts), " but the input holds ", input.count,
                                " elements"));
  }
  if (Sum(recv_counts) != output.count) {
    return invalid(absl::StrCat("recv_counts sum to ", Sum(recv_counts), " but the output holds ",
                                output.count, " elements"));
  }
  if (send_counts[rank_] != recv_counts[rank_]) {
    return invalid(absl::StrCat("this rank sends ", send_counts[rank_], " elements to itself but receives ",
                                recv_counts[rank_], " from itself"));
  }
  if (Overlap(input, output)) return invalid("the input and output overlap");
  return StartAllToAll(op, input, send_counts, output, recv_counts);
}

std::unique_ptr<Work> Collectives::SendAsync(const Buffer& data, int peer, int tag,
                                             const CallOptions& options) {
  const Op op = MakeOp(
      absl::StrCat("send of ", Elements(data.count, data.type), " to ", PeerName(peer), " (tag ", tag, ")"),
      options);
  if (absl::Status s = CheckCommon(op, options, {&data}); !s.ok()) return Reject(s);
  if (absl::Status s = CheckPeer(op, peer, tag); !s.ok()) return Reject(s);
  return StartSend(op, data, peer, tag);
}

std::unique_ptr<Work> Collectives::RecvAsync(const Buffer& data, int peer, int tag,
                                             const CallOptions& options) {
  const Op op = MakeOp(
      absl::StrCat("recv of ", Elements(data.count, data.type), " from ", PeerName(peer), " (tag ", tag, ")"),
      options);
  if (absl::Status s = CheckCommon(op, options, {&data}); !s.ok()) return Reject(s);
  if (absl::Status s = CheckPeer(op, peer, tag); !s.ok()) return Reject(s);
  return StartRecv(op, data, peer, tag);
}

absl::Status Collectives::AllReduce(const Buffer& data, ReduceOp op, const CallOptions& options) {
  return AllReduceAsync(data, op, options)->Wait();
}
absl::Status Collectives::Broadcast(const Buffer& data, int root, const CallOptions& options) {
  return BroadcastAsync(data, root, options)->Wait();
}
absl::Status Collectives::Barrier(const CallOptions& options) { return BarrierAsync(options)->Wait(); }
absl::Status Collectives::ReduceScatter(const Buffer& input, const Buffer& output, ReduceOp op,
                                        const CallOptions& options) {
  return ReduceScatterAsync(input, output, op, options)->Wait();
}
absl::Status Collectives::AllGather(const Buffer& input, const Buffer& output, const CallOptions& options) {
  return AllGatherAsync(input, output, options)->Wait();
}
absl::Status Collectives::AllToAll(const Buffer& input, const std::vector<size_t>& send_counts,
                                   const Buffer& output, const std::vector<size_t>& recv_counts,
                                   const CallOptions& options) {
  return AllToAllAsync(input, send_counts, output, recv_counts, options)->Wait();
}
absl::Status Collectives::Send(const Buffer& data, int peer, int tag, const CallOptions& options) {
  return SendAsync(data, peer, tag, options)->Wait();
}
absl::Status Collectives::Recv(const Buffer& data, int peer, int tag, const CallOptions& options) {
  return RecvAsync(data, peer, tag, options)->Wait();
}

absl::Status Collectives::AllReduceSum(float* data, size_t n) {
  return AllReduce(Buffer::Host(data, n), ReduceOp::kSum);
}
absl::Status Collectives::AllReduceSum(double* data, size_t n) {
  return AllReduce(Buffer::Host(data, n), ReduceOp::kSum);
}
absl::Status Collectives::Broadcast(float* data, size_t n, int root) {
  return Broadcast(Buffer::Host(data, n), root);
}

absl::Status Collectives::AllGatherHostValue(int64_t value, std::vector<int64_t>& all) {
  all.resize(world_size_);
  return AllGather(Buffer::Host(&value, 1), Buffer::Host(all.data(), all.size()));
}

absl::StatusOr<std::unique_ptr<Collectives>> Collectives::NewSubgroup(const std::vector<int>& ranks,
                                                                      const std::string& name) {
  const std::string what =
      absl::StrCat(GroupContext(), ": NewSubgroup '", name, "' of ranks [", absl::StrJoin(ranks, ", "), "]");
  // Every rank's arguments, compared on every rank: a rank that disagrees would connect to another set.
  const int64_t mine = static_cast<int64_t>(Fingerprint(absl::StrCat(name, "|", absl::StrJoin(ranks, ","))));
  std::vector<int64_t> all(world_size_);
  if (absl::Status s = AllGatherHostValue(mine, all); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
  }
  std::vector<int> differ;
  for (int r = 1; r < world_size_; ++r) {
    if (all[r] != all[0]) differ.push_back(r);
  }
  if (!differ.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": rank(s) ", absl::StrJoin(differ, ", "), " of group '", name_,
        "' passed other ranks or another name than rank 0 (every rank calls NewSubgroup with the same "
        "arguments, in the same order)"));
  }
  if (name.empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": the name is empty"));
  if (ranks.empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": no ranks"));
  std::set<int> seen;
  for (int r : ranks) {
    if (r < 0 || r >= world_size_) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": rank ", r, " is not a rank of group '", name_, "' [0, ", world_size_, ")"));
    }
    if (!seen.insert(r).second)
      return absl::InvalidArgumentError(absl::StrCat(what, ": rank ", r, " is listed twice"));
  }
  return MakeSubgroup(ranks, name);
}

}  // namespace lmf::distributed
