//! Each decoder op, run by the interpreter, against the plain-Rust math of the reference
//! decoder (`model::reference`), on random inputs at the tiny checkpoints' dims and at
//! Qwen3-0.6B's (hidden 1024, head_dim 128, 16 / 8 heads).
//!
//! Errors are max |Δ| / max |want|. Kernels store bf16, the reference keeps f32: one
//! rounding costs ≤ 2^-9 relative (2e-3), so TOL = 1e-2 passes right answers with room
//! for f32 summation order, and fails a wrong index, mask or formula by far.
mod common;
use common::rel_err;
use dsl_runtime::{bf16, Buffer, Device, Element, Launch};
use model::kernels::{attention, embedding, gemv, lm_head, mlp, norm, rope, Gemv, NUM_WARPS};
use model::reference::{matvec, rms_norm, rope as rope_ref, silu, softmax_in_place};
use model::sampling::SplitMix64;
use model::Tensor;

const TOL: f32 = 1e-2;

fn dev() -> Device {
    Device::interpreter()
}

fn grid(n: usize) -> Launch {
    Launch::grid(n as u32).warps(NUM_WARPS)
}

/// Uniform in [-scale, scale), rounded to bf16.
fn rand_bf16(rng: &mut SplitMix64, n: usize, scale: f32) -> Vec<bf16> {
    (0..n)
        .map(|_| bf16::from_f32((rng.next_f64() as f32 * 2.0 - 1.0) * scale))
        .collect()
}

fn f32s(v: &[bf16]) -> Vec<f32> {
    v.iter().map(|x| x.to_f32()).collect()
}

fn tensor(data: Vec<bf16>, shape: &[usize]) -> Tensor {
    Tensor {
        name: "test".into(),
        shape: shape.to_vec(),
        data: data.into(),
    }
}

fn up<T: Element>(v: &[T]) -> Buffer<T> {
    dev().upload(v).unwrap()
}

fn down<T: Element>(b: &Buffer<T>) -> Vec<T> {
    b.to_vec().unwrap()
}

fn check(what: &str, got: &[f32], want: &[f32]) {
    let e = rel_err(got, want);
    eprintln!("{what}: rel err {e:.2e}");
    assert!(e < TOL, "{what}: relative error {e} ≥ {TOL}");
}

#[test]
fn embedding_gathers_the_row_of_the_device_token() {
    let mut rng = SplitMix64::new(1);
    for (vocab, h, block) in [(1000, 64, 64), (300, 1024, 1024), (50, 100, 32)] {
        let table = rand_bf16(&mut rng, vocab * h, 1.0);
        let (tb, x) = (up(&table), dev().zeros::<f32>(h).unwrap());
        for tok in [0, vocab - 1, vocab / 3] {
            embedding::embedding::launch(
                &dev(),
                &grid(h.div_ceil(block)),
                &tb,
                &up(&[tok as i32]),
                &x,
                h as i32,
                block,
                1,
            )
            .unwrap();
            assert_eq!(
                down(&x),
                f32s(&table[tok * h..(tok + 1) * h]),
                "vocab {vocab}, hidden {h}, token {tok}"
            );
        }
    }
}

#[test]
fn rmsnorm_matches_reference() {
    let mut rng = SplitMix64::new(2);
    for (h, block) in [(64, 64), (1024, 256), (100, 32)] {
        let (x, w) = (rand_bf16(&mut rng, h, 2.0), rand_bf16(&mut rng, h, 1.5));
        let y = dev().zeros::<bf16>(h).unwrap();
        norm::rmsnorm::launch(
            &dev(),
            &grid(1),
            &up(&x),
            &up(&w),
            &y,
            h as i32,
            1e-6,
            block,
        )
        .unwrap();
        let want = rms_norm(&f32s(&x), &tensor(w, &[h]), 1e-6);
        check(&format!("rmsnorm h={h}"), &f32s(&down(&y)), &want);
    }
}

/// (m, k, tiles): tiny QKV (4·24 + 2·4·24 rows), 0.6B QKV / o_proj / down, ragged edges.
type Shape = (usize, usize, Option<(usize, usize)>);
const GEMV_SHAPES: [Shape; 5] = [
    (288, 64, None),
    (4096, 1024, None),
    (1024, 2048, None),
    (1024, 3072, None),
    (37, 100, Some((8, 32))),
];

fn tiles(m: usize, k: usize, t: Option<(usize, usize)>) -> Gemv {
    t.map_or(Gemv::for_shape(m, k), |(bm, bk)| Gemv { bm, bk })
}

#[test]
fn rmsnorm_gemv_matches_norm_then_matvec() {
    let mut rng = SplitMix64::new(3);
    for (m, k, t) in GEMV_SHAPES {
        let g = tiles(m, k, t);
        let (x, nw, w) = (
            rand_bf16(&mut rng, k, 2.0),
            rand_bf16(&mut rng, k, 1.5),
            rand_bf16(&mut rng, m * k, 0.1),
        );
        let y = dev().zeros::<bf16>(m).unwrap();
        gemv::rmsnorm_gemv::launch(
            &dev(),
            &grid(g.programs(m)),
            &up(&f32s(&x)),
            &up(&nw),
            &up(&w),
            &y,
            m as i32,
            k as i32,
            1e-6,
            g.bm,
            g.bk,
        )
        .unwrap();
        let h = rms_norm(&f32s(&x), &tensor(nw, &[k]), 1e-6);
        check(
            &format!("rmsnorm_gemv {m}x{k} {g:?}"),
            &f32s(&down(&y)),
            &matvec(&tensor(w, &[m, k]), &h),
        );
    }
}

#[test]
fn gemv_residual_adds_the_projection_in_place() {
    let mut rng = SplitMix64::new(4);
    for (m, k, t) in GEMV_SHAPES {
        let g = tiles(m, k, t);
        let (x, res, w) = (
            rand_bf16(&mut rng, k, 1.0),
            rand_bf16(&mut rng, m, 1.0),
            rand_bf16(&mut rng, m * k, 0.1),
        );
        let rb = up(&f32s(&res));
        gemv::gemv_residual::launch(
            &dev(),
            &grid(g.programs(m)),
            &up(&w),
            &up(&x),
            &rb,
            m as i32,
            k as i32,
            g.bm,
            g.bk,
        )
        .unwrap();
        let want: Vec<f32> = matvec(&tensor(w, &[m, k]), &f32s(&x))
            .iter()
            .zip(&res)
            .map(|(a, r)| a + r.to_f32())
            .collect();
        check(&format!("gemv_residual {m}x{k} {g:?}"), &down(&rb), &want);
    }
}

/// o_proj's form beside the fused MLP (`gemv_residual_copy`) adds the same bits into the
/// residual as `gemv_residual`, and leaves the same rows in its copy; with the residual in
/// 3 copies it adds into their sum (in copy order) and zeroes copies 1 and 2; with the
/// residual rows loaded first or the weights (`WEIGHTS_FIRST`).
#[test]
fn gemv_residual_copy_adds_as_gemv_residual_and_copies() {
    let mut rng = SplitMix64::new(40);
    let cases = GEMV_SHAPES
        .into_iter()
        .flat_map(|s| [(s, 1, false), (s, 3, false), (s, 1, true), (s, 3, true)]);
    for ((m, k, t), copies, weights_first) in cases {
        let g = tiles(m, k, t);
        let (x, all, w) = (
            up(&rand_bf16(&mut rng, k, 1.0)),
            f32s(&rand_bf16(&mut rng, copies * m, 1.0)),
            up(&rand_bf16(&mut rng, m * k, 0.1)),
        );
        // What `gemv::resid_load` reads: the copies summed in order.
        let res: Vec<f32> = (0..m)
            .map(|r| (1..copies).fold(all[r], |a, c| a + all[c * m + r]))
            .collect();
        let (plain, with_copy) = (up(&res), up(&all));
        let copy = up(&vec![f32::NAN; m]);
        gemv::gemv_residual::launch(
            &dev(),
            &grid(g.programs(m)),
            &w,
            &x,
            &plain,
            m as i32,
            k as i32,
            g.bm,
            g.bk,
        )
        .unwrap();
        gemv::gemv_residual_copy::launch(
            &dev(),
            &grid(g.programs(m)),
            &w,
            &x,
            &with_copy,
            &copy,
            m as i32,
            k as i32,
            g.bm,
            g.bk,
            copies,
            weights_first,
        )
        .unwrap();
        let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        let (plain, with_copy) = (down(&plain), down(&with_copy));
        assert_ne!(plain, res, "{m}x{k}: nothing added");
        assert_eq!(
            bits(&with_copy[..m]),
            bits(&plain),
            "{m}x{k} {g:?} {copies} weights first {weights_first}"
        );
        assert!(
            with_copy[m..].iter().all(|&v| v == 0.0),
            "{m}x{k}: copies not zeroed"
        );
        assert_eq!(bits(&down(&copy)), bits(&plain), "{m}x{k} {g:?}: the copy");
    }
}

