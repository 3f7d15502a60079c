#!/usr/bin/env python3
"""transformers' decode speed at several context lengths: the peers of `tessera bench`.

What: loads a Hugging Face checkpoint (config.json + model.safetensors, e.g. the one that
hf_reference.py writes) in bf16 with the model's default attention (sdpa) and times greedy
decode in ms/token: for each context C, the KV cache is prefilled with C random tokens
(not timed), then N tokens are decoded one at a time (argmax of the last logits is the next
token, read back to the host each step, as `tessera bench` does); the median over a few
repeats after a warm-up. Two peers:
  eager     model(tok, past_key_values=DynamicCache, use_cache=True), token by token
  compiled  StaticCache (max_cache_len = C + N + margin) and torch.compile(mode=
            "reduce-overhead", dynamic=False) of the one-token decode step (CUDA graphs):
            torch.compiler.cudagraph_mark_step_begin() before every step, the output token
            cloned before the next replay, warm-up before timing.
The compiled peer's greedy tokens are compared with eager's (compiled_tokens_equal_eager_prefix:
how many agree from the first on; in bf16 on random weights they part early, in --dtype
float32 they agree). A peer that fails at some context (OOM, a compile error) gets its error
string in the JSON for that context; the script goes on.

Run (on the GPU machine, after hf_reference.py wrote the checkpoint):
  python3 hf_peers.py --model /tmp/q06 --out /tmp/q06/peers.json [--contexts 1,512,2048,8192]
      [--steps 128] [--repeats 3] [--no-eager] [--no-compile] [--dynamic] [--dtype float32]
      [--prompts 128,512,2048,8192|none] [--prefill-repeats 5]
About 5 minutes on an H200 at the 0.6B shape, mostly torch.compile (about 50 s per context;
--dynamic compiles twice in all instead of once per context).
CPU smoke test: --device cpu --contexts 1,8 --steps 4 (compile runs there without CUDA graphs).

Prefill (the peer of `tessera bench`'s time to first token): for each --prompts length, ONE
forward over the whole prompt (bf16, sdpa, a fresh DynamicCache, logits of the last position
only), the argmax read back to the host; the median of --prefill-repeats runs after a warm-up.
Timed before decode, in `prefill: [{prompt_tokens, ms, runs_ms, error}]`. `--no-eager
--no-compile` times prefill alone.

Writes --out (JSON): torch, transformers, gpu, steps, prefill, contexts: [{context, eager_ms,
compiled_ms, eager_error, compiled_error, ...}], and at top level hf_eager_ms_per_token and
hf_compiled_static_ms_per_token (the values at the smallest context: the keys that
`tessera bench --peers` read before there were contexts). Rewritten after every
measurement, so a run cut short keeps what it finished. Also prints a table.
"""
import argparse
import inspect
import json
import os
import statistics
import time
import traceback

import torch
import transformers
from transformers import AutoModelForCausalLM, DynamicCache


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="checkpoint directory (config.json + model.safetensors)")
    ap.add_argument("--out", required=True, help="JSON file to write (e.g. MODEL/peers.json)")
    ap.add_argument("--contexts", default="1,512,2048,8192", help="comma-separated context positions")
    ap.add_argument("--steps", type=int, default=128, help="tokens decoded per timed run")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per context and peer (median)")
    ap.add_argument("--margin", type=int, default=16, help="extra static-cache positions")
    ap.add_argument("--prefill-chunk", type=int, default=2048, help="prefill in chunks of this many tokens")
    ap.add_argument("--prompts", default="128,512,2048,8192",
                    help="prompt lengths whose prefill (time to first token) is timed; 'none' skips it")
    ap.add_argument("--prefill-repeats", type=int, default=5, help="timed prefills per prompt length (median)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--no-compile", action="store_true", help="skip the compiled peer")
    ap.add_argument("--dynamic", action="store_true",
                    help="torch.compile(dynamic=None): let dynamo make the cache length symbolic after "
                         "the first context (fewer compiles) instead of one static compile per context")
    ap.add_argument("--no-eager", action="store_true", help="skip the eager peer")
    ap.add_argument("--no-readback", action="store_true",
                    help="do not read each token back to the host (lets the host run ahead)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"],
                    help="weights and math (float32: to check that eager and compiled agree)")
    return ap.parse_args()


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def short_error(e):
    s = f"{type(e).__name__}: {e}".strip()
    return s if len(s) <= 500 else s[:500] + "…"


