#include "models/export.h"

#include "common/error.h"
#include "common/files.h"

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (fmt >= 10 keeps it here)

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <utility>
#include <vector>

namespace dtrain::models {
namespace {

// Parameters, then buffers, by full name ("layer1.0.bn1.running_mean"): a torch state dict.
NamedTensors state_tensors(torch::nn::Module& module) {
  NamedTensors tensors;
  for (const auto& item : module.named_parameters()) tensors.emplace_back(item.key(), item.value());
  for (const auto& item : module.named_buffers()) tensors.emplace_back(item.key(), item.value());
  return tensors;
}

// A host copy that owns exactly its own elements: the pickler writes whole storages, and a
// parameter may be a view into a larger flat buffer.
torch::Tensor compact_cpu(const torch::Tensor& tensor) {
  auto cpu = tensor.detach().to(torch::kCPU).contiguous();
  const auto own_bytes = static_cast<size_t>(cpu.numel()) * cpu.element_size();
  if (cpu.storage_offset() != 0 || cpu.storage().nbytes() != own_bytes) cpu = cpu.clone();
  return cpu;
}

std::string shape_text(at::IntArrayRef sizes) {
  return fmt::format("[{}]", fmt::join(sizes, ", "));
}

void write_file(const std::string& path, const std::vector<char>& bytes) {
  const std::string tmp = path + ".tmp";
  write_whole_file(tmp, std::string_view(bytes.data(), bytes.size()));
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    throw UserError(fmt::format("cannot rename {} to {}: {}", tmp, path, std::strerror(errno)));
  }
}

std::vector<char> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw UserError(fmt::format("cannot open state dict {}: {}", path, std::strerror(errno)));
  }
  std::vector<char> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad()) throw UserError(fmt::format("reading state dict {} failed", path));
  return bytes;
}

// The {name: tensor} dict stored in a torch.save / torch::pickle_save file.
c10::Dict<std::string, torch::Tensor> parse_state_dict(const std::string& path,
                                                       const std::vector<char>& bytes) {
  torch::IValue value;
  try {
    value = torch::pickle_load(bytes);
  } catch (const c10::Error& e) {
    throw UserError(fmt::format("{} is not a readable torch.save file ({}): damaged, or not "
                                "written by torch.save(dict(model.state_dict()), path)",
                                path, e.what_without_backtrace()));
  }
  if (!value.isGenericDict()) {
    throw UserError(fmt::format("{} holds a {}, not a dict of tensors; write it with "
                                "torch.save(dict(model.state_dict()), path)",
                                path, value.tagKind()));
  }
  c10::Dict<std::string, torch::Tensor> tensors;
  for (const auto& entry : value.toGenericDict()) {
    if (!entry.key().isString() || !entry.value().isTensor()) {
      throw UserError(fmt::format("{}: every entry must map a string to a tensor, found {} -> {}",
                                  path, entry.key().tagKind(), entry.value().tagKind()));
    }
    tensors.insert(entry.key().toStringRef(), entry.value().toTensor());
  }
  return tensors;
}

// Appends "<n> <what>: a, b, c, d and <k> more" when `items` is not empty.
void describe(std::vector<std::string>& problems, const std::vector<std::string>& items,
              const char* one, const char* many) {
  constexpr size_t kShown = 4;
  if (items.empty()) return;
  const size_t shown = std::min(items.size(), kShown);
  problems.push_back(fmt::format(
      "{} {}: {}{}", items.size(), items.size() == 1 ? one : many,
      fmt::join(items.begin(), items.begin() + static_cast<std::ptrdiff_t>(shown), ", "),
      items.size() > shown ? fmt::format(" and {} more", items.size() - shown) : ""));
}

}  // namespace

void save_state_dict(torch::nn::Module& module, const std::string& path) {
  save_state_dict(state_tensors(module), path);
}

void save_state_dict(const NamedTensors& state, const std::string& path) {
  c10::Dict<std::string, torch::Tensor> tensors;
  for (const auto& [name, tensor] : state) {
    tensors.insert(name, compact_cpu(tensor));
  }
  write_file(path, torch::pickle_save(torch::IValue(tensors)));
}

void load_state_dict(torch::nn::Module& module, const std::string& path) {
  load_state_dict(state_tensors(module), path);
}

void load_state_dict(const NamedTensors& targets, const std::string& path) {
  const auto stored = parse_state_dict(path, read_file(path));

  std::vector<std::string> missing, unexpected, mismatched;
  std::set<std::string> expected;
  for (const auto& [name, tensor] : targets) {
    expected.insert(name);
    const auto it = stored.find(name);
    if (it == stored.end()) {
      missing.push_back(fmt::format("\"{}\"", name));
    } else if (it->value().sizes() != tensor.sizes()) {
      mismatched.push_back(fmt::format("\"{}\" is {} in the file, {} in the model", name,
                                       shape_text(it->value().sizes()),
                                       shape_text(tensor.sizes())));
    }
  }
  for (const auto& entry : stored) {
    if (expected.count(entry.key()) == 0) unexpected.push_back(fmt::format("\"{}\"", entry.key()));
  }
  std::vector<std::string> problems;
  describe(problems, missing, "missing key", "missing keys");
  describe(problems, unexpected, "unexpected key", "unexpected keys");
  describe(problems, mismatched, "shape mismatch", "shape mismatches");
  if (!problems.empty()) {
    throw UserError(fmt::format("{} does not match the model: {}; was it saved from the same "
                                "model name, num_classes, stem and input channels?",
                                path, fmt::join(problems, "; ")));
  }

  torch::NoGradGuard no_grad;
  for (const auto& [name, tensor] : targets) tensor.copy_(stored.at(name));
}

}  // namespace dtrain::models
