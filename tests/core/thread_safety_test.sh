#!/usr/bin/env bash
# Clang's thread-safety analysis over the given C++ files, as errors: every ABSL_GUARDED_BY,
# ABSL_EXCLUSIVE_LOCKS_REQUIRED and lock annotation in them is checked against the locks
# taken (core/mutex.h, core/shared_mutex.h). Syntax only: nothing is built.
# usage: thread_safety_test.sh FILE.cc...   (from the workspace, or Bazel's runfiles)
set -euo pipefail
compiler=clang++-14
command -v "$compiler" >/dev/null ||
  { echo "needs $compiler (Debian's clang-14; ./tessera setup installs it)"; exit 1; }
# The workspace: the sources' own folder (runfiles hold links to them); generated headers
# (proto/*.pb.h) lie in the runfiles, or in bazel-bin outside Bazel.
ws=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd)
flags=(-std=c++20 -fsyntax-only -Wno-everything -Wthread-safety -Werror=thread-safety
       -I"$ws" -I. -I"$ws/bazel-bin")
if [[ -x /usr/local/cuda/bin/nvcc ]]; then  # the CUDA code paths too, as --config=cuda builds
  flags+=(-DTESSERA_USE_CUDA=1 -isystem /usr/local/cuda/include)
fi
files=()
for f in "$@"; do [[ "$f" == *.cc ]] && files+=("$f"); done
((${#files[@]})) || { echo "no .cc files given"; exit 1; }
printf '%s\n' "${files[@]}" |
  xargs -P 2 -I{} sh -c '"$0" "$@" {} 2>&1 || echo "FAILED: {}"' "$compiler" "${flags[@]}" \
  >"${TEST_TMPDIR:-/tmp}/thread_safety.log"
if grep -q "^FAILED: " "${TEST_TMPDIR:-/tmp}/thread_safety.log"; then
  grep -E "error:|^FAILED: " "${TEST_TMPDIR:-/tmp}/thread_safety.log" | head -200
  echo "thread-safety analysis failed in $(grep -c '^FAILED: ' "${TEST_TMPDIR:-/tmp}/thread_safety.log") of ${#files[@]} files"
  exit 1
fi
echo "thread-safety analysis: ${#files[@]} files clean"
