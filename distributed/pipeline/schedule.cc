// Pipeline schedules: their generators, the check and the dry run (see schedule.h).
#include "distributed/pipeline/schedule.h"

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace lmf::distributed::pipeline {
namespace {

bool IsCompute(Op op) {
  return op == Op::kForward || op == Op::kBackward || op == Op::kBackwardInput || op == Op::kBackwardWeight;
}

// The rank and chunk of the stage before / after (rank, chunk); false at the first / last stage.
bool PreviousStage(const Schedule& s, int rank, int chunk, int* prev_rank, int* prev_chunk) {
  const int stage = s.stage(rank, chunk) - 1;
  if (stage < 0) return false;
  *prev_rank = stage % s.ranks;
  *prev_chunk = stage / s.ranks;
  return true;
}

bool NextStage(const Schedule& s, int rank, int chunk, int* next_rank, int* next_chunk) {
  const int stage = s.stage(rank, chunk) + 1;
  if (stage >= s.num_stages()) return false;
  *next_rank = stage % s.ranks;
  *next_chunk = stage / s.ranks;
  return true;
}

// A message in flight: what it carries, to which rank, for which micro-batch and receiving chunk.
using MessageKey = std::tuple<bool /*gradient*/, int /*to rank*/, int /*micro-batch*/, int /*to chunk*/>;

// The message a send posts; false when the action is not a send.
bool SentMessage(const Schedule& s, int rank, const Action& a, MessageKey* key) {
  int peer = 0, chunk = 0;
  if (a.op == Op::kSendActivation && NextStage(s, rank, a.chunk, &peer, &chunk)) {
    *key = {false, peer, a.micro_batch, chunk};
    return true;
  }
  if (a.op == Op::kSendGradient && PreviousStage(s, rank, a.chunk, &peer, &chunk)) {
    *key = {true, peer, a.micro_batch, chunk};
    return true;
  }
  return false;
}

bool ReceivedMessage(int rank, const Action& a, MessageKey* key) {
  if (a.op != Op::kRecvActivation && a.op != Op::kRecvGradient) return false;
  *key = {a.op == Op::kRecvGradient, rank, a.micro_batch, a.chunk};
  return true;
}

// The rank a receive waits on.
int Sender(const Schedule& s, int rank, const Action& a) {
  int peer = rank, chunk = 0;
  if (a.op == Op::kRecvActivation) PreviousStage(s, rank, a.chunk, &peer, &chunk);
  if (a.op == Op::kRecvGradient) NextStage(s, rank, a.chunk, &peer, &chunk);
  return peer;
}

std::string Where(int rank, size_t index, const Action& a) {
  return absl::StrCat("rank ", rank, " action #", index, " (", ActionName(a), ")");
}

// Compute orders, before communication is added.
std::vector<Action> GPipeOrder(int micro_batches) {
  std::vector<Action> order;
  for (int m = 0; m < micro_batches; ++m) order.push_back({Op::kForward, m, 0});
  for (int m = 0; m < micro_batches; ++m) order.push_back({Op::kBackward, m, 0});
  return order;
}

// 1F1B: ranks - rank - 1 forwards to fill the pipeline, then one forward and one backward in turn, then
// the backwards left. `backward` is kBackward, or kBackwardInput for ZB-H1 (whose BW are placed later).
std::vector<Action> OneFOneBOrder(int ranks, int rank, int micro_batches, Op backward) {
  const int warmup = std::min(ranks - rank - 1, micro_batches);
  std::vector<Action> order;
  for (int m = 0; m < warmup; ++m) order.push_back({Op::kForward, m, 0});
  for (int i = 0; i + warmup < micro_batches; ++i) {
    order.push_back({Op::kForward, i + warmup, 0});
    order.push_back({backward, i, 0});
  }
  for (int m = micro_batches - warmup; m < micro_batches; ++m) order.push_back({backward, m, 0});
  return order;
}

// ZB-H1 (Qi et al. 2024): 1F1B's forwards and input gradients, in 1F1B's order and memory, with each weight
// gradient (BW) put where its rank would otherwise wait for a receive (or when ranks - 1 wait already), the
// rest at the end. Placed by
// running the schedule in unit time steps (F = BI = BW, the paper's setting); a message sent at the end of
// step t is there at step t + 1.
std::vector<std::vector<Action>> ZeroBubbleH1Order(const Schedule& base) {
  std::vector<std::vector<Action>> out(base.ranks);
  std::vector<size_t> next(base.ranks, 0);
  std::vector<std::vector<int>> pending(base.ranks);  // micro-batches whose BI ran and BW did not
  std::vector<size_t> first_pending(base.ranks, 0);
  std::map<MessageKey, int> arrives;
  for (int t = 0;; ++t) {
    bool done = true;
    for (int r = 0; r < base.ranks; ++r) {
      const std::vector<Action>& list = base.actions[r];
      MessageKey key;
      while (next[r] < list.size() && ReceivedMessage(r, list[next[r]], &key) && arrives.count(key) &&
             arrives[key] <= t) {
        out[r].push_back(list[next[r]++]);
      }
      // At most ranks - 1 weight gradients wait, so rank r holds the activations of at most (ranks - r) +
      // (ranks - 1) micro-batches (1F1B: ranks - r). Any smaller bound gives a larger bubble than the
      // paper's (ranks - 1)(F + B - W) for some ranks and micro-batches (the dry run shows it).
      const size_t waiting = pending[r].size() - first_pending[r];
      if (waiting > static_cast<size_t>(base.ranks - 1)) {
        out[r].push_back({Op::kBackwardWeight, pending[r][first_pending[r]++], 0});
      } else if (next[r] < list.size() && IsCompute(list[next[r]].op)) {
        const Action& a = list[next[r]++];
        out[r].push_back(a);
        if (a.op == Op::kBackwardInput) pending[r].push_back(a.micro_batch);
        while (next[r] < list.size() && SentMessage(base, r, list[next[r]], &key)) {
          arrives[key] = t + 1;
          out[r].push_back(list[next[r]++]);
        }

      } else if (first_pending[r] < pending[r].size()) {
        out[r].push_back({Op::kBackwardWeight, pending[r][first_pending[r]++], 0});
      }
      done = done && next[r] == list.size() && first_pending[r] == pending[r].size();
    }
    // Every step runs at least one action somewhere while the 1F1B order is valid; a bound keeps a bug from
    // looping forever (ValidateSchedule then names what is missing).
    if (done || t > 16 * (base.micro_batches + base.ranks) * 3) break;
  }
  return out;
}

// Megatron-LM's interleaved 1F1B: the k-th forward of a rank runs chunk (k mod ranks*chunks) / ranks of
// micro-batch (k / (ranks*chunks)) * ranks + k mod ranks; backwards run the chunks in reverse.
std::vector<Action> InterleavedOrder(int ranks, int chunks, int rank, int micro_batches) {
  const int group = ranks * chunks;
  const int total = micro_batches * chunks;
  const auto micro_batch = [&](int k) { return (k / group) * ranks + k % ranks; };
  const auto forward = [&](int k) { return Action{Op::kForward, micro_batch(k), (k % group) / ranks}; };
  const auto backward = [&](int k) {
    return Action{Op::kBackward, micro_batch(k), chunks - 1 - (k % group) / ranks};
  };
  const int warmup = micro_batches == ranks ? total : std::min(total, (ranks - rank - 1) * 2 + (chunks - 1) * ranks);
  std::vector<Action> order;
  for (int k = 0; k < warmup; ++k) order.push_back(forward(k));
  for (int k = 0; k + warmup < total; ++k) {
    order.push_back(forward(k + warmup));
    order.push_back(backward(k));
  }
  for (int k = std::max(0, total - warmup); k < total; ++k) order.push_back(backward(k));
  return order;
}

}  // namespace

absl::StatusOr<ScheduleKind> ParseScheduleKind(std::string_view name) {
  for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::kOneFOneB, ScheduleKind::kInterleavedOneFOneB,
                            ScheduleKind::kZeroBubbleH1}) {
    if (name == ScheduleKindName(kind)) return kind;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown pipeline schedule \"", std::string(name),
                                                 "\"; expected gpipe, 1f1b, interleaved_1f1b or zb_h1"));
}

