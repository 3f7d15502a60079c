//! What the examples and tests share: a seeded random source and a tolerant comparison.

/// splitmix64: small, fast, and reproducible from a printed seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    /// A seed from `TESSERA_SEED`, else from the clock (so each run tries new inputs; a
    /// failure prints the seed that reproduces it).
    pub fn seed_from_env() -> u64 {
        std::env::var("TESSERA_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(1)
            })
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E3779B97F4A7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
        z ^ (z >> 31)
    }
    /// Uniform in [-1, 1).
    pub fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
    pub fn vec_f32(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.uniform()).collect()
    }
    pub fn vec_bf16(&mut self, n: usize) -> Vec<half::bf16> {
        (0..n)
            .map(|_| half::bf16::from_f32(self.uniform()))
            .collect()
    }
}

/// The largest error relative to `atol + rtol·|expected|`; ≤ 1 means every element is close.
/// Returns a message naming the worst element otherwise.
pub fn compare(got: &[f32], want: &[f32], atol: f32, rtol: f32) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("length {} vs expected {}", got.len(), want.len()));
    }
    let mut worst = (0.0f32, 0usize);
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let r = if g == w {
            0.0
        } else {
            (g - w).abs() / (atol + rtol * w.abs())
        };
        // A NaN ratio (a NaN result) must count as the worst, so not `r > worst.0`.
        #[allow(clippy::neg_cmp_op_on_partial_ord)]
        if !(r <= worst.0) {
            worst = (if r.is_nan() { f32::INFINITY } else { r }, i);
        }
    }
    if worst.0 <= 1.0 {
        Ok(())
    } else {
        let i = worst.1;
        Err(format!(
            "element {i}: got {}, expected {} (tolerance {atol} + {rtol}·|expected|)",
            got[i], want[i]
        ))
    }
}

pub fn to_f32(v: &[half::bf16]) -> Vec<f32> {
    v.iter().map(|x| x.to_f32()).collect()
}

/// The shared shape of every example: `--explain` prints the kernel's CUDA C on stdout and
/// exits; otherwise run `body` on the GPU if there is one (else the interpreter, said on
/// stderr) and exit non-zero on a mismatch, printing the seed that reproduces it.
pub fn run_example(
    kernel: &crate::runtime::KernelDef,
    constexprs: &[crate::runtime::Binding],
    num_warps: u32,
    body: impl FnOnce(&crate::runtime::Device, &mut Rng) -> Result<(), String>,
) -> std::process::ExitCode {
    use std::process::ExitCode;
    if std::env::args().any(|a| a == "--explain") {
        return match kernel.cuda_source(constexprs, num_warps) {
            Ok(src) => {
                print!("{}", src.code);
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let dev = crate::runtime::Device::auto();
    let seed = Rng::seed_from_env();
    eprintln!(
        "{}: running on {} (seed {seed})",
        kernel.name(),
        dev.describe()
    );
    match body(&dev, &mut Rng::new(seed)) {
        Ok(()) => {
            eprintln!("{}: matches the reference", kernel.name());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!(
                "{}: MISMATCH: {e} (reproduce with TESSERA_SEED={seed})",
                kernel.name()
            );
            ExitCode::FAILURE
        }
    }
}
