// Codec state in checkpoint directories: `codec_rank{R}.pt` holds rank R's state (its
// error-feedback residuals and the codec's shared state, e.g. PowerSGD's Q) by parameter, so it
// loads whatever the bucket plan. Rank 0 writes every rank's file from bytes gathered from
// each (serialize_codec_state on every rank, then all_gather_bytes). Loading, each rank reads
// its own file; a checkpoint written by another number of ranks or by another codec keeps
// what is meaningful and says so in the log:
//   - another codec, or none: the codec starts fresh;
//   - a codec's state resumed without dist.compression: it is not read;
//   - another world size: residuals restart from zero (each was one rank's unsent gradients
//     of a data split that no longer exists); the shared state (the same on every rank) is
//     read from codec_rank0.pt.
// A file that does not read is a UserError naming it.
#pragma once

#include "dist/compression/codec.h"

#include <optional>
#include <string>

namespace dtrain::dist::compression {

std::string codec_state_file(const std::string& dir, int rank);
// This rank's state as the bytes of a torch archive.
std::string serialize_codec_state(const Codec& codec, int world_size);
// The same for state held outside a Codec (the parameter server's pushes, dist/ps/push_codec.h):
// codec `kind`'s `state`, its slots named `slots`.
std::string serialize_codec_state(const std::string& kind, const std::vector<std::string>& slots,
                                  const CodecState& state, int world_size);
// Every rank's serialized state, by rank, on rank 0 (empty elsewhere). Blocking; collective.
std::vector<std::string> gather_codec_states(const Codec& codec, Communicator& comm);
// Writes rank R's bytes, by rank, into `dir`.
void write_codec_states(const std::string& dir, const std::vector<std::string>& states);
// Sets `codec`'s state (of `num_params` parameters) from `dir`, for `rank` of `world_size`.
void load_codec_state(const std::string& dir, Codec& codec, int64_t num_params, int rank,
                      int world_size, const torch::Device& device);
// Where a run without dist.compression resumes `dir`: rank 0 says which codec state in it
// goes unread, if any.
void skip_codec_state(const std::string& dir, int rank);
// The same for state held outside a Codec: the state to set, or nothing where codec `kind`
// starts fresh.
std::optional<CodecState> read_codec_state(const std::string& dir, const std::string& kind,
                                           const std::vector<std::string>& slots,
                                           int64_t num_params, int rank, int world_size,
                                           const torch::Device& device);

}  // namespace dtrain::dist::compression
