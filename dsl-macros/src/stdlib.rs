//! The tile standard library: `#[tile_fn]`s every kernel may call without listing them,
//! written in the DSL itself (as Triton's `standard.py`), inlined like a user's helper.
//!
//! Each exists because the decoder's kernels repeat it: write it once here, and a change
//! to it reaches every kernel that calls it.
use crate::parse::Helper;

const SOURCE: &str = r#"
/// 1 / rms: `rsqrt(mean + eps)` of the squares summed per lane in `sumsq` (a tile of
/// partial sums over `n` elements in all). RMSNorm's scale.
fn rms_inv(sumsq: Tile<f32, N>, n: i32, eps: f32) -> f32 {
    rsqrt(sum(sumsq, 0) / n as f32 + eps)
}

/// The positions each of `SPLITS` programs takes of a sequence of `len` (split-KV
/// attention): whole `BLOCK_N` tiles, so only the last tile of the last busy split is
/// ragged. The split phase and whatever merges its partials must agree on it.
fn split_chunk(len: i32, #[constexpr] SPLITS: usize, #[constexpr] BLOCK_N: usize) -> i32 {
    cdiv(cdiv(len, SPLITS), BLOCK_N) * BLOCK_N
}

/// `W[rows, :] · x` for a bf16 W of row length `k` (row-major) and a bf16 x: the GEMV
/// tile loop. Walks k in `BK`-wide steps with a [BM, BK] f32 tile of per-lane products,
/// summed over the row once, after the loop. Masked rows and columns contribute 0.
fn gemv_rows(
    w: Ptr<bf16>,
    x: Ptr<bf16>,
    rows: Tile<i32, BM>,
    row_mask: Tile<bool, BM>,
    k: i32,
    #[constexpr] BK: usize,
) -> Tile<f32, BM> {
    let mut acc = zeros([BM, BK], f32);
    for k0 in (0..k).step_by(BK) {
        let cols = k0 + arange(0, BK);
        let col_mask = cols < k;
        // The weight tile first: nothing it needs waits on another stage.
        let tile_mask = row_mask.expand_dims(1) & col_mask.expand_dims(0);
        let wv = load(w + rows.expand_dims(1) * k + cols.expand_dims(0), tile_mask, 0.0).to(f32);
        let xv = load(x + cols, col_mask, 0.0).to(f32);
        acc += wv * xv.expand_dims(0);
    }
    sum(acc, 1)
}

/// Grouped program order over a 1-D grid of cdiv(m, BM) · cdiv(n, BN) programs (Triton's
/// matmul tutorial): GROUP_M row blocks share each column block before moving right, so
/// the tiles they read along the column block are still in L2. The rows of this program's
/// [BM, BN] block of the `m` x `n` output.
fn grouped_rows(
    m: i32,
    n: i32,
    #[constexpr] BM: usize,
    #[constexpr] BN: usize,
    #[constexpr] GROUP_M: usize,
) -> Tile<i32, BM> {
    let num_pid_m = cdiv(m, BM);
    let in_group = GROUP_M * cdiv(n, BN);
    let first_m = (program_id(0) / in_group) * GROUP_M;
    let group_rows = minimum(num_pid_m - first_m, GROUP_M);
    let pid_m = first_m + (program_id(0) % in_group) % group_rows;
    pid_m * BM + arange(0, BM)
}

/// The columns of this program's block, in `grouped_rows`'s order.
fn grouped_cols(
    m: i32,
    n: i32,
    #[constexpr] BM: usize,
    #[constexpr] BN: usize,
    #[constexpr] GROUP_M: usize,
) -> Tile<i32, BN> {
    let in_group = GROUP_M * cdiv(n, BN);
    let pid_n = (program_id(0) % in_group) / group_height(m, n, BM, BN, GROUP_M);
    pid_n * BN + arange(0, BN)
}

/// The row blocks in this program's group (GROUP_M, fewer in the last group).
fn group_height(
    m: i32,
    n: i32,
    #[constexpr] BM: usize,
    #[constexpr] BN: usize,
    #[constexpr] GROUP_M: usize,
) -> i32 {
    let in_group = GROUP_M * cdiv(n, BN);
    minimum(cdiv(m, BM) - (program_id(0) / in_group) * GROUP_M, GROUP_M)
}
"#;

/// The library's helpers, parsed and checked.
pub fn helpers() -> syn::Result<Vec<Helper>> {
    let file: syn::File = syn::parse_str(SOURCE)?;
    file.items
        .into_iter()
        .map(|item| match item {
            syn::Item::Fn(f) => Ok(Helper {
                sig: crate::parse::helper_signature(&f)?,
                body: *f.block,
                library: true,
            }),
            other => Err(syn::Error::new_spanned(
                other,
                "the tile library holds fns only",
            )),
        })
        .collect()
}

/// The names, for documentation and the "unknown primitive" message.
pub const NAMES: &str = "rms_inv, split_chunk, gemv_rows, grouped_rows, grouped_cols, group_height";
