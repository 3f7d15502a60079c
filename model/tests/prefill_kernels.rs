//! The prefill kernels (`model::kernels::prefill`), run by the interpreter, against plain
//! f64 Rust on random inputs, at row counts that are not multiples of any tile (T of 37, 5
//! and 1) and odd widths, so every masked edge runs; with the interpreter's small tiles
//! and with the GPU's (128 x 128 GEMM tiles, 128 x 64 attention blocks).
//!
//! Errors are max |Δ| / max |want|. The kernels store bf16 (one rounding, ≤ 2^-9 relative)
//! and attention rounds its probabilities to bf16 before P·V: TOL = 1e-2 passes right
//! answers and fails a wrong index, mask or formula by far.
use dsl_runtime::{bf16, Buffer, Device, Element, Launch};
use model::kernels::prefill::PrefillTiles;
use model::kernels::prefill::{
    embed_rows, gemm_nn_residual, gemm_nt, gemm_nt_gate_up_silu, gemm_nt_residual,
    prefill_attention, qk_norm_rope_rows,
};
use model::reference::{rms_norm, rope as rope_ref};
use model::sampling::SplitMix64;
use model::Tensor;

const TOL: f64 = 1e-2;

fn dev() -> Device {
    Device::interpreter()
}

fn rand_bf16(rng: &mut SplitMix64, n: usize, scale: f32) -> Vec<bf16> {
    (0..n)
        .map(|_| bf16::from_f32((rng.next_f64() as f32 * 2.0 - 1.0) * scale))
        .collect()
}

fn f64s(v: &[bf16]) -> Vec<f64> {
    v.iter().map(|x| x.to_f64()).collect()
}

fn up<T: Element>(v: &[T]) -> Buffer<T> {
    dev().upload(v).unwrap()
}

fn down<T: Element>(b: &Buffer<T>) -> Vec<T> {
    b.to_vec().unwrap()
}

fn check(what: &str, got: &[bf16], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let max_ref = want.iter().fold(0f64, |m, x| m.max(x.abs()));
    let e = got
        .iter()
        .zip(want)
        .fold(0f64, |m, (a, b)| m.max((a.to_f64() - b).abs()))
        / max_ref;
    eprintln!("{what}: rel err {e:.2e}");
    assert!(e < TOL, "{what}: relative error {e} ≥ {TOL}");
}

/// GEMM tiles (BM, BN, BK, GROUP_M): the interpreter's and the GPU's.
fn gemm_tiles() -> Vec<(usize, usize, usize, usize)> {
    let (i, g) = (PrefillTiles::for_device(&dev()), PrefillTiles::gpu());
    vec![
        (i.gemm_bm, i.gemm_bn, i.gemm_bk, i.group_m),
        (g.gemm_bm, g.gemm_bn, g.gemm_bk, g.group_m),
    ]
}

/// y = x · wᵀ through `gemm_nt` with tiles `t` = (BM, BN, BK, GROUP_M).
fn run_gemm_nt(
    x: &[bf16],
    w: &[bf16],
    (m, n, k): (usize, usize, usize),
    t: (usize, usize, usize, usize),
) -> Vec<bf16> {
    let y = dev().zeros::<bf16>(m * n).unwrap();
    gemm_nt::launch(
        &dev(),
        &gemm_launch(m, n, t),
        &up(x),
        &up(w),
        &y,
        m as i32,
        n as i32,
        k as i32,
        t.0,
        t.1,
        t.2,
        t.3,
    )
    .unwrap();
    down(&y)
}

fn gemm_launch(m: usize, n: usize, t: (usize, usize, usize, usize)) -> Launch {
    Launch::grid((m.div_ceil(t.0) * n.div_ceil(t.1)) as u32).warps(4)
}

/// x · wᵀ in f64, x [m, k], w [n, k].
fn matmul_nt(x: &[bf16], w: &[bf16], m: usize, n: usize, k: usize) -> Vec<f64> {
    let (x, w) = (f64s(x), f64s(w));
    let mut y = vec![0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            y[i * n + j] = (0..k).map(|c| x[i * k + c] * w[j * k + c]).sum();
        }
    }
    y
}

