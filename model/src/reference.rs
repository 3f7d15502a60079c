//! The plain-Rust Qwen3 decoder: f32 math on bf16 weights, one token per step.
//!
//! Written to be read next to transformers' `modeling_qwen3.py`; it is the oracle the
//! GPU decoder is checked against, so every op is spelled out and nothing is fused.
//!
//! Per layer: x += o_proj(attn(rope(q_norm(q)), rope(k_norm(k)), v)) on rms_norm(x);
//! x += down(silu(gate(h)) * up(h)) with h = post_attention_layernorm(x).
use crate::config::Config;
use crate::engine::{Engine, StepOutput};
use crate::error::ModelError;
use crate::weights::{Tensor, Weights};
use half::slice::HalfFloatSliceExt;
use std::sync::Arc;

/// Per-op values of one layer at one position (for comparing another engine op by op).
#[derive(Debug, Clone, Default)]
pub struct LayerTrace {
    pub attn_norm: Vec<f32>,
    /// After q_norm and rope, `heads * head_dim`.
    pub q: Vec<f32>,
    /// After k_norm and rope, `kv_heads * head_dim`.
    pub k: Vec<f32>,
    pub v: Vec<f32>,
    /// Attention output before o_proj, `heads * head_dim`.
    pub attn: Vec<f32>,
    pub o_proj: Vec<f32>,
    pub residual_after_attn: Vec<f32>,
    pub mlp_norm: Vec<f32>,
    pub mlp: Vec<f32>,
    pub residual_after_mlp: Vec<f32>,
}

/// Keys and values of one layer, one row of `kv_heads * head_dim` per position.
#[derive(Debug, Clone, Default)]
struct KvCache {
    k: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
}

pub struct Reference {
    cfg: Config,
    weights: Arc<Weights>,
    cache: Vec<KvCache>,
    /// 1 / theta^(2i / head_dim), i < head_dim / 2, computed in f32 like transformers.
    inv_freq: Vec<f32>,
}

/// y = W x for W `[out, in]` row-major bf16; each row is widened to f32 once.
pub fn matvec(w: &Tensor, x: &[f32]) -> Vec<f32> {
    let cols = w.shape[1];
    debug_assert_eq!(cols, x.len());
    let mut row = vec![0f32; cols];
    (0..w.shape[0])
        .map(|r| {
            w.row(r).convert_to_f32_slice(&mut row);
            row.iter().zip(x).map(|(a, b)| a * b).sum()
        })
        .collect()
}

/// RMSNorm: x / sqrt(mean(x²) + eps) * weight.
pub fn rms_norm(x: &[f32], weight: &Tensor, eps: f64) -> Vec<f32> {
    let mean_sq = x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32;
    let inv = 1.0 / (mean_sq + eps as f32).sqrt();
    x.iter()
        .zip(weight.data.iter())
        .map(|(v, w)| v * inv * w.to_f32())
        .collect()
}

pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

pub fn softmax_in_place(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    x.iter_mut().for_each(|v| *v /= sum);
}

/// 1 / theta^(2i / head_dim) for i < head_dim / 2: computed in f64, kept in f32.
pub fn rope_inv_freq(cfg: &Config) -> Vec<f32> {
    let hd = cfg.head_dim;
    (0..hd / 2)
        .map(|i| (1.0 / cfg.rope_theta.powf((2 * i) as f64 / hd as f64)) as f32)
        .collect()
}

/// The rotary angles' cosines and sines for positions 0..max_seq, `head_dim` f32s per
/// position: row p is cos(p·f_i) for i < head_dim / 2, then sin(p·f_i), each angle the
/// f32 product `rope` takes and each value its `sin_cos`. The device kernels read a row
/// instead of evaluating sin and cos per element (every thread of a program held 8 of a
/// head's angles: ~1 µs of a 2.5 µs rope program on an H100), and match `rope` bit for bit.
pub fn rope_table(inv_freq: &[f32], max_seq: usize) -> Vec<f32> {
    let half = inv_freq.len();
    let mut t = vec![0.0f32; max_seq * 2 * half];
    for (p, row) in t.chunks_mut(2 * half).enumerate() {
        for (i, &f) in inv_freq.iter().enumerate() {
            let (sin, cos) = (p as f32 * f).sin_cos();
            row[i] = cos;
            row[half + i] = sin;
        }
    }
    t
}

