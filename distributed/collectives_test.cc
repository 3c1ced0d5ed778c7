// Every op of collectives.h on 2, 3 and 4 real processes over loopback (Gloo), each rank checking exact
// values: small integers, exact in every data type. The bodies take a Collectives&, so another backend's
// test can run them as they are.
#include "distributed/collectives.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "distributed/test_ranks.h"
#include "gtest/gtest.h"
#include "kernels/core/dtype.h"

namespace lmf::distributed {
namespace {

using testing::Checks;
using testing::ExpectAllPassed;
using testing::RunRanks;

constexpr DataType kAllTypes[] = {DataType::kF32, DataType::kF64, DataType::kBF16,
                                  DataType::kI32, DataType::kI64, DataType::kU8};

// Element i of `count` elements of `type`, as host bytes: set from and read as an integer.
class Values {
 public:
  Values(DataType type, size_t count) : type_(type), count_(count), bytes_(count * DataTypeSize(type) + 1) {}
  Buffer buffer() { return Buffer{bytes_.data(), count_, type_, kernels::Device::Cpu()}; }
  void Set(size_t i, int64_t v) {
    char* p = bytes_.data() + i * DataTypeSize(type_);
    switch (type_) {
      case DataType::kF32: {
        const float x = static_cast<float>(v);
        std::memcpy(p, &x, 4);
        break;
      }
      case DataType::kF64: {
        const double x = static_cast<double>(v);
        std::memcpy(p, &x, 8);
        break;
      }
      case DataType::kBF16: {
        const uint16_t x = kernels::FloatToBF16(static_cast<float>(v));
        std::memcpy(p, &x, 2);
        break;
      }
      case DataType::kI32: {
        const int32_t x = static_cast<int32_t>(v);
        std::memcpy(p, &x, 4);
        break;
      }
      case DataType::kI64:
        std::memcpy(p, &v, 8);
        break;
      case DataType::kU8: {
        const uint8_t x = static_cast<uint8_t>(v);
        std::memcpy(p, &x, 1);
        break;
      }
    }
  }
  // -1000000 for a value that is not an integer.
  int64_t Get(size_t i) const {
    const char* p = bytes_.data() + i * DataTypeSize(type_);
    double x = 0;
    switch (type_) {
      case DataType::kF32: {
        float f;
        std::memcpy(&f, p, 4);
        x = f;
        break;
      }
      case DataType::kF64:
        std::memcpy(&x, p, 8);
        break;
      case DataType::kBF16: {
        uint16_t h;
        std::memcpy(&h, p, 2);
        x = kernels::BF16ToFloat(h);
        break;
      }
      case DataType::kI32: {
        int32_t v;
        std::memcpy(&v, p, 4);
        return v;
      }
      case DataType::kI64: {
        int64_t v;
        std::memcpy(&v, p, 8);
        return v;
      }
      case DataType::kU8:
        return static_cast<uint8_t>(*p);
    }
    return x == static_cast<double>(static_cast<int64_t>(x)) ? static_cast<int64_t>(x) : -1000000;
  }
  size_t count() const { return count_; }

  // A NaN in element i, and whether element i is NaN (floating types only).
  void SetNan(size_t i) {
    char* p = bytes_.data() + i * DataTypeSize(type_);
    const float f = std::numeric_limits<float>::quiet_NaN();
    const double d = std::numeric_limits<double>::quiet_NaN();
    const uint16_t h = kernels::FloatToBF16(f);
    if (type_ == DataType::kF32) std::memcpy(p, &f, 4);
    if (type_ == DataType::kF64) std::memcpy(p, &d, 8);
    if (type_ == DataType::kBF16) std::memcpy(p, &h, 2);
  }
  bool IsNan(size_t i) const {
    const char* p = bytes_.data() + i * DataTypeSize(type_);
    float f;
    double d;
    uint16_t h;
    switch (type_) {
      case DataType::kF32:
        return std::memcpy(&f, p, 4), std::isnan(f);
      case DataType::kF64:
        return std::memcpy(&d, p, 8), std::isnan(d);
      case DataType::kBF16:
        return std::memcpy(&h, p, 2), std::isnan(kernels::BF16ToFloat(h));
      default:
        return false;
    }
  }

