#!/usr/bin/env bash
# Runs Tessera's test suite from a bundle made by `./tessera gpu-bundle DIR` (tools/gpu_bundle.sh
# copies this file there as run.sh), on a machine without Bazel: finds the CUDA libraries the
# target provides, runs every test binary as `bazel test` would (runfiles, TEST_* variables,
# per-test timeout, gtest XML), optionally the GPU benches, and prints
# 'N passed, N failed, N skipped' last (count_tests.py, the same counter ./tessera test uses).
#
# usage: run.sh [--only REGEX] [--jobs N] [--bench] [--results DIR]   or   run.sh --exec COMMAND [ARGS...]
set -euo pipefail

BUNDLE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
RESULTS="$BUNDLE/results"
ONLY=""
# A quarter of the CPUs: every CPU test sizes its engine and OpenMP pools from all of them.
JOBS=$(( $(nproc 2>/dev/null || echo 4) / 4 ))
((JOBS >= 1)) || JOBS=1
BENCH=0
EXEC=()
BENCH_FAILED=0

log() { echo "run.sh: $*" >&2; }

usage() {
  cat <<'USAGE'
usage: run.sh [--only REGEX] [--jobs N] [--bench] [--results DIR]
       run.sh --exec COMMAND [ARGS...]
  (no option)    every test binary of the bundle; 'N passed, N failed, N skipped' last
  --only REGEX   only the test labels matching REGEX (grep -E), e.g. --only 'gpu|cuda'
  --jobs N       tests run N at a time (default: a quarter of the CPUs, each test's
                 thread pools being sized from all of them)
  --bench        then every bench binary whose name contains 'gpu' (its last line shown)
  --results DIR  where logs and XML go (default: results/ in the bundle)
  --exec CMD     run CMD (a path in the bundle, e.g. client/tessera, or any command) with
                 the bundle's libraries and test variables, from the current folder
  CUDA libraries are taken from LD_LIBRARY_PATH, then ${CUDA_HOME:-/usr/local/cuda}/lib64
  and lib, then the nvidia/*/lib folders of python3's CUDA wheels.
USAGE
}

parse_args() {
  while (($#)); do
    case "$1" in
      --only) ONLY="${2:?--only needs a regex}"; shift 2 ;;
      --jobs) JOBS="${2:?--jobs needs a number}"; shift 2 ;;
      --bench) BENCH=1; shift ;;
      --results) RESULTS="$(mkdir -p "${2:?--results needs a folder}" && cd "$2" && pwd)"; shift 2 ;;
      --exec) shift; EXEC=("$@"); (($#)) || { usage; exit 2; }; return ;;
      -h | --help) usage; exit 0 ;;
      *) log "unknown argument '$1'"; usage >&2; exit 2 ;;
    esac
  done
}

# Folders that may hold the CUDA libraries, in the order they are searched: LD_LIBRARY_PATH,
# the toolkit (CUDA_HOME, default /usr/local/cuda), then the `nvidia/*/lib` folders of the
# CUDA wheels that PyTorch installs for python3.
candidate_dirs() {
  local dir site cuda="${CUDA_HOME:-/usr/local/cuda}"
  local -a dirs=()
  IFS=: read -ra dirs <<<"${LD_LIBRARY_PATH:-}"
  for dir in "${dirs[@]}"; do [[ -n "$dir" && -d "$dir" ]] && echo "$dir"; done
  for dir in "$cuda/lib64" "$cuda/lib"; do [[ -d "$dir" ]] && echo "$dir"; done
  if site=$(python3 -c 'import nvidia,os;print(os.path.dirname(list(nvidia.__path__)[0]))' \
    2>/dev/null); then
    for dir in "$site"/nvidia/*/lib; do [[ -d "$dir" ]] && echo "$dir"; done
  fi
  return 0
}

# Finds each library of cuda-libs.txt (the CUDA sonames the binaries link, written when the
# bundle was made), prints where, and puts the bundle's lib/ and the folders used on
# LD_LIBRARY_PATH. When one came from the python wheels, every `nvidia/*/lib` goes on the
# path: cuDNN and cuBLAS load siblings (libnvrtc, libnvJitLink, ...) from other wheels.
setup_libraries() {
  local -a candidates=() chosen=()
  local lib dir found missing=0 from_wheels=0
  mapfile -t candidates < <(candidate_dirs)
  echo "CUDA libraries:"
  while read -r lib; do
    [[ -n "$lib" ]] || continue
    found=""
    for dir in "${candidates[@]}"; do
      if [[ -e "$dir/$lib" ]]; then found="$dir"; break; fi
    done
    if [[ -z "$found" ]]; then
      echo "  $lib: NOT FOUND"
      missing=$((missing + 1))
      continue
    fi
    echo "  $lib: $found/$lib"
    chosen+=("$found")
    [[ "$found" == */nvidia/*/lib ]] && from_wheels=1
  done <"$BUNDLE/cuda-libs.txt"
  ((missing == 0)) ||
    log "$missing CUDA libraries not found (searched LD_LIBRARY_PATH, \${CUDA_HOME:-/usr/local/cuda}/lib64 and /lib, python3's nvidia/*/lib); binaries that link them will not start"
  # The bundle first, then the folders in the order they were searched, so the loader takes
  # what was printed. (No empty entries: one would mean the current folder.)
  local -a search=("$BUNDLE/lib")
  for dir in "${candidates[@]}"; do
    if [[ " ${chosen[*]} " == *" $dir "* ]] || { ((from_wheels)) && [[ "$dir" == */nvidia/*/lib ]]; }; then
      [[ " ${search[*]} " == *" $dir "* ]] || search+=("$dir")
    fi
  done
  LD_LIBRARY_PATH="$(IFS=:; echo "${search[*]}")"
  export LD_LIBRARY_PATH
}

# Any other library the loader cannot find here (e.g. an older libstdc++ than the build's).
check_loadable() {
  command -v ldd >/dev/null || return 0
  local missing
  # (ldd fails on the shell scripts among them: not a dynamic executable.)
  missing=$( { find "$BUNDLE" -path "$BUNDLE/results" -prune -o -type f \( -perm -u+x -o -name '*.so*' \) -print0 | xargs -0 ldd 2>/dev/null || true; } |
    awk '/not found/ {print $1}' | sort -u | tr '\n' ' ')
  [[ -z "$missing" ]] || log "libraries not found for some binaries: $missing"
}

print_machine() {
  echo "bundle: $(cat "$BUNDLE/BUILD-INFO" 2>/dev/null || echo "$BUNDLE")"
  if command -v nvidia-smi >/dev/null; then
    echo "GPUs: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null |
      paste -sd ';' || echo 'nvidia-smi failed')"
  else
    echo "GPUs: no nvidia-smi (the GPU tests skip without a driver)"
  fi
}

# What Bazel gives a test: its runfiles tree (the bundle holds the union of them, so
# TEST_SRCDIR/TEST_WORKSPACE names the bundle), the workspace as working folder, the MNIST
# digits.
export_test_env() {
  TEST_SRCDIR="$(dirname "$BUNDLE")" TEST_WORKSPACE="$(basename "$BUNDLE")"
  export TEST_SRCDIR TEST_WORKSPACE RUNFILES_DIR="$TEST_SRCDIR"
  export TESSERA_MNIST_DIR="$BUNDLE/mnist" TZ=UTC
  # HOME is each test's own scratch folder; the driver's JIT cache (PTX for a GPU newer than
  # the bundle's SASS) is shared by all of them instead of compiled again per test.
  export CUDA_CACHE_PATH="$RESULTS/cuda-cache"
}

# A result file for a test that wrote none (a shell test, or a crash before gtest wrote its
# XML), as Bazel makes one: one case, an error when the exit status was not 0.
write_standin_xml() {
  local xml="$1" label="$2" rc="$3" why="$4" error=""
  ((rc == 0)) || error="<error message=\"$why\"/>"
  printf '<?xml version="1.0" encoding="UTF-8"?>\n<testsuites><testsuite name="%s" tests="1"><testcase classname="%s" name="%s">%s</testcase></testsuite></testsuites>\n' \
    "$label" "$label" "${label##*:}" "$error" >"$xml"
}

# A test label's workspace path: //tests/ops:x -> tests/ops/x.
label_path() {
  local path="${1#//}"
  echo "${path/://}"
}

# Runs one test from tests.tsv (label, kind, timeout in seconds, arguments); its output goes
# to its own log, its one-line verdict to stdout (run_tests collects both).
run_test() {
  local label="$1" kind="$2" limit="$3"
  shift 3
  local path
  path="$(label_path "$label")"
  local xml_dir="$RESULTS/xml/$path" tmp rc=0 start=$SECONDS why="" status
  local xml="$xml_dir/test.xml" out="$xml_dir/test.log"
  mkdir -p "$xml_dir"
  rm -f "$xml" "$out"
  if [[ ! -x "$BUNDLE/$path" ]]; then
    echo "binary missing (it did not build)" >"$out"
    echo "MISSING $label (it did not build)"
    return 0
  fi
  local -a cmd=("$BUNDLE/$path" "$@")
  [[ "$kind" != cc ]] || cmd+=("--gtest_output=xml:$xml")
  tmp=$(mktemp -d "$RESULTS/tmp/test.XXXXXX")
  (cd "$BUNDLE" && TEST_TMPDIR="$tmp" HOME="$tmp" TEST_TARGET="$label" XML_OUTPUT_FILE="$xml" \
    timeout -k 10 "$limit" "${cmd[@]}") </dev/null >"$out" 2>&1 || rc=$?
  rm -rf "$tmp"
  case "$rc" in
    0) why="" ;;
    124 | 137) why="timed out after ${limit}s" ;;
    *) why="exited with status $rc" ;;
  esac
  if [[ ! -s "$xml" ]]; then
    write_standin_xml "$xml" "$label" "$rc" "$why"
  elif ((rc != 0)) && ! grep -q '<failure' "$xml"; then
    # gtest wrote its XML, then the process failed (e.g. at exit): count that too.
    sed -i "s|</testsuites>|<testsuite name=\"exit\" tests=\"1\"><testcase classname=\"$label\" name=\"exit_status\"><error message=\"$why\"/></testcase></testsuite></testsuites>|" "$xml"
  fi
  status="PASS"
  ((rc == 0)) || status="FAIL"
  printf '%-7s %s (%ss%s)\n' "$status" "$label" "$((SECONDS - start))" "${why:+, $why}"
}

# Runs the selected tests, JOBS at a time (GPU tests share the device),
# then writes tests.log (every test's output, in tests.tsv's order) and failed.log.
run_tests() {
  local -a labels=() args
  local label kind limit running=0 path verdict
  rm -rf "$RESULTS/xml" "$RESULTS/tmp"
  mkdir -p "$RESULTS/xml" "$RESULTS/tmp"
  while IFS=$'\t' read -r -a args; do
    label="${args[0]}" kind="${args[1]}" limit="${args[2]}"
    [[ -z "$ONLY" ]] || grep -Eq -- "$ONLY" <<<"$label" || continue
    labels+=("$label")
    if ((running >= JOBS)); then
      wait -n || true
      running=$((running - 1))
    fi
    run_test "$label" "$kind" "$limit" "${args[@]:3}" &
    running=$((running + 1))
  done <"$BUNDLE/tests.tsv"
  wait || true
  : >"$RESULTS/tests.log"
  : >"$RESULTS/failed.log"
  for label in "${labels[@]}"; do
    path="$(label_path "$label")"
    verdict=PASS
    grep -q '<failure\|<error' "$RESULTS/xml/$path/test.xml" 2>/dev/null && verdict=FAIL
    [[ -e "$RESULTS/xml/$path/test.xml" ]] || verdict=MISSING
    local -a logs=("$RESULTS/tests.log")
    [[ "$verdict" == PASS ]] || logs+=("$RESULTS/failed.log")
    { echo "==== $verdict $label"; cat "$RESULTS/xml/$path/test.log"; } | tee -a "${logs[@]}" >/dev/null
  done
  : >"$RESULTS/labels.txt"
  ((${#labels[@]} == 0)) || printf '%s\n' "${labels[@]}" >"$RESULTS/labels.txt"
}

# Every bench binary with 'gpu' in its name; its output goes to bench.log, its last line
# (the JSON object every bench ends with) to the terminal.
run_benches() {
  local bench rc found=0
  : >"$RESULTS/bench.log"
  while read -r bench; do
    [[ "$(basename "$bench")" == *gpu* ]] || continue
    found=1
    rc=0
    echo "==== $bench" >>"$RESULTS/bench.log"
    (cd "$BUNDLE" && timeout -k 10 1800 "$BUNDLE/$bench") </dev/null >"$RESULTS/current.log" 2>&1 || rc=$?
    cat "$RESULTS/current.log" >>"$RESULTS/bench.log"
    if ((rc == 0)); then
      echo "bench $bench: $(tail -n 1 "$RESULTS/current.log")"
    else
      echo "bench $bench: FAILED (status $rc), see $RESULTS/bench.log"
      BENCH_FAILED=1
    fi
  done <"$BUNDLE/benches.txt"
  rm -f "$RESULTS/current.log"
  ((found)) || echo "bench: no bench binary with 'gpu' in its name in this bundle"
}

main() {
  parse_args "$@"
  export_test_env
  if ((${#EXEC[@]})); then
    setup_libraries >&2  # the command's own output stays clean
    # A relative path that is not here but is in the bundle means the bundle's binary.
    [[ "${EXEC[0]}" == /* || -e "${EXEC[0]}" || ! -e "$BUNDLE/${EXEC[0]}" ]] ||
      EXEC[0]="$BUNDLE/${EXEC[0]}"
    exec "${EXEC[@]}"
  fi
  setup_libraries
  print_machine
  check_loadable
  mkdir -p "$RESULTS"
  run_tests
  ((BENCH == 0)) || run_benches
  echo "logs: $RESULTS/tests.log (all), $RESULTS/failed.log (failures only)"
  local -a labels=()
  mapfile -t labels <"$RESULTS/labels.txt"
  local rc=0
  python3 "$BUNDLE/count_tests.py" gpu "$RESULTS/xml" "${labels[@]}" || rc=$?
  ((BENCH_FAILED == 0)) || rc=1
  return "$rc"
}

main "$@"
