// Test-only: a mixture of experts' settings as tools/model/moe_reference.py writes them (a JSON object with
// MoeSpec's field names and the config's spellings: "softmax_topk", "swiglu", "score", "sequence"), for the
// layer fixtures and the whole-model fixtures that hold an MoE.
#ifndef LMFORGE_MODEL_TESTING_MOE_FIXTURE_H_
#define LMFORGE_MODEL_TESTING_MOE_FIXTURE_H_

#include <string>

#include "base/json.h"
#include "gtest/gtest.h"
#include "model/config/config.h"

namespace lmf::model::testing {

// A feed-forward kind as the reference spells it ("swiglu", "geglu", "gelu", "relu").
inline FfnKind FfnKindFromName(const std::string& name) {
  return name == "swiglu" ? FfnKind::kSwiGLU
         : name == "geglu" ? FfnKind::kGeGLU
         : name == "gelu"  ? FfnKind::kGELU
                           : FfnKind::kReLU;
}

// Absent keys keep MoeSpec's defaults.
inline MoeSpec MoeSpecFromJson(const JsonValue& j) {
  const auto num = [&](const char* key, double fallback) {
    const JsonValue* v = j.Find(key);
    double value = fallback;
    if (v != nullptr) {
      EXPECT_TRUE(v->AsDouble(&value)) << key;
    }
    return value;
  };
  const auto str = [&](const char* key) {
    const JsonValue* v = j.Find(key);
    return v != nullptr ? v->text : std::string();
  };
  const auto flag = [&](const char* key) {
    const JsonValue* v = j.Find(key);
    return v != nullptr && v->boolean;
  };
  MoeSpec s;
  s.n_experts = static_cast<int64_t>(num("n_experts", 0));
  s.top_k = static_cast<int64_t>(num("top_k", 0));
  s.d_expert = static_cast<int64_t>(num("d_expert", 0));
  s.expert_kind = FfnKindFromName(str("expert_kind"));
  s.shared_d_ff = static_cast<int64_t>(num("shared_d_ff", 0));
  const std::string router = str("router");
  s.router = router == "topk_softmax"   ? RouterKind::kTopKSoftmax
             : router == "sigmoid_topk" ? RouterKind::kSigmoidTopK
                                        : RouterKind::kSoftmaxTopK;
  s.normalize_gates = flag("normalize_gates");
  s.route_scale = num("route_scale", 1.0);
  s.n_groups = static_cast<int64_t>(num("n_groups", 1));
  s.topk_groups = static_cast<int64_t>(num("topk_groups", 1));
  s.capacity_factor = num("capacity_factor", 0.0);
  s.drop = str("drop") == "score" ? DropPolicy::kByScore : DropPolicy::kByPosition;
  s.aux_loss = num("aux_loss", 0.0);
  s.aux_loss_scope = str("aux_loss_scope") == "sequence" ? BalanceScope::kSequence : BalanceScope::kMicroBatch;
  s.router_z_loss = num("router_z_loss", 0.0);
  s.expert_bias = flag("expert_bias");
  s.noisy_gating = flag("noisy_gating");
  return s;
}

}  // namespace lmf::model::testing

#endif  // LMFORGE_MODEL_TESTING_MOE_FIXTURE_H_
