#!/usr/bin/env bash
# Session 25 call 5 (binary in .gpu/commit, the default of calls 2-4): the split attention's
# stage waiting inside its bodies (its position then loaded before the wait, early loads):
# wibs = the 0.6B rule's list plus attn_split and attn_split_ahead, at 0.6B positions 512
# and 2048, 4 reps; wibs17 = the 1.7B rule's list plus the same, at 1.7B position 512, 2 reps.
set -uo pipefail
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
export TESSERA_CACHE_DIR=/tmp/tessera-cache
echo "=== [$(date +%T)] 0.6b A/B"
bash scripts/device_ab_reps.sh 0.6b 4 "512 2048" head wibs
echo "=== [$(date +%T)] 1.7b A/B"
bash scripts/device_ab_reps.sh 1.7b 2 "512" head wibs17
echo "=== [$(date +%T)] done"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' . && mv /tmp/all.tgz $ROOT/all.tgz