/// The MLP as one stage (`rmsnorm_mlp_tiles`): x += down · (silu(gate · hn) * (up · hn)),
/// hn = rmsnorm(h) (h: o_proj's copy, not x), act rounded to bf16 as the two-stage path
/// stores it; down given transposed. Against the reference's plain Rust, with rows past
/// `inter` in the last program's tiles, hidden < BK (masked columns), and more tiles per
/// program than rows left; into one copy of the residual, and into 3 (program p into copy
/// p % 3), whose sum is then the same.
#[test]
fn fused_mlp_adds_the_reference_mlp_to_x() {
    let mut rng = SplitMix64::new(41);
    // (inter, hidden, BM, BK, TILES, copies)
    for (inter, h, bm, bk, tiles, copies) in [
        (37, 100, 4, 128, 3, 1),
        (160, 64, 8, 64, 5, 1),
        (160, 64, 8, 64, 1, 3),
        (3072, 1024, 8, 1024, 3, 1),
        (3072, 1024, 8, 1024, 3, 3),
        (24, 48, 8, 64, 7, 1),
    ] {
        let (hv, nw, x0) = (
            f32s(&rand_bf16(&mut rng, h, 2.0)),
            rand_bf16(&mut rng, h, 1.5),
            f32s(&rand_bf16(&mut rng, h, 1.0)),
        );
        let gate_up = rand_bf16(&mut rng, 2 * inter * h, 0.1);
        let down_w = rand_bf16(&mut rng, h * inter, 0.1); // [hidden, inter]
        let down_t: Vec<bf16> = (0..inter * h)
            .map(|i| down_w[(i % h) * inter + i / h])
            .collect();
        // Copies 1.. start as zeros (o_proj's fold leaves them so).
        let mut all = x0.clone();
        all.resize(copies * h, 0.0);
        let x = up(&all);
        mlp::rmsnorm_mlp_tiles::launch(
            &dev(),
            &grid(inter.div_ceil(bm * tiles)),
            &up(&hv),
            &up(&nw),
            &up(&gate_up),
            &up(&down_t),
            &x,
            inter as i32,
            h as i32,
            1e-6,
            bm,
            bk,
            tiles,
            copies,
        )
        .unwrap();
        let got = down(&x);
        let sum: Vec<f32> = (0..h)
            .map(|j| (0..copies).map(|c| got[c * h + j]).sum())
            .collect();
        if copies > 1 {
            assert!(got[h..].iter().any(|&v| v != 0.0), "nothing in copies 1..");
        }
        let hn = rms_norm(&hv, &tensor(nw, &[h]), 1e-6);
        let gu = matvec(&tensor(gate_up, &[2 * inter, h]), &hn);
        let act: Vec<f32> = (0..inter)
            .map(|i| bf16::from_f32(silu(gu[i]) * gu[inter + i]).to_f32())
            .collect();
        let want: Vec<f32> = matvec(&tensor(down_w, &[h, inter]), &act)
            .iter()
            .zip(&x0)
            .map(|(d, x)| d + x)
            .collect();
        check(
            &format!("fused MLP {inter}x{h} BM {bm} BK {bk} TILES {tiles}, {copies} copies"),
            &sum,
            &want,
        );
    }
}

/// The row-tiled variant (`gemv_residual_tiles`: TILES row tiles per program, x once, the
/// next tile's weights loaded while one reduces) adds the same bits into the residual as
/// one program per tile, with rows past `m` in the last program's tiles, k < BK (masked
/// columns), one tile, and more tiles per program than there are rows left.
#[test]
fn gemv_residual_tiles_equals_one_program_per_tile() {
    let mut rng = SplitMix64::new(16);
    // (m, k, BM, BK, TILES)
    for (m, k, bm, bk, tiles) in [
        (37, 100, 4, 128, 3),
        (64, 96, 1, 128, 3),
        (1024, 2048, 8, 2048, 1),
        (1024, 2048, 8, 2048, 3),
        (24, 48, 8, 64, 7),
        // down at 8B's tiles (`Tiles::with_gemv_tiles`): 2 rows of a 16384-wide k step.
        (150, 12288, 2, 16384, 16),
    ] {
        let x = up(&rand_bf16(&mut rng, k, 1.0));
        let w = up(&rand_bf16(&mut rng, m * k, 0.1));
        let res = f32s(&rand_bf16(&mut rng, m, 1.0));
        let (one, many) = (up(&res), up(&res));
        gemv::gemv_residual::launch(
            &dev(),
            &grid(m.div_ceil(bm)),
            &w,
            &x,
            &one,
            m as i32,
            k as i32,
            bm,
            bk,
        )
        .unwrap();
        gemv::gemv_residual_tiles::launch(
            &dev(),
            &grid(m.div_ceil(bm * tiles)),
            &w,
            &x,
            &many,
            m as i32,
            k as i32,
            bm,
            bk,
            tiles,
        )
        .unwrap();
        let (one, many) = (down(&one), down(&many));
        assert!(
            one.iter().zip(&res).all(|(a, r)| a != r),
            "{m}x{k}: a row not added to"
        );
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(&one),
            bits(&many),
            "{m}x{k} BM {bm} BK {bk} TILES {tiles}"
        );
    }
}

#[test]
fn gate_up_silu_matches_the_reference_mlp_half() {
    let mut rng = SplitMix64::new(5);
    for (inter, h, t) in [
        (128, 64, None),
        (160, 64, None),
        (3072, 1024, None),
        (37, 100, Some((4, 48))),
    ] {
        let g = tiles(inter, h, t);
        let (x, nw) = (rand_bf16(&mut rng, h, 2.0), rand_bf16(&mut rng, h, 1.5));
        let (gate, upw) = (
            rand_bf16(&mut rng, inter * h, 0.1),
            rand_bf16(&mut rng, inter * h, 0.1),
        );
        let fused: Vec<bf16> = gate.iter().chain(&upw).copied().collect(); // rows [gate; up]
        let act = dev().zeros::<bf16>(inter).unwrap();
        mlp::rmsnorm_gate_up_silu::launch(
            &dev(),
            &grid(g.programs(inter)),
            &up(&f32s(&x)),
            &up(&nw),
            &up(&fused),
            &act,
            inter as i32,
            h as i32,
            1e-6,
            g.bm,
            g.bk,
        )
        .unwrap();
        let hn = rms_norm(&f32s(&x), &tensor(nw, &[h]), 1e-6);
        let (gv, uv) = (
            matvec(&tensor(gate, &[inter, h]), &hn),
            matvec(&tensor(upw, &[inter, h]), &hn),
        );
        let want: Vec<f32> = gv.iter().zip(&uv).map(|(g, u)| silu(*g) * u).collect();
        check(
            &format!("gate_up_silu {inter}x{h} {g:?}"),
            &f32s(&down(&act)),
            &want,
        );
    }
}

/// The norm-once variant (`rmsnorm_gate_up_silu_tiles`: TILES row tiles per program, the
/// next tile's weights loaded while one reduces) computes the same bits as one program per
/// tile, with rows past `inter` in the last program's tiles, k < BK (masked columns), and
/// more tiles per program than there are rows left.
#[test]
fn gate_up_silu_tiles_equals_one_program_per_tile() {
    let mut rng = SplitMix64::new(15);
    // (inter, hidden, BM, BK, TILES)
    for (inter, h, bm, bk, tiles) in [
        (37, 100, 4, 128, 3),
        (160, 64, 8, 64, 5),
        (3072, 1024, 8, 1024, 3),
        (24, 48, 8, 64, 7),
    ] {
        let x = rand_bf16(&mut rng, h, 2.0);
        let nw = rand_bf16(&mut rng, h, 1.5);
        let fused = rand_bf16(&mut rng, 2 * inter * h, 0.1);
        let (x, nw, fused) = (up(&f32s(&x)), up(&nw), up(&fused));
        let (one, many) = (
            dev().zeros::<bf16>(inter).unwrap(),
            dev().zeros::<bf16>(inter).unwrap(),
        );
        mlp::rmsnorm_gate_up_silu::launch(
            &dev(),
            &grid(inter.div_ceil(bm)),
            &x,
            &nw,
            &fused,
            &one,
            inter as i32,
            h as i32,
            1e-6,
            bm,
            bk,
        )
        .unwrap();
        mlp::rmsnorm_gate_up_silu_tiles::launch(
            &dev(),
            &grid(inter.div_ceil(bm * tiles)),
            &x,
            &nw,
            &fused,
            &many,
            inter as i32,
            h as i32,
            1e-6,
            bm,
            bk,
            tiles,
        )
        .unwrap();
        let (one, many) = (down(&one), down(&many));
        assert!(
            one.iter().any(|v| v.to_f32() != 0.0),
            "{inter}x{h}: all zero"
        );
        assert_eq!(one, many, "{inter}x{h} BM {bm} BK {bk} TILES {tiles}");
    }
}

