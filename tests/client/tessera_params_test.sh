#!/usr/bin/env bash
# `tessera params convert` both ways and `tessera graph run --params` with an MXNet .params
# file: the real binary on LeNet's MXNet symbol file and parameters written here byte by byte
# as mx.nd.save writes them (V2 arrays, context cpu(0), names "arg:..." in sorted order).
set -euo pipefail
bin="$1"
lenet="$2"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"

python3 - "$tmp" <<'PY'
import struct, sys
tmp = sys.argv[1]
shapes = {
    "conv1_weight": (20, 1, 5, 5), "conv1_bias": (20,),
    "conv2_weight": (50, 20, 5, 5), "conv2_bias": (50,),
    "fc1_weight": (500, 800), "fc1_bias": (500,),
    "fc2_weight": (10, 500), "fc2_bias": (10,),
}
names = sorted("arg:" + n for n in shapes)
out = [struct.pack("<QQQ", 0x112, 0, len(names))]
for k, name in enumerate(names):
    shape = shapes[name[4:]]
    size = 1
    for d in shape:
        size *= d
    # V2 magic, dense storage, int32 ndim + int64 dims, cpu(0), float32 (type flag 0).
    out.append(struct.pack("<IiI", 0xF993FAC9, 0, len(shape)))
    out.append(struct.pack("<%dq" % len(shape), *shape))
    out.append(struct.pack("<iii", 1, 0, 0))
    out.append(struct.pack("<%df" % size, *[((i * 37 + k * 11) % 101 - 50) / 500.0
                                            for i in range(size)]))
out.append(struct.pack("<Q", len(names)))
for name in names:
    out.append(struct.pack("<Q", len(name)) + name.encode())
with open(tmp + "/lenet-0000.params", "wb") as f:
    f.write(b"".join(out))

header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 1, 28, 28), }"
header += " " * (63 - (10 + len(header)) % 64) + "\n"
with open(tmp + "/x.npy", "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
    f.write(struct.pack("<1568f", *[(i % 17) / 17.0 for i in range(1568)]))
PY

out=$("$bin" params convert "$tmp/lenet-0000.params" "$tmp/lenet.tsr" --format tessera)
[[ "$out" == "wrote 8 arrays to $tmp/lenet.tsr (tessera format)" ]] ||
  { echo "convert: $out"; exit 1; }
[[ "$(head -c 8 "$tmp/lenet.tsr")" == "TSRNDARR" ]] ||
  { echo "lenet.tsr is not a Tessera file"; exit 1; }
# Back to MXNet's format: the very bytes MXNet would have written.
"$bin" params convert "$tmp/lenet.tsr" "$tmp/back.params" --format=mxnet >/dev/null
cmp "$tmp/lenet-0000.params" "$tmp/back.params" ||
  { echo "mxnet -> tessera -> mxnet changed the file"; exit 1; }

"$bin" graph run "$lenet" --input "data=$tmp/x.npy" --params "$tmp/lenet-0000.params" \
  --output "$tmp/out_mxnet" >/dev/null
"$bin" graph run "$lenet" --input "data=$tmp/x.npy" --params "$tmp/lenet.tsr" \
  --output "$tmp/out_tessera" >/dev/null
cmp "$tmp/out_mxnet/softmax_output.npy" "$tmp/out_tessera/softmax_output.npy" ||
  { echo "the two formats gave different outputs"; exit 1; }
# The parameters were used: seeded initialization gives something else.
"$bin" graph run "$lenet" --input "data=$tmp/x.npy" --seed 3 --output "$tmp/out_seed" >/dev/null
if cmp -s "$tmp/out_mxnet/softmax_output.npy" "$tmp/out_seed/softmax_output.npy"; then
  echo "--params made no difference"; exit 1
fi

if err=$("$bin" params convert "$tmp/lenet.tsr" "$tmp/x.onnx" --format onnx 2>&1); then
  echo "an unknown format should fail"; exit 1
fi
grep -q "'onnx'" <<<"$err" || { echo "unclear error: $err"; exit 1; }
if err=$("$bin" params convert "$tmp/x.npy" "$tmp/x.params" --format mxnet 2>&1); then
  echo "a .npy file is no parameter file"; exit 1
fi
grep -q "x.npy: not a parameter file" <<<"$err" || { echo "unclear error: $err"; exit 1; }
if err=$("$bin" params convert "$tmp/lenet.tsr" "$tmp/y.params" 2>&1); then
  echo "--format is required"; exit 1
fi
grep -q -- "--format" <<<"$err" || { echo "unclear error: $err"; exit 1; }
echo "tessera params: ok"
