#!/usr/bin/env python3
"""Writes Fashion-MNIST's IDX files as an image folder, the layout data.dataset =
"image_folder" reads, so that the folder pipeline can be checked against the IDX reader on the
same images:

    scripts/fashion_mnist_to_folder.py OUT [--source /usr/share/datasets/fashion-mnist]

OUT/train/ holds the 60,000 images of train-*, OUT/val/ the 10,000 of t10k-*, each in
OUT/<split>/<label>_<name>/<index>.png: 28x28 grayscale PNG (lossless, so the pixels are the
IDX bytes), <index> the image's position in its IDX file. The folders sort in label order
("0_t-shirt" ... "9_ankle-boot"), and the folder reader numbers classes by sorted folder name,
so the labels are the IDX labels. Reads gzipped or plain IDX files (Debian's
dataset-fashion-mnist installs them gzipped). Needs Pillow (Debian: python3-pil).
"""
import argparse
import gzip
import os
import struct
import sys
import zlib

try:
    from PIL import Image
except ImportError:
    sys.exit(f"fashion_mnist_to_folder.py needs Pillow, which {sys.executable} lacks: "
             "apt-get install python3-pil, then run it with /usr/bin/python3")

CLASSES = ["t-shirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker",
           "bag", "ankle-boot"]
SPLITS = [("train", "train"), ("val", "t10k")]  # (folder, IDX file prefix)
IMAGE_MAGIC, LABEL_MAGIC = 2051, 2049


def fail(message):
    """A mistake in the arguments or the input: one line, exit 2."""
    print(f"fashion_mnist_to_folder.py: {message}", file=sys.stderr)
    sys.exit(2)


def read_idx(source, name, magic):
    """(dimensions, payload) of IDX file `name` (or `name`.gz) under `source`."""
    path = os.path.join(source, name)
    if not os.path.isfile(path):
        path += ".gz"
    if not os.path.isfile(path):
        fail(f"{path}: not found (nor without .gz); install Debian's dataset-fashion-mnist "
             "or pass --source DIR")
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rb") as file:
            data = file.read()
    except (OSError, EOFError, zlib.error) as error:  # EOFError: a .gz cut short
        fail(f"{path}: cannot be read ({getattr(error, 'strerror', None) or error}); "
             "a damaged copy? install it again")
    count = magic - 2048  # the magic's low byte is the number of dimensions
    if len(data) < 4 + 4 * count or struct.unpack(">I", data[:4])[0] != magic:
        fail(f"{path}: not an IDX file of {count} dimension(s) (magic {magic})")
    dims = struct.unpack(f">{count}I", data[4:4 + 4 * count])
    payload = data[4 + 4 * count:]
    size = 1
    for d in dims:
        size *= d
    if len(payload) != size:
        fail(f"{path}: {len(payload)} bytes of data, {size} expected for {dims}")
    return dims, payload


def read_split(source, prefix):
    """((count, rows, cols), pixels, labels) of split `prefix`, every class in it."""
    dims, pixels = read_idx(source, f"{prefix}-images-idx3-ubyte", IMAGE_MAGIC)
    (label_count,), labels = read_idx(source, f"{prefix}-labels-idx1-ubyte", LABEL_MAGIC)
    if label_count != dims[0]:
        fail(f"{source}: {dims[0]} {prefix} images but {label_count} labels")
    if label_count and max(labels) >= len(CLASSES):
        fail(f"{source}: a {prefix} label is {max(labels)}; Fashion-MNIST's are 0 to 9")
    # The folder reader numbers classes by folder and refuses an empty one: a class missing
    # from a split would shift the labels of the classes after it, or stop the trainer.
    missing = [f"{label} ({CLASSES[label]})" for label in range(len(CLASSES))
               if label not in labels]
    if missing:
        fail(f"{source}: {prefix} has no images of class {', '.join(missing)}; the folder "
             "needs every class in train/ and in val/")
    return dims, pixels, labels


def write_split(out, folder, split):
    (count, rows, cols), pixels, labels = split
    dirs = [os.path.join(out, folder, f"{label}_{name}") for label, name in enumerate(CLASSES)]
    size = rows * cols
    try:
        for d in dirs:
            os.makedirs(d, exist_ok=True)
        for i in range(count):
            image = Image.frombytes("L", (cols, rows), pixels[i * size:(i + 1) * size])
            image.save(os.path.join(dirs[labels[i]], f"{i:05d}.png"))
    except OSError as error:  # read-only, a full disk
        fail(f"{error.filename or out}: {error.strerror or error}")
    print(f"{os.path.join(out, folder)}: {count} images of {cols}x{rows}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="folder to write train/ and val/ into")
    parser.add_argument("--source", default="/usr/share/datasets/fashion-mnist",
                        help="folder holding the IDX files (default: Debian's)")
    args = parser.parse_args()
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        fail(f"{args.out}: not a folder")
    # Both splits read and checked before anything is written.
    splits = [(folder, read_split(args.source, prefix)) for folder, prefix in SPLITS]
    for folder, split in splits:
        write_split(args.out, folder, split)


if __name__ == "__main__":
    main()