#[test]
fn qk_norm_rope_writes_roped_q_and_the_cache_slot() {
    let mut rng = SplitMix64::new(6);
    // (heads, kv_heads, head_dim, max_seq, pos, theta)
    for (nh, nkv, hd, max_seq, pos, theta) in [
        (4, 2, 32, 16, 5, 1e6),
        (8, 2, 16, 40, 39, 1e4),
        (4, 4, 24, 8, 0, 1e6),
        (16, 8, 128, 64, 37, 1e6),
    ] {
        let rows = (nh + 2 * nkv) * hd;
        let qkv = rand_bf16(&mut rng, rows, 3.0);
        let (qn, kn) = (rand_bf16(&mut rng, hd, 1.5), rand_bf16(&mut rng, hd, 1.5));
        let inv_freq: Vec<f32> = (0..hd / 2)
            .map(|i| (1.0 / f64::powf(theta, (2 * i) as f64 / hd as f64)) as f32)
            .collect();
        let q = dev().zeros::<bf16>(nh * hd).unwrap();
        let (kc, vc) = (
            dev().zeros::<bf16>(nkv * max_seq * hd).unwrap(),
            dev().zeros::<bf16>(nkv * max_seq * hd).unwrap(),
        );
        rope::qk_norm_rope::launch(
            &dev(),
            &grid(nh + nkv),
            &up(&qkv),
            &up(&qn),
            &up(&kn),
            &up(&model::reference::rope_table(&inv_freq, max_seq)),
            &up(&[pos as i32]),
            &q,
            &kc,
            &vc,
            nh as i32,
            nkv as i32,
            max_seq as i32,
            1e-6,
            hd,
        )
        .unwrap();
        let x = f32s(&qkv);
        let normed_roped = |head: &[f32], w: &[bf16]| {
            let mut v = rms_norm(head, &tensor(w.to_vec(), &[hd]), 1e-6);
            rope_ref(&mut v, pos, &inv_freq);
            v
        };
        let want_q: Vec<f32> = x[..nh * hd]
            .chunks(hd)
            .flat_map(|h| normed_roped(h, &qn))
            .collect();
        check(&format!("q rope hd={hd}"), &f32s(&down(&q)), &want_q);
        let (kcache, vcache) = (f32s(&down(&kc)), f32s(&down(&vc)));
        for j in 0..nkv {
            let slot = (j * max_seq + pos) * hd;
            let kh = &x[(nh + j) * hd..(nh + j + 1) * hd];
            check(
                &format!("k rope hd={hd} kv head {j}"),
                &kcache[slot..slot + hd],
                &normed_roped(kh, &kn),
            );
            assert_eq!(
                vcache[slot..slot + hd],
                x[(nh + nkv + j) * hd..(nh + nkv + j + 1) * hd],
                "v head {j}"
            );
        }
        // Nothing else of the caches is touched.
        let written = |i: usize| (i / hd) % max_seq == pos;
        assert!(
            kcache
                .iter()
                .enumerate()
                .all(|(i, v)| written(i) || *v == 0.0),
            "K cache written outside the slot"
        );
        assert!(
            vcache
                .iter()
                .enumerate()
                .all(|(i, v)| written(i) || *v == 0.0),
            "V cache written outside the slot"
        );
    }
}

/// A QKV case: random inputs for `heads` query heads and `kv` KV heads of `hd`, hidden
/// `h`, a rope table of `max_seq` positions and the position `pos`.
struct Qkv {
    nh: usize,
    nkv: usize,
    hd: usize,
    h: usize,
    max_seq: usize,
    x: Buffer<f32>,
    g: Buffer<bf16>,
    w: Buffer<bf16>,
    q_norm: Buffer<bf16>,
    k_norm: Buffer<bf16>,
    table: Buffer<f32>,
    pos: Buffer<i32>,
}

/// What a QKV step writes: qkv, the roped queries, the K and V caches.
struct QkvOut([Buffer<bf16>; 4]);

impl Qkv {
    fn new(
        rng: &mut SplitMix64,
        (nh, nkv, hd, h): (usize, usize, usize, usize),
        max_seq: usize,
        pos: i32,
    ) -> Qkv {
        let m = (nh + 2 * nkv) * hd;
        let inv_freq: Vec<f32> = (0..hd / 2)
            .map(|i| (1.0 / f64::powf(1e6, (2 * i) as f64 / hd as f64)) as f32)
            .collect();
        Qkv {
            nh,
            nkv,
            hd,
            h,
            max_seq,
            x: up(&f32s(&rand_bf16(rng, h, 2.0))),
            g: up(&rand_bf16(rng, h, 1.5)),
            w: up(&rand_bf16(rng, m * h, 0.5)),
            q_norm: up(&rand_bf16(rng, hd, 1.5)),
            k_norm: up(&rand_bf16(rng, hd, 1.5)),
            table: up(&model::reference::rope_table(&inv_freq, max_seq)),
            pos: up(&[pos]),
        }
    }

    fn m(&self) -> usize {
        (self.nh + 2 * self.nkv) * self.hd
    }

    /// Zeroed outputs.
    fn out(&self) -> QkvOut {
        let cache = self.nkv * self.max_seq * self.hd;
        QkvOut([
            dev().zeros::<bf16>(self.m()).unwrap(),
            dev().zeros::<bf16>(self.nh * self.hd).unwrap(),
            dev().zeros::<bf16>(cache).unwrap(),
            dev().zeros::<bf16>(cache).unwrap(),
        ])
    }

    /// `rmsnorm_qkv_rope` (`tiles` None: one program per BM rows) or
    /// `rmsnorm_qkv_rope_tiles` (TILES row tiles per program) over `tickets`.
    fn run(&self, bm_bk: (usize, usize), tiles: Option<usize>, tickets: &Buffer<i32>) -> QkvOut {
        self.run_copying(bm_bk, tiles, tickets, 0).0
    }

    /// `run`, each program also copying `copy_rows` rows of x into a buffer of NaNs
    /// (`COPY`; 0: no copy), returned beside the outputs.
    fn run_copying(
        &self,
        (bm, bk): (usize, usize),
        tiles: Option<usize>,
        tickets: &Buffer<i32>,
        copy_rows: usize,
    ) -> (QkvOut, Vec<f32>) {
        let o = self.out();
        let x_copy = up(&vec![f32::NAN; self.h]);
        let (copy, rows) = (copy_rows > 0, copy_rows.max(1));
        let [qkv, q, kc, vc] = &o.0;
        let (m, h) = (self.m() as i32, self.h as i32);
        let (nh, nkv, max_seq) = (self.nh as i32, self.nkv as i32, self.max_seq as i32);
        match tiles {
            None => rope::rmsnorm_qkv_rope::launch(
                &dev(),
                &grid(self.m() / bm),
                &self.x,
                &x_copy,
                &self.g,
                &self.w,
                qkv,
                &self.q_norm,
                &self.k_norm,
                &self.table,
                &self.pos,
                q,
                kc,
                vc,
                tickets,
                m,
                h,
                nh,
                nkv,
                max_seq,
                1e-6,
                bm,
                bk,
                self.hd,
                1,
                copy,
                rows,
                true,
            ),
            Some(t) => rope::rmsnorm_qkv_rope_tiles::launch(
                &dev(),
                &grid((self.m() / bm).div_ceil(t)),
                &self.x,
                &x_copy,
                &self.g,
                &self.w,
                qkv,
                &self.q_norm,
                &self.k_norm,
                &self.table,
                &self.pos,
                q,
                kc,
                vc,
                tickets,
                m,
                h,
                nh,
                nkv,
                max_seq,
                1e-6,
                bm,
                bk,
                self.hd,
                t,
                1,
                copy,
                rows,
                true,
            ),
        }
        .unwrap();
        (o, down(&x_copy))
    }
}

impl QkvOut {
    /// Every output equal to `want`'s bit for bit.
    fn assert_same(&self, want: &QkvOut, what: &str) {
        let bits = |b: &Buffer<bf16>| down(b).iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        for (name, got, want) in ["qkv", "q", "K cache", "V cache"]
            .iter()
            .zip(&self.0)
            .zip(&want.0)
            .map(|((n, g), w)| (n, g, w))
        {
            assert_eq!(bits(got), bits(want), "{name} differs ({what})");
        }
    }
}

