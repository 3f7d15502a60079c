#!/usr/bin/env bash
# Session 25 call 1 (binary 00a51d8, decode step byte-identical to session 24's start):
# the token ring (decode_ahead's steps write their token into a device ring, host code
# changed, never run on a GPU): the committed GPU tests, once as default (one token a
# readback) and the decode-ahead test with 8 tokens a readback; then the A/B
# TESSERA_TOKENS_PER_READBACK 1 (head) vs 4 vs 8 at 0.6B positions 1 and 512, 4 reps; 1.7B
# head vs rb8 2 reps at position 1.
set -uo pipefail
T0=$(date +%s)
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
echo "=== [$(date +%T)] committed tests (default)"
timeout 240 env -u TESSERA_HF_CKPT .gpu/bin/test-gpu_decode --ignored --test-threads=1 --nocapture > $ROOT/tests.log 2>&1; echo rc=$?
grep -E "test result|^test |FAILED|panicked" $ROOT/tests.log | tail -12
echo "=== [$(date +%T)] decode-ahead tests, 8 tokens a readback"
timeout 120 env -u TESSERA_HF_CKPT TESSERA_TOKENS_PER_READBACK=8 .gpu/bin/test-gpu_decode --ignored --test-threads=1 --nocapture gpu_decoding_one_step_ahead gpu_megakernel_greedy > $ROOT/tests-rb8.log 2>&1; echo rc=$?
grep -E "test result|^test |FAILED|panicked" $ROOT/tests-rb8.log | tail -6
echo "=== [$(date +%T)] 0.6b A/B"
bash scripts/device_ab_reps.sh 0.6b 4 "1 512" head rb4 rb8
echo "=== [$(date +%T)] 1.7b A/B"
left=$(( 570 - ($(date +%s) - T0) ))
[[ $left -gt 150 ]] && timeout $left bash scripts/device_ab_reps.sh 1.7b 2 "1" head rb8
echo "=== [$(date +%T)] done"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' . && mv /tmp/all.tgz $ROOT/all.tgz