def free_memory(device):
    import gc
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def forward_params(model):
    try:
        return set(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):
        return set()


def load_model(path, device, dtype):
    kw = {}
    ver = tuple(int(x) for x in transformers.__version__.split(".")[:2] if x.isdigit())
    # `dtype` since 4.56 (`torch_dtype` deprecated there); older versions know only `torch_dtype`.
    kw["dtype" if ver >= (4, 56) else "torch_dtype"] = dtype
    model = AutoModelForCausalLM.from_pretrained(path, **kw)
    if model.dtype != dtype:
        model = model.to(dtype)
    return model.to(device).eval()


def make_static_cache(model, max_cache_len, device):
    """StaticCache over the constructor variants transformers has had."""
    from transformers import StaticCache
    cfg = model.config
    variants = [
        dict(config=cfg, max_batch_size=1, max_cache_len=max_cache_len, device=device, dtype=model.dtype),
        dict(config=cfg, batch_size=1, max_cache_len=max_cache_len, device=device, dtype=model.dtype),
        dict(config=cfg, max_cache_len=max_cache_len),
    ]
    errors = []
    for kw in variants:
        try:
            return StaticCache(**kw)
        except TypeError as e:  # an argument this version does not take
            errors.append(short_error(e))
    raise TypeError("no StaticCache constructor variant fits: " + " | ".join(errors))


class Runner:
    """Prefill and one-token forward calls, with the arguments this transformers version takes."""

    def __init__(self, model, device, chunk):
        self.model, self.device, self.chunk = model, device, chunk
        params = forward_params(model)
        # transformers 4.x: cache_position tells a StaticCache where to write; 5.x dropped it
        # (the cache counts its own length) and takes position_ids alone.
        self.takes_cache_position = "cache_position" in params
        self.logits_kw = next((k for k in ("logits_to_keep", "num_logits_to_keep") if k in params), None)

    def prefill(self, ids, cache):
        """Fills `cache` with `ids` (1 × C) in chunks; returns the argmax of the last logits (1 × 1)."""
        logits = None
        n = ids.shape[1]
        for s in range(0, n, self.chunk):
            e = min(n, s + self.chunk)
            kw = dict(past_key_values=cache, use_cache=True,
                      position_ids=torch.arange(s, e, device=self.device)[None])
            if self.takes_cache_position:
                kw["cache_position"] = torch.arange(s, e, device=self.device)
            if self.logits_kw:
                kw[self.logits_kw] = 1
            logits = self.model(ids[:, s:e], **kw).logits
        return logits[:, -1:].argmax(-1)


def time_prefill(r, n, ids, repeats):
    """Time to first token of a prompt of n tokens: ONE forward over the whole prompt into a
    fresh DynamicCache (use_cache=True, logits of the last position only where this version
    takes logits_to_keep), then the argmax read back to the host. Median of `repeats` runs
    after one warm-up; returns (median ms, runs)."""
    model, device = r.model, r.device
    prompt = ids[:, :n]

    def once():
        kw = dict(past_key_values=DynamicCache(), use_cache=True)
        if r.logits_kw:
            kw[r.logits_kw] = 1
        sync(device)
        t = time.perf_counter()
        with torch.no_grad():
            logits = model(prompt, **kw).logits
        tok = int(logits[0, -1].argmax().item())  # the first token, on the host
        ms = (time.perf_counter() - t) * 1e3
        del logits
        return ms, tok

    once()
    runs = [once()[0] for _ in range(repeats)]
    return statistics.median(runs), runs