/// `rmsnorm_qkv_rope` (the QKV GEMV whose last program per head norms and ropes it) writes
/// what `rmsnorm_gemv` then `qk_norm_rope` write, bit for bit, and leaves its tickets at 0,
/// twice over the same tickets (two layers); BM = head_dim (one program a head) included.
#[test]
fn qkv_gemv_with_its_head_epilogue_equals_the_two_kernels() {
    let mut rng = SplitMix64::new(16);
    // (heads, kv_heads, head_dim, hidden, BM, BK, max_seq, pos)
    for (nh, nkv, hd, h, bm, bk, max_seq, pos) in [
        (4, 2, 32, 48, 8, 32, 16, 5),
        (8, 2, 16, 40, 16, 64, 40, 39),
        (2, 1, 64, 64, 16, 64, 8, 0),
    ] {
        let c = Qkv::new(&mut rng, (nh, nkv, hd, h), max_seq, pos);
        let m = c.m();
        let want = c.out();
        let [qkv, q, kc, vc] = &want.0;
        gemv::rmsnorm_gemv::launch(
            &dev(),
            &grid(m / bm),
            &c.x,
            &c.g,
            &c.w,
            qkv,
            m as i32,
            h as i32,
            1e-6,
            bm,
            bk,
        )
        .unwrap();
        rope::qk_norm_rope::launch(
            &dev(),
            &grid(nh + nkv),
            qkv,
            &c.q_norm,
            &c.k_norm,
            &c.table,
            &c.pos,
            q,
            kc,
            vc,
            nh as i32,
            nkv as i32,
            max_seq as i32,
            1e-6,
            hd,
        )
        .unwrap();
        let tickets = dev().zeros::<i32>(nh + 2 * nkv).unwrap();
        for layer in 0..2 {
            c.run((bm, bk), None, &tickets)
                .assert_same(&want, &format!("layer {layer}, hd {hd}, BM {bm}"));
            assert_eq!(down(&tickets), vec![0; nh + 2 * nkv], "tickets not reset");
        }
    }
}

/// The norm-once QKV (`rmsnorm_qkv_rope_tiles`: TILES row tiles per program, the next
/// tile's weights loaded while one reduces, each tile counted into its head's ticket)
/// writes the same bits as one program per tile (`rmsnorm_qkv_rope`) into qkv, q and both
/// caches, and leaves its tickets at 0, twice over the same tickets: tiles that cross
/// heads, a last program with tiles past the last row, one tile, more tiles than rows.
#[test]
fn qkv_tiles_equal_one_program_per_tile() {
    let mut rng = SplitMix64::new(17);
    // (heads, kv_heads, head_dim, hidden, BM, max_seq, pos, TILES)
    for (nh, nkv, hd, h, bm, max_seq, pos, tiles) in [
        (
            4usize, 2usize, 32usize, 48usize, 8usize, 16usize, 5i32, 3usize,
        ),
        (8, 2, 16, 40, 16, 40, 39, 1),
        (8, 2, 16, 40, 4, 40, 7, 7),
        (2, 1, 64, 64, 16, 8, 0, 2),
        (2, 1, 32, 100, 8, 8, 3, 64),
    ] {
        let c = Qkv::new(&mut rng, (nh, nkv, hd, h), max_seq, pos);
        let bk = h.next_power_of_two(); // one k step, as the tiles kernel needs
        let tickets = dev().zeros::<i32>(nh + 2 * nkv).unwrap();
        let want = c.run((bm, bk), None, &tickets);
        assert!(
            down(&want.0[1]).iter().any(|v| v.to_bits() != 0),
            "no query head written"
        );
        for layer in 0..2 {
            c.run((bm, bk), Some(tiles), &tickets).assert_same(
                &want,
                &format!("layer {layer}, hd {hd}, BM {bm}, TILES {tiles}"),
            );
            assert_eq!(down(&tickets), vec![0; nh + 2 * nkv], "tickets not reset");
        }
    }
}

/// With `COPY` (the megakernel's `Tiles::o_heads`), both QKV kernels also copy the
/// residual into `x_copy`, each program its COPY_ROWS rows (the last ones masked past the
/// hidden size), and write the same bits as without: every row copied exactly, none twice
/// short (the buffer starts as NaN).
#[test]
fn qkv_programs_copy_the_residual_rows() {
    let mut rng = SplitMix64::new(18);
    // (heads, kv_heads, head_dim, hidden, BM, TILES)
    for (nh, nkv, hd, h, bm, tiles) in [
        (4usize, 2usize, 32usize, 48usize, 8usize, None),
        (4, 2, 32, 48, 8, Some(3usize)),
        (2, 1, 32, 100, 8, Some(2)),
        (2, 1, 32, 100, 16, None),
    ] {
        let c = Qkv::new(&mut rng, (nh, nkv, hd, h), 8, 3);
        let bk = h.next_power_of_two();
        let tickets = dev().zeros::<i32>(nh + 2 * nkv).unwrap();
        let programs = c.m().div_ceil(bm * tiles.unwrap_or(1));
        let rows = h.div_ceil(programs).next_power_of_two();
        let want = c.run((bm, bk), tiles, &tickets);
        let (got, copy) = c.run_copying((bm, bk), tiles, &tickets, rows);
        let what = format!("hidden {h}, BM {bm}, TILES {tiles:?}, {rows} rows a program");
        got.assert_same(&want, &what);
        let x = down(&c.x);
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&copy), bits(&x), "{what}");
    }
}

/// The reference's attention for one token: softmax(q·K/√d) · V per head, GQA.
#[allow(clippy::too_many_arguments)]
fn attention_ref(
    q: &[f32],
    kc: &[f32],
    vc: &[f32],
    nh: usize,
    group: usize,
    hd: usize,
    max_seq: usize,
    len: usize,
) -> Vec<f32> {
    let scale = 1.0 / (hd as f32).sqrt();
    let mut out = vec![0f32; nh * hd];
    for h in 0..nh {
        let base = (h / group) * max_seq * hd;
        let qh = &q[h * hd..(h + 1) * hd];
        let mut s: Vec<f32> = (0..len)
            .map(|p| {
                qh.iter()
                    .zip(&kc[base + p * hd..])
                    .map(|(a, b)| a * b)
                    .sum::<f32>()
                    * scale
            })
            .collect();
        softmax_in_place(&mut s);
        for (p, w) in s.iter().enumerate() {
            for d in 0..hd {
                out[h * hd + d] += w * vc[base + p * hd + d];
            }
        }
    }
    out
}

/// A random K and V cache of `n` elements each (keys at scale 2, values at 1).
fn rand_kv_cache(rng: &mut SplitMix64, n: usize) -> (Vec<bf16>, Vec<bf16>) {
    (rand_bf16(rng, n, 2.0), rand_bf16(rng, n, 1.0))
}

/// o_proj's random weights `[hidden, q_dim]`, the residual's `copies` and the MLP's input:
/// what the o_proj-per-head tests add into.
fn rand_o_proj(
    rng: &mut SplitMix64,
    hidden: usize,
    q_dim: usize,
    copies: usize,
) -> (Vec<bf16>, Vec<f32>, Vec<f32>) {
    let w = rand_bf16(rng, hidden * q_dim, 0.5);
    let res0 = f32s(&rand_bf16(rng, copies * hidden, 1.0));
    let xm0 = f32s(&rand_bf16(rng, hidden, 1.0));
    (w, res0, xm0)
}