std::string ScheduleKindName(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kGPipe: return "gpipe";
    case ScheduleKind::kOneFOneB: return "1f1b";
    case ScheduleKind::kInterleavedOneFOneB: return "interleaved_1f1b";
    case ScheduleKind::kZeroBubbleH1: return "zb_h1";
  }
  return "?";
}

std::string ActionName(const Action& a) {
  const char* name = "?";
  switch (a.op) {
    case Op::kForward: name = "F"; break;
    case Op::kBackward: name = "B"; break;
    case Op::kBackwardInput: name = "BI"; break;
    case Op::kBackwardWeight: name = "BW"; break;
    case Op::kRecvActivation: name = "recvA"; break;
    case Op::kSendActivation: name = "sendA"; break;
    case Op::kRecvGradient: name = "recvG"; break;
    case Op::kSendGradient: name = "sendG"; break;
  }
  return absl::StrCat(name, a.micro_batch, ".", a.chunk);
}

Schedule AddCommunication(ScheduleKind kind, int ranks, int chunks, int micro_batches,
                          std::vector<std::vector<Action>> compute) {
  Schedule s;
  s.kind = kind;
  s.ranks = ranks;
  s.chunks = chunks;
  s.micro_batches = micro_batches;
  s.actions.resize(ranks);
  for (int r = 0; r < ranks; ++r) {
    std::vector<Action>& out = s.actions[r];
    for (const Action& a : compute[r]) {
      int peer = 0, chunk = 0;
      const bool has_prev = PreviousStage(s, r, a.chunk, &peer, &chunk) && peer != r;
      const bool has_next = NextStage(s, r, a.chunk, &peer, &chunk) && peer != r;
      if (a.op == Op::kForward) {
        if (has_prev) out.push_back({Op::kRecvActivation, a.micro_batch, a.chunk});
        out.push_back(a);
        if (has_next) out.push_back({Op::kSendActivation, a.micro_batch, a.chunk});
      } else if (a.op == Op::kBackward || a.op == Op::kBackwardInput) {
        if (has_next) out.push_back({Op::kRecvGradient, a.micro_batch, a.chunk});
        out.push_back(a);
        if (has_prev) out.push_back({Op::kSendGradient, a.micro_batch, a.chunk});
      } else {
        out.push_back(a);
      }
    }
  }
  return s;
}

