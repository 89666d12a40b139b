#include "models/batch_norm_cudnn.h"

#include "common/error.h"
#include "common/shared_kernels.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cudnn/Handle.h>
#include <cudnn.h>

namespace dtrain::models::cudnn_bf16 {

namespace {

// Persistent: the kernels that keep a channel's slice on chip between the statistics and the
// normalisation (the mode ATen asks for fp16 in channels_last).
constexpr cudnnBatchNormMode_t kMode = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;
constexpr cudnnBatchNormOps_t kOps = CUDNN_BATCHNORM_OPS_BN;

void check(cudnnStatus_t status, const char* what) {
  DTRAIN_CHECK(status == CUDNN_STATUS_SUCCESS, "cuDNN {} failed: {}", what,
               cudnnGetErrorString(status));
}

// A tensor descriptor that frees itself.
class TensorDescriptor {
 public:
  TensorDescriptor() { check(cudnnCreateTensorDescriptor(&desc_), "cudnnCreateTensorDescriptor"); }
  ~TensorDescriptor() { cudnnDestroyTensorDescriptor(desc_); }
  TensorDescriptor(const TensorDescriptor&) = delete;
  TensorDescriptor& operator=(const TensorDescriptor&) = delete;
  cudnnTensorDescriptor_t get() const { return desc_; }

 private:
  cudnnTensorDescriptor_t desc_ = nullptr;
};

// The activations [N, C, H, W] in NHWC order, and cuDNN's [1, C, 1, 1] fp32 parameter shape
// derived from them.
struct Descriptors {
  explicit Descriptors(const torch::Tensor& x) {
    check(cudnnSetTensor4dDescriptor(data.get(), CUDNN_TENSOR_NHWC, CUDNN_DATA_BFLOAT16,
                                     static_cast<int>(x.size(0)), static_cast<int>(x.size(1)),
                                     static_cast<int>(x.size(2)), static_cast<int>(x.size(3))),
          "cudnnSetTensor4dDescriptor");
    check(cudnnDeriveBNTensorDescriptor(params.get(), data.get(), kMode),
          "cudnnDeriveBNTensorDescriptor");
  }
  TensorDescriptor data, params;
};

cudnnHandle_t handle_on_current_stream() {
  cudnnHandle_t handle = at::native::getCudnnHandle();
  check(cudnnSetStream(handle, at::cuda::getCurrentCUDAStream()), "cudnnSetStream");
  return handle;
}

torch::Tensor bytes(size_t size, const torch::Tensor& like) {
  return torch::empty({static_cast<int64_t>(size)}, like.options().dtype(torch::kUInt8));
}

class CudnnBf16BatchNorm : public torch::autograd::Function<CudnnBf16BatchNorm> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input,
                               const torch::Tensor& weight, const torch::Tensor& bias,
                               const torch::Tensor& running_mean,
                               const torch::Tensor& running_var, double momentum, double eps) {
    const torch::Tensor x = input.contiguous(torch::MemoryFormat::ChannelsLast);
    torch::Tensor y = torch::empty_like(x, torch::MemoryFormat::ChannelsLast);
    const torch::Tensor save_mean = torch::empty({x.size(1)}, weight.options());
    const torch::Tensor save_invstd = torch::empty_like(save_mean);
    const Descriptors desc(x);
    cudnnHandle_t handle = handle_on_current_stream();

    size_t workspace_size = 0, reserve_size = 0;
    check(cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
              handle, kMode, kOps, desc.data.get(), nullptr, desc.data.get(), desc.params.get(),
              nullptr, &workspace_size),
          "cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize");
    check(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(handle, kMode, kOps, nullptr,
                                                               desc.data.get(), &reserve_size),
          "cudnnGetBatchNormalizationTrainingExReserveSpaceSize");
    torch::Tensor workspace = bytes(workspace_size, x);
    torch::Tensor reserve = bytes(reserve_size, x);

    const float one = 1.0f, zero = 0.0f;
    check(cudnnBatchNormalizationForwardTrainingEx(
              handle, kMode, kOps, &one, &zero, desc.data.get(), x.data_ptr(), nullptr, nullptr,
              desc.data.get(), y.data_ptr(), desc.params.get(), weight.data_ptr(),
              bias.data_ptr(), momentum, running_mean.data_ptr(), running_var.data_ptr(), eps,
              save_mean.data_ptr(), save_invstd.data_ptr(), nullptr, workspace.data_ptr(),
              workspace_size, reserve.data_ptr(), reserve_size),
          "cudnnBatchNormalizationForwardTrainingEx");

