// Pipeline-parallel schedules as data: for each rank, the list of actions it runs in order during one
// optimizer step, checked before anything runs. A schedule is made by MakeSchedule (GPipe, 1F1B,
// interleaved 1F1B, ZB-H1), checked by ValidateSchedule (every send has its receive, every micro-batch
// goes forward and backward through every stage once, and no rank waits forever), and dry-run by Simulate
// (one process, unit costs: the timeline and its bubble, which also finds a deadlock in a schedule that
// was written by hand).
//
// Stages and chunks: the model's layers are cut into ranks * chunks stages. Rank r holds chunks
// c = 0..chunks-1, chunk c being stage c * ranks + r (Megatron's interleaving; chunks = 1 is the plain
// pipeline), so the stage after stage s always lives on the next rank, (r + 1) % ranks.
//
// Communication is explicit: an activation leaves stage s for stage s + 1 by a kSendActivation on s's rank
// and a kRecvActivation on s + 1's; the gradient of that activation goes back by kSendGradient /
// kRecvGradient. A send does not wait for its receive (it is posted asynchronously and completed by the
// end of the step); a receive waits for its send. Between two stages of one rank (ranks = 1) nothing is
// sent.
#ifndef LMFORGE_DISTRIBUTED_PIPELINE_SCHEDULE_H_
#define LMFORGE_DISTRIBUTED_PIPELINE_SCHEDULE_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace lmf::distributed::pipeline {

enum class Op {
  kForward,         // F: the chunk's forward for one micro-batch (the last stage also computes the loss)
  kBackward,        // B: the chunk's whole backward (input and weight gradients)
  kBackwardInput,   // BI: only the gradient of the chunk's input (zero-bubble schedules)
  kBackwardWeight,  // BW: only the gradients of the chunk's weights, after its BI
  kRecvActivation,  // the input of (micro_batch, chunk) from the previous stage's rank
  kSendActivation,  // the output of (micro_batch, chunk) to the next stage's rank
  kRecvGradient,    // the gradient of the output of (micro_batch, chunk) from the next stage's rank
  kSendGradient,    // the gradient of the input of (micro_batch, chunk) to the previous stage's rank
};

struct Action {
  Op op;
  int micro_batch;
  int chunk;  // this rank's chunk (not the stage)
};

enum class ScheduleKind { kGPipe, kOneFOneB, kInterleavedOneFOneB, kZeroBubbleH1 };

// "gpipe", "1f1b", "interleaved_1f1b", "zb_h1"; InvalidArgument listing them for another name.
absl::StatusOr<ScheduleKind> ParseScheduleKind(std::string_view name);
std::string ScheduleKindName(ScheduleKind kind);
// "F3.1" (forward of micro-batch 3 through chunk 1), "B", "BI", "BW", "recvA", "sendA", "recvG", "sendG".
std::string ActionName(const Action& action);

struct Schedule {
  ScheduleKind kind = ScheduleKind::kOneFOneB;
  int ranks = 1;
  int chunks = 1;  // per rank: the virtual stages of an interleaved schedule, else 1
  int micro_batches = 1;
  std::vector<std::vector<Action>> actions;  // [rank] -> in order

  int num_stages() const { return ranks * chunks; }
  int stage(int rank, int chunk) const { return chunk * ranks + rank; }
};

// The schedule of `kind` for `ranks` pipeline ranks, `chunks` per rank and `micro_batches` per step, or
// InvalidArgument naming what does not fit: chunks > 1 only for the interleaved schedule, which needs
// micro_batches to be a multiple of ranks (and at least ranks); every count >= 1.
absl::StatusOr<Schedule> MakeSchedule(ScheduleKind kind, int ranks, int chunks, int micro_batches);

// The schedule's compute order with the sends and receives it implies added where they are needed: a
// receive right before the compute that needs it, a send right after the compute that produces it.
// `compute` holds only kForward / kBackward / kBackwardInput / kBackwardWeight actions.
Schedule AddCommunication(ScheduleKind kind, int ranks, int chunks, int micro_batches,
                          std::vector<std::vector<Action>> compute);

// OK, or FailedPrecondition naming the rank, the action and what is wrong: a compute action missing or
// repeated, a backward before its forward, a compute without its receive before it, a send without its
// receive on the peer (or the reverse), receives from a peer in another order than its sends (a backend
// without tags, NCCL, matches by order), and a deadlock (from Simulate).
absl::Status ValidateSchedule(const Schedule& schedule);

// When a send can be waited for without waiting on this rank's own later work: for each rank, for each of
// its actions that sends, the index of the first later action of its own after which the receive of that
// message has happened (a chain of program order and messages leads from the receiving rank's receive to
// it), so that the send is done or finishing there; the action count when none does (wait at the step's
// end). -1 for the other actions. Found from the order alone (vector clocks over the dry run's order), for a
// schedule that ValidateSchedule accepts.
std::vector<std::vector<int>> SendsReceivedBy(const Schedule& schedule);

// Time each action takes in the dry run; sends and receives take `transfer` (0: free).
struct Costs {
  double forward = 1, backward = 2, backward_input = 1, backward_weight = 1, transfer = 0;
};

struct Simulation {
  double makespan = 0;                // when the last rank finishes
  std::vector<double> busy;           // [rank] compute time
  std::vector<std::vector<double>> start;  // [rank][action] when each action starts
  // Idle compute time over the ideal (a rank's compute alone): (makespan * ranks - sum busy) / sum busy,
  // the quantity Megatron's (p - 1) / m and (p - 1) / (v m) describe.
  double bubble_ratio() const;
};

// Runs the schedule's actions in order on every rank at once, a receive waiting for its send; a chunk's
// compute costs Costs / chunks (the model's layers are split over ranks * chunks stages). FailedPrecondition
// on a deadlock, naming each blocked rank and what it waits for, or on a receive whose send never comes.
absl::StatusOr<Simulation> Simulate(const Schedule& schedule, const Costs& costs = {});

// One text line per rank: its actions in order with their start times, for the dry run's output.
std::string Timeline(const Schedule& schedule, const Simulation& simulation);

}  // namespace lmf::distributed::pipeline

#endif  // LMFORGE_DISTRIBUTED_PIPELINE_SCHEDULE_H_