absl::StatusOr<Schedule> MakeSchedule(ScheduleKind kind, int ranks, int chunks, int micro_batches) {
  const std::string what = absl::StrCat("pipeline schedule ", ScheduleKindName(kind), " with ", ranks, " ranks, ",
                                        chunks, " chunks per rank and ", micro_batches, " micro-batches: ");
  if (ranks < 1 || chunks < 1 || micro_batches < 1) {
    return absl::InvalidArgumentError(what + "every count must be at least 1");
  }
  if (kind != ScheduleKind::kInterleavedOneFOneB && chunks != 1) {
    return absl::InvalidArgumentError(what + "only interleaved_1f1b runs several chunks (virtual stages) per rank");
  }
  if (kind == ScheduleKind::kInterleavedOneFOneB && (micro_batches < ranks || micro_batches % ranks != 0)) {
    return absl::InvalidArgumentError(
        what + absl::StrCat("interleaving needs the micro-batches (run.grad_accum_steps) to be a multiple of the ",
                            "pipeline ranks, and at least as many (", ranks, ", ", 2 * ranks, ", ...)"));
  }
  std::vector<std::vector<Action>> compute(ranks);
  for (int r = 0; r < ranks; ++r) {
    switch (kind) {
      case ScheduleKind::kGPipe: compute[r] = GPipeOrder(micro_batches); break;
      case ScheduleKind::kOneFOneB: compute[r] = OneFOneBOrder(ranks, r, micro_batches, Op::kBackward); break;
      case ScheduleKind::kZeroBubbleH1:
        compute[r] = OneFOneBOrder(ranks, r, micro_batches, Op::kBackwardInput);
        break;
      case ScheduleKind::kInterleavedOneFOneB: compute[r] = InterleavedOrder(ranks, chunks, r, micro_batches); break;
    }
  }
  Schedule schedule = AddCommunication(kind, ranks, chunks, micro_batches, std::move(compute));
  if (kind == ScheduleKind::kZeroBubbleH1) schedule.actions = ZeroBubbleH1Order(schedule);
  if (absl::Status s = ValidateSchedule(schedule); !s.ok()) {  // a generator's bug, not the user's
    return absl::InternalError(what + std::string(s.message()));
  }
  return schedule;
}

