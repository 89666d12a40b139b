#!/usr/bin/env bash
# What each strategy costs: the same job under every strategy and rank count, one table.
#   usage: scripts/sweep_strategies.sh BUILD_DIR OUT_DIR [options] [--set key=value ...]
#     --ranks "1 2 4"              rank counts (default "1 2")
#     --strategies "single ddp zero" (default; `single` runs at 1 rank only). A parameter
#                                  server variant is ps[:OPTION+OPTION...], OPTION one of bsp,
#                                  sspK (staleness K), async, dedicatedS (S server ranks beside
#                                  the workers), messages, collectives or p2p (the transport),
#                                  newest, exact or partial (dist.ps.ssp_reads), predict
#                                  (dist.ps.predict_weights), shared or communicator
#                                  (dist.ps.p2p_links), ctasN (dist.ps.link_ctas),
#                                  previewsN (dist.ps.previews), waitP (dist.ps.partial_wait
#                                  = P / 100: wait15 waits up to 15% of the last step),
#                                  syncN (dist.ps.sync_steps: the first N steps read as bsp),
#                                  fillmean or fillzero (dist.ps.preview_fill):
#                                  "ps ps:ssp2 ps:async ps:bsp+dedicated1 ps:bsp+messages";
#                                  a ZeRO stage is zero:stageN ("zero:stage2"); DDP's
#                                  gradients in a dtype of dist.ddp.reduce_dtype: ddp:param
#                                  (fp32, as ZeRO and ps reduce) or ddp:bf16
#     --steps N                    steps per run (default 200)
#     --repeat N                   runs per point, to show the spread (default 3)
#     --config FILE                the job (default configs/fashion_mnist.toml)
#   OUT_DIR, --config and a --set data.path, where relative, are from the current directory.
#   Further --set options go to every run (e.g. --set run.device=cuda); --help prints this.
# Each rank keeps the config's per-rank batch, so N ranks train on N times the global batch;
# "ranks" counts workers (dedicated servers are started beside them).
# Writes OUT_DIR/sweep.csv (one row per run: step time, images per second, communication,
# bytes sent, parameters, gradients and optimizer state held by rank 0 and its peak device
# memory; for ps the wait for parameters and the staleness, over p2p the server's delivery
# time and the pushes a read lacked: ps/delivery_ms, ps/shares_missing) and prints a markdown
# table of each point's median with the runs' range; scripts/plot_sweep.py draws it.
# Figures: averages over the logged intervals after the first (start-up and first-step
# allocation excluded); "vs single" is the median step time over `single`'s at 1 rank.
# Exits 2 on a bad argument, strategy or --set, said before anything starts; 1 when a run
# failed: the other runs still go, and each failure is named with the trainer's own words.
set -euo pipefail
# The usage lines of the comment above.
usage() { sed -n '/^#   usage:/,/^#   Further --set/s/^#   //p' "$0"; }
# One line naming the problem, and exit 2: nothing has been started.
die() { echo "sweep_strategies.sh: $*" >&2; exit 2; }
case ${1:-} in -h | --help) usage; exit 0 ;; esac
(($# >= 2)) && [[ $1 != -* && $2 != -* ]] || { usage >&2; exit 2; }  # BUILD_DIR or OUT_DIR left out
[ -x "$1/trainer" ] || die "$1/trainer: no trainer there (BUILD_DIR is the build directory)"
# Relative paths given are the caller's, made absolute here: the runs start from the repo root
# (the default config and scripts/mpirun.sh are found there).
absolute() { if [[ $1 == /* ]]; then echo "$1"; else echo "$PWD/$1"; fi; }
build_arg=$1 out_arg=$(absolute "$2")
shift 2
ranks="1 2" strategies="single ddp zero" steps=200 repeat=3 config=configs/fashion_mnist.toml
sets=()
while (($#)); do
  case $1 in
    --ranks | --strategies | --steps | --repeat | --config | --set)
      (($# >= 2)) || { echo "sweep_strategies.sh: $1 needs a value" >&2; usage >&2; exit 2; } ;;
    *) echo "sweep_strategies.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
  case $1 in
    --ranks) ranks=$2 ;;
    --strategies) strategies=$2 ;;
    --steps) steps=$2 ;;
    --repeat) repeat=$2 ;;
    --config) config=$(absolute "$2") ;;
    # data.path, bare or quoted ("dir", 'dir'), is the one path a --set can give.
    --set)
      if [[ $2 =~ ^data\.path=([\"\']?)([^/\"\'].*)$ ]]; then
        sets+=(--set "data.path=${BASH_REMATCH[1]}$(absolute "${BASH_REMATCH[2]}")")
      else
        sets+=(--set "$2")
      fi ;;
  esac
  shift 2
done
# $2 as a whole number of at least $3, or exit naming option $1 and $4, why that least.
whole() {
  [[ $2 =~ ^[0-9]+$ ]] && ((10#$2 >= $3)) ||
    die "$1 \"$2\": give a whole number of at least $3${4:+ ($4)}"
}
# train.max_steps=0 means every epoch, and the figures leave out the first logged interval.
whole --steps "$steps" 2 "the figures average the logged intervals after the first"
whole --repeat "$repeat" 1
[ -n "${ranks// /}" ] || die "--ranks is empty"
given=$ranks ranks=""
for n in $given; do whole --ranks "$n" 1; ranks+="${ranks:+ }$((10#$n))"; done  # 08 is not octal
steps=$((10#$steps)) repeat=$((10#$repeat))

forms='single, ddp, ddp:param, ddp:bf16, zero, zero:stageN or ps[:OPTION+OPTION...]'
forms+=' (--help lists the options)'
# The --set options of strategy spec $1 (see --strategies) into $variant, and in $servers the
# ranks it adds beside the workers; an option of another strategy is refused, as the trainer
# would only warn that it has no effect.
strategy_sets() {
  local base=${1%%:*}
  [[ $1 =~ ^[a-z]+(:[a-z0-9]+(\+[a-z0-9]+)*)?$ ]] && [[ $base =~ ^(single|ddp|zero|ps)$ ]] ||
    die "unknown strategy \"$1\": give $forms"
  variant=(--set dist.strategy="$base")
  servers=0
  [[ $1 == *:* ]] || return 0
  local option
  for option in $(tr '+' ' ' <<<"${1#*:}"); do
    # A number ends an option, so the patterns below as ssp[0-9]* take ssp12, not ssp1x.
    [[ $option =~ ^[a-z]+[0-9]*$ ]] || die "unknown option \"$option\" in \"$1\": give $forms"
    case $base:$option in
      ps:bsp | ps:async) variant+=(--set dist.ps.consistency="$option") ;;
      ps:messages | ps:collectives | ps:p2p) variant+=(--set dist.ps.transport="$option") ;;
      ps:newest | ps:exact | ps:partial) variant+=(--set dist.ps.ssp_reads="$option") ;;
      ps:predict) variant+=(--set dist.ps.predict_weights=true) ;;
      ps:shared | ps:communicator) variant+=(--set dist.ps.p2p_links="$option") ;;
      ps:ctas[0-9]*) variant+=(--set dist.ps.link_ctas="${option#ctas}") ;;
      ps:previews[0-9]*) variant+=(--set dist.ps.previews="${option#previews}") ;;
      ps:wait[0-9]*) variant+=(--set dist.ps.partial_wait="$(awk "BEGIN { print ${option#wait} / 100 }")") ;;
      ps:sync[0-9]*) variant+=(--set dist.ps.sync_steps="${option#sync}") ;;
      ps:fillmean | ps:fillzero) variant+=(--set dist.ps.preview_fill="${option#fill}") ;;
      ps:ssp[0-9]*) variant+=(--set dist.ps.consistency=ssp --set dist.ps.staleness="${option#ssp}") ;;
      zero:stage[0-9]*) variant+=(--set dist.zero.stage="${option#stage}") ;;
      ddp:param | ddp:bf16) variant+=(--set dist.ddp.reduce_dtype="$option") ;;
      ps:dedicated[0-9]*)
        servers=${option#dedicated}
        variant+=(--set dist.ps.placement=dedicated --set dist.ps.servers="$servers") ;;
      *) die "unknown option \"$option\" in \"$1\": give $forms" ;;
    esac
  done
}
# Every spec checked, and something left to run, before anything starts.
[ -n "${strategies// /}" ] || die "--strategies is empty"
runs=0
for strategy in $strategies; do
  strategy_sets "$strategy"
  for n in $ranks; do [ "$strategy" = single ] && [ "$n" -ne 1 ] || runs=$((runs + repeat)); done
done
((runs > 0)) || die "nothing to run: \`single\` runs at 1 rank only, and --ranks is \"$ranks\""

build=$(cd "$build_arg" && pwd)
cd "$(dirname "$0")/.."
[ -f "$config" ] || die "--config $config: no such file"
log_every=$((steps / 5 > 0 ? steps / 5 : 1))
# The job as the runs of each strategy get it, loaded once (no ranks, a second or two): a bad
# --set, config or variant (zero:stage9) is said in the trainer's words before anything
# launches, not once per run.
for strategy in $strategies; do
  strategy_sets "$strategy"
  if ! checked=$("$build/trainer" --print-config --config "$config" "${variant[@]}" \
    --set train.max_steps="$steps" --set run.log_every="$log_every" "${sets[@]}" 2>&1 >/dev/null)
  then
    echo "$checked" >&2
    die "the job under $strategy does not load (above: the trainer's words); nothing was run"
  fi
done
mkdir -p "$out_arg"
out=$(cd "$out_arg" && pwd)

echo "ranks,strategy,repeat,step_ms,img_per_s,comm_ms,exposed_ms,comm_mb,optimizer_state_mb,loss,ps_wait_ms,ps_staleness,parameters_mb,gradients_mb,device_peak_mb,ps_delivery_ms,ps_shares_missing" \
  >"$out/sweep.csv"
# What the trainer said on failing, from log $1: its error lines, else its last lines, leaving
# out mpirun's banners (between lines of dashes) and mpirun.sh's notes; mpirun's own last lines
# where the trainer said nothing (killed by a signal, say).
trainer_said() {
  local own errors
  own=$(awk '/^----------+$/ { banner = !banner; next }
             !banner && NF && !/^mpirun\.sh: / && !seen[$0]++' "$1")
  errors=$(grep -E '^(\[rank [0-9]+\] )?error: ' <<<"$own" | head -3 || true)
  if [ -n "$errors" ]; then echo "$errors"
  elif [ -n "$own" ]; then tail -3 <<<"$own"
  else grep . "$1" | tail -4 || true
  fi
}
failed=() skipped=0
for n in $ranks; do
  for strategy in $strategies; do
    [ "$strategy" = single ] && [ "$n" -ne 1 ] && continue
    strategy_sets "$strategy"
    for r in $(seq 1 "$repeat"); do
      name="np${n}_${strategy//[:+]/_}_r$r"
      rm -rf "${out:?}/$name"  # a rerun into OUT_DIR replaces this sweep's own earlier run
      code=0
      scripts/mpirun.sh -np $((n + servers)) --oversubscribe --bind-to none "$build/trainer" \
        --config "$config" --set run.out_dir="$out" --set run.name="$name" \
        "${variant[@]}" --set train.max_steps="$steps" --set run.log_every="$log_every" \
        "${sets[@]}" >"$out/$name.log" 2>&1 || code=$?
      case $code in
        0) ;;
        # mpirun.sh's codes for a stop asked by a signal (Ctrl-C): the sweep stops too, where
        # it would otherwise go on to the next run.
        129 | 130 | 138 | 143)
          echo "sweep_strategies.sh: stopped by a signal during $name (log: $out/$name.log)" >&2
          exit "$code" ;;
        *)
          said=$(trainer_said "$out/$name.log")
          echo "$name failed (exit $code, log: $out/$name.log):" >&2
          sed 's/^/  /' <<<"$said" >&2
          failed+=("$name: $(head -1 <<<"$said")")
          # 2 is a config or usage error, the same on every repeat.
          if ((code == 2 && r < repeat)); then
            echo "  (its other repeats skipped: exit 2 is a config error, the same each time)" >&2
            skipped=$((skipped + repeat - r))
            break
          fi
          continue ;;
      esac
      if ! python3 - "$out/$name/metrics.jsonl" "$n" "$strategy" "$r" >>"$out/sweep.csv" <<'PY'
import json, sys
records = [json.loads(line) for line in open(sys.argv[1])]
steps = [r for r in records if r["kind"] == "step"][1:]
def peak_mb(records):
    peaks = [r["memory/device_peak_allocated_mb"] for r in records
             if "memory/device_peak_allocated_mb" in r]
    return f"{max(peaks):.0f}" if peaks else ""
def mean(key, digits, scale=1.0):
    values = [s[key] * scale for s in steps if key in s]
    return f"{sum(values) / len(values):.{digits}f}" if values else ""
print(",".join([sys.argv[2], sys.argv[3], sys.argv[4], mean("time/step_ms", 2),
                mean("throughput/img_per_s", 0), mean("comm/ms", 2), mean("comm/exposed_ms", 2),
                mean("comm/sent_bytes", 3, 1 / 2**20), mean("memory/optimizer_state_mb", 3),
                f"{steps[-1]['loss/train']:.4f}" if steps else "",
                mean("ps/wait_ms", 2), mean("ps/staleness", 2), mean("memory/parameters_mb", 3),
                mean("memory/gradients_mb", 3),
                peak_mb(records), mean("ps/delivery_ms", 2), mean("ps/shares_missing", 2)]))
PY
      then
        failed+=("$name: its $out/$name/metrics.jsonl could not be read (above)")
      fi
    done
  done
done

table=0
python3 - "$out/sweep.csv" <<'PY' || table=$?
import csv, statistics, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["step_ms"]]
if not rows:
    sys.exit("sweep_strategies.sh: no run completed: no table")
points = {}
for r in rows:
    points.setdefault((int(r["ranks"]), r["strategy"]), []).append(r)
def median(runs, key):
    values = [float(r[key]) for r in runs if r[key]]
    return statistics.median(values) if values else None
def spread(runs, key, digits):
    values = [float(r[key]) for r in runs if r[key]]
    return f"{min(values):.{digits}f}-{max(values):.{digits}f}" if len(values) > 1 else "-"
def text(value, digits):
    return "-" if value is None else f"{value:.{digits}f}"
base = median(points.get((1, "single"), []), "step_ms")
print("| ranks | strategy | runs | step ms | vs single | img/s | img/s range | comm ms "
      "| exposed ms | MiB sent | parameters / gradients / optimizer state MiB (rank 0) | "
      "device peak MiB | loss | ps wait ms | staleness | delivery ms | shares missing |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for (ranks, strategy), runs in sorted(points.items()):
    step = median(runs, "step_ms")
    ratio = f"{step / base:.2f}" if base and step else "-"
    print(f"| {ranks} | {strategy} | {len(runs)} | {text(step, 2)} | {ratio} | "
          f"{text(median(runs, 'img_per_s'), 0)} | {spread(runs, 'img_per_s', 0)} | "
          f"{text(median(runs, 'comm_ms'), 2)} | {text(median(runs, 'exposed_ms'), 2)} | "
          f"{text(median(runs, 'comm_mb'), 3)} | {runs[0]['parameters_mb'] or '-'} / "
          f"{runs[0]['gradients_mb'] or '-'} / {runs[0]['optimizer_state_mb']} | "
          f"{runs[0]['device_peak_mb'] or '-'} | "
          f"{runs[0]['loss']} | {text(median(runs, 'ps_wait_ms'), 2)} | "
          f"{text(median(runs, 'ps_staleness'), 2)} | {text(median(runs, 'ps_delivery_ms'), 2)} | "
          f"{text(median(runs, 'ps_shares_missing'), 2)} |")
PY
# The runs that failed, once more after the table, and an exit that says so.
if ((${#failed[@]})); then
  also=""
  ((skipped)) && also=" and $skipped skipped"
  echo "sweep_strategies.sh: of $runs run(s), ${#failed[@]} failed$also (logs in $out):" >&2
  printf '  %s\n' "${failed[@]}" >&2
  exit 1
fi
exit "$table"
