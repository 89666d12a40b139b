// trainer: the command-line entry point. Parses flags, loads the config, runs training.
// Exit codes: 0 success, 2 bad input (config, flags, dataset files, a run directory that holds
// another run), 1 internal error, 128 + N stopped by signal N after a checkpoint (130 SIGINT,
// 143 SIGTERM, 138 SIGUSR1).
#include "common/error.h"
#include "common/host_memory.h"
#include "common/log.h"
#include "dist/comm/mpi_communicator.h"
#include "trainer/config.h"
#include "trainer/memory_plan.h"
#include "trainer/signals.h"
#include "trainer/train.h"
#include "trainer/version.h"

#include <CLI/CLI.hpp>
#include <c10/util/Exception.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

// This process's rank as its launcher set it (Open MPI, PMIx, PMI, Slurm): known before MPI
// starts, as errors in the config are found. 0 when started alone.
int launched_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    if (const char* value = std::getenv(name)) return std::atoi(value);
  }
  return 0;
}

// How many processes the launcher started; 1 when started alone. Slurm's count only under
// srun (which sets each task's SLURM_PROCID): an salloc shell has SLURM_NTASKS too.
int launched_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    if (const char* value = std::getenv(name)) return std::max(1, std::atoi(value));
  }
  const char* tasks = std::getenv("SLURM_NTASKS");
  return tasks && std::getenv("SLURM_PROCID") ? std::max(1, std::atoi(tasks)) : 1;
}

// Most bad input (a config, a dataset path) is the same on every rank: one report of it is
// enough. Rank 0 reports and ends the job at once; the others give it 3 seconds to do so, in
// which the abort stops them unheard. A rank whose error is its own (a file only it reads)
// reports 3 seconds later.
void let_rank_0_report_first(int rank) {
  if (rank > 0) std::this_thread::sleep_for(std::chrono::seconds(3));
}

// A command line that CLI11 refused, in its words.
class CommandLineError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

int run(int argc, char** argv) {
  CLI::App app{"dtrain: distributed training of image models"};
  std::string config_path;
  std::vector<std::string> overrides;
  bool print_config = false;
  bool print_markdown = false;
  bool print_version = false;
  dtrain::trainer::RunFlags flags;
  flags.command.assign(argv, argv + argc);
  std::string resume;
  std::string world_size;
  app.add_option("--config", config_path, "TOML config file")->check(CLI::ExistingFile);
  app.add_option("--set", overrides, "override a key: --set section.key=value (repeatable)");
  app.add_flag("--print-config", print_config,
               "print every key with its default and description, then exit; with --config "
               "or --set, the resolved config (file, then overrides) as the run would save it");
  app.add_flag("--print-config-markdown", print_markdown, "the same, as a markdown table");
  app.add_flag("--dry-run", flags.dry_run,
               "build the run and print its plan and its memory per rank; train nothing");
  auto* world_size_option = app.add_option(
      "--world-size", world_size,
      "with --dry-run: predict the memory per rank for this many ranks, without starting them");
  auto* json_option = app.add_option("--dry-run-json", flags.dry_run_json,
                                     "with --dry-run: also write the memory prediction here");
  auto* resume_option = app.add_option("--resume", resume,
                                       "continue the run (no value: from its newest checkpoint "
                                       "that loads), or from a checkpoint or run directory")
                            ->expected(0, 1);
  app.add_flag("--version", print_version,
               "print the versions of dtrain, LibTorch, CUDA, NCCL and MPI, then exit");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::ostringstream out, err;
    app.exit(e, out, err);
    std::string message = err.str();
    while (!message.empty() && message.back() == '\n') message.pop_back();
    throw CommandLineError(message);
  }
  if (print_config && (!config_path.empty() || !overrides.empty())) {
    std::vector<std::string> warnings;
    const auto config = dtrain::trainer::load_config(config_path, overrides, warnings);
    for (const std::string& warning : warnings) dtrain::log::warn("{}", warning);
    std::cout << dtrain::trainer::to_toml(config);
    return 0;
  }
  if (print_config || print_markdown) {
    std::cout << dtrain::trainer::describe_keys(print_markdown);
    return 0;
  }
  if (print_version) {
    std::cout << dtrain::trainer::version_report();
    return 0;
  }
  if (config_path.empty()) {
    throw CommandLineError("error: --config is required to train, e.g. trainer --config "
                           "configs/fashion_mnist.toml (--print-config lists every key)\n" +
                           app.help());
  }
  if (resume_option->count() > 0) flags.resume = resume;
  for (const CLI::Option* option : {world_size_option, json_option}) {
    if (option->count() > 0 && !flags.dry_run) {
      throw dtrain::UserError(fmt::format("{} is for a dry run, which trains nothing: add "
                                          "--dry-run (to train on N ranks, start mpirun -np N)",
                                          option->get_name()));
    }
  }
  if (world_size_option->count() > 0) {
    flags.world_size = dtrain::trainer::parse_world_size(world_size);
  }

  std::vector<std::string> warnings;
  const dtrain::trainer::Config config =
      dtrain::trainer::load_config(config_path, overrides, warnings);
  if (launched_rank() == 0) {  // every rank loads the same config: its warnings are said once
    for (const std::string& warning : warnings) dtrain::log::warn("{}", warning);
  }
  const dtrain::trainer::RunResult result = dtrain::trainer::run_training(config, flags);
  return dtrain::dist::end_world(
      result.stop_signal == 0 ? 0 : dtrain::trainer::stop_exit_code(result.stop_signal));
}

