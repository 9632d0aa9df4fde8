#!/usr/bin/env bash
# Runs every test: formatting and lints, the dependency policy (cargo-deny, deny.toml), the Rust
# unit and integration tests (real binary, fake LLM, real MCP servers), the core suites again
# against the build without TLS and OAuth signing (--no-default-features), the web client's unit
# tests and its browser tests in headless Debian chromium. Prints one summary line at the end.
set -uo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never

# Set up as on a stock Debian/Ubuntu machine: the system's own python3 (externally managed,
# PEP 668) first on PATH when there is one, so the MCP SDK must come from .venv/. Only python3
# is shadowed; cargo and node stay the ones on PATH.
setup_path=$PATH
if [ -x /usr/bin/python3 ]; then
  shim="$(mktemp -d)"
  ln -s /usr/bin/python3 "$shim/python3"
  setup_path="$shim:$PATH"
fi
PATH=$setup_path bash scripts/setup.sh --test --browser --audit
setup_status=$?
[ -z "${shim:-}" ] || rm -rf "$shim"
[ "$setup_status" = 0 ] || { echo "setup failed"; exit 1; }

passed=0; failed=0; status=0
log="$(mktemp)"
section() { printf '\n== %s\n' "$*"; }
count_cargo() {
  while read -r p f; do passed=$((passed + p)); failed=$((failed + f)); done < <(
    grep -E '^test result: ' "$log" | sed -E 's/.* ([0-9]+) passed; ([0-9]+) failed.*/\1 \2/')
}

section "cargo fmt --check"
cargo fmt --all -- --check || status=1

section "cargo clippy"
cargo clippy --all-targets --quiet -- -D warnings || status=1

# nextest prints one `Summary [..] N tests run: N passed (N slow), N failed, N timed out, ...`.
count_nextest() {
  local line p f t
  line=$(grep -E 'Summary \[.*[0-9]+ tests? run:' "$log" | tail -1)
  p=$(grep -oE '[0-9]+ passed' <<<"$line" | grep -oE '[0-9]+' || true)
  f=$(grep -oE '[0-9]+ failed' <<<"$line" | grep -oE '[0-9]+' || true)
  t=$(grep -oE '[0-9]+ timed out' <<<"$line" | grep -oE '[0-9]+' || true)
  passed=$((passed + ${p:-0})); failed=$((failed + ${f:-0} + ${t:-0}))
}

section 'docs: every `docs/<file>.md §N` citation names a section that exists'
bash scripts/check-doc-citations.sh || status=1

section "cargo deny: advisories, licences, bans, sources (deny.toml)"
bash scripts/deny.sh || status=1

section "SBOM: the release's CycloneDX components equal Cargo.lock's packages (scripts/sbom.py)"
sbom="$(mktemp)"
{ python3 scripts/sbom.py "$sbom" && python3 scripts/sbom.py --check "$sbom"; } || status=1
rm -f "$sbom"

# Unit, integration and real-MCP tests in one pool (.config/nextest.toml), then the benches'
# smoke runs (`harness = false` binaries nextest cannot list; they print no test counts).
section "cargo nextest"
cargo nextest run --lib --bins --tests --no-fail-fast 2>&1 | tee "$log"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
count_nextest

# `--bench '*'`: the bench targets only (`--benches` would run the library's unit tests again).
section "cargo test --bench '*' (smoke runs)"
cargo test --bench '*' --no-fail-fast 2>&1 | tee "$log"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
count_cargo

# The same target directory: only crates whose features differ (ureq, ours) build again.
section "cargo test --no-default-features: the build for local models (no TLS, no OAuth signing)"
cargo test --no-default-features --lib --test all --no-fail-fast -- \
  suite::ws_turns:: suite::skills_wire:: suite::startup:: suite::memory_api:: suite::llm_settings::https_endpoints_need_the_tls_feature \
  suite::http_api:: suite::shutdown:: util:: skills:: mcp::auth:: 2>&1 | tee "$log"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
count_cargo

section "cargo test: the vendored tiny_http patch (vendor/tiny_http/PATCHES.md)"
CARGO_TARGET_DIR=target/vendor-tiny-http cargo test --locked --manifest-path vendor/tiny_http/Cargo.toml 2>&1 | tee "$log"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
count_cargo

if [ -f client/package.json ]; then
  section "web client: build, lint and unit tests"
  (cd client && npm run build --silent) || status=1
  (cd client && npm run lint --silent) || status=1
  (cd client && NO_COLOR=1 FORCE_COLOR=0 npm test --silent) 2>&1 | sed 's/\x1b\[[0-9;]*m//g' | tee "$log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
  p=$(grep -oE 'Tests +[0-9]+ passed' "$log" | grep -oE '[0-9]+' | tail -1); passed=$((passed + ${p:-0}))
  f=$(grep -oE 'Tests +.*[0-9]+ failed' "$log" | grep -oE '[0-9]+ failed' | grep -oE '[0-9]+' | tail -1); failed=$((failed + ${f:-0}))

  if grep -q '"e2e"' client/package.json; then
    section "web client: browser tests (headless chromium)"
    cargo build --quiet
    (cd client && npm run e2e --silent) 2>&1 | tee "$log"
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
    p=$(grep -E '^# pass ' "$log" | awk '{s+=$3} END {print s+0}'); passed=$((passed + p))
    f=$(grep -E '^# fail ' "$log" | awk '{s+=$3} END {print s+0}'); failed=$((failed + f))
  fi
fi

rm -f "$log"
if [ "$status" != 0 ] && [ "$failed" = 0 ]; then failed=1; fi
echo
echo "tests: $passed passed, $failed failed"
exit "$status"
