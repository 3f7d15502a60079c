#!/usr/bin/env bash
# Session 21 call 7: transformers beside the new 0.6B step at context 1 (hf_peers.py, eager and
# StaticCache + torch.compile), then `tessera bench --positions 1 --peers` in the same call.
set -uo pipefail
ROOT=${OUT:-/tmp/out}
export OUT=$ROOT/p
source .gpu/device-env.sh > /dev/null 2>&1
source scripts/device_ckpt.sh
mkdir -p $OUT
ensure_ckpt 0.6b "$OUT/hf-0.6b.log"
echo "=== [$(date +%T)] hf_peers"
timeout 170 python3 .gpu/hf_peers.py --model /tmp/q06 --out /tmp/q06/peers.json --contexts 1 --prompts none --steps 128 --repeats 3 > $OUT/peers.log 2>&1; echo rc=$?
tail -8 $OUT/peers.log; cp /tmp/q06/peers.json $OUT/ 2>/dev/null
echo "=== [$(date +%T)] bench"
timeout 60 env TESSERA_CACHE_DIR=/tmp/tc .gpu/bin/tessera bench --model /tmp/q06 --positions 1 --prompts none --peers /tmp/q06/peers.json --json $OUT/bench.json > $OUT/bench.log 2>&1; echo rc=$?
sed -n '/^tessera bench/,$p' $OUT/bench.log | head -20
echo "=== [$(date +%T)] done"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' . && mv /tmp/all.tgz $ROOT/all.tgz