#[test]
fn split_kv_attention_matches_softmax_attention() {
    let mut rng = SplitMix64::new(7);
    // (heads, kv_heads, head_dim, max_seq, pos, BLOCK_N, SPLITS): GQA 2 and 4, MHA, one
    // position, ragged tiles, more splits than tiles (empty splits), one split, 0.6B dims.
    let cases = [
        (4, 2, 32, 64, 40, 32, 16),
        (8, 2, 16, 64, 0, 32, 4),
        (4, 4, 24, 50, 49, 8, 3),
        (16, 8, 128, 512, 300, 32, 16),
        (2, 1, 16, 100, 70, 16, 1),
    ];
    for (nh, nkv, hd, max_seq, pos, block_n, splits) in cases {
        let q = rand_bf16(&mut rng, nh * hd, 2.0);
        let (kc, vc) = rand_kv_cache(&mut rng, nkv * max_seq * hd);
        let parts = nh * splits;
        // Partial slots start as garbage (what the last layer or step left): every split
        // must write its own, empty or not.
        let stale = |n: usize| up(&vec![f32::NAN; n]);
        let (pm, pl, pa) = (stale(parts), stale(parts), stale(parts * hd));
        let out = dev().zeros::<bf16>(nh * hd).unwrap();
        let (qb, kb, vb, pb) = (up(&q), up(&kc), up(&vc), up(&[pos as i32]));
        let group = (nh / nkv) as i32;
        let split = Launch::grid((nh as u32, splits as u32)).warps(NUM_WARPS);
        let scale = 1.0 / (hd as f32).sqrt();
        attention::attn_split::launch(
            &dev(),
            &split,
            &qb,
            &kb,
            &vb,
            &pb,
            &pm,
            &pl,
            &pa,
            group,
            max_seq as i32,
            scale,
            hd,
            block_n,
            splits,
        )
        .unwrap();
        // With the next tile in flight (`attn_split_ahead`): the same partials, bit for bit.
        let (am, al, aa) = (stale(parts), stale(parts), stale(parts * hd));
        attention::attn_split_ahead::launch(
            &dev(),
            &split,
            &qb,
            &kb,
            &vb,
            &pb,
            &am,
            &al,
            &aa,
            group,
            max_seq as i32,
            scale,
            hd,
            block_n,
            splits,
        )
        .unwrap();
        let bits = |b: &dsl_runtime::Buffer<f32>| {
            b.to_vec()
                .unwrap()
                .iter()
                .map(|x| x.to_bits())
                .collect::<Vec<_>>()
        };
        for (what, a, b) in [("m", &am, &pm), ("l", &al, &pl), ("acc", &aa, &pa)] {
            assert_eq!(
                bits(a),
                bits(b),
                "attn_split_ahead's {what} != attn_split's"
            );
        }
        attention::attn_merge::launch(&dev(), &grid(nh), &pm, &pl, &pa, &out, hd, splits).unwrap();
        // Both phases in one grid (the last program of each head merges it), twice over the
        // same tickets (a second layer): the two-phase output bit for bit, tickets back at 0.
        let tickets = dev().zeros::<i32>(nh).unwrap();
        for layer in 0..2 {
            let (pm, pl, pa) = (stale(parts), stale(parts), stale(parts * hd));
            let fused = dev().zeros::<bf16>(nh * hd).unwrap();
            attention::attn_split_merge::launch(
                &dev(),
                &split,
                &qb,
                &kb,
                &vb,
                &pb,
                &pm,
                &pl,
                &pa,
                &tickets,
                &fused,
                group,
                max_seq as i32,
                scale,
                hd,
                block_n,
                splits,
            )
            .unwrap();
            assert_eq!(
                down(&fused).iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                down(&out).iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                "attn_split_merge (layer {layer}) != attn_split + attn_merge"
            );
            assert_eq!(down(&tickets), vec![0; nh], "tickets not reset");
        }
        let want = attention_ref(
            &f32s(&q),
            &f32s(&kc),
            &f32s(&vc),
            nh,
            nh / nkv,
            hd,
            max_seq,
            pos + 1,
        );
        check(
            &format!(
                "attention heads {nh}/{nkv} hd {hd} len {} splits {splits}",
                pos + 1
            ),
            &f32s(&down(&out)),
            &want,
        );
    }
}

/// o_proj's programs computing the attention themselves (`attn_head_residual`, the decode
/// step's specialisation for short contexts) add what the split attention then o_proj per
/// head (`attn_split`, `gemv_head_residual`) add: bit for bit while the context is one tile
/// (where the megakernel launches it), and against the softmax reference over several
/// tiles. GQA, a ragged last tile, rows past the hidden size, one and two residual copies;
/// the residual and the MLP's input start nonzero.
#[test]
fn attention_inside_o_proj_adds_what_split_attention_then_o_proj_add() {
    let mut rng = SplitMix64::new(41);
    // (heads, kv_heads, head_dim, max_seq, pos, BLOCK_N, SPLITS, hidden, BM, COPIES)
    let cases = [
        (4, 2, 32, 64, 0, 32, 4, 40, 16, 2),
        (4, 2, 32, 64, 31, 32, 4, 40, 16, 2),
        (8, 2, 16, 64, 9, 16, 4, 33, 16, 1),
        (2, 1, 16, 100, 70, 16, 3, 24, 8, 1),
        (4, 4, 24, 50, 49, 8, 2, 20, 8, 2),
    ];
    for (nh, nkv, hd, max_seq, pos, block_n, splits, hidden, bm, copies) in cases {
        let q = rand_bf16(&mut rng, nh * hd, 2.0);
        let (kc, vc) = rand_kv_cache(&mut rng, nkv * max_seq * hd);
        let q_dim = nh * hd;
        let (w, res0, xm0) = rand_o_proj(&mut rng, hidden, q_dim, copies);
        let (qb, kb, vb, pb, wb) = (up(&q), up(&kc), up(&vc), up(&[pos as i32]), up(&w));
        let group = (nh / nkv) as i32;
        let scale = 1.0 / (hd as f32).sqrt();
        let heads_grid = Launch::grid((nh as u32, hidden.div_ceil(bm) as u32)).warps(NUM_WARPS);
        // The split attention, then o_proj per head merging its partials.
        let parts = nh * splits;
        let (pm, pl, pa) = (
            up(&vec![f32::NAN; parts]),
            up(&vec![f32::NAN; parts]),
            up(&vec![f32::NAN; parts * hd]),
        );
        let (res_a, xm_a) = (up(&res0), up(&xm0));
        let split = Launch::grid((nh as u32, splits as u32)).warps(NUM_WARPS);
        attention::attn_split::launch(
            &dev(),
            &split,
            &qb,
            &kb,
            &vb,
            &pb,
            &pm,
            &pl,
            &pa,
            group,
            max_seq as i32,
            scale,
            hd,
            block_n,
            splits,
        )
        .unwrap();
        gemv::gemv_head_residual::launch(
            &dev(),
            &heads_grid,
            &wb,
            &pm,
            &pl,
            &pa,
            &res_a,
            &xm_a,
            hidden as i32,
            q_dim as i32,
            bm,
            hd,
            splits,
            copies,
        )
        .unwrap();
        // One stage: each program attends its head itself.
        let (res_b, xm_b) = (up(&res0), up(&xm0));
        gemv::attn_head_residual::launch(
            &dev(),
            &heads_grid,
            &wb,
            &qb,
            &kb,
            &vb,
            &pb,
            &res_b,
            &xm_b,
            group,
            max_seq as i32,
            scale,
            hidden as i32,
            q_dim as i32,
            bm,
            hd,
            block_n,
            copies,
        )
        .unwrap();
        let what = format!("heads {nh}/{nkv} hd {hd} len {} BLOCK_N {block_n}", pos + 1);
        if pos < block_n {
            let bits = |b: &Buffer<f32>| down(b).iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&res_b), bits(&res_a), "{what}: the residual");
            assert_eq!(bits(&xm_b), bits(&xm_a), "{what}: the MLP's input");
        }
        // Against the reference: the softmax attention, then each head's o_proj share in f64.
        let attn = attention_ref(
            &f32s(&q),
            &f32s(&kc),
            &f32s(&vc),
            nh,
            nh / nkv,
            hd,
            max_seq,
            pos + 1,
        );
        let (mut want_res, mut want_xm) = (res0.clone(), xm0.clone());
        for h in 0..nh {
            for r in 0..hidden {
                let y: f64 = (0..hd)
                    .map(|j| w[r * q_dim + h * hd + j].to_f32() as f64 * attn[h * hd + j] as f64)
                    .sum();
                want_res[(h % copies) * hidden + r] += y as f32;
                want_xm[r] += y as f32;
            }
        }
        for (part, got, want) in [
            ("the residual", &res_b, &want_res),
            ("the MLP's input", &xm_b, &want_xm),
        ] {
            let e = rel_err(&down(got), want);
            assert!(e < 1e-5, "{what}: {part}: relative error {e:.2e}");
        }
    }
}