def timed_loop(device, steps, readback, one_step, tok):
    """Runs `steps` decode steps from `tok`; returns ms/token and the tokens (if read back)."""
    toks = []
    sync(device)
    t = time.perf_counter()
    for i in range(steps):
        tok = one_step(i, tok)
        if readback:
            toks.append(int(tok))  # the host needs the token (to stream it, stop at EOS): a sync a step
    sync(device)
    return (time.perf_counter() - t) * 1e3 / steps, toks


@torch.no_grad()
def time_eager(r, ctx, ids, steps, repeats, readback):
    model, device = r.model, r.device
    runs, tokens = [], []

    def one_step(i, tok):
        out = model(tok, past_key_values=cache, use_cache=True)
        return out.logits[:, -1:].argmax(-1)

    for rep in range(1 + repeats):  # run 0 warms up (the allocator too, as the cache grows)
        cache = DynamicCache()
        tok = r.prefill(ids[:, :ctx], cache)
        ms, toks = timed_loop(device, steps, readback, one_step, tok)
        if rep:
            runs.append(ms)
            tokens = tokens or toks
        del cache
    return statistics.median(runs), runs, tokens


@torch.no_grad()
def time_compiled(r, ctx, ids, steps, repeats, readback, margin, fullgraph, dynamic):
    model, device = r.model, r.device
    cache = make_static_cache(model, ctx + steps + margin, device)

    def decode(tok, pos, cache_position, cache):
        kw = dict(position_ids=pos, past_key_values=cache, use_cache=True)
        if cache_position is not None:
            kw["cache_position"] = cache_position
        logits = model(tok, **kw).logits
        return logits[:, -1:].argmax(-1)

    compiled = torch.compile(decode, mode="reduce-overhead", fullgraph=fullgraph, dynamic=dynamic)
    # Positions made before timing (one tensor per step: cudagraph inputs are copied in).
    pos = [torch.full((1, 1), ctx + i, dtype=torch.long, device=device) for i in range(steps)]
    cpos = [p[0] if r.takes_cache_position else None for p in pos]

    def one_step(i, tok):
        torch.compiler.cudagraph_mark_step_begin()
        # Clone: the graph's output buffer is overwritten by the next replay.
        return compiled(tok, pos[i], cpos[i], cache).clone()

    runs, tokens = [], []
    skips0 = cudagraph_skips()
    t0 = time.perf_counter()
    warm_s = None
    for rep in range(1 + repeats):  # run 0 compiles, records the CUDA graph and warms up
        if rep:
            cache.reset()  # same tensors (static addresses), zeroed and rewound
        tok = r.prefill(ids[:, :ctx], cache)
        ms, toks = timed_loop(device, steps, readback, one_step, tok)
        if rep:
            runs.append(ms)
            tokens = tokens or toks
        else:
            warm_s = time.perf_counter() - t0
    del cache, compiled
    return statistics.median(runs), runs, warm_s, tokens, cudagraph_skips() - skips0


def cudagraph_skips():
    """Inductor's count of graphs it ran without CUDA graphs (always some on CPU)."""
    try:
        from torch._dynamo.utils import counters
        return int(counters["inductor"]["cudagraph_skips"])
    except Exception:
        return 0


def write(out, path):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f, indent=1)
    os.replace(tmp, path)


def fmt(v):
    return "—" if v is None else f"{v:.3f}"