#[test]
fn embed_rows_gathers_each_rows_token() {
    let mut rng = SplitMix64::new(1);
    let (vocab, h, block) = (97, 100, 32);
    let table = rand_bf16(&mut rng, vocab * h, 1.0);
    let tokens: Vec<i32> = vec![5, 96, 0, 5, 41];
    let x = dev().zeros::<bf16>(tokens.len() * h).unwrap();
    embed_rows::launch(
        &dev(),
        &Launch::grid((h.div_ceil(block) as u32, tokens.len() as u32)),
        &up(&table),
        &up(&tokens),
        &x,
        h as i32,
        block,
    )
    .unwrap();
    let got = down(&x);
    for (t, &tok) in tokens.iter().enumerate() {
        let tok = tok as usize;
        assert_eq!(
            got[t * h..(t + 1) * h],
            table[tok * h..(tok + 1) * h],
            "row {t}"
        );
    }
}

#[test]
fn gemm_nt_matches_f64_at_masked_sizes() {
    let mut rng = SplitMix64::new(2);
    for (m, n, k) in [(37, 50, 72), (5, 33, 16), (1, 130, 40)] {
        let x = rand_bf16(&mut rng, m * k, 1.0);
        let w = rand_bf16(&mut rng, n * k, 1.0);
        let want = matmul_nt(&x, &w, m, n, k);
        for t in gemm_tiles() {
            check(
                &format!("gemm_nt {m}x{n}x{k} tiles {t:?}"),
                &run_gemm_nt(&x, &w, (m, n, k), t),
                &want,
            );
        }
    }
}

/// res += x · wᵀ in place, with the weight stored `[n, k]` (`gemm_nt_residual`: o_proj,
/// down) and `[k, n]` (`gemm_nn_residual`: down in the megakernel engine), against the same
/// f64 reference.
#[test]
fn gemm_residuals_add_in_place() {
    let mut rng = SplitMix64::new(3);
    for (m, n, k) in [(37, 24, 48), (5, 64, 100)] {
        let x = rand_bf16(&mut rng, m * k, 1.0);
        let w = rand_bf16(&mut rng, n * k, 1.0); // [n, k]
        let w_kn: Vec<bf16> = (0..k * n).map(|i| w[(i % n) * k + i / n]).collect();
        let res = rand_bf16(&mut rng, m * n, 4.0);
        let prod = matmul_nt(&x, &w, m, n, k);
        let want: Vec<f64> = prod.iter().zip(&res).map(|(p, r)| p + r.to_f64()).collect();
        for t in gemm_tiles() {
            for name in ["gemm_nt_residual", "gemm_nn_residual"] {
                let r = up(&res);
                let (l, (mi, ni, ki)) = (gemm_launch(m, n, t), (m as i32, n as i32, k as i32));
                if name == "gemm_nt_residual" {
                    gemm_nt_residual::launch(
                        &dev(),
                        &l,
                        &up(&x),
                        &up(&w),
                        &r,
                        mi,
                        ni,
                        ki,
                        t.0,
                        t.1,
                        t.2,
                        t.3,
                    )
                } else {
                    gemm_nn_residual::launch(
                        &dev(),
                        &l,
                        &up(&x),
                        &up(&w_kn),
                        &r,
                        mi,
                        ni,
                        ki,
                        t.0,
                        t.1,
                        t.2,
                        t.3,
                    )
                }
                .unwrap();
                check(&format!("{name} {m}x{n}x{k} {t:?}"), &down(&r), &want);
            }
        }
    }
}

#[test]
fn gemm_gate_up_silu_matches_the_mlp_half() {
    let mut rng = SplitMix64::new(4);
    for (m, inter, k) in [(37, 40, 64), (5, 17, 24)] {
        let x = rand_bf16(&mut rng, m * k, 1.0);
        let w = rand_bf16(&mut rng, 2 * inter * k, 0.5);
        let both = matmul_nt(&x, &w, m, 2 * inter, k);
        let want: Vec<f64> = (0..m * inter)
            .map(|i| {
                let (r, j) = (i / inter, i % inter);
                let (g, u) = (both[r * 2 * inter + j], both[r * 2 * inter + inter + j]);
                g / (1.0 + (-g).exp()) * u
            })
            .collect();
        for t in gemm_tiles() {
            let act = dev().zeros::<bf16>(m * inter).unwrap();
            gemm_nt_gate_up_silu::launch(
                &dev(),
                &gemm_launch(m, inter, t),
                &up(&x),
                &up(&w),
                &act,
                m as i32,
                inter as i32,
                k as i32,
                t.0,
                t.1,
                t.2,
                t.3,
            )
            .unwrap();
            check(
                &format!("gate_up_silu {m}x{inter}x{k} {t:?}"),
                &down(&act),
                &want,
            );
        }
    }
}

