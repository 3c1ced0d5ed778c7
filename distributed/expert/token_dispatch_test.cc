// Expert parallel token exchange on 1-4 Gloo processes: every rank can regenerate every rank's routing
// (one seed), so each checks exactly which rows it received from whom for which expert; combine(dispatch(x))
// gives each token's row back for every pick; an expert computation in the middle (rows times the expert's
// id + 1) comes back to the right token and pick. Covered: an expert no token picks, a rank with no tokens,
// uneven token counts; bad expert ids and experts that do not divide over the ranks are refused.
#include "distributed/expert/token_dispatch.h"

#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "distributed/test_ranks.h"
#include "gtest/gtest.h"

namespace lmf::distributed::expert {
namespace {

using testing::Checks;
using testing::ExpectAllPassed;
using testing::RunRanks;

constexpr int kD = 3;

struct Routing {
  int64_t n = 0;
  std::vector<int32_t> experts;  // (n, k), distinct per token, never the last expert
  std::vector<float> x;          // (n, kD): row i = {rank, i, 0.5}
};

// Rank r's tokens: 5 + 3r of them, none on rank 1 (when there are 2 ranks or more).
Routing RoutingOf(int rank, int ranks, int num_experts, int k) {
  Routing r;
  r.n = (ranks > 1 && rank == 1) ? 0 : 5 + 3 * rank;
  std::mt19937_64 engine(100 + rank);
  for (int64_t i = 0; i < r.n; ++i) {
    std::vector<int32_t> picks;
    while (static_cast<int>(picks.size()) < k) {
      const int32_t e = static_cast<int32_t>(engine() % static_cast<uint64_t>(num_experts - 1));
      if (std::find(picks.begin(), picks.end(), e) == picks.end()) picks.push_back(e);
    }
    r.experts.insert(r.experts.end(), picks.begin(), picks.end());
    r.x.insert(r.x.end(), {static_cast<float>(rank), static_cast<float>(i), 0.5f});
  }
  return r;
}

int CheckExchange(Collectives& group, int num_experts, int k) {
  Checks checks(group.rank());
  const int ranks = group.world_size(), me = group.rank(), per_rank = num_experts / ranks;
  std::vector<Routing> all;
  for (int r = 0; r < ranks; ++r) all.push_back(RoutingOf(r, ranks, num_experts, k));
  const Routing& mine = all[me];
  TokenDispatcher dispatcher(group, num_experts);
  absl::StatusOr<DispatchPlan> plan = dispatcher.Plan(mine.experts.data(), mine.n, k);
  if (!checks.Ok(plan.status(), "Plan")) return checks.exit_code();
  std::vector<float> rows;
  if (!checks.Ok(dispatcher.Dispatch(*plan, mine.x.data(), kD, &rows), "Dispatch")) return checks.exit_code();

  // Who sent what: local expert e's rows are, source by source, that source's tokens picking it in order.
  std::vector<float> want;
  for (int e = 0; e < per_rank; ++e) {
    const int global = me * per_rank + e;
    int64_t expert_rows = 0;
    for (int source = 0; source < ranks; ++source) {
      int64_t from = 0;
      for (int64_t a = 0; a < all[source].n * k; ++a) {
        if (all[source].experts[a] != global) continue;
        want.insert(want.end(), all[source].x.begin() + (a / k) * kD, all[source].x.begin() + (a / k + 1) * kD);
        ++from;
      }
      checks.Expect(plan->rows_from(source, e) == from,
                    absl::StrCat("expert ", global, " from rank ", source, ": ", plan->rows_from(source, e),
                                 " rows, want ", from));
      expert_rows += from;
    }
    checks.Expect(plan->expert_rows(e) == expert_rows, absl::StrCat("expert ", global, " rows"));
  }
  checks.Expect(rows == want, "the dispatched rows are each source's rows for each expert, in order");
  checks.Expect(plan->rows() == static_cast<int64_t>(want.size() / kD), "plan rows");

  // An expert computation: rows of global expert g times g + 1.
  for (int e = 0; e < per_rank; ++e) {
    for (int64_t r = plan->expert_offset(e); r < plan->expert_offset(e) + plan->expert_rows(e); ++r) {
      for (int j = 0; j < kD; ++j) rows[r * kD + j] *= static_cast<float>(me * per_rank + e + 1);
    }
  }
  std::vector<float> out(static_cast<size_t>(mine.n * k * kD));
  if (!checks.Ok(dispatcher.Combine(*plan, rows.data(), kD, out.data()), "Combine")) return checks.exit_code();
  bool back = true;
  for (int64_t a = 0; a < mine.n * k; ++a) {
    for (int j = 0; j < kD; ++j) {
      back = back && out[a * kD + j] == mine.x[(a / k) * kD + j] * static_cast<float>(mine.experts[a] + 1);
    }
  }
  checks.Expect(back, "combine(expert(dispatch(x))) gives each token's rows back, scaled by its experts");
  return checks.exit_code();
}

TEST(TokenDispatch, OneRank) {
  ExpectAllPassed(RunRanks(1, [](Collectives& g) { return CheckExchange(g, /*num_experts=*/4, /*k=*/2); }));
}
TEST(TokenDispatch, TwoRanks) {
  ExpectAllPassed(RunRanks(2, [](Collectives& g) { return CheckExchange(g, 4, 2); }));
}
TEST(TokenDispatch, ThreeRanksTopOne) {
  ExpectAllPassed(RunRanks(3, [](Collectives& g) { return CheckExchange(g, 6, 1); }));
}
TEST(TokenDispatch, FourRanksFineGrained) {
  ExpectAllPassed(RunRanks(4, [](Collectives& g) { return CheckExchange(g, 16, 4); }));
}

TEST(TokenDispatch, BadRoutingIsRefused) {
  ExpectAllPassed(RunRanks(2, [](Collectives& g) {
    Checks checks(g.rank());
    const std::vector<int32_t> bad = {0, 9};
    checks.FailsWith(TokenDispatcher(g, 4).Plan(bad.data(), 1, 2).status(), {"token 0 pick 1 is expert 9"},
                     "an expert id out of range");
    checks.FailsWith(TokenDispatcher(g, 3).Plan(bad.data(), 1, 1).status(), {"3 experts do not divide over 2"},
                     "experts not divisible");
    return checks.exit_code();
  }));
}

}  // namespace
}  // namespace lmf::distributed::expert
