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
#   Further --set options go to every run (e.g. --set run.device=cuda).
# Each rank keeps the config's per-rank batch, so N ranks train on N times the global batch;
# "ranks" counts workers (dedicated servers are started beside them).
# Writes OUT_DIR/sweep.csv (one row per run: step time, images per second, communication,
# bytes sent, parameters, gradients and optimizer state held by rank 0 and its peak device
# memory; for ps the wait for parameters and the staleness, over p2p the server's delivery
# time and the pushes a read lacked: ps/delivery_ms, ps/shares_missing) and prints a markdown
# table of each point's median with the runs' range; scripts/plot_sweep.py draws it.
# Figures: averages over the logged intervals after the first (start-up and first-step
# allocation excluded); "vs single" is the median step time over `single`'s at 1 rank.
set -euo pipefail
build=$(cd "$1" && pwd)
mkdir -p "$2"
out=$(cd "$2" && pwd)
shift 2
ranks="1 2" strategies="single ddp zero" steps=200 repeat=3 config=configs/fashion_mnist.toml
sets=()
while (($#)); do
  case $1 in
    --ranks) ranks=$2; shift 2 ;;
    --strategies) strategies=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --config) config=$2; shift 2 ;;
    --set) sets+=(--set "$2"); shift 2 ;;
    *) echo "sweep_strategies.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
cd "$(dirname "$0")/.."

echo "ranks,strategy,repeat,step_ms,img_per_s,comm_ms,exposed_ms,comm_mb,optimizer_state_mb,loss,ps_wait_ms,ps_staleness,parameters_mb,gradients_mb,device_peak_mb,ps_delivery_ms,ps_shares_missing" \
  >"$out/sweep.csv"
# The --set options of strategy spec $1 (see --strategies) into $variant, and in $servers the
# ranks it adds beside the workers.
strategy_sets() {
  variant=(--set dist.strategy="${1%%:*}")
  servers=0
  [[ $1 == *:* ]] || return 0
  local option
  for option in $(tr '+' ' ' <<<"${1#*:}"); do
    case $option in
      bsp | async) variant+=(--set dist.ps.consistency="$option") ;;
      messages | collectives | p2p) variant+=(--set dist.ps.transport="$option") ;;
      newest | exact | partial) variant+=(--set dist.ps.ssp_reads="$option") ;;
      predict) variant+=(--set dist.ps.predict_weights=true) ;;
      shared | communicator) variant+=(--set dist.ps.p2p_links="$option") ;;
      ctas[0-9]*) variant+=(--set dist.ps.link_ctas="${option#ctas}") ;;
      previews[0-9]*) variant+=(--set dist.ps.previews="${option#previews}") ;;
      wait[0-9]*) variant+=(--set dist.ps.partial_wait="$(awk "BEGIN { print ${option#wait} / 100 }")") ;;
      sync[0-9]*) variant+=(--set dist.ps.sync_steps="${option#sync}") ;;
      fillmean | fillzero) variant+=(--set dist.ps.preview_fill="${option#fill}") ;;
      ssp[0-9]*) variant+=(--set dist.ps.consistency=ssp --set dist.ps.staleness="${option#ssp}") ;;
      stage[0-9]*) variant+=(--set dist.zero.stage="${option#stage}") ;;
      param | bf16) variant+=(--set dist.ddp.reduce_dtype="$option") ;;
      dedicated[0-9]*)
        servers=${option#dedicated}
        variant+=(--set dist.ps.placement=dedicated --set dist.ps.servers="$servers") ;;
      *) echo "sweep_strategies.sh: unknown option \"$option\" in \"$1\"" >&2; exit 2 ;;
    esac
  done
}

for n in $ranks; do
  for strategy in $strategies; do
    [ "$strategy" = single ] && [ "$n" -ne 1 ] && continue
    strategy_sets "$strategy"
    for r in $(seq 1 "$repeat"); do
      name="np${n}_${strategy//[:+]/_}_r$r"
      rm -rf "${out:?}/$name"  # a rerun into OUT_DIR replaces this sweep's own earlier run
      if ! scripts/mpirun.sh -np $((n + servers)) --oversubscribe --bind-to none "$build/trainer" \
        --config "$config" --set run.out_dir="$out" --set run.name="$name" \
        "${variant[@]}" --set train.max_steps="$steps" \
        --set run.log_every=$((steps / 5 > 0 ? steps / 5 : 1)) "${sets[@]}" \
        >"$out/$name.log" 2>&1; then
        echo "$name failed:" >&2
        tail -5 "$out/$name.log" >&2
        continue
      fi
      python3 - "$out/$name/metrics.jsonl" "$n" "$strategy" "$r" >>"$out/sweep.csv" <<'PY'
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
    done
  done
done

python3 - "$out/sweep.csv" <<'PY'
import csv, statistics, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["step_ms"]]
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
