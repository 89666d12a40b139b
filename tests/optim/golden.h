// Shared by the LARS and LAMB tests: a few tensors as flat float64 vectors, gradients that
// depend on the weights and the step, a two-party all-reduce for the sharding tests, and the
// save/load continuation check.
#pragma once

#include "optim/optimizer.h"

#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

namespace golden {

using Flat = std::vector<double>;

// Tensor i has shape kShapes[i]; its gradient is c_i * w + s_i * cos(w + step).
struct Layout {
  std::vector<std::vector<int64_t>> shapes = {{4, 3}, {6}, {2, 2, 3}};
  std::vector<double> curvature = {1.0, 2.0, 0.5};
  std::vector<double> wiggle = {0.3, 0.7, 1.1};
};

inline std::vector<Flat> start_values(const Layout& layout) {
  std::vector<Flat> values;
  for (size_t i = 0; i < layout.shapes.size(); ++i) {
    int64_t n = 1;
    for (const int64_t d : layout.shapes[i]) n *= d;
    Flat v(static_cast<size_t>(n));
    for (size_t k = 0; k < v.size(); ++k) {
      v[k] = std::sin(1.7 * static_cast<double>(k + 1) + static_cast<double>(i)) * (1.0 + i);
    }
    values.push_back(v);
  }
  return values;
}

inline double grad_of(const Layout& layout, size_t i, double w, int step) {
  return layout.curvature[i] * w + layout.wiggle[i] * std::cos(w + static_cast<double>(step));
}

// The device of the tensors under test: the CPU, or the GPU when DTRAIN_TEST_DEVICE=cuda (the
// optim.*_cuda tests in tests/CMakeLists.txt), where LARS and LAMB run multi-tensor kernels.
inline torch::Device device() {
  const char* requested = std::getenv("DTRAIN_TEST_DEVICE");
  return requested && std::string(requested) == "cuda" ? torch::Device(torch::kCUDA, 0)
                                                       : torch::Device(torch::kCPU);
}

inline std::vector<torch::Tensor> to_tensors(const Layout& layout, const std::vector<Flat>& v) {
  std::vector<torch::Tensor> tensors;
  for (size_t i = 0; i < v.size(); ++i) {
    tensors.push_back(
        torch::tensor(v[i], torch::kFloat64).reshape(layout.shapes[i]).to(device()));
    tensors.back().requires_grad_(true);
  }
  return tensors;
}

// Sets .grad of each tensor from its own values, with torch ops (the reference uses grad_of).
inline void set_grads(const Layout& layout, const std::vector<torch::Tensor>& params, int step) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i) {
    params[i].mutable_grad() = layout.curvature[i] * params[i] +
                               layout.wiggle[i] * torch::cos(params[i] + static_cast<double>(step));
  }
}

inline double sq_norm(const Flat& v) {
  double s = 0.0;
  for (const double x : v) s += x * x;
  return s;
}

inline void check_close(const std::vector<torch::Tensor>& actual,
                        const std::vector<Flat>& expected, double tolerance = 1e-12) {
  for (size_t i = 0; i < actual.size(); ++i) {
    const auto flat = actual[i].detach().reshape({-1});
    for (size_t k = 0; k < expected[i].size(); ++k) {
      const double a = flat[static_cast<int64_t>(k)].item<double>();
      INFO("tensor " << i << " element " << k);
      CHECK(std::abs(a - expected[i][k]) <= tolerance * (1.0 + std::abs(expected[i][k])));
    }
  }
}

// Two threads exchange tensors and both receive the sum, the same bits on each side.
class PairSum {
 public:
  torch::Tensor sum(int rank, const torch::Tensor& local) {
    std::unique_lock<std::mutex> lock(mutex_);
    slot_[rank] = local.clone();
    const int64_t generation = generation_;
    if (++arrived_ == 2) {
      result_ = slot_[0] + slot_[1];
      arrived_ = 0;
      ++generation_;
      changed_.notify_all();
    } else {
      changed_.wait(lock, [&] { return generation_ != generation; });
    }
    return result_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  torch::Tensor slot_[2];
  torch::Tensor result_;
  int arrived_ = 0;
  int64_t generation_ = 0;
};

// Steps an optimizer built from `o` 3 times, saves it, restores the state into an optimizer over
// copies of the weights, and checks that both continue bitwise identically for 3 more steps.
inline void check_save_load_continuation(const dtrain::optim::OptimizerOptions& o) {
  const golden::Layout layout;
  auto params = golden::to_tensors(layout, golden::start_values(layout));
  auto optimizer = dtrain::optim::make_optimizer(o, params);
  for (int t = 0; t < 3; ++t) {
    golden::set_grads(layout, params, t);
    optimizer->step();
  }
  std::stringstream bytes;
  {
    torch::serialize::OutputArchive saved;
    optimizer->save(saved);
    saved.save_to(bytes);
  }
  std::vector<torch::Tensor> copies;
  for (const auto& p : params) copies.push_back(p.detach().clone().requires_grad_(true));
  auto restored = dtrain::optim::make_optimizer(o, copies);
  torch::serialize::InputArchive loaded;
  loaded.load_from(bytes);
  restored->load(loaded);
  for (int t = 3; t < 6; ++t) {
    golden::set_grads(layout, params, t);
    golden::set_grads(layout, copies, t);
    optimizer->step();
    restored->step();
  }
  for (size_t i = 0; i < params.size(); ++i) CHECK(torch::equal(params[i], copies[i]));
}

}  // namespace golden
