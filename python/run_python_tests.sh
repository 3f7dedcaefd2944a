#!/usr/bin/env bash
# The SDK's tests with Debian's python3 and the binaries this build made.
set -euo pipefail
export TESSERA_BIN="$PWD/client/tessera" TESSERA_PS_BIN="$PWD/server/tessera-ps"
export TESSERA_WORKER_BIN="$PWD/worker/tessera-worker" TESSERA_KV_PEER_BIN="$PWD/python/kv_peer"
export TESSERA_LIBRARY="$PWD/capi/libtessera_c.so"
exec /usr/bin/python3 -W ignore python/tests/run_tests.py proto
