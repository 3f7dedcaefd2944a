#!/usr/bin/env bash
# `tessera graph inspect|run`: the real binary on the MXNet-format LeNet file.
set -euo pipefail
bin="$1"
lenet="$2"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"

out=$("$bin" graph inspect "$lenet" --shape data=64,1,28,28)
grep -q "^parameters: 431080$" <<<"$out" || { echo "wrong parameter count:"; echo "$out"; exit 1; }
grep -Eq "^  softmax_output +\(64,10\)$" <<<"$out" || { echo "no output shape:"; echo "$out"; exit 1; }

# A 2x1x28x28 float32 .npy written by hand (no NumPy needed).
python3 - "$tmp/x.npy" <<'PY'
import struct, sys
header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 1, 28, 28), }"
header += " " * (63 - (10 + len(header)) % 64) + "\n"
with open(sys.argv[1], "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
    f.write(struct.pack("<1568f", *[(i % 17) / 17.0 for i in range(1568)]))
PY
written=$("$bin" graph run "$lenet" --input "data=$tmp/x.npy" --seed 3 --output "$tmp/out")
[[ "$written" == "$tmp/out/softmax_output.npy" ]] || { echo "unexpected output list: $written"; exit 1; }
# 2 rows of 10 probabilities: the file holds 80 bytes of data after its header.
size=$(stat -c %s "$tmp/out/softmax_output.npy")
(( size == 128 + 80 )) || { echo "softmax_output.npy has $size bytes"; exit 1; }

if err=$("$bin" graph run "$lenet" --input "label=$tmp/x.npy" --output "$tmp/bad" 2>&1); then
  echo "an unknown input should fail"; exit 1
fi
grep -q "'label'" <<<"$err" || { echo "unclear error: $err"; exit 1; }
if err=$("$bin" graph inspect "$tmp/missing.json" 2>&1); then
  echo "a missing file should fail"; exit 1
fi
grep -q "missing.json" <<<"$err" || { echo "unclear error: $err"; exit 1; }
if err=$("$bin" graph inspect "$lenet" --shape data=1,x 2>&1); then
  echo "a bad --shape should fail"; exit 1
fi
grep -q "data=1,x" <<<"$err" || { echo "unclear error: $err"; exit 1; }
echo "tessera graph: ok"
