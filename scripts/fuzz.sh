#!/usr/bin/env bash
# Long runs of every property test (the fuzz targets: cargo-fuzz needs nightly, which this project
# does not use). Each target runs in release with its own case count times SCALE, on SEED.
#   scripts/fuzz.sh            # SCALE=1 (millions of cases, a few minutes on 2 cores)
#   SCALE=10 SEED=42 scripts/fuzz.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SCALE="${SCALE:-1}"
SEED="${SEED:-$(date +%s)}"
targets=(
  "ws::protocol::property::random_frames_never_panic 2000000"
  "llm::sse::property::random_streams_never_panic 2000000"
  "http::property::random_requests_get_clean_answers 50000"
  "mcp::fuzz::jsonrpc_decoding_never_panics_and_round_trips 1000000"
  "mcp::fuzz::inbox_routes_random_frames_safely 500000"
  "mcp::fuzz::sse_reader_never_panics_or_invents_data 1000000"
  "skills::fuzz::frontmatter_parser_never_panics_and_keeps_its_invariants 200000"
  "skills::fuzz::zip_importer_never_panics_and_never_leaves_files 20000"
)
cargo test --release --lib --no-run
echo "seed $SEED, scale $SCALE"
failed=0
for t in "${targets[@]}"; do
  name="${t% *}"
  cases=$(( ${t##* } * SCALE ))
  start=$(date +%s)
  if ! out=$(CASHCODE_FUZZ_SEED="$SEED" CASHCODE_FUZZ_CASES="$cases" \
    cargo test --release --lib "$name" -- --exact --nocapture 2>&1); then
    failed=1
  fi
  grep -E "property test|test result|panicked" <<<"$out" || true
  echo "== $name: $cases cases in $(( $(date +%s) - start )) s"
done
exit "$failed"
