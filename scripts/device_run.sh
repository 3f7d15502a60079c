#!/usr/bin/env bash
# Runs on the GPU machine in ONE device call, over binaries built here by
# ../shared/gpu/pack.sh (carried in .gpu/). Writes logs and JSON under $OUT.
#   device run: carry [".gpu"], command: bash scripts/device_run.sh [tests|examples|bench|all]
set -uo pipefail
what=${1:-all}
source .gpu/device-env.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache RUST_BACKTRACE=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
git rev-parse --short HEAD 2>/dev/null | tee "$OUT/commit" || true
status=0
if [[ $what == all || $what == tests ]]; then
  for t in .gpu/bin/test-*; do
    # Proc-macro test binaries link libstd dynamically and cannot run there; they hold no GPU tests.
    ldd "$t" | grep -q "not found" && continue
    echo "=== $t --ignored" | tee -a "$OUT/tests.log"
    "$t" --ignored --test-threads=1 2>&1 | tee -a "$OUT/tests.log" | grep -E "^test |test result|panicked|error" || status=1
  done
fi
if [[ $what == all || $what == examples ]]; then
  for e in vector_add rmsnorm softmax gemv add_rmsnorm toy_megakernel; do
    echo "=== example $e" | tee -a "$OUT/examples.log"
    ".gpu/bin/$e" 2>&1 | tee -a "$OUT/examples.log" || status=1
  done
fi
if [[ $what == all || $what == bench ]]; then
  .gpu/bin/bench_ops > "$OUT/ours.json" 2> "$OUT/bench_ops.log" || { status=1; cat "$OUT/bench_ops.log"; }
  .gpu/bin/bench_sync > "$OUT/mega_sync.json" 2> "$OUT/bench_sync.log" || { status=1; cat "$OUT/bench_sync.log"; }
  python3 scripts/bench_peers.py > "$OUT/peers.json" 2> "$OUT/peers.log" || { status=1; tail -20 "$OUT/peers.log"; }
  cat "$OUT/ours.json" "$OUT/peers.json"
fi
exit $status
