//! Which path each `dot` takes (tensor cores, or the FMA fallback, and why), and the
//! XOR-swizzled shared-memory rows that `dot.rs` (operands from registers) and
//! `pipeline.rs` (operands by `cp.async`) both write and `ldmatrix` reads.
//!
//! With `EmitOptions::wgmma` (sm_90a), a tensor-core `dot` in a pipelined loop whose two
//! operands both come from the cp.async ring may take `wgmma` instead ([`plan_wgmma`]):
//! warpgroups of 4 warps over M, each running m64nNk16 instructions whose operands are
//! read by shared-memory descriptor from the ring. Its rings are stored in column blocks
//! of 16, 32 or 64 elements ([`wgmma_block`]), each block `[rows][w]` in the same XOR swizzle
//! as above, which for rows of 32, 64 and 128 bytes at 1024-byte aligned blocks is exactly
//! wgmma's 32B, 64B and 128B swizzle (the swizzle XORs address bits 4.. with bits 7..).
use super::super::layout::{Frag, Layout};
use super::pipeline::Pipes;
use dsl_ir::*;
use std::collections::BTreeMap;

/// The path one `dot` takes and why (printed beside it in the generated code).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct DotPlan {
    /// `Some` on tensor cores.
    pub mma: Option<Frag>,
    /// `Some` on `wgmma` (then `mma` is the accumulator's warpgroup layout).
    pub wgmma: Option<Wgmma>,
    pub why: String,
    /// (M, K, N).
    pub mkn: (usize, usize, usize),
}

/// A `dot` on `wgmma`: A `[M][K]` (K-major) and B from ring tiles stored in column blocks.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Wgmma {
    /// B is `trans(x)` with x `[n][k]` (K-major, as A); else `[k][n]` (MN-major: the
    /// instruction's transpose bit).
    pub b_nk: bool,
    /// The column blocks of A's tile and B's (elements; see [`wgmma_block`]).
    pub a_block: usize,
    pub b_block: usize,
}

