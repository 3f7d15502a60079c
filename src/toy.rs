//! The toy megakernel: a few layers of a SwiGLU MLP block with a pre-norm residual, the
//! shape of half a transformer layer. Five kernels per layer become one persistent launch:
//!
//! ```text
//! res += x; h = rmsnorm(res) * norm_w[l]      add_rmsnorm   (1 program: idle CTAs prefetch)
//! g = W_gate[l] · h                           gemv BM=8
//! u = W_up[l] · h                             gemv BM=4     (independent of the gate GEMV)
//! a = silu(g) * u                             silu_mul
//! x = W_down[l] · a                           gemv BM=4     (x feeds the next layer's add)
//! ```
//! [`toy_sequential`] launches the same kernels one by one: the megakernel must equal it.
use crate::kernels::{add_rmsnorm::add_rmsnorm, gemv::gemv, vector_add::vector_add};
use crate::runtime::prelude::*;
use crate::runtime::{Error, Launch};

/// a = silu(g) * u, elementwise (SwiGLU's gate).
#[kernel]
pub fn silu_mul(g: Ptr<bf16>, u: Ptr<bf16>, a: Ptr<bf16>, n: i32, #[constexpr] BLOCK: usize) {
    let offs = program_id(0) * BLOCK + arange(0, BLOCK);
    let mask = offs < n;
    let gv = load(g + offs, mask, 0.0).to(f32);
    let uv = load(u + offs, mask, 0.0).to(f32);
    store(a + offs, (silu(gv) * uv).to(bf16), mask);
}

/// `n_layers` MLP blocks over the residual stream `res` (hidden size D, inner size F).
/// `x` is the block input (and, after each layer, its output); weights are stacked per
/// layer: `norm_w[L, D]`, `w_gate[L, F, D]`, `w_up[L, F, D]`, `w_down[L, D, F]`.
#[megakernel]
pub fn toy_mlp(
    x: Ptr<bf16>,
    res: Ptr<bf16>,
    norm_w: Ptr<bf16>,
    w_gate: Ptr<bf16>,
    w_up: Ptr<bf16>,
    w_down: Ptr<bf16>,
    h: Ptr<bf16>,
    g: Ptr<bf16>,
    u: Ptr<bf16>,
    a: Ptr<bf16>,
    n_layers: i32,
    eps: f32,
    #[constexpr] D: usize,
    #[constexpr] F: usize,
) {
    for layer in 0..n_layers {
        add_rmsnorm(grid(1), x, res, norm_w.layer(layer, D), h, D, eps, D);
        gemv(
            grid(cdiv(F, 8)),
            w_gate.layer(layer, F * D),
            h,
            g,
            F,
            D,
            8,
            64,
        );
        gemv(
            grid(cdiv(F, 4)),
            w_up.layer(layer, F * D),
            h,
            u,
            F,
            D,
            4,
            64,
        );
        silu_mul(grid(cdiv(F, 128)), g, u, a, F, 128);
        gemv(
            grid(cdiv(D, 4)),
            w_down.layer(layer, D * F),
            a,
            x,
            D,
            F,
            4,
            64,
        );
    }
}

/// The toy's buffers.
pub struct ToyBuffers {
    pub x: Buffer<bf16>,
    pub res: Buffer<bf16>,
    pub norm_w: Buffer<bf16>,
    pub w_gate: Buffer<bf16>,
    pub w_up: Buffer<bf16>,
    pub w_down: Buffer<bf16>,
    pub h: Buffer<bf16>,
    pub g: Buffer<bf16>,
    pub u: Buffer<bf16>,
    pub a: Buffer<bf16>,
}

impl ToyBuffers {
    /// Random inputs and weights (scaled so activations stay O(1) over layers).
    pub fn random(
        dev: &Device,
        rng: &mut crate::check::Rng,
        layers: usize,
        d: usize,
        f: usize,
    ) -> Result<ToyBuffers, Error> {
        let mut v = |n: usize, scale: f32| -> Vec<bf16> {
            (0..n)
                .map(|_| bf16::from_f32(rng.uniform() * scale))
                .collect()
        };
        let (x, res, nw) = (v(d, 1.0), v(d, 1.0), v(layers * d, 1.0));
        let (wg, wu, wd) = (
            v(layers * f * d, 2.0 / (d as f32).sqrt()),
            v(layers * f * d, 2.0 / (d as f32).sqrt()),
            v(layers * d * f, 2.0 / (f as f32).sqrt()),
        );
        Ok(ToyBuffers {
            x: dev.upload(&x)?,
            res: dev.upload(&res)?,
            norm_w: dev.upload(&nw)?,
            w_gate: dev.upload(&wg)?,
            w_up: dev.upload(&wu)?,
            w_down: dev.upload(&wd)?,
            h: dev.zeros(d)?,
            g: dev.zeros(f)?,
            u: dev.zeros(f)?,
            a: dev.zeros(f)?,
        })
    }

