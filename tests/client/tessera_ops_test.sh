#!/usr/bin/env bash
# `tessera ops`: the real binary lists the operators with their parameters, describes one
# on request, and fails with a clear message for an unknown name.
set -euo pipefail
bin="$1"

out=$("$bin" ops)
for op in Convolution FullyConnected BatchNorm smooth_l1 SoftmaxOutput; do
  grep -qx "$op" <<<"$out" || { echo "missing operator $op in 'tessera ops'"; exit 1; }
done
grep -q "num_filter (int" <<<"$out" || { echo "Convolution's num_filter is not documented"; exit 1; }
tail -n1 <<<"$out" | grep -Eq '^[0-9]+ operators$' || { echo "no closing count line"; exit 1; }

# Every operator says where it runs; a CUDA build has a GPU kernel for each of them.
ops=$(grep -cE '^[A-Za-z_]' <<<"$out" || true)
devices=$(grep -c '^  devices: ' <<<"$out" || true)
((ops == devices)) || { echo "$ops operators but $devices devices lines"; exit 1; }
if grep -q '^  devices: cpu only' <<<"$out"; then
  gpu=$(grep -c '^  devices: cpu, gpu' <<<"$out" || true)
  # Without CUDA none has a GPU kernel; with it, every one.
  ((gpu == 0)) || { echo "some operators lack a GPU kernel in a CUDA build:"; \
    grep -B5 '^  devices: cpu only' <<<"$out" | grep -E '^[A-Za-z_]'; exit 1; }
fi

one=$("$bin" ops Pooling)
grep -q "pool_type" <<<"$one" || { echo "'tessera ops Pooling' lacks pool_type"; exit 1; }

if err=$("$bin" ops NoSuchOp 2>&1); then
  echo "'tessera ops NoSuchOp' should fail"; exit 1
fi
grep -q "unknown operator 'NoSuchOp'" <<<"$err" || { echo "unclear error: $err"; exit 1; }
echo "tessera ops: ok"
