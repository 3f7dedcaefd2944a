#!/usr/bin/env bash
# --help: the CLI prints its commands on stdout and exits 0 (the image's entry point answers
# it); each daemon lists its own flags, wherever Tessera defines them. A wrong command line
# still fails with the usage on stderr.
set -euo pipefail
tessera="$1" ps="$2" worker="$3"

for flag in --help -h help; do
  out=$("$tessera" "$flag") || { echo "'tessera $flag' should exit 0"; exit 1; }
  grep -q "^usage: tessera COMMAND" <<<"$out" || { echo "'tessera $flag' printed: $out"; exit 1; }
done
if err=$("$tessera" no-such-command 2>&1 >/dev/null); then
  echo "'tessera no-such-command' should fail"; exit 1
fi
grep -q "unknown command 'no-such-command'" <<<"$err" || { echo "unclear error: $err"; exit 1; }

# absl ends --help with exit 1; what matters is that the flags are listed, the daemon's own
# and those of the libraries it links (TLS, metrics).
for daemon in "$ps:--round_timeout" "$worker:--keep_jobs"; do
  bin="${daemon%%:*}" own="${daemon##*:}"
  out=$("$bin" --help 2>&1) || true
  for flag in "$own" --tls_dir --metrics_address; do
    grep -q -- "$flag" <<<"$out" || { echo "$(basename "$bin") --help lacks $flag: $out"; exit 1; }
  done
done
echo "--help: ok"
