#!/usr/bin/env python3
"""Writes a synthetic ImageNet-shaped JPEG folder, the layout data.dataset = "image_folder"
reads, for benchmarking the image pipeline (decode, crop, resize) where ImageNet is absent:

    scripts/make_image_folder.py OUT --images N [--classes C] [--val-fraction F] [--seed S]
                                     [--jobs J]

OUT/train/<class>/<class>_<i>.JPEG and OUT/val/<class>/val_<i>.JPEG, classes n00000000,
n00000001, ... (sorted in label order, like ImageNet's WordNet ids). Image i belongs to class
i % C; the first round(N x F) images are val/, the rest train/. OUT must be new or empty:
images left there by other arguments (other classes) would be read as part of the folder.
Every file is a function of (seed, i) alone: the same arguments give the same bytes, whatever
--jobs. Each image costs about 20 ms of one core (300 images: 5.5 s of user time), so 100,000
images take some 35 core-minutes.

What the images imitate, and why (the decode and resize cost of a JPEG grows with its pixels
and its compressed bytes, so both are matched to ImageNet-1k's training set):
  - Sizes. ImageNet's photos average about 470x390 pixels, most of them Flickr downsizes whose
    longer side is 500: 500x375 and 375x500 (4:3) above all, then 3:2 (500x333) and squares.
    Here: 75% landscape, 20% portrait, 5% square; longer side 500 with probability 0.8, else
    log-normal around 500 (sigma 0.45, 100 to 2000 px: the small thumbnails and the large
    originals); longer:shorter 4:3 (55%), 3:2 (25%), else uniform in [1, 2].
  - Bytes. ImageNet's training JPEGs average about 110 KB (some 140 GB for 1.28M files).
    Here: quality 90 with 4:2:0 chroma (PIL's default, as most cameras and Flickr write), and
    per-pixel noise (NOISE_STD) chosen to give that mean. 300 images of seed 0 measured a mean
    of 474x393 pixels and 112 KB.
  - Content: not trivially compressible, and learnable. A smooth random field (noise at 1/64,
    1/16 and 1/4 of the image, bicubically enlarged) plus per-pixel noise, over a class
    signature: the class's mean colour and a sinusoidal grating of the class's orientation and
    frequency. A model can learn the classes; nothing here resembles real photos beyond that.
Needs NumPy and Pillow (Debian: python3-numpy, python3-pil).
"""
import argparse
import multiprocessing
import os
import sys
import time

try:
    import numpy as np
    from PIL import Image
except ImportError as error:
    # Both named: where one is missing, the other often is too.
    sys.exit(f"make_image_folder.py needs NumPy and Pillow; {sys.executable} has no "
             f"{error.name}: apt-get install python3-numpy python3-pil, then run it with "
             "/usr/bin/python3")

QUALITY = 90
NOISE_STD = 20.0  # per-pixel noise in 8-bit steps; sets the bytes per pixel (see the header)


def draw_size(rng):
    """(width, height) of one image, drawn as the header describes."""
    longer = 500 if rng.random() < 0.8 else int(np.clip(rng.lognormal(np.log(500), 0.45),
                                                         100, 2000))
    orientation = rng.random()
    if orientation >= 0.95:
        return longer, longer
    shape = rng.random()
    ratio = 4 / 3 if shape < 0.55 else 3 / 2 if shape < 0.8 else rng.uniform(1, 2)
    shorter = max(1, int(round(longer / ratio)))
    return (longer, shorter) if orientation < 0.75 else (shorter, longer)


def class_signature(seed, label):
    """(mean colour [3], grating angle, grating period in pixels) of class `label`."""
    rng = np.random.default_rng([seed, 1, label])
    return rng.uniform(40, 215, 3), rng.uniform(0, np.pi), rng.uniform(6, 60)


