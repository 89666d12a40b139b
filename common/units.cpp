#include "common/units.h"

namespace dtrain {

namespace {

bool records_graph(const torch::Tensor& tensor) {
  return torch::GradMode::is_enabled() && tensor.requires_grad();
}

}  // namespace

torch::Tensor UnitModule::enter_unit(int64_t index, const torch::Tensor& input) {
  UnitHooks* hooks = hooks_;
  hooks->before_forward(index);
  if (!records_graph(input)) return input;
  // The unit's own alias of its input: the alias's gradient is complete once every path
  // through the unit has delivered its share, which is the end of the unit's backward.
  torch::Tensor alias = input.alias();
  alias.register_hook([hooks, index](const torch::Tensor&) { hooks->after_backward(index); });
  return alias;
}

torch::Tensor UnitModule::leave_unit(int64_t index, torch::Tensor output) {
  UnitHooks* hooks = hooks_;
  hooks->after_forward(index);
  if (records_graph(output)) {
    output.register_hook([hooks, index](const torch::Tensor&) { hooks->before_backward(index); });
  }
  return output;
}

}  // namespace dtrain
