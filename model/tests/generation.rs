//! The engine-agnostic loop, sampling and streaming detokenization.
use model::engine::{Engine, StepOutput};
use model::generate::{generate, StopReason};
use model::sampling::{argmax, Sampler, SamplingParams};
use model::tokenizer::{StreamDecoder, Tokenizer};
use model::ModelError;

/// A fake engine whose next token is always (token + 1) mod vocab, optionally as a
/// fused argmax; it records the positions it was fed.
struct Counter {
    vocab: usize,
    ctx: usize,
    fused: bool,
    fed: Vec<(u32, usize)>,
}

impl Engine for Counter {
    fn name(&self) -> &str {
        "counter"
    }
    fn device(&self) -> String {
        "test".into()
    }
    fn max_context(&self) -> usize {
        self.ctx
    }
    fn vocab_size(&self) -> usize {
        self.vocab
    }
    fn step(&mut self, token: u32, pos: usize) -> Result<StepOutput, ModelError> {
        self.fed.push((token, pos));
        let next = (token + 1) % self.vocab as u32;
        if self.fused {
            return Ok(StepOutput::Token(next));
        }
        let mut l = vec![0.0; self.vocab];
        l[next as usize] = 10.0;
        Ok(StepOutput::Logits(l))
    }
}

fn counter(ctx: usize, fused: bool) -> Counter {
    Counter {
        vocab: 50,
        ctx,
        fused,
        fed: vec![],
    }
}

fn greedy() -> Sampler {
    Sampler::new(SamplingParams::default())
}

#[test]
fn stops_at_eos_max_tokens_and_context() {
    let mut e = counter(100, false);
    let mut seen = vec![];
    let g = generate(&mut e, &[3, 4], 10, &mut greedy(), &[8], &mut |t| {
        seen.push(t);
        Ok(())
    })
    .unwrap();
    assert_eq!(g.generated_ids, vec![5, 6, 7, 8]);
    assert_eq!(seen, g.generated_ids, "tokens are streamed as chosen");
    assert_eq!(g.stop, StopReason::Eos);
    // Prompt then generated tokens, each at its absolute position.
    assert_eq!(e.fed, vec![(3, 0), (4, 1), (5, 2), (6, 3), (7, 4)]);

    let g = generate(
        &mut counter(100, false),
        &[3],
        3,
        &mut greedy(),
        &[],
        &mut |_| Ok(()),
    )
    .unwrap();
    assert_eq!(
        (g.generated_ids, g.stop),
        (vec![4, 5, 6], StopReason::MaxNewTokens)
    );

    let mut e = counter(5, false);
    let g = generate(&mut e, &[1, 2, 3], 100, &mut greedy(), &[], &mut |_| Ok(())).unwrap();
    assert_eq!(g.stop, StopReason::ContextLimit);
    assert_eq!(e.fed.last().unwrap().1, 4, "never steps past the context");
    assert_eq!(g.generated_ids, vec![4, 5, 6]);
    assert_eq!(g.timings.prompt_tokens, 3);
    assert_eq!(g.timings.decode_tokens, 2);
}

#[test]
fn fused_argmax_engines_work_greedy_only() {
    let g = generate(
        &mut counter(100, true),
        &[1],
        4,
        &mut greedy(),
        &[],
        &mut |_| Ok(()),
    )
    .unwrap();
    assert_eq!(g.generated_ids, vec![2, 3, 4, 5]);
    let mut hot = Sampler::new(SamplingParams {
        temperature: 1.0,
        ..Default::default()
    });
    let e = generate(&mut counter(100, true), &[1], 4, &mut hot, &[], &mut |_| {
        Ok(())
    })
    .unwrap_err();
    assert!(e.to_string().contains("needs logits"), "{e}");
}

