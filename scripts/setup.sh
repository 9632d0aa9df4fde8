#!/usr/bin/env bash
# Installs what CashCode needs on a fresh Debian/Ubuntu machine (idempotent). Serving needs only
# the Python MCP SDK for mcp_servers/ in the checkout's virtual environment .venv/ (a Debian
# python3 is "externally managed", PEP 668: pip refuses to install into it, and we never try) and
# the web client's npm packages. The test tools come with flags, so the start command builds
# nothing it never runs: --test adds the MCP test servers' npm packages, the ACP client SDKs
# (tests/acp) and cargo-nextest (the runner of scripts/test.sh) at its pinned version,
# --browser Debian's chromium for the browser tests, --audit cargo-deny for scripts/deny.sh. A missing prerequisite stops it with one line
# naming the command that fixes it.
set -euo pipefail
cd "$(dirname "$0")/.."

want_test=0
want_browser=0
want_audit=0
for a in "$@"; do
  case "$a" in
    --test) want_test=1 ;;
    --browser) want_browser=1 ;;
    --audit) want_audit=1 ;;
    *) echo "setup: unknown option $a (known: --test, --browser, --audit)" >&2; exit 2 ;;
  esac
done

log() { printf '\n== %s\n' "$*"; }
# One line on stderr, then exit non-zero.
fail() {
  echo "setup: $*" >&2
  exit 1
}
sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo "

command -v cargo >/dev/null 2>&1 ||
  fail "cargo is missing; install Rust with: curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh"

if [ -f client/package.json ] || [ -f mcp_servers/package.json ]; then
  node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo none)
  if ! [ "$node_major" -ge 20 ] 2>/dev/null; then
    found=$([ "$node_major" = none ] && echo "none" || node --version)
    fail "Node.js 20 or newer is required (found $found); install it with: curl -fsSL https://deb.nodesource.com/setup_22.x | ${sudo}bash - && ${sudo}apt-get install -y nodejs"
  fi
  command -v npm >/dev/null 2>&1 || fail "npm is missing; install it with: ${sudo}apt-get install -y npm"
fi

# scripts/test.sh runs the Rust tests with cargo-nextest; pinned so every machine runs the same.
nextest_version=0.9.143
if [ "$want_test" = 1 ] && [ "$(cargo nextest --version 2>/dev/null | head -n1 | awk '{print $2}')" != "$nextest_version" ]; then
  log "cargo-nextest $nextest_version (the test runner of scripts/test.sh)"
  cargo install --locked cargo-nextest --version "$nextest_version" ||
    fail "cargo install --locked cargo-nextest --version $nextest_version failed (cargo's message is above)"
fi

# cargo-deny at a pinned version, built from its own lock file; kept when that version is
# already installed, so a second run builds nothing.
CARGO_DENY_VERSION=0.20.2
if [ "$want_audit" = 1 ]; then
  log "cargo-deny $CARGO_DENY_VERSION (dependency checks, deny.toml)"
  if [ "$(cargo deny --version 2>/dev/null)" != "cargo-deny $CARGO_DENY_VERSION" ]; then
    cargo install --locked --quiet cargo-deny --version "$CARGO_DENY_VERSION" ||
      fail "installing cargo-deny $CARGO_DENY_VERSION failed (cargo's message is above)"
  fi
fi