def main():
    a = parse_args()
    device = torch.device(a.device)
    contexts = sorted({int(c) for c in a.contexts.split(",") if c.strip()})
    if a.steps < 1 or a.repeats < 1 or a.prefill_chunk < 1 or a.prefill_repeats < 1 or not contexts:
        raise SystemExit("--steps, --repeats, --prefill-chunk and --prefill-repeats must be at least 1; "
                         "--contexts not empty")
    torch.manual_seed(a.seed)
    # One compile per context (static shapes): allow more than the default 8.
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, max(64, getattr(torch._dynamo.config, name)))

    model = load_model(a.model, device, getattr(torch, a.dtype))
    cfg = model.config
    r = Runner(model, device, a.prefill_chunk)
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    out = {
        "script": "scripts/hf_peers.py",
        "model": os.path.abspath(a.model),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "gpu": gpu,
        "steps": a.steps,
        "repeats": a.repeats,
        "readback_each_step": not a.no_readback,
        "attn_implementation": getattr(cfg, "_attn_implementation", None),
        "dtype": str(model.dtype),
        "layers": cfg.num_hidden_layers,
        "hidden": cfg.hidden_size,
        "weight_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
        "compiled_peer": "StaticCache + torch.compile(mode='reduce-overhead', dynamic=%s) of the one-token step"
                         % (None if a.dynamic else False),
        "static_cache_margin": a.margin,
        "hf_eager_ms_per_token": None,
        "hf_compiled_static_ms_per_token": None,
        "contexts": [],
    }
    print(f"hf_peers: {a.model} on {gpu}; torch {torch.__version__}, transformers {transformers.__version__}, "
          f"{out['attn_implementation']}, {a.steps} tokens after each context, median of {a.repeats}", flush=True)

    max_pos = getattr(cfg, "max_position_embeddings", None)
    g = torch.Generator().manual_seed(a.seed + 1)
    ids = torch.randint(0, cfg.vocab_size, (1, max(contexts)), generator=g).to(device)
    entries = {}
    for ctx in contexts:
        e = {"context": ctx, "eager_ms": None, "compiled_ms": None, "eager_error": None, "compiled_error": None}
        if ctx < 1:
            e["eager_error"] = e["compiled_error"] = "context must be at least 1"
        elif max_pos and ctx + a.steps + a.margin > max_pos:
            e["eager_error"] = e["compiled_error"] = (
                f"skipped: needs {ctx + a.steps + a.margin} positions, the model allows {max_pos}")
        if a.no_eager and not e["eager_error"]:
            e["eager_error"] = "not run (--no-eager)"
        if a.no_compile and not e["compiled_error"]:
            e["compiled_error"] = "not run (--no-compile)"
        entries[ctx] = e
        out["contexts"].append(e)

    def top_level():
        first = out["contexts"][0] if out["contexts"] else {}
        out["hf_eager_ms_per_token"] = first.get("eager_ms")
        out["hf_compiled_static_ms_per_token"] = first.get("compiled_ms")
        write(out, a.out)

    top_level()

    # Prefill (time to first token) first: quick, and a run cut short keeps it.
    prompts = [] if a.prompts.strip() == "none" else sorted({int(p) for p in a.prompts.split(",") if p.strip()})
    if prompts:
        out["prefill"] = []
        out["prefill_note"] = (f"transformers {transformers.__version__}, {out['dtype'].replace('torch.', '')}, "
                               f"{out['attn_implementation']}: one forward over the prompt into a DynamicCache "
                               f"(logits of the last position only), argmax read back; median of {a.prefill_repeats}")
        gp = torch.Generator().manual_seed(a.seed + 2)
        pids = torch.randint(0, cfg.vocab_size, (1, max(prompts)), generator=gp).to(device)
    for n in prompts:
        e = {"prompt_tokens": n, "ms": None, "error": None}
        out["prefill"].append(e)
        if max_pos and n > max_pos:
            e["error"] = f"skipped: the model allows {max_pos} positions"
        else:
            try:
                ms, runs = time_prefill(r, n, pids, a.prefill_repeats)
                e["ms"] = round(ms, 4)
                e["runs_ms"] = [round(x, 4) for x in runs]
                e["prompt_tokens_per_s"] = round(n * 1e3 / ms, 1)
            except Exception as ex:
                e["error"] = short_error(ex)
                traceback.print_exc()
            free_memory(device)
        print(f"prefill  {n} tokens: {fmt(e['ms'])} ms {e['error'] or ''}", flush=True)
        write(out, a.out)

    readback = not a.no_readback
    eager_tokens = {}
    # Eager first at every context (no compile needed), then the compiled peer.
    for ctx in contexts:
        e = entries[ctx]
        if e["eager_error"]:
            continue
        try:
            e["eager_ms"], runs, eager_tokens[ctx] = time_eager(r, ctx, ids, a.steps, a.repeats, readback)
            e["eager_runs_ms"] = [round(x, 4) for x in runs]
            e["eager_ms"] = round(e["eager_ms"], 4)
        except Exception as ex:
            e["eager_error"] = short_error(ex)
            traceback.print_exc()
        free_memory(device)
        print(f"eager    context {ctx}: {fmt(e['eager_ms'])} ms/token {e['eager_error'] or ''}", flush=True)
        top_level()

    fullgraph = True
    dynamic = None if a.dynamic else False
    for ctx in contexts:
        e = entries[ctx]
        if e["compiled_error"]:
            continue
        try:
            try:
                ms, runs, warm_s, toks, skips = time_compiled(
                    r, ctx, ids, a.steps, a.repeats, readback, a.margin, fullgraph, dynamic)
            except torch._dynamo.exc.TorchDynamoException as ex:
                if not fullgraph:
                    raise
                # A graph break somewhere in this version's forward: allow it, once for all.
                print(f"compiled context {ctx}: fullgraph=True failed ({short_error(ex)}); "
                      "retrying with fullgraph=False", flush=True)
                fullgraph = False
                free_memory(device)
                ms, runs, warm_s, toks, skips = time_compiled(
                    r, ctx, ids, a.steps, a.repeats, readback, a.margin, fullgraph, dynamic)
            e["compiled_ms"] = round(ms, 4)
            e["compiled_runs_ms"] = [round(x, 4) for x in runs]
            e["compiled_fullgraph"] = fullgraph
            e["compile_and_warmup_s"] = round(warm_s, 1)
            e["cudagraph_skips"] = skips
            if skips and device.type == "cuda":
                print(f"compiled context {ctx}: inductor skipped CUDA graphs {skips} time(s) "
                      "(TORCH_LOGS=cudagraphs says why)", flush=True)
            if toks and eager_tokens.get(ctx):
                # A check that both decode the same thing: the greedy tokens they agree on
                # from the start (bf16 rounding may part them later on random weights).
                same = next((i for i, (x, y) in enumerate(zip(toks, eager_tokens[ctx])) if x != y), len(toks))
                e["compiled_tokens_equal_eager_prefix"] = same
        except Exception as ex:
            e["compiled_error"] = short_error(ex)
            traceback.print_exc()
        free_memory(device)
        print(f"compiled context {ctx}: {fmt(e['compiled_ms'])} ms/token {e['compiled_error'] or ''}", flush=True)
        top_level()

    print(f"\ntransformers {transformers.__version__} on {gpu}: ms/token, {a.steps} greedy tokens after each context")
    print("| context | eager ms | compiled ms | compiled = eager tokens |")
    print("|---:|---:|---:|---:|")
    for e in out["contexts"]:
        same = e.get("compiled_tokens_equal_eager_prefix")
        same = "—" if same is None else f"first {same} of {a.steps}"
        print(f"| {e['context']} | {fmt(e['eager_ms'])} | {fmt(e['compiled_ms'])} | {same} |")
    for e in out["contexts"]:
        for k in ("eager_error", "compiled_error"):
            if e[k]:
                print(f"context {e['context']} {k.split('_')[0]}: {e[k]}")
    if out.get("prefill"):
        print(f"\ntransformers prefill (time to first token), median of {a.prefill_repeats}")
        print("| prompt tokens | ms | prompt tokens/s |")
        print("|---:|---:|---:|")
        for e in out["prefill"]:
            print(f"| {e['prompt_tokens']} | {fmt(e['ms'])} | {e.get('prompt_tokens_per_s') or '—'} |"
                  + (f" {e['error']}" if e["error"] else ""))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