/// o_proj's programs norming and roping the raw heads themselves
/// (`attn_rope_head_residual`: the raw QKV output in, the new K/V row written by one
/// program per KV head) add what `qk_norm_rope` then `attn_head_residual` add, and write the
/// same cache row: one tile of context and three (ragged), GQA 2 and 1, one and two row
/// blocks a program (the last program's second block past the hidden size), the older
/// cache rows random.
#[test]
fn attention_inside_o_proj_ropes_the_raw_heads_as_qk_norm_rope() {
    let mut rng = SplitMix64::new(43);
    // (heads, kv_heads, head_dim, max_seq, pos, BLOCK_N, hidden, BM, TILES, COPIES)
    let cases = [
        (4, 2, 32, 40, 7, 16, 40, 16, 1, 2),
        (4, 2, 32, 40, 37, 16, 40, 16, 2, 1),
        (2, 2, 16, 30, 20, 8, 24, 8, 2, 2),
    ];
    for (nh, nkv, hd, max_seq, pos, block_n, hidden, bm, tiles, copies) in cases {
        let qkv = rand_bf16(&mut rng, (nh + 2 * nkv) * hd, 3.0);
        let (qn, kn) = (rand_bf16(&mut rng, hd, 1.5), rand_bf16(&mut rng, hd, 1.5));
        let inv_freq: Vec<f32> = (0..hd / 2)
            .map(|i| (1.0 / f64::powf(1e6, (2 * i) as f64 / hd as f64)) as f32)
            .collect();
        let table = up(&model::reference::rope_table(&inv_freq, max_seq));
        let cache = rand_kv_cache(&mut rng, nkv * max_seq * hd);
        let q_dim = nh * hd;
        let (w, res0, xm0) = rand_o_proj(&mut rng, hidden, q_dim, copies);
        let (qkvb, qnb, knb, pb, wb) = (up(&qkv), up(&qn), up(&kn), up(&[pos]), up(&w));
        let scale = 1.0 / (hd as f32).sqrt();
        // The kernels engine's head epilogue, then the attention inside o_proj.
        let (kc_a, vc_a) = (up(&cache.0), up(&cache.1));
        let q = dev().zeros::<bf16>(q_dim).unwrap();
        rope::qk_norm_rope::launch(
            &dev(),
            &grid(nh + nkv),
            &qkvb,
            &qnb,
            &knb,
            &table,
            &pb,
            &q,
            &kc_a,
            &vc_a,
            nh as i32,
            nkv as i32,
            max_seq as i32,
            1e-6,
            hd,
        )
        .unwrap();
        let (res_a, xm_a) = (up(&res0), up(&xm0));
        gemv::attn_head_residual::launch(
            &dev(),
            &Launch::grid((nh as u32, hidden.div_ceil(bm) as u32)).warps(NUM_WARPS),
            &wb,
            &q,
            &kc_a,
            &vc_a,
            &pb,
            &res_a,
            &xm_a,
            (nh / nkv) as i32,
            max_seq as i32,
            scale,
            hidden as i32,
            q_dim as i32,
            bm,
            hd,
            block_n,
            copies,
        )
        .unwrap();
        // The raw heads in, TILES row blocks a program.
        let (kc_b, vc_b) = (up(&cache.0), up(&cache.1));
        let (res_b, xm_b) = (up(&res0), up(&xm0));
        let programs = hidden.div_ceil(bm * tiles);
        gemv::attn_rope_head_residual::launch(
            &dev(),
            &Launch::grid((nh as u32, programs as u32)).warps(NUM_WARPS),
            &wb,
            &qkvb,
            &qnb,
            &knb,
            &table,
            &kc_b,
            &vc_b,
            &pb,
            &res_b,
            &xm_b,
            nh as i32,
            nkv as i32,
            max_seq as i32,
            1e-6,
            scale,
            hidden as i32,
            q_dim as i32,
            bm,
            hd,
            block_n,
            copies,
            tiles,
        )
        .unwrap();
        let what = format!("heads {nh}/{nkv} len {} TILES {tiles}", pos + 1);
        assert_eq!(down(&kc_b), down(&kc_a), "{what}: the K cache");
        assert_eq!(down(&vc_b), down(&vc_a), "{what}: the V cache");
        for (part, got, want) in [
            ("the residual", &res_b, &res_a),
            ("the MLP's input", &xm_b, &xm_a),
        ] {
            let e = rel_err(&down(got), &down(want));
            assert!(e < 1e-6, "{what}: {part}: relative error {e:.2e}");
        }
    }
}

/// The QKV stage's rotated pairs and the o_proj programs that scale them
/// (`rmsnorm_qkv_rope_pairs` then `attn_scale_head_residual`, `Tiles::qkv_pairs`) add what
/// `rmsnorm_qkv_rope` (its last program per head norming and roping it) then
/// `attn_head_residual` add, within the bf16 rounding of q and the new K row (the 1/rms is
/// applied after the rotation, not before): the same V cache bit for bit, the same K cache
/// but for the new row, each program's sum of squares that of its own pair rows of the
/// finished path's raw QKV output (f64), over one tile of context and three (ragged), GQA
/// 2 and 1, the last o_proj row block past the hidden size, the older cache rows random; and
/// so does the split attention that scales the heads (`attn_split_scaled`, three splits,
/// merged by `gemv_head_residual`) against `attn_split`, its K row the same bits as
/// `attn_scale_head_residual`'s.
#[test]
fn qkv_pairs_then_the_scaled_heads_add_what_the_finished_heads_add() {
    let mut rng = SplitMix64::new(44);
    // (heads, kv_heads, head_dim, hidden, QKV BM, BK, max_seq, pos, BLOCK_N, o BM, COPIES)
    let cases = [
        (4, 2, 32, 48, 8, 64, 16, 5, 16, 16, 2),
        (4, 2, 32, 40, 16, 64, 40, 37, 16, 16, 1),
        (2, 2, 16, 24, 4, 32, 30, 20, 8, 16, 2),
    ];
    for (nh, nkv, hd, h, bm, bk, max_seq, pos, block_n, obm, copies) in cases {
        let c = Qkv::new(&mut rng, (nh, nkv, hd, h), max_seq, pos as i32);
        let (m, q_dim) = (c.m(), nh * hd);
        let cache = rand_kv_cache(&mut rng, nkv * max_seq * hd);
        let (w, res0, xm0) = rand_o_proj(&mut rng, h, q_dim, copies);
        let wb = up(&w);
        let scale = 1.0 / (hd as f32).sqrt();
        let x_copy = up(&vec![f32::NAN; h]);
        let (mi, hi, nhi, nkvi, msi) = (m as i32, h as i32, nh as i32, nkv as i32, max_seq as i32);
        // The finished heads, then the attention inside o_proj.
        let (qkv, q) = (
            dev().zeros::<bf16>(m).unwrap(),
            dev().zeros::<bf16>(q_dim).unwrap(),
        );
        let (kc_a, vc_a) = (up(&cache.0), up(&cache.1));
        let tickets = dev().zeros::<i32>(nh + 2 * nkv).unwrap();
        rope::rmsnorm_qkv_rope::launch(
            &dev(),
            &grid(m / bm),
            &c.x,
            &x_copy,
            &c.g,
            &c.w,
            &qkv,
            &c.q_norm,
            &c.k_norm,
            &c.table,
            &c.pos,
            &q,
            &kc_a,
            &vc_a,
            &tickets,
            mi,
            hi,
            nhi,
            nkvi,
            msi,
            1e-6,
            bm,
            bk,
            hd,
            1,
            false,
            1,
            true,
        )
        .unwrap();
        let (res_a, xm_a) = (up(&res0), up(&xm0));
        gemv::attn_head_residual::launch(
            &dev(),
            &Launch::grid((nh as u32, h.div_ceil(obm) as u32)).warps(NUM_WARPS),
            &wb,
            &q,
            &kc_a,
            &vc_a,
            &c.pos,
            &res_a,
            &xm_a,
            (nh / nkv) as i32,
            msi,
            scale,
            hi,
            q_dim as i32,
            obm,
            hd,
            block_n,
            copies,
        )
        .unwrap();
        // The rotated pairs, then the scaled heads.
        let units = nh + nkv;
        let (rot, ss) = (
            dev().zeros::<f32>(units * hd).unwrap(),
            dev().zeros::<f32>(units * hd / bm).unwrap(),
        );
        let (kc_b, vc_b) = (up(&cache.0), up(&cache.1));
        rope::rmsnorm_qkv_rope_pairs::launch(
            &dev(),
            &grid(m / bm),
            &c.x,
            &x_copy,
            &c.g,
            &c.w,
            &c.q_norm,
            &c.k_norm,
            &c.table,
            &c.pos,
            &rot,
            &ss,
            &vc_b,
            mi,
            hi,
            nhi,
            nkvi,
            msi,
            1e-6,
            bm,
            bk,
            hd,
            1,
            false,
            1,
        )
        .unwrap();
        let (res_b, xm_b) = (up(&res0), up(&xm0));
        gemv::attn_scale_head_residual::launch(
            &dev(),
            &Launch::grid((nh as u32, h.div_ceil(obm) as u32)).warps(NUM_WARPS),
            &wb,
            &rot,
            &ss,
            &kc_b,
            &vc_b,
            &c.pos,
            &res_b,
            &xm_b,
            nhi,
            nkvi,
            msi,
            1e-6,
            scale,
            hi,
            q_dim as i32,
            obm,
            hd,
            block_n,
            copies,
            bm,
        )
        .unwrap();
        let what = format!("heads {nh}/{nkv} len {} BM {bm} o BM {obm}", pos + 1);
        let bits = |v: Vec<bf16>| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(down(&vc_b)), bits(down(&vc_a)), "{what}: the V cache");
        let (kb, ka) = (down(&kc_b), down(&kc_a));
        for kvh in 0..nkv {
            for p in 0..max_seq {
                let r = (kvh * max_seq + p) * hd..(kvh * max_seq + p + 1) * hd;
                if p == pos {
                    let e = rel_err(&f32s(&kb[r.clone()]), &f32s(&ka[r]));
                    assert!(e < 1e-2, "{what}: the new K row of KV head {kvh}: {e:.2e}");
                } else {
                    assert_eq!(bits(kb[r.clone()].to_vec()), bits(ka[r].to_vec()), "{what}");
                }
            }
        }
        // Each q/k program's sum of squares: its pair rows of the raw output, in f64.
        let raw = f32s(&down(&qkv));
        let half = bm / 2;
        let want_ss: Vec<f32> = (0..units * hd / bm)
            .map(|p| {
                let (unit, c) = (p / (hd / bm), p % (hd / bm));
                let dims =
                    (c * half..(c + 1) * half).chain(hd / 2 + c * half..hd / 2 + (c + 1) * half);
                dims.map(|d| (raw[unit * hd + d] as f64).powi(2))
                    .sum::<f64>() as f32
            })
            .collect();
        let e = rel_err(&down(&ss), &want_ss);
        assert!(e < 1e-5, "{what}: the sums of squares: {e:.2e}");
        for (part, got, want) in [
            ("the residual", &res_b, &res_a),
            ("the MLP's input", &xm_b, &xm_a),
        ] {
            let e = rel_err(&down(got), &down(want));
            assert!(e < 5e-3, "{what}: {part}: relative error {e:.2e}");
        }
        // The split attention (3 splits, o_proj merging them per head): the finished heads'
        // `attn_split`, and `attn_split_scaled` on the pairs, with the new K row not yet in
        // its cache (the split holding the position writes it) and the V row as the pairs
        // stage left it.
        let splits = 3;
        let parts = || {
            (
                dev().zeros::<f32>(nh * splits).unwrap(),
                dev().zeros::<f32>(nh * splits).unwrap(),
                dev().zeros::<f32>(nh * splits * hd).unwrap(),
            )
        };
        let split_grid = Launch::grid((nh as u32, splits as u32)).warps(NUM_WARPS);
        let heads_grid = Launch::grid((nh as u32, h.div_ceil(obm) as u32)).warps(NUM_WARPS);
        let merge = |(pm, pl, pa): &(Buffer<f32>, Buffer<f32>, Buffer<f32>)| {
            let (res, xm) = (up(&res0), up(&xm0));
            gemv::gemv_head_residual::launch(
                &dev(),
                &heads_grid,
                &wb,
                pm,
                pl,
                pa,
                &res,
                &xm,
                hi,
                q_dim as i32,
                obm,
                hd,
                splits,
                copies,
            )
            .unwrap();
            (down(&res), down(&xm))
        };
        let pa_a = parts();
        attention::attn_split::launch(
            &dev(),
            &split_grid,
            &q,
            &kc_a,
            &vc_a,
            &c.pos,
            &pa_a.0,
            &pa_a.1,
            &pa_a.2,
            (nh / nkv) as i32,
            msi,
            scale,
            hd,
            block_n,
            splits,
        )
        .unwrap();
        let (kc_c, vc_c) = (up(&cache.0), up(&down(&vc_b)));
        let pa_c = parts();
        attention::attn_split_scaled::launch(
            &dev(),
            &split_grid,
            &rot,
            &ss,
            &kc_c,
            &vc_c,
            &c.pos,
            &pa_c.0,
            &pa_c.1,
            &pa_c.2,
            nhi,
            nkvi,
            msi,
            1e-6,
            scale,
            hd,
            block_n,
            splits,
            bm,
        )
        .unwrap();
        assert_eq!(
            bits(down(&kc_c)),
            bits(down(&kc_b)),
            "{what}: split: the K cache"
        );
        let (want, got) = (merge(&pa_a), merge(&pa_c));
        for (part, got, want) in [
            ("the residual", &got.0, &want.0),
            ("the MLP's input", &got.1, &want.1),
        ] {
            let e = rel_err(got, want);
            assert!(e < 5e-3, "{what}: split: {part}: relative error {e:.2e}");
        }
    }
}

