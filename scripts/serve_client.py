#!/usr/bin/env python3
"""Helpers for scripts/device_serve.sh (standard library only, so it runs anywhere).

  serve_client.py word-tokenizer DIR
      Writes DIR/tokenizer.json: a word-level tokenizer where token N is the word "tN", so
      a checkpoint with random weights and no tokenizer (hf_reference.py's) can be served:
      every generated token decodes to one word, i.e. one streamed chunk.
  serve_client.py measure URL [--max-tokens N] [--requests R] [--out FILE]
      Waits for URL/health, then sends R streaming /v1/completions requests one after
      the other and prints, for each, the time to first token and decode tokens/s as the
      client sees them (first chunk with text; chunks after it over the time they took).
"""
import argparse
import json
import sys
import time
import urllib.error
import urllib.request


def word_tokenizer(d):
    with open(f"{d}/config.json") as f:
        vocab = json.load(f)["vocab_size"]
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [],
        "normalizer": None,
        "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": {f"t{i}": i for i in range(vocab)}, "unk_token": "t0"},
    }
    with open(f"{d}/tokenizer.json", "w") as f:
        json.dump(tok, f)
    print(f"wrote {d}/tokenizer.json (word-level, {vocab} words t0..t{vocab - 1})")


def wait_health(url, limit_s):
    t = time.time()
    while time.time() - t < limit_s:
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as r:
                return json.load(r)
        except (urllib.error.URLError, ConnectionError, OSError):
            time.sleep(0.5)
    sys.exit(f"no answer from {url}/health within {limit_s} s")


def one_stream(url, model, max_tokens):
    body = {
        "model": model,
        "prompt": list(range(1, 9)),
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    req = urllib.request.Request(
        url + "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    t0 = time.perf_counter()
    first = last = None
    chunks, usage, finish = 0, None, None
    with urllib.request.urlopen(req, timeout=600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: "):
                continue
            data = line[len("data: "):]
            if data == "[DONE]":
                break
            c = json.loads(data)
            if c.get("usage"):
                usage = c["usage"]
            for ch in c.get("choices", []):
                finish = ch.get("finish_reason") or finish
                if ch.get("text"):
                    now = time.perf_counter()
                    first = first or now
                    last = now
                    chunks += 1
    ttft_ms = (first - t0) * 1e3 if first else None
    tps = (chunks - 1) / (last - first) if first and last > first else None
    return {
        "ttft_ms": ttft_ms,
        "decode_tokens_per_s": tps,
        "text_chunks": chunks,
        "usage": usage,
        "finish_reason": finish,
    }


def measure(a):
    health = wait_health(a.url, a.wait)
    print(f"server: {json.dumps(health)}")
    runs = []
    for i in range(a.requests):
        r = one_stream(a.url, health["model"], a.max_tokens)
        r["request"] = i
        runs.append(r)
        print(
            f"request {i}: time to first token {r['ttft_ms']:.1f} ms | decode {r['text_chunks']} chunks, "
            f"{r['decode_tokens_per_s'] or 0:.1f} tokens/s | usage {r['usage']} | finish {r['finish_reason']}"
        )
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"server": health, "requests": runs}, f, indent=1)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("word-tokenizer")
    w.add_argument("dir")
    m = sub.add_parser("measure")
    m.add_argument("url")
    m.add_argument("--max-tokens", type=int, default=128)
    m.add_argument("--requests", type=int, default=2)
    m.add_argument("--wait", type=float, default=300, help="seconds to wait for /health")
    m.add_argument("--out")
    a = ap.parse_args()
    if a.cmd == "word-tokenizer":
        word_tokenizer(a.dir)
    else:
        measure(a)


if __name__ == "__main__":
    main()