// The world to end on a failure: MPI's, started here if the launcher started several ranks
// and the failure came before MPI did (a config), so that one rank's report ends them all
// quietly (abort_world) instead of each rank's exit adding mpirun's banner. None when alone.
std::optional<dtrain::dist::WorldInfo> world_to_end() {
  if (const auto world = dtrain::dist::started_world()) return world;
  if (launched_size() == 1 || dtrain::dist::world_finalized()) return std::nullopt;
  return dtrain::dist::init_world();
}

// Reports this rank's failure (`report` is given the rank's "rank N: " prefix, empty when
// alone) and returns `exit_code`. With several ranks it ends them all at once instead: the
// others would wait in their next collective for dist.timeout_s, then blame this rank for not
// joining.
int fail(const std::function<void(const std::string&)>& report, int exit_code) {
  const std::optional<dtrain::dist::WorldInfo> world = world_to_end();
  if (!world || world->size == 1) {
    let_rank_0_report_first(launched_rank());  // MPI not started: the launcher's rank
    report("");
    return exit_code;
  }
  let_rank_0_report_first(world->rank);
  report(fmt::format("rank {}: ", world->rank));
  dtrain::dist::abort_world(exit_code);
}

// An error's one line, prefixed by the rank unless its message names it already (a check
// failure's does).
int fail(const std::string& message, int exit_code) {
  return fail([&message](const std::string& rank) {
    dtrain::log::error("{}{}", message.rfind(rank, 0) == 0 ? "" : rank, message);
  }, exit_code);
}

// The exit code of the run, every failure reported.
int run_reporting(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const CommandLineError& e) {  // CLI11's words, as it prints them alone
    return fail([&e](const std::string&) {
      const std::string text = e.what();  // the help after --config's line ends in a newline
      std::fprintf(stderr, "%s%s", text.c_str(), !text.empty() && text.back() == '\n' ? "" : "\n");
    }, 2);
  } catch (const dtrain::trainer::ConfigError& e) {  // every problem, a line each
    return fail([&e](const std::string&) {
      for (const std::string& problem : e.problems()) std::fprintf(stderr, "%s\n", problem.c_str());
    }, 2);
  } catch (const dtrain::trainer::FailedOnAnotherRank& e) {
    // The rank that failed reports and ends the job within seconds (fail()); should it not,
    // this rank ends it.
    std::this_thread::sleep_for(std::chrono::seconds(30));
    return fail(e.what(), 2);
  } catch (const dtrain::UserError& e) {
    return fail(e.what(), 2);
  } catch (const c10::Error& e) {  // torch's: the message, not the C++ frames it carries
    return fail(e.what_without_backtrace(), 1);
  } catch (const std::exception& e) {  // InternalError, std::bad_alloc
    return fail(e.what(), 1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  dtrain::keep_freed_host_memory();
  const int code = run_reporting(argc, argv);
  dtrain::dist::note_exit_code(code);
  return code;
}
