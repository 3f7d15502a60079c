#!/usr/bin/env bash
# Session 33 call 12 (H200): hop_bound.cu with step_chain's per-stage profile (waits and no
# waits), and the generated step's `tessera tune --profile` beside it (main 3cd8561's binary,
# position 1, with waits and with --no-waits), so the bodies' cost shows stage by stage.
set -uo pipefail
ROOT=${OUT:-/tmp/out}
export PATH=/usr/local/cuda/bin:$PATH
(cd scripts/probe && nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -o /tmp/hop_bound hop_bound.cu 2>&1 | tail -20)
echo "=== hop_bound"; timeout 200 /tmp/hop_bound > $ROOT/hop_bound.txt 2>&1; echo rc=$?
sed -n '/sync pattern/,$p' $ROOT/hop_bound.txt
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
ensure_ckpt 0.6b "$ROOT/hf-0.6b.log"
d=$(ckpt_dir 0.6b)
echo "=== tune --profile p1"
timeout 120 .gpu/bin/tessera tune --model $d --position 1 --tokens 128 --profile > $ROOT/profile-p1.md 2>&1; echo rc=$?
grep -E "^\| (stage|[0-9])" $ROOT/profile-p1.md
echo "=== tune --no-waits --profile p1"
timeout 120 .gpu/bin/tessera tune --model $d --position 1 --tokens 128 --no-waits --profile > $ROOT/nowaits-profile-p1.md 2>&1; echo rc=$?
grep -E "^\| (stage|[0-9])" $ROOT/nowaits-profile-p1.md
