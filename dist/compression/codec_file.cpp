#include "dist/compression/codec_file.h"

#include "common/error.h"
#include "common/files.h"
#include "common/log.h"
#include "dist/comm/gather.h"

#include <fmt/format.h>

#include <filesystem>
#include <sstream>

namespace dtrain::dist::compression {

namespace {

constexpr const char* kShared = "shared";

std::string key(const std::string& slot, int64_t param) {
  return fmt::format("{}.{}", slot, param);
}

void write_by_param(torch::serialize::OutputArchive& archive, const std::string& slot,
                    const ByParam& tensors) {
  for (const auto& [param, tensor] : tensors) archive.write(key(slot, param), tensor.cpu());
}

ByParam read_by_param(torch::serialize::InputArchive& archive, const std::string& slot,
                      int64_t num_params) {
  ByParam tensors;
  for (int64_t param = 0; param < num_params; ++param) {
    torch::Tensor tensor;
    if (archive.try_read(key(slot, param), tensor)) tensors[param] = tensor;
  }
  return tensors;
}

// Reads `file`; a damaged one is a UserError naming it.
void read_codec_archive(const std::string& file, const torch::Device& device,
                        torch::serialize::InputArchive& archive) {
  try {
    archive.load_from(file, device);
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    throw UserError(fmt::format("{}: damaged, does not load: {}", file,
                                what.substr(0, what.find('\n'))));
  }
}

}  // namespace

std::string codec_state_file(const std::string& dir, int rank) {
  return (std::filesystem::path(dir) / fmt::format("codec_rank{}.pt", rank)).string();
}

std::string serialize_codec_state(const Codec& codec, int world_size) {
  return serialize_codec_state(codec.kind(), codec.slots(), codec.state(), world_size);
}

std::string serialize_codec_state(const std::string& kind, const std::vector<std::string>& slots,
                                  const CodecState& state, int world_size) {
  torch::serialize::OutputArchive archive;
  archive.write("kind", c10::IValue(kind));
  archive.write("world_size", c10::IValue(static_cast<int64_t>(world_size)));
  for (size_t slot = 0; slot < state.slots.size(); ++slot) {
    write_by_param(archive, slots.at(slot), state.slots[slot]);
  }
  write_by_param(archive, kShared, state.shared);
  std::ostringstream stream;
  archive.save_to(stream);
  return stream.str();
}

std::vector<std::string> gather_codec_states(const Codec& codec, Communicator& comm) {
  std::vector<std::string> all =
      all_gather_bytes(comm, serialize_codec_state(codec, comm.size()));
  if (comm.rank() != 0) all.clear();  // only rank 0 writes
  return all;
}

void write_codec_states(const std::string& dir, const std::vector<std::string>& states) {
  for (size_t rank = 0; rank < states.size(); ++rank) {
    write_whole_file(codec_state_file(dir, static_cast<int>(rank)), states[rank]);
  }
}

void load_codec_state(const std::string& dir, Codec& codec, int64_t num_params, int rank,
                      int world_size, const torch::Device& device) {
  std::optional<CodecState> state =
      read_codec_state(dir, codec.kind(), codec.slots(), num_params, rank, world_size, device);
  if (state) codec.set_state(std::move(*state));
}

void skip_codec_state(const std::string& dir, int rank) {
  const std::string first = codec_state_file(dir, 0);
  if (rank != 0 || !std::filesystem::exists(first)) return;
  torch::serialize::InputArchive archive;
  read_codec_archive(first, torch::kCPU, archive);
  c10::IValue written_kind, writers;
  archive.read("kind", written_kind);
  archive.read("world_size", writers);
  log::warn("{}: codec state of \"{}\" (codec_rank0.pt to codec_rank{}.pt) not read: this run "
            "has no dist.compression, so its residuals are dropped",
            dir, written_kind.toStringRef(), writers.toInt() - 1);
}

std::optional<CodecState> read_codec_state(const std::string& dir, const std::string& kind,
                                           const std::vector<std::string>& slots,
                                           int64_t num_params, int rank, int world_size,
                                           const torch::Device& device) {
  const std::string first = codec_state_file(dir, 0);
  if (!std::filesystem::exists(first)) {
    log::info("{}: no codec state (written without dist.compression); \"{}\" starts fresh", dir,
              kind);
    return std::nullopt;
  }
  torch::serialize::InputArchive archive;
  read_codec_archive(first, device, archive);
  c10::IValue written_kind, writers;
  archive.read("kind", written_kind);
  archive.read("world_size", writers);
  if (written_kind.toStringRef() != kind) {
    // Every rank's file holds the same kind: said once, of them all.
    if (rank == 0) {
      log::warn("{}: codec state of \"{}\" (codec_rank0.pt to codec_rank{}.pt), not \"{}\": "
                "the codec starts fresh",
                dir, written_kind.toStringRef(), writers.toInt() - 1, kind);
    }
    return std::nullopt;
  }
  CodecState state;
  state.shared = read_by_param(archive, kShared, num_params);
  state.slots.resize(slots.size());
  if (writers.toInt() == world_size) {
    torch::serialize::InputArchive own;
    if (rank != 0) read_codec_archive(codec_state_file(dir, rank), device, own);
    for (size_t slot = 0; slot < state.slots.size(); ++slot) {
      state.slots[slot] = read_by_param(rank == 0 ? archive : own, slots[slot], num_params);
    }
  } else if (rank == 0 && !state.slots.empty()) {
    log::warn("{}: codec state of {} ranks, resumed on {}: the error-feedback residuals restart "
              "from zero",
              dir, writers.toInt(), world_size);
  }
  return state;
}

}  // namespace dtrain::dist::compression
