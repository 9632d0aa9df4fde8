#!/usr/bin/env bash
# Checks that the release build is reproducible: exports the committed tree into two directories
# of different paths, runs scripts/release.sh in each (own target directories, the shared cargo
# registry) and compares the binaries. Prints "identical" and the hash, or the first section
# that differs (readelf) and exits 1. Extra arguments go to release.sh's cargo.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
work=$(mktemp -d /tmp/cashcode-repro.XXXXXX)
trap 'rm -rf "$work"' EXIT
a=$work/a
b=$work/second-checkout/elsewhere
for d in "$a" "$b"; do
  mkdir -p "$d"
  git -C "$root" archive HEAD | tar -x -C "$d"
  echo "== building in $d"
  (cd "$d" && CARGO_TARGET_DIR="$d/target" bash scripts/release.sh "$d/dist" "$@" >"$d.log" 2>&1) ||
    { tail -n 30 "$d.log"; exit 1; }
done
ha=$(sha256sum <"$a/dist/cashcode" | cut -d' ' -f1)
hb=$(sha256sum <"$b/dist/cashcode" | cut -d' ' -f1)
if [ "$ha" = "$hb" ]; then
  echo "repro: identical: sha256 $ha ($(stat -c %s "$a/dist/cashcode") bytes), built in $a and $b"
  exit 0
fi
echo "repro: DIFFERENT: $ha vs $hb"
# The first section whose bytes differ.
readelf -SW "$a/dist/cashcode" | awk '/^ *\[ *[0-9]+\]/ {gsub(/\[|\]/, ""); print}' |
  while read -r _ name _ _ off size _; do
    [ -n "$name" ] || continue
    if ! cmp -s <(tail -c +$((16#$off + 1)) "$a/dist/cashcode" | head -c $((16#$size))) \
                <(tail -c +$((16#$off + 1)) "$b/dist/cashcode" | head -c $((16#$size))); then
      echo "repro: first differing section: $name (offset 0x$off, size 0x$size)"
      break
    fi
  done
exit 1
