#!/usr/bin/env bash
# `dot` on the GPU, in ONE device call (about 4 minutes), over binaries built here by
# scripts/pack_gpu.sh (carried in .gpu/). Writes logs and JSON lines under $OUT:
#   tests.log     the dot GPU tests (tests/dot_kernels.rs, `--ignored`)
#   examples.log  the matmul and attention examples' self-checks (odd sizes, vs f64)
#   dot.jsonl     tessera vs Triton's tutorial matmul / torch.matmul, and vs torch SDPA,
#                 one JSON object per line, all measured in this call on this GPU
#   device run: carry [".gpu"], command: bash scripts/device_dot.sh
set -uo pipefail
source .gpu/device-env.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache RUST_BACKTRACE=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
cp .gpu/commit "$OUT/commit" 2>/dev/null; echo "commit: $(cat .gpu/commit 2>/dev/null)"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit --format=csv > "$OUT/gpu.csv" 2>&1
status=0
t0=$SECONDS
step() { echo "[$((SECONDS - t0))s] $*"; }

step "dot GPU tests"
t=.gpu/bin/test-dot_kernels
if [[ -x $t ]]; then
  timeout 180 "$t" --ignored --test-threads=1 2>&1 | tee "$OUT/tests.log" | grep -E "^test |test result|panicked" || status=1
else
  echo "missing $t (run scripts/pack_gpu.sh)"; status=1
fi

step "examples (self-checks)"
for e in matmul attention; do
  echo "=== example $e" >> "$OUT/examples.log"
  timeout 150 ".gpu/bin/$e" >> "$OUT/examples.log" 2>&1 || { status=1; echo "example $e FAILED"; }
done
tail -12 "$OUT/examples.log"

J="$OUT/dot.jsonl"; : > "$J"
bench() {  # bench <timeout> <cmd...>: one JSON line on stdout, the rest to the log
  timeout "$1" "${@:2}" >> "$J" 2>> "$OUT/bench.log" || { status=1; echo "FAILED: ${*:2}" | tee -a "$OUT/bench.log"; }
}
for mnk in "4096 4096 4096" "8192 8192 8192" "4000 4100 4200"; do
  step "matmul $mnk"
  bench 60 .gpu/bin/matmul --bench $mnk
  bench 60 python3 .gpu/dot_peers.py matmul $mnk
done
for c in "" "--causal"; do
  step "attention 4 32 4096 128 $c"
  bench 60 .gpu/bin/attention --bench 4 32 4096 128 $c
  bench 60 python3 .gpu/dot_peers.py attention 4 32 4096 128 $c
done
step "done"
cat "$J"
exit $status
