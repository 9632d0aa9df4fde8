#!/usr/bin/env bash
# Builds the release binary so anyone can rebuild it bit for bit and inspect what is in it:
# --locked (exactly Cargo.lock), SOURCE_DATE_EPOCH fixed to the commit's time, every machine path
# (checkout, cargo home, toolchain) remapped, and the dependency list embedded in the binary by
# cargo-auditable (`cargo audit bin dist/cashcode` reads it). Writes to dist/ (or $1): the
# binary, a CycloneDX SBOM whose components are Cargo.lock's packages, and SHA256SUMS.
# Extra arguments go to cargo (e.g. --no-default-features for the build without TLS).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=${1:-dist}
shift || true

CARGO_AUDITABLE_VERSION=0.7.7
if [ "$(cargo auditable --version 2>/dev/null)" != "cargo-auditable $CARGO_AUDITABLE_VERSION" ]; then
  cargo install --locked --quiet cargo-auditable --version "$CARGO_AUDITABLE_VERSION"
fi

cargo_home=${CARGO_HOME:-$HOME/.cargo}
sysroot=$(rustc --print sysroot)
# The commit's time (the tree's newest change when not in git): the same source, the same stamp.
SOURCE_DATE_EPOCH=$(git -C "$root" log -1 --format=%ct 2>/dev/null || find . -type f -not -path './target/*' -printf '%T@\n' | sort -n | tail -n1 | cut -d. -f1)
export SOURCE_DATE_EPOCH
# Longest prefix first: the checkout may sit inside the cargo home or the other way round.
remap=""
for pair in "$(realpath "$root")=/cashcode" "$(realpath "$cargo_home")=/cargo" "$(realpath "$sysroot")=/rustc-sysroot"; do
  remap="$remap${#pair} $pair"$'\n'
done
RUSTFLAGS=$(printf '%s' "$remap" | sort -rn | cut -d' ' -f2- | sed 's/^/--remap-path-prefix=/' | paste -sd' ')
export RUSTFLAGS
# C built by build scripts (ring) sees the same remapping and no absolute debug paths.
export CFLAGS="-ffile-prefix-map=$(realpath "$root")=/cashcode -ffile-prefix-map=$(realpath "$cargo_home")=/cargo"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target/release-repro}

cargo auditable build --release --locked --bin cashcode "$@"

mkdir -p "$out"
cp "$CARGO_TARGET_DIR/release/cashcode" "$out/cashcode"
python3 scripts/sbom.py "$out/cashcode.cdx.json"
python3 scripts/sbom.py --check "$out/cashcode.cdx.json"
(cd "$out" && sha256sum cashcode cashcode.cdx.json >SHA256SUMS && cat SHA256SUMS)
