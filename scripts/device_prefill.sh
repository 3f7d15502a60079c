#!/usr/bin/env bash
# Prefill on the GPU, in ONE device call, over binaries built here by scripts/pack_gpu.sh
# (carried in .gpu/: test-gpu_prefill, tessera, hf_reference.py, hf_peers.py, device-env.sh).
#   device run: carry [".gpu"], command: bash scripts/device_prefill.sh [GROUP...]
# Groups, in the order they run (default: committed 0.6b 4b; most important first, so a call
# cut short by the device's time limit still returns the key results in $OUT):
#   committed  GPU prefill tests on the committed checkpoints (model/tests/gpu_prefill.rs):
#              GPU prefill = interpreter = token by token, chunked = one chunk, decode after
#              prefill, transformers' greedy tokens through `generate`
#   0.6b 4b    (also 1.7b, 8b) hf_reference.py writes the random-weight checkpoint of that
#              shape (/tmp/q06, /tmp/q4; kept if already there) with its fp32 oracle and
#              transformers' bf16 error; the real-shape prefill test (TESSERA_HF_CKPT); then
#              hf_peers.py times transformers' prefill (bf16, sdpa, one forward over the
#              prompt, median of 5) at 128, 512, 2048, 8192 tokens (PEERS=0 skips it;
#              DECODE_PEERS=1 also times its decode, minutes more); then `tessera bench` with
#              those peers: time to first token and prompt tokens/s at the same lengths, the
#              GEMM-bound floor, and decode at context 1 (BENCH=0 skips it)
# Writes under $OUT: prefill.log (the summary), one .log per step, expected-SHAPE.json,
# peers-SHAPE.json, bench-SHAPE.{json,md,svg}. A failed step is reported and the script goes on.
set -uo pipefail
groups=("$@")
[[ ${#groups[@]} == 0 || ${groups[0]} == all ]] && groups=(committed 0.6b 4b)
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
source .gpu/device-env.sh > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
export RUST_BACKTRACE=1
cp .gpu/commit "$OUT/commit" 2>/dev/null || true
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit --format=csv > "$OUT/gpu.csv" 2>&1

failed=()
# step NAME TIMEOUT_S CMD...: runs CMD with a time limit, its output in $OUT/NAME.log.
step() {
  local name=$1 limit=$2
  shift 2
  echo "=== [$(date +%T)] $name: $*" | tee -a "$OUT/prefill.log"
  timeout --signal=KILL "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "--- [$(date +%T)] $name: rc=$rc" | tee -a "$OUT/prefill.log"
  grep -E "^test |test result|panicked|error|prefill|relative|greedy|TTFT|first token|ms |^[|]" \
    "$OUT/$name.log" | tail -n 40
  [[ $rc == 0 ]] || failed+=("$name (rc=$rc)")
}

source scripts/device_ckpt.sh
test_cache=/tmp/tessera-cache-tests
t=.gpu/bin/test-gpu_prefill
[[ -x $t ]] || { echo "missing $t (run scripts/pack_gpu.sh)" | tee -a "$OUT/prefill.log"; failed+=("no $t"); }

for g in "${groups[@]}"; do
  case $g in
  committed)
    step gpu-prefill 300 env -u TESSERA_HF_CKPT TESSERA_CACHE_DIR=$test_cache \
      "$t" --ignored --test-threads=1 --nocapture
    ;;
  0.6b | 1.7b | 4b | 8b)
    d=$(ckpt_dir "$g")
    ensure_ckpt "$g" "$OUT/hf-$g.log" || failed+=("hf-$g")
    cp "$d/expected.json" "$OUT/expected-$g.json" 2>/dev/null
    if [[ ! -f $d/expected.json ]]; then
      echo "skip the $g prefill test and bench: no $d/expected.json" | tee -a "$OUT/prefill.log"
      failed+=("$g: no checkpoint")
      continue
    fi
    step "gpu-prefill-$g" 300 env TESSERA_HF_CKPT="$d" TESSERA_CACHE_DIR=$test_cache \
      "$t" --ignored --exact gpu_prefill_matches_transformers_at_real_shape --nocapture
    peers_json="$d/peers-prefill.json"
    if [[ ${PEERS:-1} != 0 ]]; then
      decode=(--no-eager --no-compile --contexts 1)
      [[ ${DECODE_PEERS:-0} == 1 ]] && decode=(--no-compile)
      step "peers-$g" 300 python3 .gpu/hf_peers.py --model "$d" --out "$peers_json" \
        --prompts 128,512,2048,8192 --prefill-repeats 5 "${decode[@]}"
      cp "$peers_json" "$OUT/peers-$g.json" 2>/dev/null
    fi
    [[ ${BENCH:-1} == 0 ]] && continue
    peers=()
    [[ -f $peers_json ]] && peers=(--peers "$peers_json")
    step "bench-$g" 300 env TESSERA_CACHE_DIR=$test_cache .gpu/bin/tessera bench \
      --model "$d" "${peers[@]}" --positions 1 --tokens 32 --no-kernels \
      --prompts 128,512,2048,8192 --prefill-repeats 5 --json "$OUT/bench-$g.json" \
      --plot "$OUT/bench-$g.svg"
    sed -n '/^tessera bench/,$p' "$OUT/bench-$g.log" > "$OUT/bench-$g.md" 2>/dev/null
    ;;
  *)
    echo "unknown group $g (all, committed, 0.6b, 1.7b, 4b, 8b)" | tee -a "$OUT/prefill.log"
    ;;
  esac
done

echo "=== failed steps: ${#failed[@]}" | tee -a "$OUT/prefill.log"
for f in "${failed[@]}"; do echo "  $f" | tee -a "$OUT/prefill.log"; done
cat "$OUT"/bench-*.md 2>/dev/null
exit 0
