#!/usr/bin/env bash
# `tessera serve` with the megakernel engine on the GPU machine: streaming requests over
# loopback, time to first token and decode tokens/s for docs/PERF.md, as the client sees
# them ($OUT/serve.json) and as the server logs them ($OUT/serve-requests.log).
#   device run: carry [".gpu"], command: bash scripts/device_serve.sh [DIR]
# DIR: a checkpoint; default /tmp/q06, written here by .gpu/hf_reference.py (random-weight
# Qwen3-0.6B) when absent. A checkpoint without tokenizer.json gets a word-level one
# (token N is the word "tN": one streamed chunk per token).
# Env: TESSERA (default .gpu/bin/tessera), ENGINE_ARGS (default: none, i.e. the
# megakernel on the GPU), MAX_TOKENS (128), REQUESTS (2: the first after start-up, then a
# warm one), PORT (8188).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
[[ -f .gpu/device-env.sh ]] && source .gpu/device-env.sh > "$OUT/env.txt" 2>&1
TESSERA=${TESSERA:-.gpu/bin/tessera}
dir=${1:-/tmp/q06}
port=${PORT:-8188}
if [[ ! -f $dir/config.json ]]; then
  timeout 300 python3 .gpu/hf_reference.py --shape 0.6b --out "$dir" --steps 8 --no-bench \
    > "$OUT/hf-reference.log" 2>&1 || { echo "no checkpoint in $dir (see $OUT/hf-reference.log)"; exit 1; }
fi
[[ -f $dir/tokenizer.json ]] || python3 scripts/serve_client.py word-tokenizer "$dir"

# shellcheck disable=SC2086
"$TESSERA" serve --model "$dir" --host 127.0.0.1 --port "$port" \
  --log "$OUT/serve-requests.log" ${ENGINE_ARGS:-} > "$OUT/serve.log" 2>&1 &
pid=$!
timeout 600 python3 scripts/serve_client.py measure "http://127.0.0.1:$port" \
  --max-tokens "${MAX_TOKENS:-128}" --requests "${REQUESTS:-2}" --out "$OUT/serve.json"
rc=$?
kill -INT "$pid" 2>/dev/null
wait "$pid"
echo "--- server (stderr):"
cat "$OUT/serve.log"
echo "--- server (per request):"
cat "$OUT/serve-requests.log" 2>/dev/null
exit $rc
