#!/usr/bin/env python3
"""Goldens for the model crate: tiny random-weight Qwen3 checkpoints in the Hugging Face
layout, with what transformers computes for them (the oracle nobody here wrote).

  python3 -m venv /work/venv-goldens
  /work/venv-goldens/bin/pip install torch transformers safetensors
  /work/venv-goldens/bin/python scripts/make_goldens.py --out model/tests/data

Each OUT/<name>/ holds config.json, generation_config.json, model.safetensors (bf16),
optionally tokenizer.json + tokenizer_config.json, and expected.json:
  prompt_ids, greedy_ids, margins (top1 - top2 logit per greedy step; compare tokens
  only while decisive), first_logits (after the prompt), logits (the first LOGIT_STEPS
  steps, step 0 = after the prompt, teacher-forced on greedy_ids), reference.
Checkpoints with a tokenizer also record chat: transformers' apply_chat_template ids
for a user message (thinking on and off) and the decoded greedy text.

Math is fp32 on the bf16-rounded weights: build in bf16, save, then `.float()` (and
rebuild the rope inv_freq buffer in fp32, which `.to(bfloat16)` had rounded).
Conventions follow scripts/hf_reference.py.
"""
import argparse, json, os
import torch
from transformers import DynamicCache, Qwen3Config, Qwen3ForCausalLM

STEPS = 24
LOGIT_STEPS = 4
PROMPT_LEN = 12

# name: vocab, hidden, intermediate, layers, heads, kv heads, head_dim, tied, rope_theta,
#       rope spelling ("v4": top-level rope_theta; "v5": rope_parameters), tokenizer
SHAPES = {
    # GQA 2, heads*head_dim = 128 != hidden 64, odd vocab, tied, transformers 4.x spelling.
    "tied_gqa2_v4": dict(vocab=997, hidden=64, inter=160, layers=2, heads=4, kv=2, head_dim=32,
                         tied=True, theta=1e6, spelling="v4", tokenizer=False, eos=[995, 996], seed=0,
                         std=0.25),  # larger layer weights so the tied head does not echo the input
    # GQA 4, 8*16 = 128 != 64, untied, 3 layers, transformers 5.x spelling.
    "untied_gqa4_v5": dict(vocab=1000, hidden=64, inter=128, layers=3, heads=8, kv=2, head_dim=16,
                           tied=False, theta=5e5, spelling="v5", tokenizer=False, eos=999, seed=100),
    # GQA 1 (MHA), 4*24 = 96 != 64, untied, with a tiny BPE tokenizer and chat template.
    "mha_tok_v5": dict(vocab=1024, hidden=64, inter=128, layers=2, heads=4, kv=4, head_dim=24,
                       tied=False, theta=1e4 * 3, spelling="v5", tokenizer=True, eos=None, seed=201),
}

# A small Qwen-style ChatML template (written for these tests) that uses the Python string
# methods Qwen3's real template relies on (strip, split, lstrip, startswith).
CHAT_TEMPLATE = """{%- for message in messages %}
{%- set content = message.content.strip() %}
{%- if message.role == "assistant" and "</think>" in content %}
{%- set content = content.split("</think>")[-1].lstrip("\\n") %}
{%- endif %}
{%- if message.role.startswith("sys") %}
{{- "<|im_start|>system\\n" + content + "<|im_end|>\\n" }}
{%- else %}
{{- "<|im_start|>" + message.role + "\\n" + content + "<|im_end|>\\n" }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
{{- "<|im_start|>assistant\\n" }}
{%- if enable_thinking is defined and enable_thinking is false %}
{{- "<think>\\n\\n</think>\\n\\n" }}
{%- endif %}
{%- endif %}"""

CORPUS = """Tessera compiles a small language model into one persistent kernel.
The reference decoder is plain Rust: embedding, normalization, attention, and a gated MLP.
Numbers like 42, 3.14 and 1024 appear; so do symbols: <>, [], {}, and unicode: naïve café, 東京.
Greedy decoding picks the most likely token; sampling draws from the softmax distribution.
"""
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def build_tokenizer(out, vocab):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers, AddedToken
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab - 8, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([CORPUS] * 20, trainer)
    # Like Qwen: <think> tags are added tokens but not special (they survive decoding).
    tok.add_tokens([AddedToken("<think>", normalized=False), AddedToken("</think>", normalized=False)])
    assert tok.get_vocab_size() <= vocab
    tok.save(os.path.join(out, "tokenizer.json"))
    json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": None, "eos_token": "<|im_end|>",
               "pad_token": "<|endoftext|>", "chat_template": CHAT_TEMPLATE, "model_max_length": 32768},
              open(os.path.join(out, "tokenizer_config.json"), "w"), indent=1)
    return tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")


def build_model(s, seed):
    cfg = Qwen3Config(vocab_size=s["vocab"], hidden_size=s["hidden"], intermediate_size=s["inter"],
                      num_hidden_layers=s["layers"], num_attention_heads=s["heads"],
                      num_key_value_heads=s["kv"], head_dim=s["head_dim"], max_position_embeddings=4096,
                      rms_norm_eps=1e-6, rope_theta=s["theta"], tie_word_embeddings=s["tied"])
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(cfg).to(torch.bfloat16).eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "norm" in n:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif "embed" in n or "lm_head" in n:
                p.normal_(0.0, 0.5)  # decisive logits, so greedy tokens are comparable
            else:
                p.normal_(0.0, s.get("std", 0.1))
    return cfg, model


