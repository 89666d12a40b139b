// Bytes in a mebibyte, for the MB figures of logs, metrics and plans (2^20, as torch's and
// nvidia-smi's "MB").
#pragma once

namespace dtrain {

inline constexpr double kMiB = 1024.0 * 1024.0;

}  // namespace dtrain
