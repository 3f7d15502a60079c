#!/usr/bin/env bash
# Runs on the GPU machine in ONE device call, over binaries built here by
# scripts/pack_gpu.sh (carried in .gpu/). Writes logs and JSON under $OUT.
#   device run: carry [".gpu"], command: bash scripts/device_run.sh [tests|examples|sanitize|bench|all]
set -uo pipefail
what=${1:-all}
source .gpu/device-env.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache RUST_BACKTRACE=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
cp .gpu/commit "$OUT/commit" 2>/dev/null; echo "commit: $(cat .gpu/commit 2>/dev/null)"
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
if [[ $what == all || $what == sanitize ]]; then
  # compute-sanitizer: memcheck and racecheck on the toy megakernel; memcheck on every
  # shipped kernel's GPU test (odd sizes, padding lanes).
  cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
  for tool in memcheck racecheck; do
    "$cs" --tool $tool --error-exitcode 9 .gpu/bin/toy_megakernel --layers 2 --d 256 --f 512 > "$OUT/sanitize-toy-$tool.log" 2>&1
    rc=$?; echo "compute-sanitizer $tool toy_megakernel: rc=$rc ($(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitize-toy-$tool.log" | tail -1))" | tee -a "$OUT/sanitize.log"
    [[ $rc == 0 ]] || status=1
  done
  "$cs" --tool memcheck --error-exitcode 9 .gpu/bin/test-gpu_kernels --ignored --test-threads=1 > "$OUT/sanitize-kernels-memcheck.log" 2>&1
  rc=$?; echo "compute-sanitizer memcheck gpu_kernels tests: rc=$rc ($(grep -E 'ERROR SUMMARY' "$OUT/sanitize-kernels-memcheck.log" | tail -1))" | tee -a "$OUT/sanitize.log"
  [[ $rc == 0 ]] || status=1
fi
if [[ $what == all || $what == bench ]]; then
  .gpu/bin/bench_ops > "$OUT/ours.json" 2> "$OUT/bench_ops.log" || { status=1; cat "$OUT/bench_ops.log"; }
  .gpu/bin/bench_sync > "$OUT/mega_sync.json" 2> "$OUT/bench_sync.log" || { status=1; cat "$OUT/bench_sync.log"; }
  python3 scripts/bench_peers.py > "$OUT/peers.json" 2> "$OUT/peers.log" || { status=1; tail -20 "$OUT/peers.log"; }
  cat "$OUT/ours.json" "$OUT/peers.json"
fi
exit $status
