#!/usr/bin/env bash
# Checks the dependency tree against deny.toml with cargo-deny: advisories, licences, bans
# (duplicate versions, wildcards) and sources. Advisories come from the live RustSec database
# when it answers within seconds, else from the dated snapshot in ../shared/supply-chain/ (all
# CI has); the first line of output names which database and its date. Exit status: cargo-deny's.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

command -v cargo-deny >/dev/null 2>&1 ||
  { echo "deny: cargo-deny is missing; install it with: bash scripts/setup.sh --audit" >&2; exit 1; }

url=https://github.com/rustsec/advisory-db
# The folder cargo-deny derives from that URL inside its db-path.
db_dir=advisory-db-3157b0e258782691
dbs=$root/target/advisory-dbs
supply=${CASHCODE_SUPPLY_CHAIN:-$root/../shared/supply-chain}

# deny.toml with db-path pointed at one of the two databases.
config_for() {
  mkdir -p "$dbs/$1"
  sed "s|^db-path = .*|db-path = \"$dbs/$1\"|" deny.toml >"$dbs/deny-$1.toml"
  echo "$dbs/deny-$1.toml"
}

# cargo-deny reads every package's manifest, other platforms' too, so all must be downloaded.
cargo fetch --locked --quiet

config=""
if timeout 10 git ls-remote --quiet "$url" HEAD >/dev/null 2>&1; then
  config=$(config_for live)
  if timeout 300 cargo deny --log-level error --config "$config" fetch db; then
    date=$(git -C "$dbs/live/$db_dir" log -1 --format=%cs 2>/dev/null || echo unknown)
    commit=$(git -C "$dbs/live/$db_dir" rev-parse --short HEAD 2>/dev/null || echo unknown)
    echo "deny: advisories from the live RustSec database ($url), commit $commit of $date"
  else
    echo "deny: fetching the live RustSec database failed; using the offline snapshot"
    config=""
  fi
else
  echo "deny: the RustSec database is unreachable; using the offline snapshot"
fi

if [ -z "$config" ]; then
  tarball=$(ls "$supply"/rustsec-advisory-db-*.tar.gz 2>/dev/null | sort | tail -n1 || true)
  [ -n "$tarball" ] || { echo "deny: no advisory database snapshot in $supply" >&2; exit 1; }
  date=$(basename "$tarball" | grep -oE '[0-9]{4}-[0-9]{2}-[0-9]{2}')
  config=$(config_for snapshot)
  dest=$dbs/snapshot/$db_dir
  # Unpacked once per snapshot; cargo-deny opens the database as a git repository.
  if [ "$(cat "$dest/.snapshot" 2>/dev/null)" != "$(basename "$tarball")" ]; then
    rm -rf "$dest" "$dbs/snapshot/unpack"
    mkdir -p "$dbs/snapshot/unpack"
    tar -xzf "$tarball" -C "$dbs/snapshot/unpack"
    mv "$dbs/snapshot/unpack/advisory-db" "$dest"
    rm -rf "$dbs/snapshot/unpack"
    (
      cd "$dest"
      export GIT_AUTHOR_DATE="${date}T00:00:00Z" GIT_COMMITTER_DATE="${date}T00:00:00Z"
      git init -q && git add -A && git -c user.name=snapshot -c user.email=snapshot@localhost commit -qm "snapshot $date"
    )
    basename "$tarball" >"$dest/.snapshot"
  fi
  commit=$(grep -oE 'commit [0-9a-f]{40}' "$supply/README.md" 2>/dev/null | head -n1 | cut -c8-14 || true)
  echo "deny: advisories from the RustSec database snapshot of $date${commit:+ (advisory-db commit $commit)}, offline"
fi

cargo deny --offline --config "$config" check --show-stats "$@"