install_python_venv() {
  log "Python packages (${reqs[*]}) in .venv/"
  py=.venv/bin/python
  # .venv is a virtual environment (never the system Python) with every pin of the
  # requirements files at exactly its version (no import of mcp: stays fast).
  pins_ok() {
    "$py" - "${reqs[@]}" <<'PY' >/dev/null 2>&1
import importlib.metadata as m, importlib.util, re, sys
req = "\n".join(open(f).read() for f in sys.argv[1:])
pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==([^\s#]+)", req, re.M))
ok = sys.prefix != sys.base_prefix and importlib.util.find_spec("mcp") is not None
sys.exit(0 if ok and all(m.version(k) == v for k, v in pins.items()) else 1)
PY
  }
  if ! pins_ok; then
    command -v python3 >/dev/null 2>&1 ||
      fail "python3 is missing; install it with: ${sudo}apt-get install -y python3 python3-venv"
    # Redone unless it is a virtual environment with pip: its interpreter may be gone, or an
    # earlier creation failed half-way (Debian leaves .venv/bin/python without pip).
    if ! "$py" -c 'import sys, pip; sys.exit(sys.prefix == sys.base_prefix)' >/dev/null 2>&1; then
      rm -rf .venv
      # The venv links to the interpreter by the path it was started as: resolve it, so a
      # python3 reached through a temporary link (as scripts/test.sh makes) does not dangle.
      real_python=$(readlink -f "$(command -v python3)")
      if ! out=$("$real_python" -m venv .venv 2>&1); then
        rm -rf .venv
        # Debian/Ubuntu ship ensurepip (and venv's pip) in a separate package; its message names
        # the versioned one, e.g. "apt install python3.11-venv".
        if grep -qiE 'ensurepip|No module named venv' <<<"$out" || ! python3 -c 'import ensurepip' >/dev/null 2>&1; then
          pkg=$(grep -oE 'apt(-get)? install +python3[.0-9]*-venv' <<<"$out" | head -n1 | grep -oE '[^ ]+$' || true)
          [ -n "$pkg" ] || pkg=$(python3 -c 'import sys; print("python%d.%d-venv" % sys.version_info[:2])' 2>/dev/null || echo python3-venv)
          fail "python3 cannot create a virtual environment (ensurepip is missing); install it with: ${sudo}apt-get install -y $pkg"
        fi
        fail "python3 -m venv .venv failed: $(grep -v '^\s*$' <<<"$out" | tail -n1)"
      fi
    fi
    .venv/bin/python -m pip install --quiet --disable-pip-version-check "${reqs[@]/#/-r}" ||
      fail "installing ${reqs[*]} into .venv failed (pip's message is above)"
    pins_ok || fail "the pins of ${reqs[*]} are still not met in .venv after pip install"
  fi
}

# The Python packages: the MCP SDK for serving; the ACP client SDK for the tests too.
reqs=(mcp_servers/requirements.txt)
[ "$want_test" = 0 ] || [ ! -f tests/acp/requirements.txt ] || reqs+=(tests/acp/requirements.txt)

install_acp_npm() {
  log "npm packages for the ACP test client"
  (cd tests/acp && { [ -d node_modules ] || npm ci --no-audit --no-fund --loglevel=error; })
}

install_mcp_npm() {
  log "npm packages for MCP test servers"
  (cd mcp_servers && { [ -d node_modules ] || npm ci --no-audit --no-fund --loglevel=error; })
}

install_client_npm() {
  log "web client packages"
  (cd client && { [ -d node_modules ] || npm ci --no-audit --no-fund --loglevel=error; })
}

# The three installs are independent and mostly wait on the registries and the disk: they run
# at once, each into its own log, printed in this order once all have ended; any failure (its
# one-line message is in its log) stops set-up.
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
names=()
pids=()
start() {
  "$2" >"$logs/$1" 2>&1 &
  names+=("$1")
  pids+=("$!")
}
[ ! -f mcp_servers/requirements.txt ] || start python install_python_venv
[ "$want_test" = 0 ] || [ ! -f mcp_servers/package.json ] || start mcp_npm install_mcp_npm
[ "$want_test" = 0 ] || [ ! -f tests/acp/package.json ] || start acp_npm install_acp_npm
[ ! -f client/package.json ] || start client_npm install_client_npm
installs_ok=1
for i in "${!pids[@]}"; do
  if wait "${pids[$i]}"; then
    cat "$logs/${names[$i]}"
  else
    installs_ok=0
    cat "$logs/${names[$i]}" >&2
  fi
done
[ "$installs_ok" = 1 ] || exit 1

if [ "$want_browser" = 1 ] && [ ! -x /usr/bin/chromium ]; then
  log "Debian chromium for browser tests"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq chromium >/dev/null
fi
