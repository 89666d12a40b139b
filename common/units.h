// Units of a model's forward pass (stem, blocks, head) and hooks around each unit, so that a
// strategy can hold a unit's full parameters only while the unit runs (ZeRO-3: gather before,
// release after, prefetch the next). C++ modules have no forward hooks; this is the contract.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace dtrain {

// One unit of the forward pass, in execution order. `prefix` is the unit's name prefix in the
// model's named_parameters() / named_buffers(), ending in '.' (e.g. "layer2.1."): for every
// (name, tensor) of module->named_parameters() and module->named_buffers(), the model holds the
// same tensor as prefix + name. `module` is owned by the model and lives as long as it does.
struct Unit {
  std::string prefix;
  torch::nn::Module* module;
};

// Called with the unit's index in units(). What fires, for one run of unit u on input x:
//   1. before_forward(u), then the unit's forward on x.
//   2. after_forward(u), once the unit's output exists.
//   3. before_backward(u) in backward, when the gradient of the unit's output is complete and
//      the unit's own backward is about to run (a hook on the output; only if the output
//      requires grad and its gradient is ever computed).
//   4. after_backward(u), when the unit's backward has produced the gradient of x (a hook on
//      the unit's own alias of x). Autograd runs ready nodes newest first and AccumulateGrad
//      before all, so the unit's parameter gradients have arrived by then. Only if x requires
//      grad: for the first unit on images it never fires, and that unit's gradients are final
//      when backward returns.
// Steps 3 and 4 are attached only while autograd records (grad mode on): under NoGradGuard, as
// in evaluation, only steps 1 and 2 fire. A unit run twice in one forward fires all four per
// run; backward visits the runs in reverse. Callbacks run on the thread that runs the forward
// or the backward (on CUDA, autograd's device thread).
// For a strategy that swaps parameter data (Tensor::set_data) between the steps: a parameter
// that autograd saved as itself (convolution, BatchNorm) is read with the data it holds at
// backward, hence step 3; a tensor computed from it (Linear's weight.t(), an autocast copy)
// keeps the storage it had in forward. Gradients accumulate between steps 3 and 4, so the
// parameters must hold their full data then.
class UnitHooks {
 public:
  virtual ~UnitHooks() = default;
  virtual void before_forward(int64_t unit) {}
  virtual void after_forward(int64_t unit) {}
  virtual void before_backward(int64_t unit) {}
  virtual void after_backward(int64_t unit) {}
};

// A module made of units, whose forward runs each unit through run_unit in the order units()
// lists them. Without hooks (the default) run_unit is a plain call: no extra autograd nodes.
class UnitModule : public torch::nn::Module {
 public:
  // Units in forward order; together they own every parameter and buffer exactly once.
  virtual std::vector<Unit> units() = 0;

  // nullptr: none. Takes effect at the next forward; a graph already built keeps calling the
  // hooks it was built with, so `hooks` must outlive every graph built while it is installed.
  void set_unit_hooks(UnitHooks* hooks) { hooks_ = hooks; }

 protected:
  // forward(input) for unit `index`, with the hooks around it. The unit must not modify its
  // input in place: that would move the alias's history from under its hook.
  template <typename Forward>
  torch::Tensor run_unit(int64_t index, const torch::Tensor& input, Forward&& forward) {
    if (hooks_ == nullptr) return std::forward<Forward>(forward)(input);
    return leave_unit(index, std::forward<Forward>(forward)(enter_unit(index, input)));
  }

 private:
  // Steps 1 and 4: before_forward, and the hooked alias of the input.
  torch::Tensor enter_unit(int64_t index, const torch::Tensor& input);
  // Steps 2 and 3: after_forward, and the hook on the output.
  torch::Tensor leave_unit(int64_t index, torch::Tensor output);

  UnitHooks* hooks_ = nullptr;
};

}  // namespace dtrain
