#!/usr/bin/env bash
# Installs everything CashCode needs on a fresh Debian machine (idempotent):
# the Python MCP SDK for mcp_servers/, npm packages for the web client and the MCP test
# servers, and (with --browser) Debian's chromium for the browser tests.
set -euo pipefail
cd "$(dirname "$0")/.."

want_browser=0
for a in "$@"; do [ "$a" = "--browser" ] && want_browser=1; done

log() { printf '\n== %s\n' "$*"; }

if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo is required (https://rustup.rs)" >&2
  exit 1
fi

if [ -f mcp_servers/requirements.txt ]; then
  log "Python MCP SDK (mcp_servers/requirements.txt)"
  if ! python3 -c 'import mcp' >/dev/null 2>&1 || ! python3 - <<'PY' >/dev/null 2>&1
import importlib.metadata as m, re, sys
req = open("mcp_servers/requirements.txt").read()
pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==([^\s#]+)", req, re.M))
sys.exit(0 if all(m.version(k) == v for k, v in pins.items()) else 1)
PY
  then
    python3 -m pip install --quiet --disable-pip-version-check -r mcp_servers/requirements.txt
  fi
fi

if [ -f mcp_servers/package.json ]; then
  log "npm packages for MCP test servers"
  (cd mcp_servers && { [ -d node_modules ] || npm ci --no-audit --no-fund --loglevel=error; })
fi

if [ -f client/package.json ]; then
  log "web client packages"
  (cd client && { [ -d node_modules ] || npm ci --no-audit --no-fund --loglevel=error; })
fi

if [ "$want_browser" = 1 ] && [ ! -x /usr/bin/chromium ]; then
  log "Debian chromium for browser tests"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq chromium >/dev/null
fi
