#!/usr/bin/env bash
# mpirun with what dtrain's CPU jobs need everywhere: allowed as root (CI and containers run as
# root), shared-memory transport without cross-memory attach (often barred in containers), and,
# on one machine, more ranks than cores when asked for (Open MPI otherwise refuses with a
# page-long slot message). With a hostfile, --host or inside a Slurm allocation, the slots come
# from there and nothing is added.
#   usage: scripts/mpirun.sh -np N COMMAND...
# Stopping (Open MPI 4.1): mpirun answers SIGINT and SIGTERM by killing the ranks (SIGCONT, then
# SIGTERM 1 s later, SIGKILL 1 s after that: odls_base_sigkill_timeout), too soon for a
# checkpoint, but it forwards SIGUSR1 to every rank at once. So mpirun runs here in a session of
# its own (a terminal's Ctrl-C reaches this script only), and a SIGINT, SIGTERM or SIGUSR1 sent
# to this script reaches the ranks as SIGUSR1: the trainer checkpoints and stops, and this
# script exits 130, 143 or 138 as for the signal it got (SIGHUP likewise, 129). Not every
# mpirun passes SIGUSR1 on (Open MPI 4.1.6 in a GPU machine's container dropped it, with no
# word), so this script also sends it to the ranks mpirun started on this machine; one rank's
# signal stops them all, and the trainer takes a repeated SIGUSR1 as one (mpirun is sent it too
# only when some ranks run elsewhere). The signal this script got is written into
# $DTRAIN_STOP_SIGNAL_FILE, so that the trainer reports it and exits as for it; the trainer's
# resume line names this script ($DTRAIN_LAUNCHER). After the first signal a SIGUSR1 changes
# nothing, and a SIGINT, SIGTERM or SIGHUP (as SIGTERM) goes to the local ranks as it is: the
# trainer then ends the job at once, not waiting for the stop's checkpoint, with one line naming
# the newest checkpoint and exit code 130 or 143 (mpirun itself is never sent SIGTERM: it kills
# the ranks and, while finishing, may crash on it). mpirun stays this script's child, so a
# killer of process trees ends it.
if [ "$(id -u)" = 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}

ranks="" placed="" extra=() recovery=${OMPI_MCA_orte_enable_recovery:-}
args=("$@")
for ((i = 0; i < ${#args[@]}; ++i)); do
  case "${args[i]}" in
    --enable-recovery) recovery=1 ;;
    -np | -n | --np | -c) ranks=${args[i + 1]:-} ;;
    --oversubscribe | --hostfile | -hostfile | --machinefile | -machinefile | --host | -host | -H | \
      --default-hostfile) placed=1 ;;
  esac
done
[ -n "${SLURM_JOB_ID:-}" ] && placed=1
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)  # nproc alone obeys OMP_NUM_THREADS
if [ -z "$placed" ] && [[ "$ranks" =~ ^[0-9]+$ ]] && [ "$ranks" -gt "$cores" ]; then
  echo "mpirun.sh: $ranks ranks on $cores cores: oversubscribing (ranks share cores)" >&2
  extra=(--oversubscribe)
fi
# With --enable-recovery (dist.ps.tolerate_worker_loss), mpirun exits 0 whatever its ranks'
# codes: a rank that fails writes its code into $DTRAIN_EXIT_CODES, and this script exits with
# the largest.
if [ -n "$recovery" ] && [ "$recovery" != 0 ] && [ "$recovery" != false ]; then
  export DTRAIN_EXIT_CODES
  DTRAIN_EXIT_CODES=$(mktemp -d)
  extra+=(-x DTRAIN_EXIT_CODES)
