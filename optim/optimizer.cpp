#include "optim/optimizer.h"

#include "common/error.h"
#include "optim/foreach_sgd.h"
#include "optim/lamb.h"
#include "optim/lars.h"

#include <fmt/format.h>

#include <utility>

namespace dtrain::optim {
namespace {

// Builds `Optimizer` over group 0 (`decay`, with the defaults) and, when `split`, group 1
// (`no_decay`, the same options with weight_decay 0). A group may be empty: a rank's shard
// can hold only 1-D tensors, and the group indices stay fixed either way.
template <typename Optimizer, typename Options>
std::unique_ptr<torch::optim::Optimizer> build(const Options& defaults,
                                               std::vector<torch::Tensor> decay,
                                               std::vector<torch::Tensor> no_decay, bool split) {
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::move(decay), std::make_unique<Options>(defaults));
  if (split) {
    Options without_decay = defaults;
    without_decay.weight_decay(0.0);
    groups.emplace_back(std::move(no_decay), std::make_unique<Options>(without_decay));
  }
  return std::make_unique<Optimizer>(std::move(groups), defaults);
}

// LARS / LAMB: group 0 adapts its trust ratio; group 1 (1-D tensors, when they take no decay
// or no adaptation) takes weight decay only if decay_norm_and_bias and adapts only if
// adapt_norm_and_bias, so with the defaults it is plain momentum SGD / Adam.
template <typename Optimizer, typename Options>
std::unique_ptr<torch::optim::Optimizer> build_adaptive(const OptimizerOptions& options,
                                                        Options defaults,
                                                        const std::vector<torch::Tensor>& params) {
  const bool split = !options.decay_norm_and_bias || !options.adapt_norm_and_bias;
  std::vector<torch::Tensor> adapted, plain;
  for (const auto& param : params) (split && param.dim() <= 1 ? plain : adapted).push_back(param);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  defaults.adapt(true);
  groups.emplace_back(std::move(adapted), std::make_unique<Options>(defaults));
  if (split) {
    Options norm_and_bias = defaults;
    norm_and_bias.weight_decay(options.decay_norm_and_bias ? options.weight_decay : 0.0);
    norm_and_bias.adapt(options.adapt_norm_and_bias);
    groups.emplace_back(std::move(plain), std::make_unique<Options>(norm_and_bias));
  }
  return std::make_unique<Optimizer>(std::move(groups), defaults);
}

}  // namespace

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerOptions& unresolved,
                                                        const std::vector<torch::Tensor>& params) {
  const OptimizerOptions options = unresolved.resolved();
  // Biases and normalisation gains/shifts are the tensors of at most one dimension.
  const bool split = !options.decay_norm_and_bias;
  std::vector<torch::Tensor> decay, no_decay;
  for (const auto& param : params) (split && param.dim() <= 1 ? no_decay : decay).push_back(param);

  if (options.name == "sgd") {
    // torch::optim::SGD's arithmetic with multi-tensor kernels (foreach_sgd.h):
    // g += wd * p; b = momentum * b + g (b = g at the first step);
    // p -= lr * (nesterov ? g + momentum * b : b).
    const auto defaults = torch::optim::SGDOptions(options.lr)
                              .momentum(options.momentum)
                              .dampening(0.0)
                              .weight_decay(options.weight_decay)
                              .nesterov(options.nesterov);
    return build<ForeachSGD>(defaults, std::move(decay), std::move(no_decay), split);
  }
  if (options.name == "adamw") {
    // Loshchilov & Hutter 2019, Algorithm 2, with decoupled decay p -= lr * wd * p.
    const auto defaults = torch::optim::AdamWOptions(options.lr)
                              .betas(std::make_tuple(options.beta1, options.beta2))
                              .eps(options.eps)
                              .weight_decay(options.weight_decay)
                              .amsgrad(false);
    return build<torch::optim::AdamW>(defaults, std::move(decay), std::move(no_decay), split);
  }
  if (options.name == "lars") {
    // You et al. 2017, MLPerf form (lars.h): v = m v + lr * ratio * (g + wd w); w -= v.
    const auto defaults = LarsOptions(options.lr)
                              .momentum(options.momentum)
                              .weight_decay(options.weight_decay)
                              .trust_coefficient(options.trust_coefficient)
                              .trust_eps(options.trust_eps)
                              .max_trust_ratio(options.max_trust_ratio);
    return build_adaptive<Lars>(options, defaults, params);
  }
  if (options.name == "lamb") {
    // You et al. 2020, Algorithm 2 (lamb.h): Adam direction + wd w, scaled by ||w|| / ||r||.
    const auto defaults = LambOptions(options.lr)
                              .beta1(options.beta1)
                              .beta2(options.beta2)
                              .eps(options.eps)
                              .weight_decay(options.weight_decay)
                              .trust_eps(options.trust_eps)
                              .max_trust_ratio(options.max_trust_ratio)
                              .max_grad_norm(options.max_grad_norm);
    return build_adaptive<Lamb>(options, defaults, params);
  }
  throw UserError(
      fmt::format("optim.name \"{}\" is not one of: sgd, adamw, lars, lamb", options.name));
}

void set_lr(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

bool set_grad_norm_reducer(torch::optim::Optimizer& optimizer, SquaredNormReducer reducer) {
  auto* lamb = dynamic_cast<Lamb*>(&optimizer);
  if (lamb == nullptr) return false;
  lamb->set_grad_norm_reducer(std::move(reducer));
  return true;
}

bool set_norm_reducer(torch::optim::Optimizer& optimizer, NormReducer reducer) {
  if (auto* lamb = dynamic_cast<Lamb*>(&optimizer)) {
    lamb->set_norm_reducer(std::move(reducer));
    return true;
  }
  if (auto* lars = dynamic_cast<Lars*>(&optimizer)) {
    lars->set_norm_reducer(std::move(reducer));
    return true;
  }
  return false;
}

}  // namespace dtrain::optim