/// Rotate-half rope on one head: (x1, x2) → (x1 cos − x2 sin, x2 cos + x1 sin),
/// with x1/x2 the first/second halves and angle pos · inv_freq[i] (an f32 product).
pub fn rope(head: &mut [f32], pos: usize, inv_freq: &[f32]) {
    let half = head.len() / 2;
    for i in 0..half {
        let angle = pos as f32 * inv_freq[i];
        let (sin, cos) = angle.sin_cos();
        let (x1, x2) = (head[i], head[i + half]);
        head[i] = x1 * cos - x2 * sin;
        head[i + half] = x2 * cos + x1 * sin;
    }
}

impl Reference {
    pub fn new(cfg: Config, weights: Arc<Weights>) -> Reference {
        let inv_freq = rope_inv_freq(&cfg);
        let cache = vec![KvCache::default(); cfg.num_hidden_layers];
        Reference {
            cfg,
            weights,
            cache,
            inv_freq,
        }
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Positions currently cached.
    pub fn cached_len(&self) -> usize {
        self.cache.first().map_or(0, |c| c.k.len())
    }

    /// [`rope`] with this model's frequencies.
    fn rope(&self, head: &mut [f32], pos: usize) {
        rope(head, pos, &self.inv_freq);
    }

    /// Logits for `token` at `pos`, plus per-op values of the first `trace_layers` layers.
    pub fn forward_traced(
        &mut self,
        token: u32,
        pos: usize,
        trace_layers: usize,
    ) -> Result<(Vec<f32>, Vec<LayerTrace>), ModelError> {
        let cfg = &self.cfg;
        let err = |msg: String| ModelError::Engine {
            engine: "reference".into(),
            msg,
        };
        if token as usize >= cfg.vocab_size {
            return Err(err(format!(
                "token id {token} ≥ vocab_size {}",
                cfg.vocab_size
            )));
        }
        if pos >= cfg.max_position_embeddings {
            return Err(err(format!(
                "position {pos} beyond the context limit {}",
                cfg.max_position_embeddings
            )));
        }
        let cached = self.cached_len();
        if pos > cached {
            return Err(err(format!(
                "position {pos} skips ahead of the {cached} cached positions"
            )));
        }
        for c in &mut self.cache {
            c.k.truncate(pos);
            c.v.truncate(pos);
        }

        let w = Arc::clone(&self.weights);
        let (hd, eps) = (cfg.head_dim, cfg.rms_norm_eps);
        let (heads, group) = (cfg.num_attention_heads, cfg.gqa_group());
        let scale = 1.0 / (hd as f32).sqrt();
        let mut x: Vec<f32> = w.embed_tokens.row(token as usize).to_f32_vec();
        let mut traces = Vec::new();

        for (l, lw) in w.layers.iter().enumerate() {
            // Attention block.
            let h = rms_norm(&x, &lw.input_layernorm, eps);
            let mut q = matvec(&lw.q_proj, &h);
            let mut k = matvec(&lw.k_proj, &h);
            let v = matvec(&lw.v_proj, &h);
            for head in q.chunks_mut(hd) {
                head.copy_from_slice(&rms_norm(head, &lw.q_norm, eps));
                self.rope(head, pos);
            }
            for head in k.chunks_mut(hd) {
                head.copy_from_slice(&rms_norm(head, &lw.k_norm, eps));
                self.rope(head, pos);
            }
            self.cache[l].k.push(k.clone());
            self.cache[l].v.push(v.clone());

            let cache = &self.cache[l];
            let mut attn = vec![0f32; heads * hd];
            for hi in 0..heads {
                let kv = hi / group; // GQA: `group` query heads share one KV head.
                let qh = &q[hi * hd..(hi + 1) * hd];
                let mut scores: Vec<f32> = cache
                    .k
                    .iter()
                    .map(|kt| {
                        qh.iter()
                            .zip(&kt[kv * hd..(kv + 1) * hd])
                            .map(|(a, b)| a * b)
                            .sum::<f32>()
                            * scale
                    })
                    .collect();
                softmax_in_place(&mut scores);
                let out = &mut attn[hi * hd..(hi + 1) * hd];
                for (p, vt) in scores.iter().zip(&cache.v) {
                    for (o, vv) in out.iter_mut().zip(&vt[kv * hd..(kv + 1) * hd]) {
                        *o += p * vv;
                    }
                }
            }
            let o = matvec(&lw.o_proj, &attn);
            x.iter_mut().zip(&o).for_each(|(a, b)| *a += b);
            let after_attn = if l < trace_layers {
                x.clone()
            } else {
                Vec::new()
            };

            // MLP block.
            let h2 = rms_norm(&x, &lw.post_attention_layernorm, eps);
            let gate = matvec(&lw.gate_proj, &h2);
            let up = matvec(&lw.up_proj, &h2);
            let act: Vec<f32> = gate.iter().zip(&up).map(|(g, u)| silu(*g) * u).collect();
            let mlp = matvec(&lw.down_proj, &act);
            x.iter_mut().zip(&mlp).for_each(|(a, b)| *a += b);

            if l < trace_layers {
                traces.push(LayerTrace {
                    attn_norm: h,
                    q,
                    k,
                    v,
                    attn,
                    o_proj: o,
                    residual_after_attn: after_attn,
                    mlp_norm: h2,
                    mlp,
                    residual_after_mlp: x.clone(),
                });
            }
        }
        let x = rms_norm(&x, &w.norm, eps);
        Ok((matvec(w.lm_head(), &x), traces))
    }

    /// Logits for `token` at `pos`.
    pub fn forward(&mut self, token: u32, pos: usize) -> Result<Vec<f32>, ModelError> {
        Ok(self.forward_traced(token, pos, 0)?.0)
    }
}

impl Engine for Reference {
    fn name(&self) -> &str {
        "reference"
    }
    fn device(&self) -> String {
        "cpu".into()
    }
    fn max_context(&self) -> usize {
        self.cfg.max_position_embeddings
    }
    fn vocab_size(&self) -> usize {
        self.cfg.vocab_size
    }
    fn step(&mut self, token: u32, pos: usize) -> Result<StepOutput, ModelError> {
        self.forward(token, pos).map(StepOutput::Logits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table's row p rotates a head exactly as `rope` does at position p: the
    /// device kernels read it in place of evaluating sin and cos.
    #[test]
    fn rope_table_rows_are_ropes_angles() {
        let inv_freq: Vec<f32> = (0..8)
            .map(|i| (1.0 / 1e6f64.powf((2 * i) as f64 / 16.0)) as f32)
            .collect();
        let max_seq = 300;
        let table = rope_table(&inv_freq, max_seq);
        assert_eq!(table.len(), max_seq * 16);
        for pos in [0, 1, 17, 299] {
            let head: Vec<f32> = (0..16).map(|i| (i as f32 - 7.5) * 0.37).collect();
            let mut want = head.clone();
            rope(&mut want, pos, &inv_freq);
            let (cos, sin) = table[pos * 16..(pos + 1) * 16].split_at(8);
            for i in 0..8 {
                let (x1, x2) = (head[i], head[i + 8]);
                assert_eq!(x1 * cos[i] - x2 * sin[i], want[i], "pos {pos} i {i}");
                assert_eq!(x2 * cos[i] + x1 * sin[i], want[i + 8], "pos {pos} i {i}");
            }
        }
    }
}
