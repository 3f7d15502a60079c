#!/usr/bin/env bash
# Session 24 call 4 (binary 87eba88; its decode step is byte-identical to the session's
# start): the step launched back to back with no token read back between steps
# (`tune --launch-only`) beside the decode loop, at 0.6B positions 1 and 512, 4 runs;
# `tessera bench` at 0.6B (no peers); transformers (eager and compiled) at 1.7B, contexts 1
# and 512, then `tessera bench` at 1.7B with them.
set -uo pipefail
T0=$(date +%s)
ROOT=${OUT:-/tmp/out}
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
export TESSERA_CACHE_DIR=/tmp/tessera-cache
source scripts/device_ckpt.sh
ensure_ckpt 0.6b "$ROOT/hf-0.6b.log"
d06=$(ckpt_dir 0.6b)
for rep in 1 2 3 4; do for p in 1 512; do
  timeout 120 .gpu/bin/tessera tune --model $d06 --tokens 128 --position $p --launch-only > $ROOT/lo-p$p-$rep.md 2> $ROOT/lo-p$p-$rep.err
  echo "rep $rep p$p rc=$? decode $(grep -E '^\| [0-9]' $ROOT/lo-p$p-$rep.md | cut -d'|' -f2) $(grep -o 'between steps: [0-9.]* ms/step' $ROOT/lo-p$p-$rep.md)"
done; done
echo "=== [$(date +%T)] bench 0.6b"
timeout 200 env TESSERA_CACHE_DIR=$(mktemp -d) .gpu/bin/tessera bench --model $d06 --json $ROOT/bench-0.6b.json > $ROOT/bench-0.6b.log 2>&1; echo rc=$?
sed -n '/^tessera bench/,$p' $ROOT/bench-0.6b.log | head -24
echo "=== [$(date +%T)] 1.7b"
ensure_ckpt 1.7b "$ROOT/hf-1.7b.log"
d17=$(ckpt_dir 1.7b)
left=$(( 560 - ($(date +%s) - T0) ))
echo "=== [$(date +%T)] hf_peers 1.7b (limit $((left - 60))s)"
timeout $((left - 60)) python3 .gpu/hf_peers.py --model $d17 --out $d17/peers.json --contexts 1,512 --prompts none --steps 128 --repeats 3 > $ROOT/peers-1.7b.log 2>&1; echo rc=$?
tail -5 $ROOT/peers-1.7b.log; cp $d17/peers.json $ROOT/peers-1.7b.json 2>/dev/null
peers=(); [[ -f $d17/peers.json ]] && peers=(--peers $d17/peers.json)
echo "=== [$(date +%T)] bench 1.7b"
timeout 100 env TESSERA_CACHE_DIR=$(mktemp -d) .gpu/bin/tessera bench --model $d17 "${peers[@]}" --json $ROOT/bench-1.7b.json > $ROOT/bench-1.7b.log 2>&1; echo rc=$?
sed -n '/^tessera bench/,$p' $ROOT/bench-1.7b.log | head -24
echo "=== [$(date +%T)] done"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' . && mv /tmp/all.tgz $ROOT/all.tgz
