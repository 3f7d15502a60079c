#!/usr/bin/env bash
# Session 32 call 15. Binary as call 14 (main's default code). On the H200, 0.6B position 1:
# a sweep of the knobs tuned on the H100 (wait prefetch 2/4/8 MiB, 32/64 elements a thread,
# 8/16 warps), twice.
set -uo pipefail
T0=$(date +%s)
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
ensure_ckpt 0.6b "$ROOT/hf-0.6b.log"
d=$(ckpt_dir 0.6b)
for r in 1 2; do
  echo "=== [$(date +%T)] sweep rep $r"
  timeout 200 .gpu/bin/tessera tune --model $d --position 1 --tokens 128 --wait-prefetch-mib 2,4,8 --elems 32,64 --warps 8,16 > $ROOT/sweep-$r.md 2>&1; echo rc=$?
  grep -E "^\| [0-9]" $ROOT/sweep-$r.md
done
echo "=== [$(date +%T)] done ($(( $(date +%s) - T0 )) s)"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' --exclude=stdout.txt . && mv /tmp/all.tgz $ROOT/all.tgz && find $ROOT -mindepth 1 -maxdepth 1 ! -name all.tgz ! -name stdout.txt -exec rm -rf {} +