/// The norm-once variant (`lm_head_argmax_tiles`: TILES blocks per program, the next
/// block's weights loaded while one reduces) writes the same logits and per-block
/// (max, argmax) bits as one program per block, greedy and sampling, with an odd vocab, the
/// last program's blocks past it (they must write nothing), and k < BK.
#[test]
fn lm_head_tiles_equal_one_program_per_block() {
    let mut rng = SplitMix64::new(18);
    // (vocab, hidden, BM, BK, TILES, 1 / temperature)
    for (vocab, h, bm, bk, tiles, it) in [
        (997usize, 64, 4, 64, 3, 0.0),
        (997, 100, 8, 128, 5, 1.25),
        (2048, 1024, 32, 1024, 4, 0.0),
    ] {
        let blocks = vocab.div_ceil(bm);
        let x = up(&f32s(&rand_bf16(&mut rng, h, 2.0)));
        let nw = up(&rand_bf16(&mut rng, h, 1.5));
        let w = up(&rand_bf16(&mut rng, vocab * h, 0.1));
        let (pos, seed, inv_temp) = (up(&[37i32]), up(&[12345i32]), up(&[it as f32]));
        let outs = || {
            (
                dev().zeros::<f32>(vocab).unwrap(),
                // One spare slot past the blocks: nothing may write it.
                up(&vec![7.0f32; blocks + 1]),
                up(&vec![-7i32; blocks + 1]),
            )
        };
        let (one, many) = (outs(), outs());
        lm_head::lm_head_argmax::launch(
            &dev(),
            &grid(blocks),
            &x,
            &nw,
            &w,
            &one.0,
            &one.1,
            &one.2,
            &pos,
            &seed,
            &inv_temp,
            vocab as i32,
            h as i32,
            1e-6,
            bm,
            bk,
            1,
        )
        .unwrap();
        lm_head::lm_head_argmax_tiles::launch(
            &dev(),
            &grid(blocks.div_ceil(tiles)),
            &x,
            &nw,
            &w,
            &many.0,
            &many.1,
            &many.2,
            &pos,
            &seed,
            &inv_temp,
            vocab as i32,
            h as i32,
            1e-6,
            bm,
            bk,
            tiles,
            1,
        )
        .unwrap();
        let what = format!("vocab {vocab} h {h} BM {bm} BK {bk} TILES {tiles} 1/T {it}");
        assert_eq!(down(&one.0), down(&many.0), "{what}: logits");
        assert_eq!(down(&one.1), down(&many.1), "{what}: block maxima");
        assert_eq!(down(&one.2), down(&many.2), "{what}: block argmaxes");
        assert_eq!(down(&many.1)[blocks], 7.0, "{what}: wrote past the blocks");
    }
}

#[test]
fn lm_head_argmax_finds_the_greedy_token_in_two_phases() {
    let mut rng = SplitMix64::new(8);
    for (vocab, h, t, block) in [
        (1000, 64, None, None),
        (997, 64, Some((4, 64)), Some(7)),
        (20_000, 1024, None, None),
    ] {
        let g = tiles(vocab, h, t);
        let blocks = g.programs(vocab);
        let block = block.unwrap_or(blocks.min(1024));
        let (x, nw, w) = (
            rand_bf16(&mut rng, h, 2.0),
            rand_bf16(&mut rng, h, 1.5),
            rand_bf16(&mut rng, vocab * h, 0.1),
        );
        let (wb, xb, nb) = (up(&w), up(&f32s(&x)), up(&nw));
        let logits = dev().zeros::<f32>(vocab).unwrap();
        let (pmax, pidx, tok) = (
            dev().zeros::<f32>(blocks).unwrap(),
            dev().zeros::<i32>(blocks).unwrap(),
            dev().zeros::<i32>(1).unwrap(),
        );
        let run = || {
            lm_head::lm_head_argmax::launch(
                &dev(),
                &grid(blocks),
                &xb,
                &nb,
                &wb,
                &logits,
                &pmax,
                &pidx,
                &dev().zeros::<i32>(1).unwrap(), // pos (unused when greedy)
                &dev().zeros::<i32>(1).unwrap(), // seed
                &dev().zeros::<f32>(1).unwrap(), // 1 / temperature: 0 = greedy
                vocab as i32,
                h as i32,
                1e-6,
                g.bm,
                g.bk,
                1,
            )
            .unwrap();
            lm_head::argmax_merge::launch(
                &dev(),
                &grid(1),
                &pmax,
                &pidx,
                &tok,
                &dev().zeros::<i32>(1).unwrap(),
                &dev().zeros::<i32>(1).unwrap(),
                blocks as i32,
                block,
            )
            .unwrap();
            (down(&logits), down(&tok)[0] as u32)
        };
        let (got, id) = run();
        let hn = rms_norm(&f32s(&x), &tensor(nw.clone(), &[h]), 1e-6);
        let want = matvec(&tensor(w.clone(), &[vocab, h]), &hn);
        check(&format!("lm_head {vocab}x{h} {g:?}"), &got, &want);
        assert_eq!(
            id,
            model::sampling::argmax(&got),
            "fused argmax vs argmax of the kernel's logits"
        );
        assert_eq!(
            id,
            model::sampling::argmax(&want),
            "fused argmax vs the reference's"
        );
    }
}