 private:
  DataType type_;
  size_t count_;
  std::vector<char> bytes_;  // one more byte: an empty buffer still has an address
};

// Whether element i of `values` is want(i) for every i; names the first that is not.
template <typename Want>
bool ExpectValues(Checks& checks, const Values& values, Want want, const std::string& what) {
  for (size_t i = 0; i < values.count(); ++i) {
    if (values.Get(i) != want(i)) {
      return checks.Expect(
          false, absl::StrCat(what, ": element ", i, " is ", values.Get(i), ", expected ", want(i)));
    }
  }
  return true;
}

class EveryWorldSize : public ::testing::TestWithParam<int> {};
INSTANTIATE_TEST_SUITE_P(Gloo, EveryWorldSize, ::testing::Values(2, 3, 4));

TEST_P(EveryWorldSize, AllReduceSumsAndMaxesEveryDataType) {
  ExpectAllPassed(RunRanks(GetParam(), [](Collectives& group) {
    Checks checks(group.rank());
    const int64_t w = group.world_size(), r = group.rank();
    for (const DataType type : kAllTypes) {
      // 300000 f32 are more than Gloo's 1 MiB segment: several ring steps.
      Values v(type, type == DataType::kF32 ? 300000 : 1000);
      const std::string what = absl::StrCat("all-reduce of ", DataTypeName(type));
      for (size_t i = 0; i < v.count(); ++i) v.Set(i, (r + 1) * (i % 7 + 1));
      checks.Ok(group.AllReduce(v.buffer(), ReduceOp::kSum), what);
      ExpectValues(
          checks, v, [&](size_t i) { return static_cast<int64_t>(i % 7 + 1) * w * (w + 1) / 2; },
          what + " sum");
      for (size_t i = 0; i < v.count(); ++i) v.Set(i, (r + 1) * (i % 7 + 1));
      checks.Ok(group.AllReduce(v.buffer(), ReduceOp::kMax), what);
      ExpectValues(
          checks, v, [&](size_t i) { return static_cast<int64_t>(i % 7 + 1) * w; }, what + " max");
    }
    // The trainer's conveniences.
    std::vector<double> sums = {static_cast<double>(r), 1.0};
    checks.Ok(group.AllReduceSum(sums.data(), sums.size()), "AllReduceSum(double*)");
    checks.Expect(sums[0] == static_cast<double>(w * (w - 1) / 2) && sums[1] == static_cast<double>(w),
                  "double sums");
    return checks.exit_code();
  }));
}

// Several all-reduces as one op (AllReduceManyAsync): buffers of other sizes and types each get their own
// sum; overlapping buffers are refused.
TEST_P(EveryWorldSize, SeveralAllReducesAsOne) {
  ExpectAllPassed(RunRanks(GetParam(), [](Collectives& group) {
    Checks checks(group.rank());
    const int64_t w = group.world_size(), r = group.rank();
    Values a(DataType::kF32, 300000), b(DataType::kBF16, 3), c(DataType::kI64, 1);
    for (Values* v : {&a, &b, &c}) {
      for (size_t i = 0; i < v->count(); ++i) v->Set(i, (r + 1) * (i % 5 + 1));
    }
    checks.Ok(group.AllReduceManyAsync({a.buffer(), b.buffer(), c.buffer()}, ReduceOp::kSum)->Wait(),
              "all-reduce of three buffers");
    for (Values* v : {&a, &b, &c}) {
      ExpectValues(
          checks, *v, [&](size_t i) { return static_cast<int64_t>(i % 5 + 1) * w * (w + 1) / 2; },
          absl::StrCat("summed ", DataTypeName(v->buffer().type)));
    }
    return checks.exit_code();
  }));
  ExpectAllPassed(RunRanks(2, [](Collectives& group) {
    Checks checks(group.rank());
    std::vector<float> x(8);
    checks.FailsWith(group.AllReduceManyAsync({Buffer::Host(x.data(), 8), Buffer::Host(x.data() + 4, 4)},
                                              ReduceOp::kSum)
                         ->Wait(),
                     {"of 2 buffers, 12 elements in all", "two of the buffers overlap"}, "overlapping buffers");
    return checks.exit_code();
  }));
}

// Several broadcasts as one op (BroadcastManyAsync), each buffer from its own root; a root out of range is
// refused, naming the buffer.
TEST_P(EveryWorldSize, SeveralBroadcastsAsOne) {
  ExpectAllPassed(RunRanks(GetParam(), [](Collectives& group) {
    Checks checks(group.rank());
    const int w = group.world_size(), r = group.rank();
    std::vector<Values> values;
    std::vector<Buffer> buffers;
    std::vector<int> roots;
    for (int i = 0; i < 2 * w; ++i) {  // buffer i from rank i % w, every rank a root twice
      values.emplace_back(i % 2 == 0 ? DataType::kF32 : DataType::kI64, i == 0 ? 300000 : 3 + i);
    }
    for (int i = 0; i < 2 * w; ++i) {
      for (size_t k = 0; k < values[i].count(); ++k) values[i].Set(k, 100 * r + i + k % 3);
      buffers.push_back(values[i].buffer());
      roots.push_back(i % w);
    }
    checks.Ok(group.BroadcastManyAsync(buffers, roots)->Wait(), "broadcast of every rank's buffers");
    for (int i = 0; i < 2 * w; ++i) {
      ExpectValues(
          checks, values[i], [&](size_t k) { return static_cast<int64_t>(100 * (i % w) + i + k % 3); },
          absl::StrCat("buffer ", i, " from rank ", i % w));
    }
    Values one(DataType::kF32, 2);
    checks.FailsWith(group.BroadcastManyAsync({one.buffer()}, {w})->Wait(), {"root ", " of buffer 0"},
                     "a root out of range");
    return checks.exit_code();
  }));
}

// kMax of floating types is fmax, as NCCL's (collectives.h): a NaN on the first rank or on the last is
// dropped, whichever way the ring combines them; an element that is NaN on every rank stays NaN.
TEST_P(EveryWorldSize, MaxDropsANaNUnlessEveryRankHasOne) {
  ExpectAllPassed(RunRanks(GetParam(), [](Collectives& group) {
    Checks checks(group.rank());
    const int64_t w = group.world_size(), r = group.rank();
    for (const DataType type : {DataType::kF32, DataType::kF64, DataType::kBF16}) {
      Values v(type, 3);
      for (size_t i = 0; i < v.count(); ++i) v.Set(i, r);
      if (r == 0) v.SetNan(0);
      if (r == w - 1) v.SetNan(1);
      v.SetNan(2);
      const std::string what = absl::StrCat("max of ", DataTypeName(type), " with NaNs");
      checks.Ok(group.AllReduce(v.buffer(), ReduceOp::kMax), what);
      checks.Expect(v.Get(0) == w - 1 && v.Get(1) == w - 2 && v.IsNan(2),
                    absl::StrCat(what, ": ", v.Get(0), " ", v.Get(1), " (NaN: ", v.IsNan(2), "), expected ",
                                 w - 1, " ", w - 2, " (NaN: 1); -1000000 is NaN"));
    }
    return checks.exit_code();
  }));
}

TEST_P(EveryWorldSize, BroadcastsFromEveryRoot) {
  ExpectAllPassed(RunRanks(GetParam(), [](Collectives& group) {
    Checks checks(group.rank());
    for (int root = 0; root < group.world_size(); ++root) {
      Values v(DataType::kF64, 37);
      for (size_t i = 0; i < v.count(); ++i)
        v.Set(i, group.rank() == root ? root * 1000 + static_cast<int64_t>(i) : -1);
      checks.Ok(group.Broadcast(v.buffer(), root), absl::StrCat("broadcast from ", root));
      ExpectValues(
          checks, v, [&](size_t i) { return root * 1000 + static_cast<int64_t>(i); },
          absl::StrCat("broadcast from ", root));
    }
    std::vector<float> weights(5, group.rank() == 1 ? 2.5f : -1.0f);
    checks.Ok(group.Broadcast(weights.data(), weights.size(), /*root=*/1), "Broadcast(float*)");
    for (float x : weights) checks.Expect(x == 2.5f, "Broadcast(float*) value");
    return checks.exit_code();
  }));
}

// Reduce-scatter then all-gather gives back the all-reduce; in place too (NCCL's layout: this rank's block).
TEST_P(EveryWorldSize, ReduceScatterAndAllGatherRoundTrip) {
  ExpectAllPassed(RunRanks(GetParam(), [](Collectives& group) {
    Checks checks(group.rank());
    const int64_t w = group.world_size(), r = group.rank();
    const size_t n = 5;
    Values input(DataType::kI32, w * n), block(DataType::kI32, n), all(DataType::kI32, w * n);
    for (size_t j = 0; j < input.count(); ++j) input.Set(j, (r + 1) * static_cast<int64_t>(j + 1));
    checks.Ok(group.ReduceScatter(input.buffer(), block.buffer(), ReduceOp::kSum), "reduce-scatter");
    ExpectValues(
        checks, block,
        [&](size_t i) {
          return (r * static_cast<int64_t>(n) + static_cast<int64_t>(i) + 1) * w * (w + 1) / 2;
        },
        "reduce-scatter sum");
    checks.Ok(group.AllGather(block.buffer(), all.buffer()), "all-gather");
    ExpectValues(
        checks, all, [&](size_t j) { return static_cast<int64_t>(j + 1) * w * (w + 1) / 2; }, "all-gather");

    // In place: the output of reduce-scatter is this rank's block of its input; all-gather's input likewise.
    Values inplace(DataType::kI32, w * n);
    for (size_t j = 0; j < inplace.count(); ++j) inplace.Set(j, (r + 1) * static_cast<int64_t>(j + 1));
    Buffer whole = inplace.buffer(), mine = whole;
    mine.data = static_cast<char*>(whole.data) + r * n * 4;
    mine.count = n;
    checks.Ok(group.ReduceScatter(whole, mine, ReduceOp::kMax), "in-place reduce-scatter");
    checks.Ok(group.AllGather(mine, whole), "in-place all-gather");
    ExpectValues(
        checks, inplace, [&](size_t j) { return static_cast<int64_t>(j + 1) * w; },
        "in-place max round trip");

    // Nothing to move.
    Values none(DataType::kI32, 0);
    checks.Ok(group.ReduceScatter(none.buffer(), none.buffer(), ReduceOp::kSum), "empty reduce-scatter");
    checks.Ok(group.AllGather(none.buffer(), none.buffer()), "empty all-gather");
    return checks.exit_code();
  }));
}

// Rank s sends Count(s, d) elements to rank d, element j being s * 10000 + d * 100 + j: zero to some peers,
// rank 0 receives nothing at all and the last rank sends nothing at all.
int64_t Count(int64_t s, int64_t d, int64_t world) { return s == world - 1 || d == 0 ? 0 : 1 + (s + d) % 3; }

TEST_P(EveryWorldSize, AllToAllWithVariableCountsDeliversWhoSentWhat) {
  ExpectAllPassed(RunRanks(GetParam(), [](Collectives& group) {
    Checks checks(group.rank());
    const int64_t w = group.world_size(), r = group.rank();
    for (const DataType type : {DataType::kI32, DataType::kF32}) {
      std::vector<size_t> send_counts(w), recv_counts(w);
      size_t sends = 0, recvs = 0;
      for (int64_t p = 0; p < w; ++p) {
        send_counts[p] = Count(r, p, w);
        recv_counts[p] = Count(p, r, w);
        sends += send_counts[p];
        recvs += recv_counts[p];
      }
      Values input(type, sends), output(type, recvs);
      size_t at = 0;
      for (int64_t d = 0; d < w; ++d) {
        for (int64_t j = 0; j < Count(r, d, w); ++j) input.Set(at++, r * 10000 + d * 100 + j);
      }
      for (size_t i = 0; i < recvs; ++i) output.Set(i, -1);
      const std::string what = absl::StrCat("all-to-all of ", DataTypeName(type));
      checks.Ok(group.AllToAll(input.buffer(), send_counts, output.buffer(), recv_counts), what);
      at = 0;
      for (int64_t s = 0; s < w; ++s) {
        for (int64_t j = 0; j < Count(s, r, w); ++j, ++at) {
          checks.Expect(output.Get(at) == s * 10000 + r * 100 + j,
                        absl::StrCat(what, ": element ", j, " from rank ", s, " is ", output.Get(at)));
        }
      }
    }
    return checks.exit_code();
  }));
}

TEST_P(EveryWorldSize, SendAndRecvInARingAndByTag) {
  ExpectAllPassed(RunRanks(GetParam(), [](Collectives& group) {
    Checks checks(group.rank());
    const int r = group.rank(), w = group.world_size();
    const int next = (r + 1) % w, prev = (r + w - 1) % w;
    // Every rank sends before it receives: the sends must not wait for the recvs to be issued.
    Values out(DataType::kF32, 100), in(DataType::kF32, 100);
    for (size_t i = 0; i < out.count(); ++i) out.Set(i, r * 1000 + static_cast<int64_t>(i));
    std::unique_ptr<Work> send = group.SendAsync(out.buffer(), next, /*tag=*/0);
    std::unique_ptr<Work> recv = group.RecvAsync(in.buffer(), prev, /*tag=*/0);
    checks.Ok(recv->Wait(), "ring recv");
    checks.Ok(send->Wait(), "ring send");
    ExpectValues(
        checks, in, [&](size_t i) { return prev * 1000 + static_cast<int64_t>(i); }, "ring");

    // Tags: sent 7 then 9 (of one size), received 9 then 7; two with tag 4 arrive in order; an empty one.
    Values seven(DataType::kI64, 4), nine(DataType::kI64, 4), four_a(DataType::kI64, 2),
        four_b(DataType::kI64, 2);
    for (size_t i = 0; i < 4; ++i) {
      seven.Set(i, r * 100 + 70 + static_cast<int64_t>(i));
      nine.Set(i, r * 100 + 90 + static_cast<int64_t>(i));
      if (i < 2) four_a.Set(i, r * 100 + 40 + static_cast<int64_t>(i));
      if (i < 2) four_b.Set(i, r * 100 + 50 + static_cast<int64_t>(i));
    }
    Values empty(DataType::kU8, 0);
    std::vector<std::unique_ptr<Work>> sends;
    sends.push_back(group.SendAsync(seven.buffer(), next, 7));
    sends.push_back(group.SendAsync(nine.buffer(), next, 9));
    sends.push_back(group.SendAsync(four_a.buffer(), next, 4));
    sends.push_back(group.SendAsync(four_b.buffer(), next, 4));
    sends.push_back(group.SendAsync(empty.buffer(), next, 11));
    Values got9(DataType::kI64, 4), got7(DataType::kI64, 4), got4a(DataType::kI64, 2),
        got4b(DataType::kI64, 2);
    Values got_empty(DataType::kU8, 0);
    std::unique_ptr<Work> recv9 = group.RecvAsync(got9.buffer(), prev, 9);
    std::unique_ptr<Work> recv7 = group.RecvAsync(got7.buffer(), prev, 7);
    std::unique_ptr<Work> recv4a = group.RecvAsync(got4a.buffer(), prev, 4);
    std::unique_ptr<Work> recv4b = group.RecvAsync(got4b.buffer(), prev, 4);
    checks.Ok(group.Recv(got_empty.buffer(), prev, 11), "empty recv");
    checks.Ok(recv4b->Wait(), "recv tag 4 (second)");
    checks.Ok(recv7->Wait(), "recv tag 7");
    checks.Ok(recv9->Wait(), "recv tag 9");
    checks.Ok(recv4a->Wait(), "recv tag 4 (first)");
    checks.Ok(WaitAll(sends), "tagged sends");
    ExpectValues(
        checks, got7, [&](size_t i) { return prev * 100 + 70 + static_cast<int64_t>(i); }, "tag 7");
    ExpectValues(
        checks, got9, [&](size_t i) { return prev * 100 + 90 + static_cast<int64_t>(i); }, "tag 9");
    ExpectValues(
        checks, got4a, [&](size_t i) { return prev * 100 + 40 + static_cast<int64_t>(i); }, "tag 4, first");
    ExpectValues(
        checks, got4b, [&](size_t i) { return prev * 100 + 50 + static_cast<int64_t>(i); }, "tag 4, second");
    return checks.exit_code();
  }));
}

// Ops issued back to back without waiting, then waited for last first: each still gets its own result.
TEST_P(EveryWorldSize, AsyncOpsWaitedForInReverseOrder) {
  ExpectAllPassed(RunRanks(GetParam(), [](Collectives& group) {
    Checks checks(group.rank());
    const int64_t w = group.world_size(), r = group.rank();
    Values sum(DataType::kF32, 1000), bcast(DataType::kI32, 10), gathered(DataType::kI64, w),
        mine(DataType::kI64, 1);
    Values scatter_in(DataType::kF64, w * 2), scatter_out(DataType::kF64, 2);
    Values a2a_in(DataType::kI32, w), a2a_out(DataType::kI32, w), ring(DataType::kI32, 4),
        ring_in(DataType::kI32, 4);
    for (size_t i = 0; i < sum.count(); ++i) sum.Set(i, r + static_cast<int64_t>(i));
    for (size_t i = 0; i < bcast.count(); ++i) bcast.Set(i, r == w - 1 ? 500 + static_cast<int64_t>(i) : 0);
    mine.Set(0, r * 3);
    for (size_t j = 0; j < scatter_in.count(); ++j) scatter_in.Set(j, static_cast<int64_t>(j));
    for (int64_t d = 0; d < w; ++d) a2a_in.Set(d, r * 10 + d);
    for (size_t i = 0; i < ring.count(); ++i) ring.Set(i, r * 7 + static_cast<int64_t>(i));
    const int next = static_cast<int>((r + 1) % w), prev = static_cast<int>((r + w - 1) % w);
    std::vector<std::unique_ptr<Work>> works;
    works.push_back(group.AllReduceAsync(sum.buffer(), ReduceOp::kSum));
    works.push_back(group.BroadcastAsync(bcast.buffer(), static_cast<int>(w - 1)));
    works.push_back(group.AllGatherAsync(mine.buffer(), gathered.buffer()));
    works.push_back(group.SendAsync(ring.buffer(), next, 1));
    works.push_back(group.ReduceScatterAsync(scatter_in.buffer(), scatter_out.buffer(), ReduceOp::kSum));
    works.push_back(group.AllToAllAsync(a2a_in.buffer(), std::vector<size_t>(w, 1), a2a_out.buffer(),
                                        std::vector<size_t>(w, 1)));
    works.push_back(group.RecvAsync(ring_in.buffer(), prev, 1));
    works.push_back(group.BarrierAsync());
    for (size_t k = works.size(); k-- > 0;) checks.Ok(works[k]->Wait(), absl::StrCat("op ", k));
    ExpectValues(
        checks, sum, [&](size_t i) { return w * (w - 1) / 2 + w * static_cast<int64_t>(i); }, "all-reduce");
    ExpectValues(
        checks, bcast, [&](size_t i) { return 500 + static_cast<int64_t>(i); }, "broadcast");
    ExpectValues(
        checks, gathered, [&](size_t j) { return static_cast<int64_t>(j) * 3; }, "all-gather");
    ExpectValues(
        checks, scatter_out, [&](size_t i) { return w * (r * 2 + static_cast<int64_t>(i)); },
        "reduce-scatter");
    ExpectValues(
        checks, a2a_out, [&](size_t s) { return static_cast<int64_t>(s) * 10 + r; }, "all-to-all");
    ExpectValues(
        checks, ring_in, [&](size_t i) { return prev * 7 + static_cast<int64_t>(i); }, "send/recv");
    return checks.exit_code();
  }));
}

}  // namespace
}  // namespace lmf::distributed
