//! Next-token selection, outside the engine so every engine shares it: greedy, or
//! temperature with optional top-k then top-p (the order transformers applies them),
//! driven by a small seeded RNG so runs are reproducible.

/// splitmix64: tiny, deterministic, good enough for sampling.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1) with 53 bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// 0 (or less) = greedy.
    pub temperature: f32,
    /// 0 = no top-k cut.
    pub top_k: usize,
    /// 1.0 = no nucleus cut.
    pub top_p: f32,
    pub seed: u64,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            seed: 0,
        }
    }
}

impl SamplingParams {
    pub fn is_greedy(&self) -> bool {
        self.temperature <= 0.0
    }
}

pub struct Sampler {
    params: SamplingParams,
    rng: SplitMix64,
}

/// Index of the largest logit; the first one on ties (as torch.argmax).
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in logits.iter().enumerate() {
        if x > logits[best] {
            best = i;
        }
    }
    best as u32
}

impl Sampler {
    pub fn new(params: SamplingParams) -> Self {
        let rng = SplitMix64::new(params.seed);
        Sampler { params, rng }
    }

    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        if self.params.is_greedy() {
            return argmax(logits);
        }
        // Candidates by descending logit (stable, so ties keep the lower id first).
        let mut idx: Vec<usize> = (0..logits.len()).collect();
        idx.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
        if self.params.top_k > 0 {
            idx.truncate(self.params.top_k);
        }
        let t = self.params.temperature as f64;
        let max = logits[idx[0]] as f64;
        let mut probs: Vec<f64> = idx
            .iter()
            .map(|&i| ((logits[i] as f64 - max) / t).exp())
            .collect();
        let total: f64 = probs.iter().sum();
        probs.iter_mut().for_each(|p| *p /= total);
        // Nucleus: the shortest prefix whose mass reaches top_p (always at least one).
        if self.params.top_p < 1.0 {
            let mut cum = 0.0;
            let mut keep = probs.len();
            for (n, p) in probs.iter().enumerate() {
                cum += p;
                if cum >= self.params.top_p as f64 {
                    keep = n + 1;
                    break;
                }
            }
            probs.truncate(keep);
            idx.truncate(keep);
        }
        let mass: f64 = probs.iter().sum();
        let mut u = self.rng.next_f64() * mass;
        for (n, p) in probs.iter().enumerate() {
            if u < *p {
                return idx[n] as u32;
            }
            u -= p;
        }
        idx[probs.len() - 1] as u32
    }
}

/// The uniform in (0, 1) that the lm_head kernel draws for `row` at `pos` (Gumbel-max
/// sampling on the device, `kernels/lm_head.rs`), computed the same way on the host: the
/// same 16-bit-lane hash of (seed, position, row). `seed` is used modulo 2^31.
pub fn gumbel_uniform(seed: u32, pos: u32, row: u32) -> f32 {
    let (seed, pos, row) = (seed & 0x7FFF_FFFF, pos & 0x7FFF_FFFF, row & 0x7FFF_FFFF);
    let (mut a, mut b) = (0x2545u32, 0x4F6Cu32);
    for r in 0..8 {
        let word = match r {
            0 | 1 => seed,
            2 | 3 => pos,
            4 | 5 => row,
            _ => 0,
        };
        let w = (word >> (16 * (r % 2))) & 0xFFFF;
        a = ((a ^ w) * 27459) & 0xFFFF;
        a ^= a >> 7;
        b = ((b ^ a) * 24373) & 0xFFFF;
        b ^= b >> 8;
        a ^= b >> 3;
    }
    (((a & 0xFF) * 65536 + b) as f32 + 0.5) * (1.0 / 16_777_216.0)
}

/// The Gumbel-max choice the device makes: argmax over `logits / temperature + g`,
/// g = -log(-log(u)) with u from [`gumbel_uniform`]. An exact draw from
/// softmax(logits / temperature); greedy when `temperature` ≤ 0.
pub fn gumbel_max(logits: &[f32], temperature: f32, seed: u32, pos: u32) -> u32 {
    if temperature <= 0.0 {
        return argmax(logits);
    }
    let it = 1.0 / temperature;
    let noisy: Vec<f32> = logits
        .iter()
        .enumerate()
        .map(|(i, &z)| z * it + -(-gumbel_uniform(seed, pos, i as u32).ln()).ln())
        .collect();
    argmax(&noisy)
}