/// q rows roped at start_pos + t; K/V written at exactly those cache slots, the rest of the
/// cache untouched.
#[test]
fn qk_norm_rope_rows_writes_q_and_the_cache_slots() {
    let mut rng = SplitMix64::new(5);
    let (heads, kv, d, max_seq, eps) = (4usize, 2usize, 16usize, 20usize, 1e-6f32);
    let qkv_rows = (heads + 2 * kv) * d;
    let inv_freq: Vec<f32> = (0..d / 2)
        .map(|i| (1.0 / 10000f64.powf((2 * i) as f64 / d as f64)) as f32)
        .collect();
    let tensor = |data: Vec<bf16>| Tensor {
        name: "t".into(),
        shape: vec![d],
        data: data.into(),
    };
    for (t_len, start, bt) in [(7usize, 3usize, 4usize), (5, 0, 16), (1, 19, 4)] {
        let qkv = rand_bf16(&mut rng, t_len * qkv_rows, 2.0);
        let (qn, kn) = (rand_bf16(&mut rng, d, 1.5), rand_bf16(&mut rng, d, 1.5));
        let sentinel = bf16::from_f32(7.5);
        let (kc, vc) = (
            up(&vec![sentinel; kv * max_seq * d]),
            up(&vec![sentinel; kv * max_seq * d]),
        );
        let q = dev().zeros::<bf16>(t_len * heads * d).unwrap();
        qk_norm_rope_rows::launch(
            &dev(),
            &Launch::grid(((heads + kv) as u32, t_len.div_ceil(bt) as u32)),
            &up(&qkv),
            &up(&qn),
            &up(&kn),
            &up(&model::reference::rope_table(&inv_freq, max_seq)),
            &q,
            &kc,
            &vc,
            t_len as i32,
            start as i32,
            heads as i32,
            kv as i32,
            max_seq as i32,
            eps,
            d,
            bt,
        )
        .unwrap();
        let (qn, kn) = (tensor(qn), tensor(kn));
        let (mut want_q, mut want_k, mut want_v) = (vec![], vec![0f64; kv * max_seq * d], vec![]);
        want_v.resize(kv * max_seq * d, 7.5f64);
        want_k.iter_mut().for_each(|x| *x = 7.5);
        for t in 0..t_len {
            let row: Vec<f32> = qkv[t * qkv_rows..(t + 1) * qkv_rows]
                .iter()
                .map(|x| x.to_f32())
                .collect();
            for h in 0..heads {
                let mut x = rms_norm(&row[h * d..(h + 1) * d], &qn, eps as f64);
                rope_ref(&mut x, start + t, &inv_freq);
                want_q.extend(x.iter().map(|&v| v as f64));
            }
            for h in 0..kv {
                let o = heads * d + h * d;
                let mut x = rms_norm(&row[o..o + d], &kn, eps as f64);
                rope_ref(&mut x, start + t, &inv_freq);
                let slot = (h * max_seq + start + t) * d;
                for c in 0..d {
                    want_k[slot + c] = x[c] as f64;
                    want_v[slot + c] = row[o + kv * d + c] as f64;
                }
            }
        }
        let what = format!("T={t_len} start={start} BT={bt}");
        check(&format!("rope q {what}"), &down(&q), &want_q);
        check(&format!("rope K cache {what}"), &down(&kc), &want_k);
        // V is copied, not computed: exactly.
        let got_v: Vec<f64> = f64s(&down(&vc));
        assert_eq!(got_v, want_v, "V cache {what}");
    }
}

