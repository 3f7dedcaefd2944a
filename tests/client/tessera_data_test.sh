#!/usr/bin/env bash
# `tessera data pack`: the real binary on a folder of PNGs written here (no image tools
# needed), then on a .lst, with a corrupt image and bad flags.
set -euo pipefail
bin="$1"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
src="$tmp/images"

python3 - "$src" <<'PY'
import os, struct, sys, zlib
def png(width, height, seed):
    rows = b"".join(b"\x00" + bytes((x * seed + y * 7) % 256 for x in range(width * 3))
                    for y in range(height))
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")
root = sys.argv[1]
for cls, count, (w, h) in (("cats", 3, (40, 30)), ("dogs", 2, (20, 50))):
    os.makedirs(os.path.join(root, cls))
    for i in range(count):
        with open(os.path.join(root, cls, f"{cls}{i}.png"), "wb") as f:
            f.write(png(w, h, i + 1))
with open(os.path.join(root, "readme.txt"), "w") as f:
    f.write("not an image\n")
PY

out=$("$bin" data pack "$src" "$tmp/pets")
grep -q "^packed 5 images (.* bytes) into $tmp/pets.rec and $tmp/pets.idx, 2 classes$" <<<"$out" ||
  { echo "unexpected summary: $out"; exit 1; }
[[ $(wc -l <"$tmp/pets.idx") -eq 5 ]] || { echo "pets.idx:"; cat "$tmp/pets.idx"; exit 1; }
grep -q $'^4\t1.000000\tdogs/dogs1.png$' "$tmp/pets.lst" || { echo "pets.lst:"; cat "$tmp/pets.lst"; exit 1; }

# The written list packs again, relative to the source folder, resized.
out=$("$bin" data pack "$tmp/pets.lst" "$tmp/again" --root "$src" --resize 10)
grep -q "^packed 5 images" <<<"$out" || { echo "unexpected summary: $out"; exit 1; }

printf 'garbage' >"$src/dogs/broken.png"
if err=$("$bin" data pack "$src" "$tmp/bad" 2>&1); then
  echo "an undecodable image should fail"; exit 1
fi
grep -q "dogs/broken.png" <<<"$err" || { echo "unclear error: $err"; exit 1; }
out=$("$bin" data pack "$src" "$tmp/skipped" --skip_bad true 2>/dev/null)
grep -q "1 undecodable skipped" <<<"$out" || { echo "unexpected summary: $out"; exit 1; }

if err=$("$bin" data pack "$src" "$tmp/x" --resize big 2>&1); then
  echo "a bad --resize should fail"; exit 1
fi
grep -q -- "--resize 'big'" <<<"$err" || { echo "unclear error: $err"; exit 1; }
if err=$("$bin" data pack "$tmp/missing" "$tmp/x" 2>&1); then
  echo "a missing source should fail"; exit 1
fi
grep -q "missing" <<<"$err" || { echo "unclear error: $err"; exit 1; }
echo "tessera data pack: ok"