def fix_config(out, s, eos):
    """Rewrite config.json in the requested rope spelling and set the EOS ids."""
    path = os.path.join(out, "config.json")
    c = json.load(open(path))
    c.pop("rope_theta", None); c.pop("rope_parameters", None); c.pop("rope_scaling", None)
    if s["spelling"] == "v4":
        c["rope_theta"] = s["theta"]; c["rope_scaling"] = None
    else:
        c["rope_parameters"] = {"rope_type": "default", "rope_theta": s["theta"]}
    c["eos_token_id"] = eos
    json.dump(c, open(path, "w"), indent=2)
    json.dump({"eos_token_id": eos, "do_sample": False}, open(os.path.join(out, "generation_config.json"), "w"), indent=2)
    # The rewritten config must still describe the same model to transformers.
    back = Qwen3Config.from_pretrained(out)
    theta = back.rope_parameters["rope_theta"] if getattr(back, "rope_parameters", None) else back.rope_theta
    assert abs(theta - s["theta"]) < 1e-6, (theta, s["theta"])


@torch.no_grad()
def greedy(model, prompt, steps):
    out = model(prompt, past_key_values=DynamicCache(), use_cache=True)
    past, logits = out.past_key_values, out.logits[0, -1].float()
    toks, margins, per_step = [], [], []
    for i in range(steps):
        if i < LOGIT_STEPS:
            per_step.append(logits.tolist())
        top2 = torch.topk(logits, 2)
        t = int(top2.indices[0]); toks.append(t); margins.append(float(top2.values[0] - top2.values[1]))
        o = model(torch.tensor([[t]]), past_key_values=past, use_cache=True)
        past, logits = o.past_key_values, o.logits[0, -1].float()
    return toks, margins, per_step


def make(name, s, root, seed):
    out = os.path.join(root, name)
    os.makedirs(out, exist_ok=True)
    eos = s["eos"]
    if s["tokenizer"]:
        im_end, eot = build_tokenizer(out, s["vocab"])
        eos = [im_end, eot]
    cfg, model = build_model(s, seed)
    model.save_pretrained(out, safe_serialization=True)
    fix_config(out, s, eos)
    for extra in ["chat_template.jinja"]:
        if os.path.exists(os.path.join(out, extra)):
            os.remove(os.path.join(out, extra))
    model = model.float()  # fp32 math on the bf16-rounded weights
    # .to(bfloat16) above also rounded the rope buffer inv_freq to bf16; transformers
    # computes it in fp32 from the config, so rebuild it (otherwise angles are off ~1e-3).
    model.model.rotary_emb = type(model.model.rotary_emb)(config=model.config)
    inv = model.model.rotary_emb.inv_freq
    assert inv.dtype == torch.float32 and float(inv[1]) != float(inv[1].bfloat16())
    g = torch.Generator().manual_seed(seed + 1)
    prompt = torch.randint(0, s["vocab"], (1, PROMPT_LEN), generator=g)
    chat = None
    if s["tokenizer"]:
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(out)
        msg = [{"role": "user", "content": "  Hello, naïve café 東京! 42  "}]
        ids = {}
        for think in (True, False):
            ids[think] = tok.apply_chat_template(msg, add_generation_prompt=True, enable_thinking=think,
                                                 tokenize=True, return_dict=False)
            if isinstance(ids[think], dict) or hasattr(ids[think], "input_ids"):
                ids[think] = ids[think]["input_ids"]
        chat = {"user": msg[0]["content"], "ids_thinking": list(ids[True]), "ids_no_thinking": list(ids[False]),
                "text_no_thinking": tok.apply_chat_template(msg, add_generation_prompt=True, enable_thinking=False,
                                                            tokenize=False)}
        prompt = torch.tensor([chat["ids_no_thinking"]])
    toks, margins, per_step = greedy(model, prompt, STEPS)
    exp = {"prompt_ids": prompt[0].tolist(), "greedy_ids": toks, "margins": margins,
           "first_logits": per_step[0], "logits": per_step,
           "reference": f"transformers {__import__('transformers').__version__}, torch {torch.__version__}, fp32 math on bf16 weights"}
    if chat is not None:
        chat["greedy_text"] = tok.decode(toks, skip_special_tokens=True)
        exp["chat"] = chat
    json.dump(exp, open(os.path.join(out, "expected.json"), "w"))
    print(f"{name}: greedy {toks[:10]}... min margin {min(margins):.4f}, "
          f"decisive prefix {next((i for i, m in enumerate(margins) if m <= 0.05), len(margins))}/{len(margins)}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    torch.set_num_threads(1)  # deterministic reductions on CPU
    for name, s in SHAPES.items():
        make(name, s, a.out, a.seed + s["seed"])  # per-shape seeds picked for decisive margins


if __name__ == "__main__":
    main()
