#!/usr/bin/env bash
# Session 22 call 3, on the landing binary (decode one step ahead by default): at 0.6B
# transformers at contexts 1 and 512 (hf_peers.py), `tessera bench` with them, the
# real-shape test; at 4B o_proj per head's row blocks spread (ohtiles) against the default,
# 4 reps, and the real-shape test with it.
set -uo pipefail
ROOT=${OUT:-/tmp/out}
export ROOT OUT=$ROOT/d
mkdir -p $OUT
source .gpu/device-env.sh > /dev/null 2>&1
source scripts/device_ckpt.sh
ensure_ckpt 0.6b "$OUT/hf-0.6b.log"
echo "=== [$(date +%T)] hf_peers"
timeout 240 python3 .gpu/hf_peers.py --model /tmp/q06 --out /tmp/q06/peers.json --contexts 1,512 --prompts none --steps 128 --repeats 3 > $OUT/peers.log 2>&1; echo rc=$?
tail -6 $OUT/peers.log; cp /tmp/q06/peers.json $OUT/ 2>/dev/null
echo "=== [$(date +%T)] bench"
timeout 200 env TESSERA_CACHE_DIR=$(mktemp -d) .gpu/bin/tessera bench --model /tmp/q06 --peers /tmp/q06/peers.json --json $OUT/bench-0.6b.json > $OUT/bench-0.6b.log 2>&1; echo rc=$?
sed -n '/^tessera bench/,$p' $OUT/bench-0.6b.log | head -40
echo "=== [$(date +%T)] real shape 0.6b"
timeout 200 env TESSERA_HF_CKPT=/tmp/q06 TESSERA_CACHE_DIR=/tmp/tc .gpu/bin/test-gpu_decode --ignored --exact gpu_megakernel_matches_transformers_at_real_shape --nocapture > $OUT/real-0.6b.log 2>&1; echo rc=$?
grep -E "first-logit|test result|panicked" $OUT/real-0.6b.log
export OUT=$ROOT/4b-ab1
PROBE=0 GENERATE=0 PROFILE=0 POSITIONS="1 512" bash scripts/device_ab.sh 4b head ohtiles -- --tokens 128 > $ROOT/4b-ab1.log 2>&1; rm -f $OUT/all.tgz
export OUT=$ROOT/4b-ab2
PROBE=0 GENERATE=0 PROFILE=0 POSITIONS="1 512" bash scripts/device_ab.sh 4b head ohtiles -- --tokens 128 > $ROOT/4b-ab2.log 2>&1; rm -f $OUT/all.tgz
for n in head ohtiles; do for p in 1 512; do
  v=$(for f in $ROOT/4b-ab*/tune-$n-p$p-*.md; do grep -E '^\| [0-9]' $f | head -1 | cut -d'|' -f2; done | sort -n | tr -d ' ' | tr '\n' ' ')
  echo "4b $n p$p: $v"
done; done
echo "=== [$(date +%T)] real shape 4b, o_proj per head's blocks spread"
d4=$(ckpt_dir 4b)
timeout 240 env TESSERA_O_HEADS_TILES=0 TESSERA_HF_CKPT=$d4 TESSERA_CACHE_DIR=/tmp/tc .gpu/bin/test-gpu_decode --ignored --exact gpu_megakernel_matches_transformers_at_real_shape --nocapture > $ROOT/real-4b-ohtiles.log 2>&1; echo rc=$?
grep -E "first-logit|test result|panicked" $ROOT/real-4b-ohtiles.log
echo "=== [$(date +%T)] done"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' . && mv /tmp/all.tgz $ROOT/all.tgz
