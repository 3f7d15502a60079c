//! The reference decoder against transformers (goldens from scripts/make_goldens.py).
//!
//! Logits: teacher-forced on transformers' greedy ids, max |Δ| / max |logit| must stay
//! below LOGIT_TOL. Both sides compute in f32 on the same bf16 weights, so the only
//! differences are summation order and transcendental rounding (measured ≤ 1.1e-6); a
//! single bf16 rounding of an intermediate would already cost ~1e-3, and a wrong rope
//! base, norm or GQA mapping costs far more, so 1e-4 separates right from wrong.
//! Tokens: our greedy ids must equal transformers' on the prefix where its top-1 margin
//! stays decisive (> 0.05).
mod common;
use common::*;
use model::{Checkpoint, Reference};
use std::sync::Arc;

const LOGIT_TOL: f32 = 1e-4;

fn engine(name: &str) -> (Reference, Checkpoint) {
    let ck = Checkpoint::load(&data_dir(name), false).unwrap();
    let ck2 = Checkpoint::load(&data_dir(name), false).unwrap();
    (Reference::new(ck.config, Arc::new(ck.weights)), ck2)
}

#[test]
fn logits_match_transformers() {
    for name in CHECKPOINTS {
        let exp = expected(name);
        let (mut r, _) = engine(name);
        let prompt = ids(&exp["prompt_ids"]);
        let greedy = ids(&exp["greedy_ids"]);
        let steps = exp["logits"].as_array().unwrap();
        assert!(
            steps.len() >= 2,
            "{name}: goldens should hold several logit steps"
        );
        let mut logits = Vec::new();
        for (pos, &t) in prompt.iter().enumerate() {
            logits = r.forward(t, pos).unwrap();
        }
        for (s, want) in steps.iter().enumerate() {
            if s > 0 {
                logits = r.forward(greedy[s - 1], prompt.len() + s - 1).unwrap();
            }
            let e = rel_err(&logits, &floats(want));
            eprintln!("{name} step {s}: relative max error {e:.2e}");
            assert!(
                e < LOGIT_TOL,
                "{name} step {s}: relative error {e} ≥ {LOGIT_TOL}"
            );
        }
        assert_eq!(floats(&exp["first_logits"]), floats(&steps[0]));
    }
}

#[test]
fn greedy_matches_transformers_while_decisive() {
    for name in CHECKPOINTS {
        let exp = expected(name);
        let (mut r, ck) = engine(name);
        let prompt = ids(&exp["prompt_ids"]);
        let want = ids(&exp["greedy_ids"]);
        let margins: Vec<f64> = exp["margins"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m.as_f64().unwrap())
            .collect();
        let decisive = margins
            .iter()
            .position(|&m| m <= DECISIVE)
            .unwrap_or(margins.len());
        assert!(
            decisive >= 8,
            "{name}: only {decisive} decisive steps; regenerate goldens"
        );
        let mut sampler = model::sampling::Sampler::new(Default::default());
        // No EOS: transformers' loop in the script does not stop either.
        let g = model::generate::generate(
            &mut r,
            &prompt,
            decisive,
            &mut sampler,
            &[],
            &mut |_| Ok(()),
        )
        .unwrap();
        assert_eq!(
            g.generated_ids,
            want[..decisive],
            "{name}: greedy ids differ"
        );
        assert_eq!(
            ck.config.vocab_size,
            exp["first_logits"].as_array().unwrap().len()
        );
    }
}

#[test]
fn chat_template_and_tokenizer_match_transformers() {
    let name = "mha_tok_v5";
    let exp = expected(name);
    let chat = &exp["chat"];
    let ck = Checkpoint::load(&data_dir(name), false).unwrap();
    let tok = ck.tokenizer.as_ref().expect("tokenizer.json");
    let tmpl = ck.chat_template.as_ref().expect("chat template");
    let user = chat["user"].as_str().unwrap();
    let text = tmpl.render_user(user, false).unwrap();
    assert_eq!(text, chat["text_no_thinking"].as_str().unwrap());
    assert_eq!(tok.encode(&text).unwrap(), ids(&chat["ids_no_thinking"]));
    let think = tok.encode(&tmpl.render_user(user, true).unwrap()).unwrap();
    assert_eq!(think, ids(&chat["ids_thinking"]));
    assert_eq!(ids(&exp["prompt_ids"]), ids(&chat["ids_no_thinking"]));
    // Decoding, whole and streamed, gives transformers' text.
    let greedy = ids(&exp["greedy_ids"]);
    let want = chat["greedy_text"].as_str().unwrap();
    assert_eq!(tok.decode(&greedy).unwrap(), want);
    let mut stream = model::tokenizer::StreamDecoder::new();
    let mut streamed = String::new();
    for &id in &greedy {
        if let Some(s) = stream.push(tok, id).unwrap() {
            streamed.push_str(&s);
        }
    }
    streamed.push_str(&stream.flush(tok).unwrap().unwrap_or_default());
    assert_eq!(streamed, want);
    // EOS ids come from generation_config.json: <|im_end|> and <|endoftext|>.
    assert_eq!(ck.config.eos_token_ids.len(), 2);
}

#[test]
fn traced_forward_agrees_with_forward() {
    let name = "untied_gqa4_v5";
    let (mut a, ck) = engine(name);
    let mut b = Reference::new(ck.config.clone(), Arc::new(ck.weights));
    let prompt = ids(&expected(name)["prompt_ids"]);
    for (pos, &t) in prompt.iter().enumerate() {
        let plain = a.forward(t, pos).unwrap();
        let (traced, layers) = b.forward_traced(t, pos, 2).unwrap();
        assert_eq!(plain, traced);
        assert_eq!(layers.len(), 2);
        let cfg = &ck.config;
        assert_eq!(layers[0].q.len(), cfg.q_dim());
        assert_eq!(layers[0].k.len(), cfg.kv_dim());
        assert_eq!(layers[1].residual_after_mlp.len(), cfg.hidden_size);
        // The residual after attention is the layer input plus o_proj.
        let x0: Vec<f32> = layers[0].residual_after_mlp.clone();
        let sum: Vec<f32> = x0
            .iter()
            .zip(&layers[1].o_proj)
            .map(|(x, o)| x + o)
            .collect();
        assert_eq!(sum, layers[1].residual_after_attn);
    }
}

#[test]
fn rewinding_the_cache_reproduces_logits() {
    let name = "tied_gqa2_v4";
    let (mut r, _) = engine(name);
    let prompt = ids(&expected(name)["prompt_ids"]);
    let mut first = Vec::new();
    for (pos, &t) in prompt.iter().enumerate() {
        first = r.forward(t, pos).unwrap();
    }
    let _ = r.forward(5, prompt.len()).unwrap();
    // Re-feeding the last prompt token at its position drops the later entry.
    let again = r
        .forward(*prompt.last().unwrap(), prompt.len() - 1)
        .unwrap();
    assert_eq!(first, again);
    assert!(
        r.forward(1, prompt.len() + 3).is_err(),
        "skipping positions must fail"
    );
}