fi
# This command line, a word a line, for the trainer's resume line (trainer/signals.h).
export DTRAIN_LAUNCHER=$0 DTRAIN_STOP_SIGNAL_FILE DTRAIN_LAUNCH_ARGS
DTRAIN_LAUNCH_ARGS=$(printf '%s\n' "$0" "$@")
DTRAIN_STOP_SIGNAL_FILE=$(mktemp)
extra+=(-x DTRAIN_LAUNCHER -x DTRAIN_STOP_SIGNAL_FILE -x DTRAIN_LAUNCH_ARGS)
setsid mpirun "${extra[@]}" "$@" &
pid=$!
# The ranks on this machine: mpirun's children whose environment names their rank (not an ssh
# to another node's daemon, which SIGUSR1 would end).
local_ranks() {
  local dir key value
  for dir in /proc/[0-9]*; do
    value=
    while read -r key value; do [ "$key" = PPid: ] && break; done 2>/dev/null <"$dir/status"
    [ "$value" = "$pid" ] || continue
    tr '\0' '\n' 2>/dev/null <"$dir/environ" | grep -q '^OMPI_COMM_WORLD_RANK=' &&
      echo "${dir#/proc/}"
  done
}
# Whether process $1 has a handler for SIGUSR1 (bit 9 of its caught-signal mask). Without one
# the signal ends it: mpirun under ess_base_forward_signals = none, or a rank whose start-up
# has not yet reached the trainer's handlers.
catches_usr1() {
  local key mask
  while read -r key mask; do [ "$key" = SigCgt: ] && break; done 2>/dev/null <"/proc/$1/status"
  [ -n "$mask" ] && (((0x$mask >> 9) & 1))
}
# The local ranks once each has its handler (or has ended), waiting up to 30 s for them to
# start and install it: a signal in the first seconds of a job stops it as one later would.
ready_local_ranks() {
  local here rank tries=0
  here=$(local_ranks)
  while [ -z "$here" ] && kill -0 "$pid" 2>/dev/null && [ $tries -lt 300 ]; do
    sleep 0.1; tries=$((tries + 1)); here=$(local_ranks)
  done
  for rank in $here; do
    while ! catches_usr1 "$rank" && kill -0 "$rank" 2>/dev/null && [ $tries -lt 300 ]; do
      sleep 0.1; tries=$((tries + 1))
    done
  done
  echo $here
}
received= forced= elsewhere=
forward() {  # SIGNAL_NUMBER
  if [ -z "$received" ]; then
    received=$1
    echo "$1" >"$DTRAIN_STOP_SIGNAL_FILE"
    local here
    here=$(ready_local_ranks)
    # mpirun forwards it to every rank, and says so on the terminal: only for ranks elsewhere.
    if ! [[ "$ranks" =~ ^[0-9]+$ ]] || [ "$(echo $here | wc -w)" -lt "$ranks" ]; then
      elsewhere=1
      catches_usr1 "$pid" && kill -USR1 "$pid" 2>/dev/null
    fi
    [ -n "$here" ] && kill -USR1 $here 2>/dev/null
  elif [ "$1" != 10 ] && [ -z "$forced" ]; then
    forced=1
    end_at_once "$([ "$1" = 2 ] && echo INT || echo TERM)"
  fi
}
# SIGINT or SIGTERM to the ranks on this machine, which end the job at once (one rank's end
# ends them all). Only where none runs here is mpirun sent SIGTERM, to kill the ranks elsewhere;
# none left here and none elsewhere: the job is ending already.
end_at_once() {  # SIGNAL_NAME
  local here
  here=$(local_ranks)
  if [ -n "$here" ]; then
    kill -"$1" $here 2>/dev/null
  elif [ -n "$elsewhere" ]; then
    kill -TERM "$pid" 2>/dev/null
  fi
}
trap 'forward 1' HUP  # the terminal went away: mpirun, in its own session, would not know
trap 'forward 2' INT
trap 'forward 15' TERM
trap 'forward 10' USR1
# wait returns early (above 128) when a trapped signal arrives, with mpirun still running; if
# mpirun ended meanwhile, a second wait returns the status bash holds for it (127: none held).
while :; do
  wait "$pid"
  code=$?
  kill -0 "$pid" 2>/dev/null && continue
  wait "$pid" 2>/dev/null
  held=$?
  [ "$held" -ne 127 ] && code=$held
  break
done
if [ -n "${DTRAIN_EXIT_CODES:-}" ]; then
  for file in "$DTRAIN_EXIT_CODES"/rank*; do
    [ -f "$file" ] && [ "$(cat "$file")" -gt "$code" ] && code=$(cat "$file")
  done
  rm -rf "$DTRAIN_EXIT_CODES"
fi
rm -f "$DTRAIN_STOP_SIGNAL_FILE"
# 138: the ranks stopped on the SIGUSR1 this script sent for another signal (ranks elsewhere
# cannot read the file that names it).
if [ -n "$received" ] && [ "$code" -eq 138 ]; then
  exit $((128 + received))
fi
exit "$code"
