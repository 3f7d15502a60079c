#!/usr/bin/env bash
# Session 26 call 6 (call 5's binary, the session's default): candidates on top of it.
# mwib: the MLP's stage waits in its body too (its first tile's weights in registers during
# the wait; slower in session 23, re-timed with the 2 MiB prefetch); wa2: the attention and
# o_proj stages' wait prefetch 2 MiB too; wl0: none for the lm_head; w8e128 / w8e64: 8
# warps a program (`tune --warps 8 --elems 128` keeps a tile's bytes, `--elems 64` halves
# them). 0.6B at 1 and 512, 4 reps; 1.7B at 1, 2 reps (mwib17: the 1.7B rule's list plus
# the MLP); arwib17: the 1.7B rule's list plus attn_rope_head_residual (not in it).
set -uo pipefail
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
echo "=== [$(date +%T)] 0.6b A/B"
bash scripts/device_ab_reps.sh 0.6b 4 "1 512" head mwib wa2 wl0 w8e128 w8e64
echo "=== [$(date +%T)] 1.7b A/B"
bash scripts/device_ab_reps.sh 1.7b 2 "1" head mwib17 arwib17 wa2 w8e128
echo "=== [$(date +%T)] done"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' . && mv /tmp/all.tgz $ROOT/all.tgz
