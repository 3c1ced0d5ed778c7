// The optimizer message's conversion (see optimizer_conversion.h).
#include "config/optimizer_conversion.h"


namespace lmf::config {

model::AdamWConfig ToAdamWConfig(const OptimizerConfig& optimizer) {
  model::AdamWConfig c;
  c.beta1 = optimizer.adamw().beta1();
  c.beta2 = optimizer.adamw().beta2();
  c.eps = optimizer.adamw().eps();
  c.weight_decay = optimizer.adamw().weight_decay();
  c.decay_vectors = optimizer.adamw().decay_vectors();
  c.max_grad_norm = optimizer.grad_clip();
  return c;
}

std::string AdamWConfigPath(std::string_view member) {
  if (member == "max_grad_norm") return "optimizer.grad_clip";
  return "optimizer.adamw." + std::string(member);
}

}  // namespace lmf::config