/// Causal softmax(q·kᵀ·scale)·v in f64: query row t (position start + t) of head h sees
/// cache positions 0 ..= start + t of KV head h / group.
#[allow(clippy::too_many_arguments)]
fn attention_ref(
    q: &[bf16],
    kc: &[bf16],
    vc: &[bf16],
    t_len: usize,
    start: usize,
    heads: usize,
    group: usize,
    max_seq: usize,
    d: usize,
) -> Vec<f64> {
    let scale = 1.0 / (d as f64).sqrt();
    let mut out = vec![0f64; t_len * heads * d];
    for t in 0..t_len {
        for h in 0..heads {
            let qrow = &q[(t * heads + h) * d..(t * heads + h + 1) * d];
            let base = (h / group) * max_seq * d;
            let n = start + t + 1;
            let s: Vec<f64> = (0..n)
                .map(|p| {
                    (0..d)
                        .map(|c| qrow[c].to_f64() * kc[base + p * d + c].to_f64())
                        .sum::<f64>()
                        * scale
                })
                .collect();
            let mx = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = s.iter().map(|x| (x - mx).exp()).collect();
            let z: f64 = e.iter().sum();
            for c in 0..d {
                out[(t * heads + h) * d + c] = (0..n)
                    .map(|p| e[p] * vc[base + p * d + c].to_f64())
                    .sum::<f64>()
                    / z;
            }
        }
    }
    out
}

#[test]
fn prefill_attention_is_causal_over_the_cache_with_gqa() {
    let mut rng = SplitMix64::new(6);
    let (heads, kv, d, max_seq) = (4usize, 2usize, 16usize, 64usize);
    let (i, g) = (PrefillTiles::for_device(&dev()), PrefillTiles::gpu());
    // (T, start_pos, BM, BN): masked rows and keys, earlier cache positions, both tile sets.
    for (t_len, start, bm, bn) in [
        (37, 0, i.attn_bm, i.attn_bn),
        (5, 9, i.attn_bm, i.attn_bn),
        (1, 30, i.attn_bm, i.attn_bn),
        (37, 0, g.attn_bm, g.attn_bn),
        (20, 17, g.attn_bm, g.attn_bn),
    ] {
        let q = rand_bf16(&mut rng, t_len * heads * d, 2.0);
        let mut kc = rand_bf16(&mut rng, kv * max_seq * d, 2.0);
        let vc = rand_bf16(&mut rng, kv * max_seq * d, 1.0);
        // Positions past the last query must not count: make them huge.
        for h in 0..kv {
            for p in start + t_len..max_seq {
                for c in 0..d {
                    kc[(h * max_seq + p) * d + c] = bf16::from_f32(100.0);
                }
            }
        }
        let want = attention_ref(&q, &kc, &vc, t_len, start, heads, heads / kv, max_seq, d);
        let out = dev().zeros::<bf16>(t_len * heads * d).unwrap();
        prefill_attention::launch(
            &dev(),
            &Launch::grid((t_len.div_ceil(bm) as u32, heads as u32)).warps(4),
            &up(&q),
            &up(&kc),
            &up(&vc),
            &out,
            t_len as i32,
            start as i32,
            heads as i32,
            (heads / kv) as i32,
            max_seq as i32,
            1.0 / (d as f32).sqrt(),
            bm,
            bn,
            d,
        )
        .unwrap();
        check(
            &format!("attention T={t_len} start={start} BM={bm} BN={bn}"),
            &down(&out),
            &want,
        );
    }
}

/// A row count of 0 is never launched; an empty chunk would be a bug in the driver. The
/// GEMM's masks must hold at a single row with the GPU tiles (128 x 128 on 1 x 7).
#[test]
fn gemm_single_row_with_gpu_tiles() {
    let mut rng = SplitMix64::new(7);
    let (m, n, k) = (1, 7, 9);
    let x = rand_bf16(&mut rng, m * k, 1.0);
    let w = rand_bf16(&mut rng, n * k, 1.0);
    let g = PrefillTiles::gpu();
    let t = (g.gemm_bm, g.gemm_bn, g.gemm_bk, g.group_m);
    check(
        "gemm 1x7x9, GPU tiles",
        &run_gemm_nt(&x, &w, (m, n, k), t),
        &matmul_nt(&x, &w, m, n, k),
    );
}