    /// The same data on another device (to compare devices, or runs).
    pub fn copy_to(&self, dev: &Device) -> Result<ToyBuffers, Error> {
        let c = |b: &Buffer<bf16>| -> Result<Buffer<bf16>, Error> { dev.upload(&b.to_vec()?) };
        Ok(ToyBuffers {
            x: c(&self.x)?,
            res: c(&self.res)?,
            norm_w: c(&self.norm_w)?,
            w_gate: c(&self.w_gate)?,
            w_up: c(&self.w_up)?,
            w_down: c(&self.w_down)?,
            h: c(&self.h)?,
            g: c(&self.g)?,
            u: c(&self.u)?,
            a: c(&self.a)?,
        })
    }

    /// Every buffer the toy writes, in one vector (x, res, h, g, u, a).
    pub fn outputs(&self) -> Result<Vec<bf16>, Error> {
        let mut out = vec![];
        for b in [&self.x, &self.res, &self.h, &self.g, &self.u, &self.a] {
            out.extend(b.to_vec()?);
        }
        Ok(out)
    }

    /// Runs the megakernel on these buffers.
    pub fn megakernel(
        &self,
        dev: &Device,
        opts: &crate::runtime::mega::MegaOptions,
        layers: usize,
        d: usize,
        f: usize,
        eps: f32,
    ) -> Result<(), Error> {
        let b = self;
        toy_mlp::launch(
            dev,
            opts,
            &b.x,
            &b.res,
            &b.norm_w,
            &b.w_gate,
            &b.w_up,
            &b.w_down,
            &b.h,
            &b.g,
            &b.u,
            &b.a,
            layers as i32,
            eps,
            d,
            f,
        )
    }
}

/// The toy as separate launches: what the megakernel replaces.
pub fn toy_sequential(
    dev: &Device,
    b: &ToyBuffers,
    layers: usize,
    d: usize,
    f: usize,
    eps: f32,
) -> Result<(), Error> {
    let (di, fi) = (d as i32, f as i32);
    let cdiv = |a: usize, b: usize| a.div_ceil(b) as u32;
    for l in 0..layers {
        add_rmsnorm::launch(
            dev,
            &Launch::grid(1u32),
            &b.x,
            &b.res,
            &b.norm_w.slice(l * d..(l + 1) * d),
            &b.h,
            di,
            eps,
            d,
        )?;
        gemv::launch(
            dev,
            &Launch::grid(cdiv(f, 8)),
            &b.w_gate.slice(l * f * d..(l + 1) * f * d),
            &b.h,
            &b.g,
            fi,
            di,
            8,
            64,
        )?;
        gemv::launch(
            dev,
            &Launch::grid(cdiv(f, 4)),
            &b.w_up.slice(l * f * d..(l + 1) * f * d),
            &b.h,
            &b.u,
            fi,
            di,
            4,
            64,
        )?;
        silu_mul::launch(dev, &Launch::grid(cdiv(f, 128)), &b.g, &b.u, &b.a, fi, 128)?;
        gemv::launch(
            dev,
            &Launch::grid(cdiv(d, 4)),
            &b.w_down.slice(l * d * f..(l + 1) * d * f),
            &b.a,
            &b.x,
            di,
            fi,
            4,
            64,
        )?;
    }
    Ok(())
}

/// A chain of dependent elementwise stages, x → y → x → …, each reading what the previous
/// one wrote: one counter wait per stage. (`y = x + x`, then `x = y + y`.)
#[megakernel]
pub fn chain_counter(
    x: Ptr<f32>,
    y: Ptr<f32>,
    steps: i32,
    #[constexpr] N: usize,
    #[constexpr] BLOCK: usize,
) {
    for s in 0..steps {
        vector_add(grid(cdiv(N, BLOCK)), x, x, y, N, BLOCK);
        vector_add(grid(cdiv(N, BLOCK)), y, y, x, N, BLOCK);
    }
}

/// The same chain with a grid barrier before every stage (`#[barrier]`).
#[megakernel]
pub fn chain_barrier(
    x: Ptr<f32>,
    y: Ptr<f32>,
    steps: i32,
    #[constexpr] N: usize,
    #[constexpr] BLOCK: usize,
) {
    for s in 0..steps {
        #[barrier]
        vector_add(grid(cdiv(N, BLOCK)), x, x, y, N, BLOCK);
        #[barrier]
        vector_add(grid(cdiv(N, BLOCK)), y, y, x, N, BLOCK);
    }
}

/// The same amount of work with no dependency: every stage writes its own window of `y`
/// (the scheduler proves the windows disjoint, across iterations too): no sync at all.
#[megakernel]
pub fn chain_free(
    x: Ptr<f32>,
    y: Ptr<f32>,
    steps: i32,
    #[constexpr] N: usize,
    #[constexpr] BLOCK: usize,
) {
    for s in 0..steps {
        vector_add(
            grid(cdiv(N, BLOCK)),
            x,
            x,
            &y[2 * s * N..(2 * s + 1) * N],
            N,
            BLOCK,
        );
        vector_add(
            grid(cdiv(N, BLOCK)),
            x,
            x,
            &y[(2 * s + 1) * N..(2 * s + 2) * N],
            N,
            BLOCK,
        );
    }
}
