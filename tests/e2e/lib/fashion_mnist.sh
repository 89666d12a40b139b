# Sourced by the end-to-end scripts that train on Fashion-MNIST, with the script's own
# arguments: sets $trainer and $source_dir, skips (77) where Debian's dataset is absent, and
# makes $work, a scratch directory removed on exit.
trainer=$1
source_dir=$2
data=/usr/share/datasets/fashion-mnist
[ -d "$data" ] || { echo "skipped: no Fashion-MNIST at $data"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
