//! Which path each `dot` takes (tensor cores, or the FMA fallback, and why), and the
//! XOR-swizzled shared-memory rows that `dot.rs` (operands from registers) and
//! `pipeline.rs` (operands by `cp.async`) both write and `ldmatrix` reads.
use super::super::layout::{Frag, Layout};
use dsl_ir::*;
use std::collections::BTreeMap;

/// The path one `dot` takes and why (printed beside it in the generated code).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct DotPlan {
    /// `Some` on tensor cores.
    pub mma: Option<Frag>,
    pub why: String,
    /// (M, K, N).
    pub mkn: (usize, usize, usize),
}

/// Decides every `dot` of a specialised kernel for `threads` threads: the plans, and the
/// `[M, N]` shapes that take the accumulator fragment layout.
pub(crate) fn plan_dots(
    k: &Kernel,
    threads: usize,
) -> (BTreeMap<ValueId, DotPlan>, BTreeMap<Vec<usize>, Frag>) {
    let mut plans = BTreeMap::new();
    let mut frags: BTreeMap<Vec<usize>, Frag> = BTreeMap::new();
    walk(&k.body, &mut |s| {
        let Stmt::Let {
            id,
            op: Op::Dot { a, .. },
            ..
        } = s
        else {
            return;
        };
        let (ta, to) = (k.ty(*a), k.ty(*id));
        let (ad, od) = (ta.dims(), to.dims());
        let (m, kk, n) = (ad[0], ad[1], od[1]);
        let plan = |mma, why: String| DotPlan {
            mma,
            why,
            mkn: (m, kk, n),
        };
        let d = ta.elem.num();
        let p = if !matches!(d, Some(DType::BF16 | DType::F16)) {
            plan(
                None,
                format!(
                    "FMA fallback: {} operands (tensor cores take bf16 or f16; f32 stays exact)",
                    ta.elem
                ),
            )
        } else if m % 16 != 0 || n % 16 != 0 || kk % 16 != 0 {
            plan(
                None,
                format!("FMA fallback: M={m}, N={n}, K={kk} are not all multiples of 16"),
            )
        } else if let Some(f) = frags.get(&od).copied().or_else(|| warp_grid(m, n, threads)) {
            frags.insert(od.clone(), f);
            plan(
                Some(f),
                format!(
                    "tensor cores: mma.sync m16n8k16 {}, {}x{} warps, each {} x {} tiles of 16x8, \
                     operands by ldmatrix from XOR-swizzled shared memory",
                    d.unwrap(),
                    f.wm,
                    f.wn,
                    f.mt,
                    f.nt
                ),
            )
        } else {
            plan(
                None,
                format!(
                    "FMA fallback: {} warps cannot tile [{m}, {n}] in 16x16 pieces",
                    threads / 32
                ),
            )
        };
        plans.insert(*id, p);
    });
    (plans, frags)
}

/// The warp grid whose warps load the fewest fragments per k step (`mt` ldmatrix.x4 for A,
/// `nt / 2` for B): square-ish warp tiles, as Triton's and CUTLASS's (128x256 on 8 warps:
/// 2x4 warps of 64x64, 8 ldmatrix per 32 mma, where 8x1 takes 17 and 64 registers of B
/// fragments). Ties go to more warps along M (the grids are tried from all warps along M
/// down to one, each halving it).
fn warp_grid(m: usize, n: usize, threads: usize) -> Option<Frag> {
    let w = threads / 32;
    let mut best: Option<(usize, Frag)> = None;
    let mut wm = w;
    while wm >= 1 {
        let wn = w / wm;
        if m.is_multiple_of(16 * wm) && n.is_multiple_of(16 * wn) {
            let f = Layout::mma(m, n, wm, wn).frag?;
            let loads = f.mt + f.nt / 2;
            if best.is_none_or(|(b, _)| loads < b) {
                best = Some((loads, f));
            }
        }
        wm /= 2;
    }
    best.map(|(_, f)| f)
}

/// Element offset of (row, col) in a swizzled bf16/f16 tile with rows of `cols` elements:
/// 16-byte chunks, chunk index XOR-ed with `(row / per_phase) % max_phase`.
pub(crate) fn swizzle_params(cols: usize) -> (usize, usize) {
    let chunks = cols / 8;
    let row_bytes = cols * 2;
    let per_phase = (128 / row_bytes).max(1);
    // The XOR must stay inside the row: the largest power of two dividing the chunk count.
    let max_phase = (1usize << chunks.trailing_zeros()).min(8);
    (per_phase, max_phase)
}

/// The swizzled element offset as C: `row * cols + (chunk ^ phase) * 8 + col % 8` where
/// `col` is a multiple of 8 (a whole chunk) when `chunk_only`.
pub(crate) fn swz_c(row: &str, col_chunk: &str, cols: usize) -> String {
    let (pp, mp) = swizzle_params(cols);
    let phase = match (pp, mp) {
        (_, 1) => "0".to_string(),
        (1, m) => format!("({row}) % {m}"),
        (p, m) => format!("({row}) / {p} % {m}"),
    };
    if phase == "0" {
        format!("({row}) * {cols} + ({col_chunk}) * 8")
    } else {
        format!("({row}) * {cols} + (({col_chunk}) ^ ({phase})) * 8")
    }
}
