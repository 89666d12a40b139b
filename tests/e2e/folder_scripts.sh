#!/usr/bin/env bash
# scripts/fashion_mnist_to_folder.py and scripts/make_image_folder.py on mistaken inputs and
# outputs: one line, exit 2, no traceback, nothing written. The first on a small source cut
# from Fashion-MNIST (a damaged .gz, a split lacking a class, OUT a file); the second on its
# arguments, OUT a file, a non-empty OUT (old images would stay among the new) and, where the
# user is not root, a read-only OUT. Under Debian's python3, where python3-pil and
# python3-numpy live; skipped (77) without them.   usage: folder_scripts.sh TRAINER SOURCE_DIR
set -uo pipefail
. "$(dirname "$0")/lib/fashion_mnist.sh"
python=python3
[ -x /usr/bin/python3 ] && python=/usr/bin/python3
"$python" -c "import numpy, PIL" 2>/dev/null ||
  { echo "skipped: $python lacks python3-numpy or python3-pil"; exit 77; }

# small/: 40 train and 40 val images; no_dress/: val without class 3 (dress).
"$python" - "$data" "$work" <<'PY'
import gzip, os, struct, sys
data, work = sys.argv[1:]
def idx(prefix, keep):
    images = gzip.open(os.path.join(data, f"{prefix}-images-idx3-ubyte.gz")).read()
    labels = gzip.open(os.path.join(data, f"{prefix}-labels-idx1-ubyte.gz")).read()[8:]
    chosen = [i for i in range(200) if keep(labels[i])][:40]
    pixels = b"".join(images[16 + 784 * i:16 + 784 * (i + 1)] for i in chosen)
    return (struct.pack(">IIII", 2051, len(chosen), 28, 28) + pixels,
            struct.pack(">II", 2049, len(chosen)) + bytes(labels[i] for i in chosen))
for name, val_keep in (("small", lambda label: True), ("no_dress", lambda label: label != 3)):
    os.makedirs(os.path.join(work, name))
    for prefix, keep in (("train", lambda label: True), ("t10k", val_keep)):
        for kind, payload in zip(("images-idx3", "labels-idx1"), idx(prefix, keep)):
            with gzip.open(os.path.join(work, name, f"{prefix}-{kind}-ubyte.gz"), "wb") as out:
                out.write(payload)
PY
for damage in truncated corrupt; do
  cp -r "$work/small" "$work/$damage"
  gz=$work/$damage/t10k-images-idx3-ubyte.gz
  size=$(stat -c %s "$gz")
  if [ $damage = truncated ]; then
    truncate -s $((size / 2)) "$gz"
  else
    printf 'garbage!' | dd of="$gz" bs=1 seek=$((size / 2)) conv=notrunc status=none
  fi
done
touch "$work/file"

# SCRIPT EXPECTED ARGUMENT...: SCRIPT exits 2 with one line starting EXPECTED.
refused() {
  local script=$1 expected=$2 said
  shift 2
  said=$("$python" "$source_dir/scripts/$script" "$@" 2>&1)
  [ $? -eq 2 ] && [[ $said == "$script: $expected"* && $said != *$'\n'* ]] ||
    { echo "FAIL: $script $*: expected exit 2 and \"$expected\", got: $said"; exit 1; }
}
to_folder=fashion_mnist_to_folder.py
refused $to_folder "$work/truncated/t10k-images-idx3-ubyte.gz: cannot be read (Compressed \
file ended" "$work/out" --source "$work/truncated"
refused $to_folder "$work/corrupt/t10k-images-idx3-ubyte.gz: cannot be read (" "$work/out" \
  --source "$work/corrupt"
refused $to_folder "$work/no_dress: t10k has no images of class 3 (dress); the folder needs \
every class" "$work/out" --source "$work/no_dress"
refused $to_folder "$work/file: not a folder" "$work/file" --source "$work/small"
[ ! -e "$work/out" ] || { echo "FAIL: $to_folder wrote $work/out though it refused"; exit 1; }
said=$("$python" "$source_dir/scripts/$to_folder" "$work/out" --source "$work/small" 2>&1) &&
  [ "$(find "$work/out/val" -name '*.png' | wc -l)" -eq 40 ] ||
  { echo "FAIL: $to_folder on a good source: $said"; exit 1; }
echo "ok: $to_folder: damaged or incomplete sources and a file as OUT refused in one line"

make=make_image_folder.py
refused $make "--seed -1: give at least 0" "$work/images" --images 20 --classes 2 --seed -1
refused $make "--val-fraction nan: give a share in (0, 1)" "$work/images" --images 20 \
  --val-fraction nan
refused $make "$work/file: not a folder" "$work/file" --images 20 --classes 2 --val-fraction 0.5
refused $make "$work/file/sub: Not a directory" "$work/file/sub" --images 20 --classes 2 \
  --val-fraction 0.5
refused $make "$work/out: not empty; give a new or empty folder" "$work/out" --images 4 \
  --classes 2 --val-fraction 0.5
if [ "$(id -u)" -ne 0 ]; then  # root writes into a read-only folder all the same
  mkdir "$work/read_only" && chmod a-w "$work/read_only"
  refused $make "$work/read_only/train: Permission denied" "$work/read_only" --images 4 \
    --classes 2 --val-fraction 0.5
fi
said=$("$python" "$source_dir/scripts/$make" "$work/images" --images 4 --classes 2 \
  --val-fraction 0.5 --jobs 1 2>&1) && [ "$(find "$work/images" -name '*.JPEG' | wc -l)" -eq 4 ] ||
  { echo "FAIL: $make: $said"; exit 1; }
echo "ok: $make: bad arguments, a file or a non-empty folder as OUT refused in one line"

# A python3 without the packages (on PATH before Debian's, say): the packages to install.
for other in $(which -a python3); do
  "$other" -c "import numpy, PIL" 2>/dev/null && continue
  said=$("$other" "$source_dir/scripts/$make" "$work/hint" --images 4 2>&1)
  [ $? -ne 0 ] && [[ $said == *"apt-get install python3-numpy python3-pil"* ]] &&
    [[ $said != *$'\n'* ]] || { echo "FAIL: $make under $other: $said"; exit 1; }
  said=$("$other" "$source_dir/scripts/$to_folder" "$work/hint" 2>&1)
  [ $? -ne 0 ] && [[ $said == *"apt-get install python3-pil"* ]] && [[ $said != *$'\n'* ]] ||
    { echo "FAIL: $to_folder under $other: $said"; exit 1; }
  echo "ok: under $other, which lacks them: $said"
done
