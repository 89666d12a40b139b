#include "dist/agreement.h"

#include "common/error.h"
#include "dist/comm/gather.h"

#include <fmt/format.h>

#include <map>

namespace dtrain::dist {

namespace {

constexpr int kKeysShown = 3;

std::string join(const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& line : lines) text += line + '\n';
  return text;
}

// "key = value" -> {key: value}; a line without " = " is its own key.
std::map<std::string, std::string> by_key(const std::string& text) {
  std::map<std::string, std::string> entries;
  size_t begin = 0;
  for (size_t end = text.find('\n'); end != std::string::npos; end = text.find('\n', begin)) {
    const std::string line = text.substr(begin, end - begin);
    const size_t equals = line.find(" = ");
    if (equals == std::string::npos) {
      entries[line] = "(present)";
    } else {
      entries[line.substr(0, equals)] = line.substr(equals + 3);
    }
    begin = end + 1;
  }
  return entries;
}

// "train.epochs: 3 vs 5, ..." for the keys where `other` differs from `reference`.
std::string differences(const std::map<std::string, std::string>& reference,
                        const std::map<std::string, std::string>& other) {
  std::vector<std::string> found;
  auto note = [&](const std::string& key, const std::string& mine, const std::string& theirs) {
    found.push_back(fmt::format("{} = {} (rank 0: {})", key, mine, theirs));
  };
  for (const auto& [key, value] : other) {
    auto it = reference.find(key);
    if (it == reference.end()) {
      note(key, value, "absent");
    } else if (it->second != value) {
      note(key, value, it->second);
    }
  }
  for (const auto& [key, value] : reference) {
    if (other.count(key) == 0) note(key, "absent", value);
  }
  std::string text;
  for (size_t i = 0; i < found.size() && i < kKeysShown; ++i) text += (i ? ", " : "") + found[i];
  if (found.size() > kKeysShown) text += fmt::format(" and {} more", found.size() - kKeysShown);
  return text;
}

}  // namespace

void check_same_on_all_ranks(Communicator& comm, const std::string& what,
                             const std::vector<std::string>& lines) {
  const std::vector<std::string> texts = all_gather_bytes(comm, join(lines));
  const int size = comm.size();
  const std::string& reference_text = texts[0];
  const std::map<std::string, std::string> reference = by_key(reference_text);
  std::string message;
  for (int rank = 1; rank < size; ++rank) {
    const std::string& other = texts[static_cast<size_t>(rank)];
    if (other == reference_text) continue;
    message += fmt::format("{}rank {}: {}", message.empty() ? "" : "; ", rank,
                           differences(reference, by_key(other)));
  }
  if (!message.empty()) {
    throw UserError(fmt::format("ranks disagree on the {}: {}", what, message));
  }
}

}  // namespace dtrain::dist