absl::Status ValidateSchedule(const Schedule& s) {
  const auto bad = [](const std::string& what) { return absl::FailedPreconditionError(what); };
  if (static_cast<int>(s.actions.size()) != s.ranks) {
    return bad(absl::StrCat("the schedule lists ", s.actions.size(), " ranks, not ", s.ranks));
  }
  std::map<MessageKey, int> in_flight;  // sends minus receives of each message
  for (int r = 0; r < s.ranks; ++r) {
    // Per (micro-batch, chunk): where its F, B, BI and BW are in this rank's list (-1: absent).
    std::map<std::pair<int, int>, std::map<Op, int>> seen;
    std::map<MessageKey, int> received;  // this rank's receives so far
    const std::vector<Action>& list = s.actions[r];
    for (size_t i = 0; i < list.size(); ++i) {
      const Action& a = list[i];
      if (a.micro_batch < 0 || a.micro_batch >= s.micro_batches || a.chunk < 0 || a.chunk >= s.chunks) {
        return bad(absl::StrCat(Where(r, i, a), ": micro-batch or chunk out of range (", s.micro_batches,
                                " micro-batches, ", s.chunks, " chunks)"));
      }
      MessageKey key;
      if (ReceivedMessage(r, a, &key)) {
        ++received[key];
        --in_flight[key];
        continue;
      }
      if (SentMessage(s, r, a, &key)) {
        ++in_flight[key];
        continue;
      }
      if (!IsCompute(a.op)) return bad(absl::StrCat(Where(r, i, a), ": a send past the pipeline's end"));
      std::map<Op, int>& ops = seen[{a.micro_batch, a.chunk}];
      if (ops.count(a.op)) return bad(absl::StrCat(Where(r, i, a), ": repeats action #", ops[a.op]));
      ops[a.op] = static_cast<int>(i);
      const bool backward = a.op != Op::kForward;
      if (backward && !ops.count(Op::kForward)) return bad(absl::StrCat(Where(r, i, a), ": before its forward"));
      if (a.op == Op::kBackwardWeight && !ops.count(Op::kBackwardInput)) {
        return bad(absl::StrCat(Where(r, i, a), ": before its input gradient (BI)"));
      }
      // Its input: from the other rank's stage through a receive, or this rank's own stage computed before.
      int peer = 0, chunk = 0;
      const bool needs = (a.op == Op::kForward && PreviousStage(s, r, a.chunk, &peer, &chunk)) ||
                         ((a.op == Op::kBackward || a.op == Op::kBackwardInput) &&
                          NextStage(s, r, a.chunk, &peer, &chunk));
      if (!needs) continue;
      if (peer != r) {
        const MessageKey need{a.op != Op::kForward, r, a.micro_batch, a.chunk};
        if (received[need] < 1) {
          return bad(absl::StrCat(Where(r, i, a), ": its ", a.op == Op::kForward ? "activation" : "gradient",
                                  " is not received before it (from rank ", peer, ")"));
        }
      } else {
        const auto& producer = seen[{a.micro_batch, chunk}];
        const Op op = a.op == Op::kForward ? Op::kForward : Op::kBackwardInput;
        if (!producer.count(op) && !(op == Op::kBackwardInput && producer.count(Op::kBackward))) {
          return bad(absl::StrCat(Where(r, i, a), ": needs chunk ", chunk, "'s ",
                                  a.op == Op::kForward ? "forward" : "backward", " of micro-batch ", a.micro_batch,
                                  " first"));
        }
      }
    }
    for (int m = 0; m < s.micro_batches; ++m) {
      for (int c = 0; c < s.chunks; ++c) {
        const std::map<Op, int>& ops = seen[{m, c}];
        const bool whole = ops.count(Op::kBackward) == 1;
        const bool split = ops.count(Op::kBackwardInput) == 1 && ops.count(Op::kBackwardWeight) == 1;
        if (!ops.count(Op::kForward) || whole == split || (whole && ops.size() != 2)) {
          return bad(absl::StrCat("rank ", r, " does not run micro-batch ", m, " through chunk ", c,
                                  " exactly once (a forward, then a backward or a BI and a BW)"));
        }
      }
    }
  }
  for (const auto& [key, count] : in_flight) {
    if (count != 0) {
      const auto& [gradient, to, m, chunk] = key;
      return bad(absl::StrCat("the ", gradient ? "gradient" : "activation", " for rank ", to, "'s chunk ", chunk,
                              " of micro-batch ", m, " is ", count > 0 ? "sent but never received"
                                                                        : "received but never sent"));
    }
  }
  // A backend without tags (NCCL) matches a channel's messages by order: each rank's receives from a peer
  // must come in the order that peer sends them.
  std::map<std::tuple<int, int, bool>, std::vector<MessageKey>> sent, received;  // (from, to, gradient)
  for (int r = 0; r < s.ranks; ++r) {
    for (const Action& a : s.actions[r]) {
      MessageKey key;
      if (SentMessage(s, r, a, &key)) sent[{r, std::get<1>(key), std::get<0>(key)}].push_back(key);
      if (ReceivedMessage(r, a, &key)) received[{Sender(s, r, a), r, std::get<0>(key)}].push_back(key);
    }
  }
  for (const auto& [channel, keys] : sent) {
    if (received[channel] != keys) {
      const auto& [from, to, gradient] = channel;
      return bad(absl::StrCat("rank ", to, " receives the ", gradient ? "gradients" : "activations", " of rank ",
                              from, " in another order than rank ", from, " sends them"));
    }
  }
  absl::StatusOr<Simulation> dry_run = Simulate(s);
  return dry_run.ok() ? absl::OkStatus() : dry_run.status();
}

