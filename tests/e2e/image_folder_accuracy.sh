#!/usr/bin/env bash
# The image-folder pipeline against the IDX reader on the same images: Fashion-MNIST written
# as a folder of 28x28 grey PNGs (scripts/fashion_mnist_to_folder.py) trains, in one epoch of
# the default job (DDP, 2 ranks, same seed and steps), to the IDX form's test accuracy within
# 0.5 points. The folder run keeps the images as they are (image_size 28, center_crop_fraction
# 1, no augmentation); what still differs is docs/PERFORMANCE.md's "Fashion-MNIST as an image
# folder". Skipped (77) without the dataset, Pillow or a JPEG/PNG decoder.   usage: ... TRAINER SOURCE_DIR
set -euo pipefail
. "$(dirname "$0")/lib/fashion_mnist.sh"
python=python3
[ -x /usr/bin/python3 ] && python=/usr/bin/python3  # Debian's, where python3-pil lives
"$python" -c "import PIL" 2>/dev/null || { echo "skipped: no Pillow (python3-pil)"; exit 77; }

# run NAME ARGS...: one epoch of the default job; prints its final test accuracy (messages go
# to stderr, as its output is captured).
run() {
  local name=$1
  shift
  "$source_dir/scripts/mpirun.sh" -np 2 --oversubscribe "$trainer" \
    --config "$source_dir/configs/fashion_mnist.toml" --set train.epochs=1 \
    --set run.out_dir="$work/runs" --set run.name="$name" "$@" >"$work/$name.log" 2>&1 ||
    { grep -q "this build has no JPEG/PNG decoder" "$work/$name.log" &&
        { echo "skipped: this build has no JPEG/PNG decoder" >&2; exit 77; }
      echo "FAIL: the $name run" >&2; tail "$work/$name.log" >&2; exit 1; }
  grep '"kind":"final"' "$work/runs/$name/metrics.jsonl" |
    sed 's/.*"accuracy\/test":\([0-9.]*\).*/\1/'
}

"$python" "$source_dir/scripts/fashion_mnist_to_folder.py" "$work/folder"
folder=$(run folder --set data.dataset=image_folder --set data.path="$work/folder" \
  --set data.image_size=28 --set data.center_crop_fraction=1 --set data.augment=false)
idx=$(run idx)
echo "test accuracy after one epoch: IDX $idx, image folder $folder"
awk -v a="$idx" -v b="$folder" 'BEGIN { d = a - b; exit !(d <= 0.005 && d >= -0.005) }' ||
  { echo "FAIL: more than 0.5 points apart"; exit 1; }
