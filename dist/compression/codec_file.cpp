#include "dist/compression/codec_file.h"

#include "common/error.h"
#include "common/log.h"
#include "dist/comm/gather.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
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
void read_archive(const std::string& file, const torch::Device& device,
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
  torch::serialize::OutputArchive archive;
  archive.write("kind", c10::IValue(codec.kind()));
  archive.write("world_size", c10::IValue(static_cast<int64_t>(world_size)));
  const CodecState state = codec.state();
  for (size_t slot = 0; slot < state.slots.size(); ++slot) {
    write_by_param(archive, codec.slots().at(slot), state.slots[slot]);
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
    const std::string file = codec_state_file(dir, static_cast<int>(rank));
    std::ofstream out(file, std::ios::binary);
    out << states[rank];
    if (!out) throw UserError(fmt::format("{}: cannot write", file));
  }
}

void load_codec_state(const std::string& dir, Codec& codec, int64_t num_params, int rank,
                      int world_size, const torch::Device& device) {
  const std::string first = codec_state_file(dir, 0);
  if (!std::filesystem::exists(first)) {
    log::info("{}: no codec state (written without dist.compression); \"{}\" starts fresh", dir,
              codec.kind());
    return;
  }
  torch::serialize::InputArchive archive;
  read_archive(first, device, archive);
  c10::IValue kind, writers;
  archive.read("kind", kind);
  archive.read("world_size", writers);
  if (kind.toStringRef() != codec.kind()) {
    log::info("{}: codec state of \"{}\", not \"{}\": the codec starts fresh", first,
              kind.toStringRef(), codec.kind());
    return;
  }
  CodecState state;
  state.shared = read_by_param(archive, kShared, num_params);
  state.slots.resize(codec.slots().size());
  if (writers.toInt() == world_size) {
    torch::serialize::InputArchive own;
    if (rank != 0) read_archive(codec_state_file(dir, rank), device, own);
    for (size_t slot = 0; slot < state.slots.size(); ++slot) {
      state.slots[slot] = read_by_param(rank == 0 ? archive : own, codec.slots()[slot], num_params);
    }
  } else if (rank == 0 && !state.slots.empty()) {
    log::warn("{}: codec state of {} ranks, resumed on {}: the error-feedback residuals restart "
              "from zero",
              dir, writers.toInt(), world_size);
  }
  codec.set_state(std::move(state));
}

}  // namespace dtrain::dist::compression