double Simulation::bubble_ratio() const {
  double sum = 0;
  for (double b : busy) sum += b;
  return sum > 0 ? (makespan * static_cast<double>(busy.size()) - sum) / sum : 0;
}

namespace {

// A rank's action: (rank, index in its list).
using Position = std::pair<int, int>;

// Runs the schedule's actions in the dry run's order: every rank in turn runs its actions in order until a
// receive whose send has not run yet, until no rank can go on. visit(rank, index, send) sees each action as
// it runs, `send` being a receive's send (null for the other actions). Returns where each rank stopped (its
// action count when it ran them all).
std::vector<size_t> InDryRunOrder(const Schedule& s,
                                  const std::function<void(int rank, int index, const Position* send)>& visit) {
  std::map<MessageKey, Position> posted;  // the messages sent and not yet received
  std::vector<size_t> next(s.ranks, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < s.ranks; ++r) {
      const std::vector<Action>& list = s.actions[r];
      for (; next[r] < list.size(); ++next[r]) {
        const int i = static_cast<int>(next[r]);
        MessageKey key;
        std::optional<Position> send;
        if (ReceivedMessage(r, list[i], &key)) {
          const auto it = posted.find(key);
          if (it == posted.end()) break;  // blocked until its sender gets there
          send = it->second;
          posted.erase(it);
        } else if (SentMessage(s, r, list[i], &key)) {
          posted[key] = {r, i};
        }
        visit(r, i, send.has_value() ? &*send : nullptr);
        progress = true;
      }
    }
  }
  return next;
}

}  // namespace

