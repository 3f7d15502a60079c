#!/usr/bin/env bash
# Session 24 call 5 (binary 88c267d; decode step byte-identical to the session's start):
# the step with every wait left out (`tune --no-waits`, the stream and compute ceiling)
# beside the default, each also launched back to back (`--launch-only`), 0.6B positions 1
# and 512, 2 runs; one profile with no waits; then transformers (eager and compiled) at 4B,
# contexts 1 and 512, and `tessera bench` at 4B with them.
set -uo pipefail
T0=$(date +%s)
ROOT=${OUT:-/tmp/out}
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
export TESSERA_CACHE_DIR=/tmp/tessera-cache
source scripts/device_ckpt.sh
ensure_ckpt 0.6b "$ROOT/hf-0.6b.log"
d06=$(ckpt_dir 0.6b)
for rep in 1 2; do for p in 1 512; do for nw in "" "--no-waits"; do
  tag=p$p${nw:+-nw}-$rep
  timeout 120 .gpu/bin/tessera tune --model $d06 --tokens 128 --position $p --launch-only $nw > $ROOT/t-$tag.md 2> $ROOT/t-$tag.err
  echo "$tag rc=$? decode $(grep -E '^\| [0-9]' $ROOT/t-$tag.md | cut -d'|' -f2) $(grep -o 'between steps: [0-9.]* ms/step' $ROOT/t-$tag.md)"
done; done; done
timeout 120 .gpu/bin/tessera tune --model $d06 --tokens 64 --no-waits --profile > $ROOT/profile-nw.md 2> $ROOT/profile-nw.err
echo "profile no waits rc=$?"; grep -E "^\| stage" $ROOT/profile-nw.md | cut -d'|' -f2-5,10-15
echo "=== [$(date +%T)] 4b"
ensure_ckpt 4b "$ROOT/hf-4b.log"
d4=$(ckpt_dir 4b)
left=$(( 540 - ($(date +%s) - T0) ))
echo "=== [$(date +%T)] hf_peers 4b (limit $((left - 50))s)"
timeout $((left - 50)) python3 .gpu/hf_peers.py --model $d4 --out $d4/peers.json --contexts 1,512 --prompts none --steps 128 --repeats 3 > $ROOT/peers-4b.log 2>&1; echo rc=$?
tail -5 $ROOT/peers-4b.log; cp $d4/peers.json $ROOT/peers-4b.json 2>/dev/null
peers=(); [[ -f $d4/peers.json ]] && peers=(--peers $d4/peers.json)
left=$(( 585 - ($(date +%s) - T0) ))
echo "=== [$(date +%T)] bench 4b (limit ${left}s)"
timeout $left env TESSERA_CACHE_DIR=$(mktemp -d) .gpu/bin/tessera bench --model $d4 "${peers[@]}" --json $ROOT/bench-4b.json > $ROOT/bench-4b.log 2>&1; echo rc=$?
sed -n '/^tessera bench/,$p' $ROOT/bench-4b.log | head -16
echo "=== [$(date +%T)] done"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' . && mv /tmp/all.tgz $ROOT/all.tgz
