#!/usr/bin/env bash
# Sets up, builds (web client + release server) and starts CashCode:
#   HTTP + web client on http://127.0.0.1:8000/, WebSocket on ws://127.0.0.1:8765/.
# Extra arguments go to the server (see `cashcode --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ -f client/package.json ]; then
  (cd client && npm run build --silent)
fi
cargo build --release --quiet
exec ./target/release/cashcode "$@"
