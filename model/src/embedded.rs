//! The default model when no `--model` is given: a small Qwen3 with deterministic
//! random weights (fixed seed), built in memory, and a byte-level tokenizer. It makes
//! `tessera generate` run anywhere; its text is noise, and the CLI says so.
use crate::config::Config;
use crate::sampling::SplitMix64;
use crate::tokenizer::ByteTokenizer;
use crate::weights::{Tensor, Weights};
use half::bf16;

pub const SEED: u64 = 0x7e55_e7a0;

pub fn byte_tokenizer() -> ByteTokenizer {
    ByteTokenizer {
        specials: ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
            .map(String::from)
            .to_vec(),
    }
}

/// 2 layers, hidden 64, 4 query heads of 32 (GQA 2), untied, vocab = 256 bytes + 3 specials.
pub fn config() -> Config {
    Config {
        vocab_size: byte_tokenizer().vocab_size(),
        hidden_size: 64,
        intermediate_size: 192,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        num_key_value_heads: 2,
        head_dim: 32,
        max_position_embeddings: 512,
        rms_norm_eps: 1e-6,
        rope_theta: 1e6,
        tie_word_embeddings: false,
        bos_token_id: None,
        eos_token_ids: vec![256],
    }
}

/// Weights drawn from a fixed-seed RNG: norms near 1, matrices uniform with a small
/// scale. lm_head rows of printable ASCII are larger, so the noise at least prints.
pub fn weights(cfg: &Config) -> Weights {
    let mut rng = SplitMix64::new(SEED);
    let tensors = Weights::expected(cfg)
        .into_iter()
        .map(|(name, shape)| {
            let n: usize = shape.iter().product();
            let (center, spread) = if name.contains("norm") {
                (1.0, 0.1)
            } else if name.contains("embed") || name.contains("lm_head") {
                (0.0, 0.8)
            } else {
                (0.0, 0.4)
            };
            let cols = *shape.last().unwrap_or(&1);
            let data = (0..n)
                .map(|i| {
                    let row = i / cols;
                    let damp = if name == "lm_head.weight" && !(32..127).contains(&row) {
                        0.1
                    } else {
                        1.0
                    };
                    bf16::from_f64(damp * (center + spread * (2.0 * rng.next_f64() - 1.0)))
                })
                .collect::<Vec<_>>()
                .into();
            Tensor { name, shape, data }
        })
        .collect();
    Weights::from_tensors(cfg, tensors).expect("embedded tensors follow Weights::expected")
}