#[test]
fn zero_new_tokens_and_bad_prompts() {
    let g = generate(
        &mut counter(100, false),
        &[1],
        0,
        &mut greedy(),
        &[],
        &mut |_| Ok(()),
    )
    .unwrap();
    assert!(g.generated_ids.is_empty());
    assert!(generate(
        &mut counter(100, false),
        &[],
        3,
        &mut greedy(),
        &[],
        &mut |_| Ok(())
    )
    .is_err());
    assert!(generate(
        &mut counter(100, false),
        &[50],
        3,
        &mut greedy(),
        &[],
        &mut |_| Ok(())
    )
    .is_err());
    assert!(generate(
        &mut counter(2, false),
        &[1, 2, 3],
        3,
        &mut greedy(),
        &[],
        &mut |_| Ok(())
    )
    .is_err());
}

#[test]
fn sampling_is_seeded_and_respects_top_k_top_p() {
    let logits: Vec<f32> = (0..20).map(|i| (i as f32 * 0.37).sin()).collect();
    let top = argmax(&logits);
    let draw = |p: SamplingParams, n: usize| {
        let mut s = Sampler::new(p);
        (0..n).map(|_| s.sample(&logits)).collect::<Vec<u32>>()
    };
    let hot = SamplingParams {
        temperature: 1.0,
        seed: 42,
        ..Default::default()
    };
    let a = draw(hot.clone(), 200);
    assert_eq!(a, draw(hot.clone(), 200), "same seed, same draws");
    assert_ne!(
        a,
        draw(
            SamplingParams {
                seed: 43,
                ..hot.clone()
            },
            200
        )
    );
    let distinct: std::collections::BTreeSet<_> = a.iter().collect();
    assert!(
        distinct.len() > 5,
        "temperature 1 over 20 similar logits should spread"
    );
    assert!(draw(
        SamplingParams {
            top_k: 1,
            ..hot.clone()
        },
        50
    )
    .iter()
    .all(|&t| t == top));
    assert!(draw(
        SamplingParams {
            top_p: 1e-6,
            ..hot.clone()
        },
        50
    )
    .iter()
    .all(|&t| t == top));
    let mut order: Vec<u32> = (0..20).collect();
    order.sort_by(|&x, &y| logits[y as usize].total_cmp(&logits[x as usize]));
    let top3 = &order[..3];
    assert!(draw(
        SamplingParams {
            top_k: 3,
            ..hot.clone()
        },
        100
    )
    .iter()
    .all(|t| top3.contains(t)));
    // Greedy takes the first of equal maxima, as torch.argmax.
    assert_eq!(argmax(&[1.0, 3.0, 3.0]), 1);
}

#[test]
fn streaming_emits_only_complete_utf8() {
    let tok = Tokenizer::Bytes(model::embedded::byte_tokenizer());
    let text = "héllo 東京!";
    let mut stream = StreamDecoder::new();
    let mut pieces = vec![];
    for id in tok.encode(text).unwrap() {
        if let Some(s) = stream.push(&tok, id).unwrap() {
            assert!(!s.contains('\u{FFFD}'), "partial character emitted: {s:?}");
            pieces.push(s);
        }
    }
    assert_eq!(pieces.concat(), text);
    assert!(pieces.contains(&"東".to_string()), "{pieces:?}");
    // A dangling lead byte is flushed at the end as U+FFFD.
    let mut stream = StreamDecoder::new();
    assert_eq!(
        stream.push(&tok, b'a' as u32).unwrap().as_deref(),
        Some("a")
    );
    assert_eq!(stream.push(&tok, 0xE6).unwrap(), None);
    assert_eq!(stream.flush(&tok).unwrap().as_deref(), Some("\u{FFFD}"));
    // Specials are not text.
    assert_eq!(tok.decode(&[104, 256, 105]).unwrap(), "hi");
}

#[test]
fn embedded_model_is_deterministic_and_valid() {
    let cfg = model::embedded::config();
    let w1 = model::embedded::weights(&cfg);
    let w2 = model::embedded::weights(&cfg);
    assert_eq!(w1.layers[1].down_proj.data, w2.layers[1].down_proj.data);
    assert_eq!(cfg.vocab_size, 259);
    let mut r = model::Reference::new(cfg.clone(), std::sync::Arc::new(w1));
    let logits = r.forward(b'H' as u32, 0).unwrap();
    assert_eq!(logits.len(), cfg.vocab_size);
    assert!(logits.iter().all(|x| x.is_finite()));
}
