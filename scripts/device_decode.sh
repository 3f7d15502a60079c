#!/usr/bin/env bash
# The Qwen3 megakernel decoder on the GPU machine, in ONE device call, over binaries built
# here by scripts/pack_gpu.sh (carried in .gpu/: bin/tessera, bin/test-gpu_decode,
# bin/test-gpu_ops, hf_reference.py, hf_peers.py, device-env.sh).
#   device run: carry [".gpu"], command: bash scripts/device_decode.sh [GROUP...]
# Groups, in the order they run (default: all of them; most important first, so a call cut
# short by the device's time limit still returns the key results in $OUT):
#   committed  GPU tests on the committed checkpoints: megakernel = kernels engine,
#              transformers' greedy tokens, one launch per token, Gumbel sampling
#   0.6b 1.7b 4b 8b
#              hf_reference.py writes /tmp/q06 (q17, q4, q8): a random-weight Qwen3 at that
#              shape, its fp32 oracle and transformers' bf16 error (expected.json);
#              hf_peers.py times transformers (eager, static cache + torch.compile) at the
#              bench's contexts (peers.json; PEERS=0 skips it); the real-shape GPU test
#              (TESSERA_HF_CKPT); `tessera bench` with those peers (BENCH=0 skips it)
#   generate   one `tessera generate` (the megakernel is the default engine on a GPU)
#   kernels    the ops and the kernels engine on the GPU against the interpreter (test-gpu_ops)
#   sanitize   compute-sanitizer memcheck and racecheck on the decode megakernel at the 0.6B
#              shape (two timed steps of `tessera tune`; the watchdog raised, since the
#              instrumented step takes seconds)
# Every step is logged under $OUT (one .log each, decode.log for the summary); a failed
# step is reported and the script goes on.
set -uo pipefail
groups=("$@")
[[ ${#groups[@]} == 0 || ${groups[0]} == all ]] && groups=(committed 0.6b 1.7b generate kernels)
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
source .gpu/device-env.sh > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
export RUST_BACKTRACE=1
cp .gpu/commit "$OUT/commit" 2>/dev/null || true
cp .gpu/origin "$OUT/origin" 2>/dev/null || true

failed=()
# step NAME TIMEOUT_S CMD...: runs CMD with a time limit, its output in $OUT/NAME.log.
step() {
  local name=$1 limit=$2
  shift 2
  echo "=== [$(date +%T)] $name: $*" | tee -a "$OUT/decode.log"
  timeout --signal=KILL "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "--- [$(date +%T)] $name: rc=$rc" | tee -a "$OUT/decode.log"
  grep -E "^test |test result|panicked|error|relative|greedy|ms/token|GB/s|NVRTC|first token|^[|]" \
    "$OUT/$name.log" | tail -n 40
  [[ $rc == 0 ]] || failed+=("$name (rc=$rc)")
}

source scripts/device_ckpt.sh
test_cache=/tmp/tessera-cache-tests

for g in "${groups[@]}"; do
  case $g in
  committed)
    step gpu-megakernel 300 env -u TESSERA_HF_CKPT TESSERA_CACHE_DIR=$test_cache \
      .gpu/bin/test-gpu_decode --ignored --test-threads=1 --nocapture
    ;;
  0.6b | 1.7b | 4b | 8b)
    d=$(ckpt_dir "$g")
    # A checkpoint written earlier in the same call (e.g. by device_ab.sh) is kept.
    ensure_ckpt "$g" "$OUT/hf-$g.log" || failed+=("hf-$g")
    cp "$d/expected.json" "$OUT/expected-$g.json" 2>/dev/null
    if [[ ! -f $d/expected.json ]]; then
      echo "skip the $g GPU test and bench: no $d/expected.json" | tee -a "$OUT/decode.log"
      failed+=("$g: no checkpoint")
      continue
    fi
    # transformers' ms/token at 1, 512, 2048, 8192 (peers.json is rewritten after each
    # measurement, so a run cut short still leaves what it finished).
    [[ ${PEERS:-1} != 0 ]] && step "peers-$g" 420 python3 .gpu/hf_peers.py --model "$d" --out "$d/peers.json"
    cp "$d/peers.json" "$OUT/peers-$g.json" 2>/dev/null
    step "gpu-megakernel-$g" 300 env TESSERA_HF_CKPT="$d" TESSERA_CACHE_DIR=$test_cache \
      .gpu/bin/test-gpu_decode --ignored --exact gpu_megakernel_matches_transformers_at_real_shape --nocapture
    [[ ${BENCH:-1} == 0 ]] && continue
    peers=()
    [[ -f $d/peers.json ]] && peers=(--peers "$d/peers.json")
    # A fresh NVRTC cache, so the reported time to first token includes a cold compile.
    step "bench-$g" 300 env TESSERA_CACHE_DIR="$(mktemp -d)" .gpu/bin/tessera bench \
      --model "$d" "${peers[@]}" --json "$OUT/bench-$g.json"
    sed -n '/^tessera bench/,$p' "$OUT/bench-$g.log" > "$OUT/bench-$g.md" 2>/dev/null
    ;;
  generate)
    if [[ -f /tmp/q06/config.json ]]; then
      step generate-0.6b 120 env TESSERA_CACHE_DIR=$test_cache .gpu/bin/tessera generate \
        --model /tmp/q06 --prompt-ids 1,2,3,4,5,6,7,8 --max-new-tokens 64 --json
    fi
    ;;
  kernels)
    step gpu-kernels 300 env TESSERA_CACHE_DIR=$test_cache \
      .gpu/bin/test-gpu_ops --ignored --test-threads=1 --nocapture
    ;;
  sanitize)
    ensure_ckpt 0.6b "$OUT/hf-0.6b.log" || failed+=("hf-0.6b")
    cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
    for tool in memcheck racecheck; do
      step "sanitize-decode-$tool" 280 "$cs" --tool $tool --error-exitcode 9 .gpu/bin/tessera tune \
        --model /tmp/q06 --tokens 2 --watchdog-ms 120000
      grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/sanitize-decode-$tool.log" | tee -a "$OUT/decode.log"
    done
    ;;
  *)
    echo "unknown group $g (all, committed, 0.6b, 1.7b, 4b, 8b, generate, kernels, sanitize)" | tee -a "$OUT/decode.log"
    ;;
  esac
done

echo "=== failed steps: ${#failed[@]}" | tee -a "$OUT/decode.log"
for f in "${failed[@]}"; do echo "  $f" | tee -a "$OUT/decode.log"; done
cat "$OUT"/bench-*.md 2>/dev/null
tar_out
exit 0