    ctx->saved_data["eps"] = eps;
    ctx->save_for_backward({x, weight, bias, save_mean, save_invstd, reserve});
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &weight = saved[1], &bias = saved[2],
                        &save_mean = saved[3], &save_invstd = saved[4], &reserve = saved[5];
    const torch::Tensor dy = grads[0].contiguous(torch::MemoryFormat::ChannelsLast);
    if (take_shared_kernel_request()) {
      // Beside an all-reduce in flight: ATen's kernels start without waiting for every SM.
      // cuDNN saved the batch's mean and inverse standard deviation, as ATen does.
      auto [dx, dweight, dbias] = at::native_batch_norm_backward(
          dy, x, weight, /*running_mean=*/torch::Tensor(), /*running_var=*/torch::Tensor(),
          save_mean, save_invstd, /*train=*/true, ctx->saved_data["eps"].toDouble(),
          {true, true, true});
      return {dx, dweight, dbias, torch::Tensor(), torch::Tensor(), torch::Tensor(),
              torch::Tensor()};
    }
    torch::Tensor dx = torch::empty_like(x, torch::MemoryFormat::ChannelsLast);
    torch::Tensor dweight = torch::empty_like(weight), dbias = torch::empty_like(bias);
    const Descriptors desc(x);
    cudnnHandle_t handle = handle_on_current_stream();

    size_t workspace_size = 0;
    check(cudnnGetBatchNormalizationBackwardExWorkspaceSize(
              handle, kMode, kOps, desc.data.get(), nullptr, desc.data.get(), nullptr,
              desc.data.get(), desc.params.get(), nullptr, &workspace_size),
          "cudnnGetBatchNormalizationBackwardExWorkspaceSize");
    torch::Tensor workspace = bytes(workspace_size, x);

    const float one = 1.0f, zero = 0.0f;
    check(cudnnBatchNormalizationBackwardEx(
              handle, kMode, kOps, &one, &zero, &one, &zero, desc.data.get(), x.data_ptr(),
              nullptr, nullptr, desc.data.get(), dy.data_ptr(), nullptr, nullptr,
              desc.data.get(), dx.data_ptr(), desc.params.get(), weight.data_ptr(),
              bias.data_ptr(), dweight.data_ptr(), dbias.data_ptr(),
              ctx->saved_data["eps"].toDouble(), save_mean.data_ptr(), save_invstd.data_ptr(),
              nullptr, workspace.data_ptr(), workspace_size,
              reserve.data_ptr(), static_cast<size_t>(reserve.numel())),
          "cudnnBatchNormalizationBackwardEx");
    // One entry per forward argument: input, weight, bias, then none for the rest.
    torch::autograd::variable_list result(7);
    result[0] = dx;
    result[1] = dweight;
    result[2] = dbias;
    return result;
  }
};

}  // namespace

bool accepts(const torch::Tensor& input, const torch::Tensor& weight, const torch::Tensor& bias,
             const torch::Tensor& running_mean, const torch::Tensor& running_var, double eps) {
  // ATen's own bounds for its cuDNN BatchNorm: batch sizes, an eps cuDNN accepts. A channel
  // of one value has no unbiased variance: that input stays on ATen's kernel, as before.
  // Its persistent kernels load in 16-byte vectors ("misaligned address" otherwise): a
  // parameter that lives in a flat buffer (the parameter server's buckets) may start 8 bytes off.
  const auto aligned = [](const torch::Tensor& t) {
    return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
  };
  return input.is_cuda() && input.dim() == 4 && input.scalar_type() == torch::kBFloat16 &&
         aligned(input) && aligned(weight) && aligned(bias) && aligned(running_mean) &&
         aligned(running_var) && weight.scalar_type() == torch::kFloat32 && input.numel() > input.size(1) &&
         input.size(0) <= 880801 && at::globalContext().userEnabledCuDNN() &&
         eps >= CUDNN_BN_MIN_EPSILON;
}

torch::Tensor batch_norm_training(const torch::Tensor& input, const torch::Tensor& weight,
                                  const torch::Tensor& bias, const torch::Tensor& running_mean,
                                  const torch::Tensor& running_var, double momentum, double eps) {
  return CudnnBf16BatchNorm::apply(input, weight, bias, running_mean, running_var, momentum, eps);
}

}  // namespace dtrain::models::cudnn_bf16
