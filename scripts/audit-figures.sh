#!/usr/bin/env bash
# Measures the figures of SECURITY.md "Supply chain" (its table and method) for both builds (default: tls and oauth;
# --no-default-features: plain HTTP to local endpoints): crates in the runtime tree, third-party
# lines of Rust and of C/assembly in those crates' sources, `unsafe` blocks of ours and theirs,
# release binary size; then the advisory scan's database date and result. Prints a Markdown table.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
export CARGO_TERM_COLOR=never

# Source directories of the crates compiled into the binary: normal edges, no proc-macros (they
# run in the compiler only), no build scripts. The root crate is ours, the rest third-party.
crate_dirs() {
  local ids
  ids=$(cargo tree --locked -e normal,no-proc-macro --prefix none -f '{p}' "$@" | sed -E 's/ \(\*\)$//' | sort -u)
  cargo metadata --locked --format-version 1 "$@" | python3 -c '
import json, sys
meta = json.load(sys.stdin)
want = set(l.split(" (")[0] for l in sys.argv[1].splitlines())
for p in meta["packages"]:
    if p["name"] + " v" + p["version"] in want and p["source"] is not None or \
       p["name"] + " v" + p["version"] in want and "/vendor/" in p["manifest_path"]:
        print(p["manifest_path"].rsplit("/", 1)[0])
' "$ids"
}

# Lines in files matching the name patterns, outside tests/, benches/, examples/.
lines() {
  local dirs=$1; shift
  [ -n "$dirs" ] || { echo 0; return; }
  # shellcheck disable=SC2086
  find $dirs \( -path '*/tests/*' -o -path '*/benches/*' -o -path '*/examples/*' \) -prune -o -type f \( "$@" \) -print0 |
    xargs -0 -r cat | wc -l
}

unsafe_blocks() {
  local dirs=$1
  [ -n "$dirs" ] || { echo 0; return; }
  # shellcheck disable=SC2086
  find $dirs \( -path '*/tests/*' -o -path '*/benches/*' -o -path '*/examples/*' \) -prune -o -type f -name '*.rs' -print0 |
    xargs -0 -r grep -hoE '\bunsafe[[:space:]]*\{' | wc -l
}

row() {
  local label=$1; shift
  local n dirs rust c ours theirs size
  n=$(cargo tree --locked -e normal,no-proc-macro --prefix none -f '{p}' "$@" | sed -E 's/ \(\*\)$//' | sort -u | wc -l)
  dirs=$(crate_dirs "$@" | tr '\n' ' ')
  rust=$(lines "$dirs" -name '*.rs')
  c=$(lines "$dirs" -name '*.c' -o -name '*.h' -o -name '*.S' -o -name '*.s' -o -name '*.asm' -o -name '*.inl')
  ours=$(grep -rhoE '\bunsafe[[:space:]]*\{' src | wc -l)
  theirs=$(unsafe_blocks "$dirs")
  cargo build --release --locked --quiet "$@"
  size=$(stat -c %s target/release/cashcode)
  printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$label" "$n (incl. cashcode)" "$rust" "$c" "$ours" "$theirs" \
    "$(awk -v s="$size" 'BEGIN {printf "%.1f MB (%d bytes)", s / 1e6, s}')"
}

echo "| build | crates in the runtime tree | third-party Rust lines | third-party C/asm lines | \`unsafe {\` ours | \`unsafe {\` dependencies | release binary |"
echo "|---|---|---|---|---|---|---|"
row "default (tls, oauth)"
row "--no-default-features" --no-default-features
echo
echo "Cargo.lock: $(grep -c '^name = ' Cargo.lock) packages (all platforms and features)."
echo
echo "Advisory scan:"
bash scripts/deny.sh advisories 2>&1 | grep -E '^deny:|advisories (ok|FAILED)|error\[' | sed 's/^/    /'