#[test]
fn argmax_merge_keeps_the_lowest_id_on_ties() {
    // Block maxima with a tie between blocks 2 and 5 (ids 20 and 50), and -inf-ish padding.
    let pmax = [0.5f32, -1.0, 3.0, 2.0, -3.0e38, 3.0, 1.0];
    let pidx = [1i32, 10, 20, 30, 40, 50, 60];
    let tok = dev().zeros::<i32>(1).unwrap();
    for block in [1, 2, 3, 7] {
        let pos = up(&[41i32]);
        let next_in = dev().zeros::<i32>(1).unwrap();
        lm_head::argmax_merge::launch(
            &dev(),
            &grid(1),
            &up(&pmax),
            &up(&pidx),
            &tok,
            &next_in,
            &pos,
            7,
            block,
        )
        .unwrap();
        assert_eq!(down(&tok)[0], 20, "BLOCK {block}");
        assert_eq!(
            down(&next_in)[0],
            20,
            "BLOCK {block}: handed to the next step"
        );
        assert_eq!(
            down(&pos)[0],
            42,
            "BLOCK {block}: the position is advanced once"
        );
    }
}

/// The tile rule from Qwen3-0.6B to 32B: a GEMV step covers k in one round trip (up to
/// 4096), a tile stays within its registers, and the busiest CTA streams at most a third
/// more rows than an even split over the GPU (or less than one tile more), BM is smaller
/// only where that spares the busiest CTA 1/8 of its rows; the attention splits fill one
/// round of CTAs.
#[test]
fn tile_rule_spreads_rows_evenly_from_0_6b_to_32b() {
    use model::kernels::{qwen3_0_6b, Gemv, TileRule, Tiles};
    // (hidden, intermediate, heads, kv heads): 0.6B, 1.7B, 4B, 8B, 14B, 32B.
    let shapes = [
        (1024, 3072, 16, 8),
        (2048, 6144, 16, 8),
        (2560, 9728, 32, 8),
        (4096, 12288, 32, 8),
        (5120, 17408, 40, 8),
        (5120, 25600, 64, 8),
    ];
    let rule = TileRule::default();
    let threads = 32 * rule.warps as usize;
    for (h, i, nh, nkv) in shapes {
        let cfg = model::Config {
            hidden_size: h,
            intermediate_size: i,
            num_attention_heads: nh,
            num_key_value_heads: nkv,
            ..qwen3_0_6b()
        };
        let t = Tiles::with_rule(&cfg, &rule);
        let rows = [
            (t.qkv, cfg.q_dim() + 2 * cfg.kv_dim(), h, 1),
            (t.o_proj, h, cfg.q_dim(), 1),
            (t.gate_up, i, h, 2),
            (t.down, h, i, 1),
            (t.lm_head, cfg.vocab_size, h, 1),
        ];
        for (g, m, k, tiles) in rows {
            let busiest = |g: Gemv| g.programs(m).div_ceil(rule.ctas) * g.bm;
            assert_eq!(g.bk, k.next_power_of_two().min(4096), "hidden {h}: {g:?}");
            assert!(
                g.bm * g.bk * tiles <= threads * rule.elems_per_thread,
                "{g:?}"
            );
            let even = m.div_ceil(rule.ctas);
            assert!(
                busiest(g) * 3 <= even * 4 || busiest(g) < even + g.bm,
                "hidden {h}, m {m}: {g:?} leaves the busiest CTA {} rows, an even split {even}",
                busiest(g)
            );
            // A smaller tile only where it spares the busiest CTA at least 1/8 of its
            // rows; a larger one never fits (BM is the largest that fits, or smaller).
            for bm in [1, 2, 4, 8, 16, 32] {
                let other = Gemv { bm, bk: g.bk };
                if bm < g.bm {
                    assert!(
                        busiest(other) * 8 > busiest(g) * 7,
                        "hidden {h}, m {m}: {g:?} vs BM {bm}: {} against {} rows",
                        busiest(g),
                        busiest(other)
                    );
                }
            }
            // Never the one-row programs that made 8B decode 4.4x its floor (session 14).
            assert!(g.bm >= 2 || m < rule.ctas, "hidden {h}, m {m}: {g:?}");
        }
        // One round of split programs: as many splits as fit in the CTAs (≥ 128 programs'
        // worth), at most 32.
        let room = rule.ctas.max(128);
        assert!(
            nh * t.attn_splits <= room.max(nh)
                && (t.attn_splits == 32 || nh * (t.attn_splits + 1) > room),
            "hidden {h}: {} attention programs",
            nh * t.attn_splits
        );
        assert!(t.attn_block_n * cfg.head_dim <= threads * rule.elems_per_thread);
    }
}

/// o_proj and down with row tiles per program (`Tiles::with_gemv_tiles`) from Qwen3-0.6B
/// to 32B: off by default (1 changes nothing); on (0), a GEMV gets several tiles only with
/// one k step that covers its k (down at 8B re-derived with k steps up to 16384, BM = 2),
/// within the elements per thread, and its programs spread over at most one round of CTAs;
/// where no k step up to 16384 covers k (down at 14B and 32B) it keeps its tiles, one per
/// program.
#[test]
fn gemv_tiles_take_one_k_step_or_stay_one_per_program() {
    use model::kernels::{qwen3_0_6b, TileRule, Tiles, GEMV_TILES_BK_MAX};
    // (hidden, intermediate, heads): 0.6B, 1.7B, 4B, 8B, 14B, 32B.
    let shapes = [
        (1024, 3072, 16),
        (2048, 6144, 16),
        (2560, 9728, 32),
        (4096, 12288, 32),
        (5120, 17408, 40),
        (5120, 25600, 64),
    ];
    let rule = TileRule::default();
    let threads = 32 * rule.warps as usize;
    for (h, i, nh) in shapes {
        let cfg = model::Config {
            hidden_size: h,
            intermediate_size: i,
            num_attention_heads: nh,
            ..qwen3_0_6b()
        };
        let off = Tiles::with_rule(&cfg, &rule);
        assert_eq!((off.o_proj_tiles, off.down_tiles), (1, 1), "hidden {h}");
        assert_eq!(off.clone().with_gemv_tiles(&cfg, 1), off, "hidden {h}");
        let on = off.clone().with_gemv_tiles(&cfg, 0);
        // Nothing else moves.
        let only = Tiles {
            o_proj: off.o_proj,
            o_proj_tiles: 1,
            down: off.down,
            down_tiles: 1,
            ..on.clone()
        };
        assert_eq!(only, off, "hidden {h}");
        for (what, g0, g, tiles, k) in [
            (
                "o_proj",
                off.o_proj,
                on.o_proj,
                on.o_proj_tiles,
                cfg.q_dim(),
            ),
            ("down", off.down, on.down, on.down_tiles, i),
        ] {
            eprintln!("hidden {h} {what}: BM {} BK {} TILES {tiles}", g.bm, g.bk);
            if k <= GEMV_TILES_BK_MAX {
                assert!(g.bk >= k, "hidden {h} {what}: {g:?}");
                assert_eq!(
                    g == g0,
                    g0.bk >= k,
                    "hidden {h} {what}: re-derived only for k"
                );
                assert!(g.bm * g.bk <= threads * rule.elems_per_thread);
                // One round: every CTA one program at most, and as few tiles per program
                // as that takes (one where the tiles fit the CTAs: o_proj and down at 0.6B).
                let programs = h.div_ceil(g.bm * tiles);
                assert!(programs <= rule.ctas, "hidden {h} {what}: {programs}");
                assert!(
                    tiles == 1 || h.div_ceil(g.bm * (tiles - 1)) > rule.ctas,
                    "hidden {h} {what}: {tiles} tiles, fewer fit"
                );
                assert_eq!(tiles > 1, g.programs(h) > rule.ctas, "hidden {h} {what}");
            } else {
                assert_eq!((g, tiles), (g0, 1), "hidden {h} {what}");
            }
            // An explicit count is taken as it is (capped at the programs there are).
            let three = off.clone().with_gemv_tiles(&cfg, 3);
            let t3 = if what == "o_proj" {
                three.o_proj_tiles
            } else {
                three.down_tiles
            };
            assert_eq!(
                t3,
                if k <= GEMV_TILES_BK_MAX { 3 } else { 1 },
                "hidden {h} {what}"
            );
        }
    }
}

/// `shipped()` (what `tessera explain` lists): every kernel specialises at its defaults.
#[test]
fn shipped_kernels_specialise_at_their_defaults() {
    let all = model::kernels::shipped();
    assert_eq!(all.len(), 21);
    let prefill = model::kernels::prefill_shipped();
    assert_eq!(prefill.len(), 8);
    for k in all.into_iter().chain(prefill) {
        k.kernel
            .specialize(&k.constexprs)
            .unwrap_or_else(|e| panic!("{}: {e}", k.kernel.name()));
        assert!(!k.about.is_empty());
    }
}
