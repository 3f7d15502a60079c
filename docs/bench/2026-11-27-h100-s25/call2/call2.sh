#!/usr/bin/env bash
# Session 25 call 2 (binary in .gpu/commit): the new default (4 tokens a readback after the
# first step's alone) under the committed GPU tests; then the candidates, each A/B against
# it: el (TESSERA_EARLY_LOADS=1: the attention's position loaded before its wait), wr
# (TESSERA_WARP_REDUCE=1: a replicated row's max/sum in each row group, no shared memory),
# both; rb1 (one token a readback, the old default). 0.6B positions 1 and 512, 4 reps;
# 1.7B head/wr/both 2 reps at 1; 4B head/both 2 reps at 1; profiles of head and both.
set -uo pipefail
T0=$(date +%s)
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
echo "=== [$(date +%T)] committed tests (default)"
timeout 200 env -u TESSERA_HF_CKPT .gpu/bin/test-gpu_decode --ignored --test-threads=1 --nocapture > $ROOT/tests.log 2>&1; echo rc=$?
grep -E "test result|^test |FAILED|panicked" $ROOT/tests.log | tail -12
echo "=== [$(date +%T)] tests with both candidates"
timeout 150 env -u TESSERA_HF_CKPT TESSERA_EARLY_LOADS=1 TESSERA_WARP_REDUCE=1 .gpu/bin/test-gpu_decode --ignored --test-threads=1 --nocapture gpu_megakernel_equals gpu_attention gpu_megakernel_greedy gpu_decoding > $ROOT/tests-both.log 2>&1; echo rc=$?
grep -E "test result|^test |FAILED|panicked" $ROOT/tests-both.log | tail -8
echo "=== [$(date +%T)] 0.6b A/B"
bash scripts/device_ab_reps.sh 0.6b 4 "1 512" head el wr both rb1
d06=$(ckpt_dir 0.6b)
mkdir -p $ROOT/prof
for n in head both; do
  b=.gpu/bin/tessera; [[ $n != head ]] && b=.gpu/bin/tessera-$n
  timeout 100 $b tune --model $d06 --tokens 64 --profile > $ROOT/prof/profile-$n.md 2> $ROOT/prof/profile-$n.err
  echo "profile $n rc=$?"; grep -E "^\| stage [234]" $ROOT/prof/profile-$n.md | cut -d'|' -f2-5,10-15
done
echo "=== [$(date +%T)] 1.7b A/B"
bash scripts/device_ab_reps.sh 1.7b 2 "1" head wr both
left=$(( 560 - ($(date +%s) - T0) ))
echo "=== [$(date +%T)] 4b A/B (left ${left}s)"
[[ $left -gt 160 ]] && timeout $left bash scripts/device_ab_reps.sh 4b 2 "1" head both
echo "=== [$(date +%T)] done"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' . && mv /tmp/all.tgz $ROOT/all.tgz