absl::StatusOr<Simulation> Simulate(const Schedule& s, const Costs& costs) {
  Simulation sim;
  sim.busy.assign(s.ranks, 0);
  sim.start.resize(s.ranks);
  std::vector<double> clock(s.ranks, 0);
  std::map<Position, double> arrives;  // each send's message: when it arrives
  const double per_chunk = 1.0 / s.chunks;
  const std::vector<size_t> stopped = InDryRunOrder(s, [&](int r, int i, const Position* send) {
    const Action& a = s.actions[r][i];
    MessageKey key;
    double start = clock[r], cost = 0;
    if (send != nullptr) {
      start = std::max(clock[r], arrives.at(*send));
    } else if (SentMessage(s, r, a, &key)) {
      arrives[{r, i}] = clock[r] + costs.transfer;
    } else {
      cost = per_chunk * (a.op == Op::kForward          ? costs.forward
                          : a.op == Op::kBackward       ? costs.backward
                          : a.op == Op::kBackwardInput  ? costs.backward_input
                          : a.op == Op::kBackwardWeight ? costs.backward_weight
                                                        : 0);
      sim.busy[r] += cost;
    }
    sim.start[r].push_back(start);
    clock[r] = start + cost;
  });
  std::vector<std::string> blocked;
  for (int r = 0; r < s.ranks; ++r) {
    if (stopped[r] == s.actions[r].size()) continue;
    const Action& a = s.actions[r][stopped[r]];
    blocked.push_back(absl::StrCat(Where(r, stopped[r], a), " waits for rank ", Sender(s, r, a)));
  }
  if (!blocked.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the schedule deadlocks: ", absl::StrJoin(blocked, "; ")));
  }
  for (int r = 0; r < s.ranks; ++r) sim.makespan = std::max(sim.makespan, clock[r]);
  return sim;
}

std::vector<std::vector<int>> SendsReceivedBy(const Schedule& s) {
  // clocks[r][i][q]: how many of rank q's actions happened before or at rank r's action i.
  std::vector<std::vector<std::vector<int>>> clocks(s.ranks);
  std::vector<std::pair<Position, Position>> messages;  // (send, receive)
  InDryRunOrder(s, [&](int r, int i, const Position* send) {
    std::vector<int> clock = i == 0 ? std::vector<int>(s.ranks, 0) : clocks[r][i - 1];
    clock[r] = i + 1;
    if (send != nullptr) {
      const std::vector<int>& theirs = clocks[send->first][send->second];
      for (int q = 0; q < s.ranks; ++q) clock[q] = std::max(clock[q], theirs[q]);
      messages.push_back({*send, {r, i}});
    }
    clocks[r].push_back(std::move(clock));
  });
  std::vector<std::vector<int>> done(s.ranks);
  for (int r = 0; r < s.ranks; ++r) {
    done[r].assign(s.actions[r].size(), -1);
    for (size_t i = 0; i < s.actions[r].size(); ++i) {
      MessageKey key;
      if (SentMessage(s, r, s.actions[r][i], &key)) done[r][i] = static_cast<int>(s.actions[r].size());  // no receive
    }
  }
  for (const auto& [send, receive] : messages) {
    const auto [r, i] = send;
    const auto [q, j] = receive;
    for (int k = i + 1; k < static_cast<int>(clocks[r].size()); ++k) {
      if (clocks[r][k][q] > j) {
        done[r][i] = k;
        break;
      }
    }
  }
  return done;
}

std::string Timeline(const Schedule& s, const Simulation& sim) {
  std::string out;
  for (int r = 0; r < s.ranks; ++r) {
    absl::StrAppend(&out, "rank ", r, ":");
    for (size_t i = 0; i < s.actions[r].size(); ++i) {
      if (IsCompute(s.actions[r][i].op)) {
        absl::StrAppend(&out, " ", ActionName(s.actions[r][i]), "@", absl::StrFormat("%g", sim.start[r][i]));
      }
    }
    absl::StrAppend(&out, "\n");
  }
  return out;
}

}  // namespace lmf::distributed::pipeline