/// Decides every `dot` of a specialised kernel for `threads` threads: the plans, and the
/// `[M, N]` shapes that take the accumulator fragment layout. With `rows_whole`
/// (`EmitOptions::frag_rows`), the dots of an M that some chained dot has ([`chained_ms`])
/// tile M only, so each warp holds whole rows of each accumulator.
pub(crate) fn plan_dots(
    k: &Kernel,
    threads: usize,
    rows_whole: bool,
) -> (BTreeMap<ValueId, DotPlan>, BTreeMap<Vec<usize>, Frag>) {
    let mut plans = BTreeMap::new();
    let mut frags: BTreeMap<Vec<usize>, Frag> = BTreeMap::new();
    let chained = if rows_whole {
        chained_ms(k)
    } else {
        Default::default()
    };
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
            wgmma: None,
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
        } else if let Some(f) = frags.get(&od).copied().or_else(|| {
            let along_m = threads / 32;
            if chained.contains(&m) && m.is_multiple_of(16 * along_m) && n.is_multiple_of(8) {
                Layout::mma(m, n, along_m, 1).frag
            } else {
                warp_grid(m, n, threads)
            }
        }) {
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

/// The M of every `dot` whose A operand is computed from another `dot`'s result (through
/// elementwise ops and casts only: FlashAttention's `dot(p.to(bf16), v)`, p from
/// `dot(q, trans(k))`). Such a chain keeps whole rows in each warp (Triton's rule for
/// chained dots), so the rows reduce in registers and the A operand comes from them.
pub(crate) fn chained_ms(k: &Kernel) -> std::collections::BTreeSet<usize> {
    let mut defs: BTreeMap<ValueId, Op> = BTreeMap::new();
    walk(&k.body, &mut |s| {
        if let Stmt::Let { id, op, .. } = s {
            defs.insert(*id, op.clone());
        }
    });
    fn from_dot(defs: &BTreeMap<ValueId, Op>, v: ValueId, depth: usize) -> bool {
        if depth > 64 {
            return false;
        }
        let go = |x: &ValueId| from_dot(defs, *x, depth + 1);
        match defs.get(&v) {
            Some(Op::Dot { .. }) => true,
            Some(Op::Unary(_, x) | Op::Cast(x)) => go(x),
            Some(Op::Binary(_, x, y)) => go(x) || go(y),
            Some(Op::Where(_, x, y)) => go(x) || go(y),
            _ => false,
        }
    }
    let mut out = std::collections::BTreeSet::new();
    for op in defs.values() {
        if let Op::Dot { a, .. } = op {
            if from_dot(&defs, *a, 0) {
                out.insert(k.ty(*a).dims()[0]);
            }
        }
    }
    out
}

/// Per M, the fragment whose rows the `[M]` and `[M, 1]` tiles take (`Layout::rows_of`,
/// `EmitOptions::frag_rows`): the first `[M, N]` fragment the kernel reduces along its rows.
pub(crate) fn row_frags(k: &Kernel, frags: &BTreeMap<Vec<usize>, Frag>) -> BTreeMap<usize, Frag> {
    let mut out = BTreeMap::new();
    walk(&k.body, &mut |s| {
        if let Stmt::Let {
            op: Op::Reduce { x, axis, .. },
            ..
        } = s
        {
            let d = k.ty(*x).dims();
            if let (Some(f), true) = (frags.get(&d), d.len() == 2 && *axis == 1) {
                out.entry(d[0]).or_insert(*f);
            }
        }
    });
    out
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

/// The column block (elements) of a `wgmma` operand tile whose rows have `cols` bf16/f16
/// elements: rows of 32, 64 or 128 bytes (a 32B, 64B or 128B swizzle), wider tiles cut into
/// blocks of 64 columns. `None`: no wgmma swizzle fits (48 columns, ...).
pub(crate) fn wgmma_block(cols: usize) -> Option<usize> {
    match cols {
        16 | 32 => Some(cols),
        c if c.is_multiple_of(64) => Some(64),
        _ => None,
    }
}

/// The swizzle field of a wgmma descriptor for a block of `w` columns (PTX ISA, matrix
/// descriptor: 1 = 128B, 2 = 64B, 3 = 32B).
pub(crate) fn wgmma_swizzle_mode(w: usize) -> u32 {
    match w {
        64 => 1,
        32 => 2,
        _ => 3,
    }
}

/// The element offset of 16-byte chunk `chunk` (C) of row `row` (C) in a tile of `rows` x
/// `cols` stored in column blocks of `w` elements, each `[rows][w]` and swizzled as
/// [`swz_c`]; `w == cols` is the plain swizzled tile (the same text as [`swz_c`]).
pub(crate) fn tile_off_c(row: &str, chunk: &str, rows: usize, cols: usize, w: usize) -> String {
    if w == cols {
        return swz_c(row, chunk, cols);
    }
    let cpb = w / 8;
    format!(
        "({chunk}) / {cpb} * {} + {}",
        rows * w,
        swz_c(row, &format!("({chunk}) % {cpb}"), w)
    )
}

/// With `EmitOptions::wgmma`: moves each tensor-core `dot` whose tile allows to `wgmma`
/// (its plan, its `[M, N]` shape's accumulator layout, the column blocks of its rings in
/// `pipe`), and says why in every other tensor-core `dot`'s plan. A `dot` qualifies when it
/// is in a pipelined loop with both operands in its ring, the warps are whole warpgroups
/// over M (M a multiple of 16 x num_warps: each warpgroup m64 slabs, `mt` of them a warp
/// grid apart), N a multiple of 8 up to 256 (one instruction's N), and both tiles' rows
/// take a wgmma swizzle ([`wgmma_block`]).
pub(crate) fn plan_wgmma(
    k: &Kernel,
    defs: &[Option<Op>],
    warps: usize,
    plans: &mut BTreeMap<ValueId, DotPlan>,
    frags: &mut BTreeMap<Vec<usize>, Frag>,
    pipe: &mut Pipes,
) {
    let mut fits = vec![];
    for (&id, p) in plans.iter().filter(|(_, p)| p.mma.is_some()) {
        let Some(Op::Dot { a, b, .. }) = &defs[id.0 as usize] else {
            continue;
        };
        let (b_src, b_nk) = match &defs[b.0 as usize] {
            Some(Op::Trans(x)) => (*x, true),
            _ => (*b, false),
        };
        fits.push((
            id,
            *a,
            b_src,
            wgmma_fit(p.mkn, warps, pipe, (*a, b_src, b_nk)),
        ));
    }
    // One accumulator layout per [M, N] shape: a shape that some mma.sync dot keeps stays
    // in mma.sync's warp grid.
    let kept: Vec<(usize, usize)> = fits
        .iter()
        .filter(|f| f.3.is_err())
        .map(|f| (plans[&f.0].mkn.0, plans[&f.0].mkn.2))
        .collect();
    for (id, a, b_src, fit) in fits {
        let p = plans.get_mut(&id).expect("listed above");
        let (m, _, n) = p.mkn;
        let fit = fit.and_then(|w| {
            if kept.contains(&(m, n)) {
                Err(format!(
                    "another dot of shape [{m}, {n}] stays on mma.sync (one accumulator layout per shape)"
                ))
            } else {
                Ok(w)
            }
        });
        match fit {
            Ok(w) => {
                let f = Frag {
                    wm: warps,
                    wn: 1,
                    mt: m / (16 * warps),
                    nt: n / 8,
                    interleaved: true,
                };
                p.why = wgmma_why(k.ty(a).elem, warps, f, w);
                p.mma = Some(f);
                p.wgmma = Some(w);
                frags.insert(vec![m, n], f);
                pipe.blocks.insert(a, w.a_block);
                pipe.blocks.insert(b_src, w.b_block);
                if let Some(pl) = pipe.loads.get(&a).and_then(|l| pipe.loops.get_mut(l)) {
                    pl.wgmma = true;
                }
            }
            Err(why) => p.why = format!("{}; not wgmma: {why}", p.why),
        }
    }
}

/// The generated comment of a `dot` on wgmma.
fn wgmma_why(elem: Elem, warps: usize, f: Frag, w: Wgmma) -> String {
    let n = f.nt * 8;
    format!(
        "tensor cores: wgmma m64n{n}k16 {elem}, {} warpgroup{} over M, each {} x m64n{n}, \
         operands by descriptor from the {}-swizzled ring (A K-major, B {})",
        warps / 4,
        if warps == 4 { "" } else { "s" },
        f.mt,
        swizzle_name(w.a_block),
        if w.b_nk {
            "K-major".to_string()
        } else {
            format!("MN-major, {}-swizzled", swizzle_name(w.b_block))
        }
    )
}

fn swizzle_name(w: usize) -> &'static str {
    match w {
        64 => "128B",
        32 => "64B",
        _ => "32B",
    }
}

/// Whether a tensor-core `dot` of shape (M, K, N) with operands `a` and `b_src` (B `[n][k]`
/// when `b_nk`) can take `wgmma` on `warps` warps, or why not.
fn wgmma_fit(
    (m, kk, n): (usize, usize, usize),
    warps: usize,
    pipe: &Pipes,
    (a, b_src, b_nk): (ValueId, ValueId, bool),
) -> Result<Wgmma, String> {
    let ring = |v: ValueId| pipe.loads.get(&v).copied();
    if ring(a).is_none() || ring(b_src).is_none() || ring(a) != ring(b_src) {
        return Err(
            "its operands are not both in one loop's cp.async ring (wgmma reads them there by descriptor)"
                .into(),
        );
    }
    if !warps.is_multiple_of(4) {
        return Err(format!("{warps} warps are not whole warpgroups of 4"));
    }
    if !m.is_multiple_of(16 * warps) {
        return Err(format!(
            "M={m} is not a multiple of 64 rows x {} warpgroup{}",
            warps / 4,
            if warps == 4 { "" } else { "s" }
        ));
    }
    if n > 256 || !n.is_multiple_of(8) {
        return Err(format!(
            "N={n} is over 256 (one wgmma's N) or not a multiple of 8"
        ));
    }
    let rows = |cols: usize, what: &str| {
        wgmma_block(cols).ok_or_else(|| {
            format!(
                "{what}'s rows of {} bytes take no wgmma swizzle (32, 64 or a multiple of 128 bytes)",
                2 * cols
            )
        })
    };
    let a_block = rows(kk, "A")?;
    let b_block = if b_nk { rows(kk, "B")? } else { rows(n, "B")? };
    Ok(Wgmma {
        b_nk,
        a_block,
        b_block,
    })
}
