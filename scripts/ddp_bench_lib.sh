# Shared by the data-parallel benchmarks (bench_ddp_scaling.sh, bench_sync_batchnorm.sh):
# launching one process per GPU and reading back dtrain's and PyTorch's throughput.
# Source it from the project root with $build (the build directory), $out (the output
# directory) and optionally $model set; it sources scripts/gpu_env.sh (NCCL_NVLS_ENABLE=0,
# mpirun as root).
. scripts/gpu_env.sh

# The benchmarked model: dtrain's config, and the same model in scripts/bench_torch_ddp.py.
case "${model:=resnet50}" in
  resnet50)
    config=configs/resnet50_synthetic.toml
    torch_args=(--batch 128 --warmup 20 --steps 100)
    ;;
  resnet18_cifar)
    config=configs/resnet18_cifar_synthetic.toml
    torch_args=(--batch 256 --warmup 50 --steps 300)
    ;;
  *) echo "unknown model '$model' (resnet50 or resnet18_cifar)" >&2; exit 2 ;;
esac

launch() {  # N COMMAND...: one process per GPU, NCCL's environment passed to every rank
  local n=$1
  shift
  mpirun -np "$n" --oversubscribe --bind-to none -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE \
    -x MASTER_PORT=$((29500 + n)) "$@"
}

# N NAME --set ... -> "img/s exposed_ms comm_ms busbw_gbps" from rank 0's metrics.jsonl of
# $config, averaged over the logged intervals after the first ("-" where a field is absent).
dtrain_run() {
  local n=$1 name=$2
  shift 2
  rm -rf "${out:?}/$name"  # a rerun into the same $out replaces the benchmark's earlier run
  launch "$n" "$build/trainer" --config "$config" \
    --set run.out_dir="$out" --set run.name="$name" "$@" >"$out/$name.log" 2>&1 \
    || { tail -30 "$out/$name.log" >&2; return 1; }
  # The first interval holds cuDNN's algorithm search and NCCL's connection set-up.
  python3 - "$out/$name/metrics.jsonl" <<'PY'
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"kind":"step"' in l][1:]
def mean(key, digits):
    values = [s[key] for s in steps if key in s]
    return f"{sum(values) / len(values):.{digits}f}" if values else "-"
print(mean("throughput/img_per_s", 0), mean("comm/exposed_ms", 1), mean("comm/ms", 1),
      mean("comm/busbw_gbps", 1))
PY
}

torch_run() {  # N NAME [bench_torch_ddp.py options] -> img/s
  local n=$1 log="$out/$2.log"
  shift 2
  launch "$n" python3 scripts/bench_torch_ddp.py --model "$model" "${torch_args[@]}" "$@" \
    >"$log" 2>&1 || { tail -30 "$log" >&2; return 1; }
  sed -n 's/.*img\/s: \([0-9.]*\).*/\1/p' "$log"
}

ratio() {  # A B -> A / B, "-" where either is missing
  awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b <= 0) print "-"; else printf "%.3f", a / b }'
}
