#!/usr/bin/env bash
# Session 25 call 3 (binary in .gpu/commit: early loads and warp reductions of replicated
# rows on by default, 4 tokens a readback): compute-sanitizer memcheck and racecheck on the
# decode step at position 0 (the attention inside o_proj) and racecheck at 256 (the split
# attention); transformers eager and compiled at 0.6B (contexts 1 and 512), the real-shape
# test at 0.6B, and `tessera bench` at 0.6B with those peers.
set -uo pipefail
T0=$(date +%s)
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
ensure_ckpt 0.6b "$ROOT/hf-0.6b.log"
d=$(ckpt_dir 0.6b)
cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
for run in "memcheck 0" "racecheck 0" "racecheck 256"; do
  set -- $run
  echo "=== [$(date +%T)] $1 at position $2"
  timeout 200 "$cs" --tool $1 --error-exitcode 9 .gpu/bin/tessera tune --model $d --tokens 2 --position $2 --watchdog-ms 120000 > $ROOT/sanitize-$1-p$2.log 2>&1; echo rc=$?
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^\| [0-9]" $ROOT/sanitize-$1-p$2.log | head -3
done
echo "=== [$(date +%T)] hf_peers 0.6b"
timeout 240 python3 .gpu/hf_peers.py --model $d --out $d/peers.json --contexts 1,512 --prompts none --steps 128 --repeats 3 > $ROOT/peers-0.6b.log 2>&1; echo rc=$?
tail -4 $ROOT/peers-0.6b.log; cp $d/peers.json $ROOT/peers-0.6b.json 2>/dev/null
echo "=== [$(date +%T)] real shape 0.6b"
timeout 120 env TESSERA_HF_CKPT=$d TESSERA_CACHE_DIR=/tmp/tc .gpu/bin/test-gpu_decode --ignored --exact gpu_megakernel_matches_transformers_at_real_shape --nocapture > $ROOT/real-0.6b.log 2>&1; echo rc=$?
grep -E "first-logit|greedy|test result|panicked" $ROOT/real-0.6b.log | head -6
peers=(); [[ -f $d/peers.json ]] && peers=(--peers $d/peers.json)
left=$(( 585 - ($(date +%s) - T0) ))
echo "=== [$(date +%T)] bench 0.6b (limit ${left}s)"
timeout $left env TESSERA_CACHE_DIR=$(mktemp -d) .gpu/bin/tessera bench --model $d "${peers[@]}" --json $ROOT/bench-0.6b.json > $ROOT/bench-0.6b.log 2>&1; echo rc=$?
sed -n '/^tessera bench/,$p' $ROOT/bench-0.6b.log | head -30
echo "=== [$(date +%T)] done"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' . && mv /tmp/all.tgz $ROOT/all.tgz
