#!/usr/bin/env bash
# Session 23 call 2 (binary 2475ee5): the attention inside o_proj below one tile, now the default
# at 0.6B and 1.7B (head), against never (noino: TESSERA_ATTN_IN_O=0), and on top of it the
# MLP's wait in its body (wibm) and the MLP's and QKV's (wibq), 0.6B 4 reps at position 1;
# at 4B the specialisation forced (ino128) against the default, 2 reps; the real-shape test
# at 0.6B and 1.7B; transformers at context 1 and 512 and `tessera bench` at 0.6B.
set -uo pipefail
ROOT=${OUT:-/tmp/out}
export ROOT
run() {  # shape reps positions names...
  local shape=$1 reps=$2 positions=$3; shift 3
  for i in $(seq 1 $(( reps / 2 ))); do
    export OUT=$ROOT/$shape-ab$i
    PROBE=0 GENERATE=0 PROFILE=0 POSITIONS="$positions" bash scripts/device_ab.sh $shape "$@" -- --tokens 128 > $ROOT/$shape-ab$i.log 2>&1
    rm -f $OUT/all.tgz
  done
  for n in "$@"; do for p in $positions; do
    v=$(for f in $ROOT/$shape-ab*/tune-$n-p$p-*.md; do grep -E '^\| [0-9]' $f | head -1 | cut -d'|' -f2; done | sort -n | tr -d ' ' | tr '\n' ' ')
    echo "$shape $n p$p: $v"
  done; done
}
run 0.6b 4 "1" head noino wibm wibq
source .gpu/device-env.sh > /dev/null 2>&1
source scripts/device_ckpt.sh
export OUT=$ROOT/d
mkdir -p $OUT
for s in 0.6b 1.7b; do
  ensure_ckpt $s "$OUT/hf-$s.log"
  echo "=== [$(date +%T)] real shape $s"
  timeout 200 env TESSERA_HF_CKPT=$(ckpt_dir $s) TESSERA_CACHE_DIR=/tmp/tc .gpu/bin/test-gpu_decode --ignored --exact gpu_megakernel_matches_transformers_at_real_shape --nocapture > $OUT/real-$s.log 2>&1; echo rc=$?
  grep -E "first-logit|greedy|test result|panicked" $OUT/real-$s.log | tail -6
done
run 4b 2 "1" head ino128
d06=$(ckpt_dir 0.6b)
echo "=== [$(date +%T)] hf_peers"
timeout 240 python3 .gpu/hf_peers.py --model $d06 --out $d06/peers.json --contexts 1,512 --prompts none --steps 128 --repeats 3 > $OUT/peers.log 2>&1; echo rc=$?
tail -4 $OUT/peers.log; cp $d06/peers.json $OUT/ 2>/dev/null
echo "=== [$(date +%T)] bench"
timeout 200 env TESSERA_CACHE_DIR=$(mktemp -d) .gpu/bin/tessera bench --model $d06 --peers $d06/peers.json --json $OUT/bench-0.6b.json > $OUT/bench-0.6b.log 2>&1; echo rc=$?
sed -n '/^tessera bench/,$p' $OUT/bench-0.6b.log | head -30
echo "=== [$(date +%T)] done"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' . && mv /tmp/all.tgz $ROOT/all.tgz