def smooth_field(rng, width, height, cells, amplitude):
    """Noise of `cells` x `cells` pixels per value, bicubically enlarged: [height, width, 3]."""
    small = rng.normal(128, amplitude, (max(2, height // cells), max(2, width // cells), 3))
    image = Image.fromarray(np.clip(small, 0, 255).astype(np.uint8))
    return np.asarray(image.resize((width, height), Image.BICUBIC), np.float32) - 128


def render(seed, index, label):
    """The RGB pixels [height, width, 3] of image `index`."""
    rng = np.random.default_rng([seed, 0, index])
    width, height = draw_size(rng)
    colour, angle, period = class_signature(seed, label)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    phase = rng.uniform(0, 2 * np.pi)
    grating = 30 * np.sin((x * np.cos(angle) + y * np.sin(angle)) * (2 * np.pi / period) + phase)
    pixels = colour.astype(np.float32) + grating[..., None]
    for cells, amplitude in ((64, 50), (16, 30), (4, 18)):
        pixels += smooth_field(rng, width, height, cells, amplitude)
    pixels += rng.normal(0, NOISE_STD, pixels.shape).astype(np.float32)
    return np.clip(pixels, 0, 255).astype(np.uint8)


def write_image(job):
    """Writes one image; returns (width, height, bytes)."""
    out, seed, index, label, val = job
    name = f"n{label:08d}"
    path = os.path.join(out, "val" if val else "train", name,
                        f"val_{index:08d}.JPEG" if val else f"{name}_{index}.JPEG")
    pixels = render(seed, index, label)
    Image.fromarray(pixels).save(path, quality=QUALITY)
    return pixels.shape[1], pixels.shape[0], os.path.getsize(path)


def fail(message):
    """A mistake in the arguments or the output folder: one line, exit 2."""
    print(f"make_image_folder.py: {message}", file=sys.stderr)
    sys.exit(2)


def make_folders(out, classes):
    """OUT/{train,val}/<class>/, in a new or empty OUT: images left there from another run (of
    other classes, say) would be read as part of this folder."""
    if os.path.exists(out) and not os.path.isdir(out):
        fail(f"{out}: not a folder")
    if os.path.isdir(out) and os.listdir(out):
        fail(f"{out}: not empty; give a new or empty folder (its files would mix with these)")
    try:
        for split in ("train", "val"):
            for label in range(classes):
                os.makedirs(os.path.join(out, split, f"n{label:08d}"), exist_ok=True)
    except OSError as error:
        fail(f"{error.filename}: {error.strerror}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="folder to write train/ and val/ into")
    parser.add_argument("--images", type=int, required=True, help="images in all (train + val)")
    parser.add_argument("--classes", type=int, default=1000, help="classes (default 1000)")
    parser.add_argument("--val-fraction", type=float, default=0.04,
                        help="share of the images in val/ (default 0.04, about ImageNet's "
                             "50k of 1.33M)")
    parser.add_argument("--seed", type=int, default=0, help="seed of every image (default 0)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count(),
                        help="processes encoding images (default: the cores)")
    args = parser.parse_args()
    # Checked before rounding: round(NaN) raises (and NaN fails `0 < F < 1`, as it should).
    for bad, problem in ((args.classes < 2, f"--classes {args.classes}: give at least 2"),
                         (args.jobs < 1, f"--jobs {args.jobs}: give at least 1"),
                         (args.seed < 0, f"--seed {args.seed}: give at least 0"),
                         (not 0 < args.val_fraction < 1,
                          f"--val-fraction {args.val_fraction}: give a share in (0, 1)")):
        if bad:
            fail(problem)
    num_val = round(args.images * args.val_fraction)
    if min(num_val, args.images - num_val) < args.classes:
        fail(f"--images {args.images} at --val-fraction {args.val_fraction} gives "
             f"{num_val} val and {args.images - num_val} train images, fewer than the "
             f"{args.classes} classes; every class needs an image in both: raise --images "
             "or lower --classes")
    make_folders(args.out, args.classes)
    jobs = ((args.out, args.seed, i, i % args.classes, i < num_val) for i in range(args.images))
    start = time.monotonic()
    try:
        with multiprocessing.Pool(args.jobs) as pool:
            written = list(pool.imap_unordered(write_image, jobs, chunksize=16))
    except OSError as error:  # a full disk, say; raised in a worker, re-raised here
        fail(f"{error.filename}: {error.strerror}")
    sizes = np.array(written, np.float64)
    print(f"{args.out}: {args.images - num_val} train and {num_val} val images, "
          f"{args.classes} classes, mean {sizes[:, 0].mean():.0f}x{sizes[:, 1].mean():.0f} px, "
          f"mean {sizes[:, 2].mean() / 1000:.0f} KB, {time.monotonic() - start:.0f} s")


if __name__ == "__main__":
    main()
