//! The prefill kernels' generated CUDA C at the GPU's tiles, warps and pipelining depths,
//! and the decode's one-grid split attention (its scalar atomic and last-program merge),
//! run on the CPU by the g++ emulation (dsl-runtime/tests/host_emu: one OS thread per CUDA
//! thread, functional models of ldmatrix, mma.sync and cp.async): bit for bit what the
//! interpreter computes, at masked sizes (rows, columns and keys past the tiles' edges, a
//! chunk at start_pos > 0). This checks the tensor-core path, `trans` of the weight tile,
//! the cp.async rings and the fused epilogues without a GPU. Skipped without g++. The
//! row-tiled kernels (`gemv_residual_tiles`, `rmsnorm_qkv_rope_tiles`) are checked against
//! their one-tile kernels' C instead.
#[path = "../../dsl-runtime/tests/host_emu/kernel.rs"]
mod emu;
use dsl_ir::{DType, Kernel};
use dsl_runtime::interp::{self, HostMem, InterpArg, InterpOptions};
use dsl_runtime::ConstVal;
use emu::{emulate, emulate_variant, have_gxx, Scalar, Variant};
use model::kernels::attention::{attn_split, attn_split_ahead, attn_split_merge};
use model::kernels::gemv::gemv_residual_tiles;
use model::kernels::prefill::PrefillTiles;
use model::kernels::prefill::{gemm_nn_residual, gemm_nt, gemm_nt_gate_up_silu, prefill_attention};
use model::kernels::rope::{rmsnorm_qkv_rope, rmsnorm_qkv_rope_pairs, rmsnorm_qkv_rope_tiles};
use model::kernels::NUM_WARPS;
use model::sampling::SplitMix64;

fn rand(rng: &mut SplitMix64, n: usize, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|_| (rng.next_f64() as f32 * 2.0 - 1.0) * scale)
        .collect()
}

/// The host's RoPE table (`reference::rope_table`, theta 1e6) for `max_seq` positions of
/// head_dim `d`.
fn rope_rows(d: usize, max_seq: usize) -> HostMem {
    let inv_freq: Vec<f32> = (0..d / 2)
        .map(|i| (1.0 / f64::powf(1e6, (2 * i) as f64 / d as f64)) as f32)
        .collect();
    HostMem::from_f32s(
        DType::F32,
        &model::reference::rope_table(&inv_freq, max_seq),
    )
}

/// The lowerings the shipped kernels are emitted with (`KernelDef`'s defaults): reductions
/// of replicated rows in each warp, per-row values once per row, a loop's reuse barriers
/// elided after an earlier barrier of the iteration, a tensor-core tile's rows reduced in
/// its registers and `exp2` as `ex2.approx` (no decode kernel has either; prefill's attention
/// has both).
fn shipped() -> Variant {
    Variant {
        warp_reduce: true,
        row_values: true,
        reuse_sync: true,
        frag_rows: true,
        fast_exp2: true,
        ..Variant::default()
    }
}

/// `shipped()` with every reuse barrier of a loop kept (`TESSERA_REUSE_SYNC=0`; the same
/// bits).
fn reuse_barriers() -> Variant {
    Variant {
        reuse_sync: false,
        ..shipped()
    }
}

/// The reduction lowerings added one by one, from none to `shipped()`'s: replicated rows
/// reduced in each warp, then per-row values once per row, then the loops' reuse barriers
/// elided (`frag_rows` and `fast_exp2`, the last two, change no decode kernel).
fn lowerings_one_by_one() -> [Variant; 4] {
    let v = |warp_reduce, row_values, reuse_sync| Variant {
        warp_reduce,
        row_values,
        reuse_sync,
        ..Variant::default()
    };
    [
        v(false, false, false),
        v(true, false, false),
        v(true, true, false),
        v(true, true, true),
    ]
}

/// What a shipped kernel's emulation is checked on: its lowerings on the warps it ships with
/// and on one warp (a tile then takes more passes over its rows), and with every reuse
/// barrier kept.
fn shipped_runs() -> [(u32, Variant); 3] {
    [
        (NUM_WARPS, shipped()),
        (1, shipped()),
        (NUM_WARPS, reuse_barriers()),
    ]
}

fn bf16s(v: Vec<f32>) -> Vec<f32> {
    v.into_iter()
        .map(|x| dsl_runtime::bf16::from_f32(x).to_f32())
        .collect()
}

fn interpret(k: &Kernel, grid: [u32; 3], bufs: &mut [HostMem], scalars: &[Scalar]) {
    let mut args: Vec<InterpArg> = (0..bufs.len()).map(|i| InterpArg::whole(i, bufs)).collect();
    args.extend(scalars.iter().map(|s| match *s {
        Scalar::I32(v) => InterpArg::I32(v),
        Scalar::F32(v) => InterpArg::F32(v),
    }));
    interp::run(k, grid, &args, bufs, &InterpOptions::default()).unwrap();
}

/// Runs `k` through the interpreter and the emulation; buffer `out` must be equal bit for
/// bit (and must have been written: it starts as NaN).
#[allow(clippy::too_many_arguments)]
fn same_as_interpreter(
    what: &str,
    k: &Kernel,
    warps: u32,
    stages: u32,
    grid: [u32; 3],
    bufs: Vec<HostMem>,
    scalars: &[Scalar],
    out: usize,
) {
    let v = Variant::default();
    same_as_interpreter_as(what, k, (warps, stages, v), grid, bufs, scalars, out);
}

/// [`same_as_interpreter`] with the emulation lowered on `warps` warps, `stages` deep, with
/// the candidate lowerings of `v`.
fn same_as_interpreter_as(
    what: &str,
    k: &Kernel,
    (warps, stages, v): (u32, u32, Variant),
    grid: [u32; 3],
    bufs: Vec<HostMem>,
    scalars: &[Scalar],
    out: usize,
) {
    let mut mem = bufs.clone();
    interpret(k, grid, &mut mem, scalars);
    let want = mem[out].to_f32s();
    assert!(
        want.iter().all(|x| x.is_finite()),
        "{what}: interpreter left NaN"
    );
    let got = emulate_variant(k, warps, stages, v, grid, &bufs, scalars)[out].to_f32s();
    let diff = got
        .iter()
        .zip(&want)
        .position(|(a, b)| a.to_bits() != b.to_bits());
    assert!(
        diff.is_none(),
        "{what}: emulated C != interpreter at element {diff:?}"
    );
    eprintln!("{what}: emulated C = interpreter, bit for bit");
}

/// Prefill GEMM `gemm` (its `m x n` output over k, a grid of `BM x BN` tiles) at the GPU's
/// tiles on `a`, `b` and `out` (bf16; an output it only writes starts as NaN, one it adds
/// into holds the residual): the emulation equals the interpreter.
fn gemm_same_as_interpreter(
    what: &str,
    gemm: &dsl_runtime::KernelDef,
    p: &PrefillTiles,
    (m, n, k): (usize, usize, usize),
    a: Vec<f32>,
    b: Vec<f32>,
    out: Vec<f32>,
) {
    let int = |v: usize| ConstVal::Int(v as i64);
    let kern = gemm
        .specialize(&[
            ("BM", int(p.gemm_bm)),
            ("BN", int(p.gemm_bn)),
            ("BK", int(p.gemm_bk)),
            ("GROUP_M", int(p.group_m)),
        ])
        .unwrap();
    let bufs = [a, b, out].map(|v| HostMem::from_f32s(DType::BF16, &v));
    let grid = [(m.div_ceil(p.gemm_bm) * n.div_ceil(p.gemm_bn)) as u32, 1, 1];
    let sc = [m as i32, n as i32, k as i32].map(Scalar::I32);
    same_as_interpreter(
        &format!("{what} {m}x{n}x{k}"),
        &kern,
        p.gemm_warps,
        p.gemm_stages,
        grid,
        bufs.to_vec(),
        &sc,
        2,
    );
}

#[test]
fn gemms_emulated_equal_the_interpreter() {
    if !have_gxx() {
        eprintln!("no g++: skipped");
        return;
    }
    let p = PrefillTiles::gpu();
    let mut rng = SplitMix64::new(11);
    // QKV-like: 37 rows (not a multiple of 128), 40 outputs, k 64.
    let (m, n, k) = (37, 40, 64);
    gemm_same_as_interpreter(
        "gemm_nt",
        &gemm_nt::KERNEL,
        &p,
        (m, n, k),
        rand(&mut rng, m * k, 1.0),
        rand(&mut rng, n * k, 1.0),
        vec![f32::NAN; m * n],
    );
    // down stored [k, n] (the megakernel engine's): the weight tile read along n, the
    // residual added in place; 37 rows, 40 outputs, k 72.
    let (m, n, k) = (37, 40, 72);
    gemm_same_as_interpreter(
        "gemm_nn_residual",
        &gemm_nn_residual::KERNEL,
        &p,
        (m, n, k),
        rand(&mut rng, m * k, 1.0),
        rand(&mut rng, k * n, 1.0),
        rand(&mut rng, m * n, 2.0),
    );
    // gate/up: two accumulators over the fused weight, SiLU·mul epilogue; k 48.
    let (m, inter, k) = (37, 24, 48);
    gemm_same_as_interpreter(
        "gemm_nt_gate_up_silu",
        &gemm_nt_gate_up_silu::KERNEL,
        &p,
        (m, inter, k),
        rand(&mut rng, m * k, 1.0),
        rand(&mut rng, 2 * inter * k, 0.5),
        vec![f32::NAN; m * inter],
    );
}

#[test]
fn attention_emulated_equals_the_interpreter() {
    if !have_gxx() {
        eprintln!("no g++: skipped");
        return;
    }
    let p = PrefillTiles::gpu();
    let mut rng = SplitMix64::new(12);
    // A later chunk: 20 query rows at positions 17.., keys 0..37 from the cache, GQA 2:1,
    // head_dim 32 (tensor cores), one 64-row query block, keys in a ragged last block.
    let (t_len, start, heads, kv, d, max_seq) = (20usize, 17usize, 2usize, 1usize, 32usize, 48);
    let int = |v: usize| ConstVal::Int(v as i64);
    let kern = prefill_attention::KERNEL
        .specialize(&[
            ("BM", int(p.attn_bm)),
            ("BN", int(p.attn_bn)),
            ("D", int(d)),
        ])
        .unwrap();
    let bufs = vec![
        HostMem::from_f32s(DType::BF16, &rand(&mut rng, t_len * heads * d, 2.0)),
        HostMem::from_f32s(DType::BF16, &rand(&mut rng, kv * max_seq * d, 2.0)),
        HostMem::from_f32s(DType::BF16, &rand(&mut rng, kv * max_seq * d, 1.0)),
        HostMem::from_f32s(DType::BF16, &vec![f32::NAN; t_len * heads * d]),
    ];
    let grid = [t_len.div_ceil(p.attn_bm) as u32, heads as u32, 1];
    let sc = [
        Scalar::I32(t_len as i32),
        Scalar::I32(start as i32),
        Scalar::I32(heads as i32),
        Scalar::I32((heads / kv) as i32),
        Scalar::I32(max_seq as i32),
        Scalar::F32(1.0 / (d as f32).sqrt()),
    ];
    same_as_interpreter(
        "prefill_attention T=20 start=17 D=32",
        &kern,
        p.attn_warps,
        p.attn_stages,
        grid,
        bufs.clone(),
        &sc,
        3,
    );
    // As shipped: the softmax in the fragment's registers, P into the second dot from them
    // (`EmitOptions::frag_rows`).
    same_as_interpreter_as(
        "prefill_attention T=20 start=17 D=32, as shipped",
        &kern,
        (p.attn_warps, p.attn_stages, shipped()),
        grid,
        bufs,
        &sc,
        3,
    );
}

/// Decode attention's inputs at 4 query heads over 2 KV heads of 32, 48 cache positions,
/// `pos` the last one attended, and its partials for `splits` splits (`fill`: their value
/// before the launch), its constexprs for `block_n`-position tiles, and its scalars.
struct SplitAttention {
    kern: Kernel,
    bufs: Vec<HostMem>,
    sc: [Scalar; 3],
    grid: [u32; 3],
}

fn split_attention(
    kernel: &dsl_runtime::KernelDef,
    seed: u64,
    pos: usize,
    block_n: usize,
    splits: usize,
    fill: f32,
) -> SplitAttention {
    let (heads, kv, d, max_seq) = (4usize, 2usize, 32usize, 48usize);
    let mut rng = SplitMix64::new(seed);
    let int = |v: usize| ConstVal::Int(v as i64);
    let kern = kernel
        .specialize(&[
            ("D", int(d)),
            ("BLOCK_N", int(block_n)),
            ("SPLITS", int(splits)),
        ])
        .unwrap();
    let parts = heads * splits;
    let bufs = vec![
        HostMem::from_f32s(DType::BF16, &rand(&mut rng, heads * d, 2.0)),
        HostMem::from_f32s(DType::BF16, &rand(&mut rng, kv * max_seq * d, 2.0)),
        HostMem::from_f32s(DType::BF16, &rand(&mut rng, kv * max_seq * d, 1.0)),
        HostMem::from_f32s(DType::I32, &[pos as f32]),
        HostMem::from_f32s(DType::F32, &vec![fill; parts]),
        HostMem::from_f32s(DType::F32, &vec![fill; parts]),
        HostMem::from_f32s(DType::F32, &vec![fill; parts * d]),
    ];
    let sc = [
        Scalar::I32((heads / kv) as i32),
        Scalar::I32(max_seq as i32),
        Scalar::F32(1.0 / (d as f32).sqrt()),
    ];
    SplitAttention {
        kern,
        bufs,
        sc,
        grid: [heads as u32, splits as u32, 1],
    }
}

/// `attn_split_merge`'s C against the interpreter, bit for bit, also with its max and sum
/// over a tile of keys reduced in each row group (`EmitOptions::warp_replica_reductions`).
#[test]
fn split_attention_with_its_merge_emulated_equals_the_interpreter() {
    if !have_gxx() {
        eprintln!("no g++: skipped");
        return;
    }
    // 5 splits of a 38-position context in 8-key tiles (ragged last tile, one empty split);
    // the last program of each head merges it.
    let heads = 4;
    let SplitAttention {
        kern,
        mut bufs,
        sc,
        grid,
    } = split_attention(&attn_split_merge::KERNEL, 13, 37, 8, 5, 0.0);
    bufs.push(HostMem::from_f32s(DType::I32, &vec![0.0; heads]));
    bufs.push(HostMem::from_f32s(DType::BF16, &vec![f32::NAN; heads * 32]));
    for v in lowerings_one_by_one() {
        same_as_interpreter_as(
            &format!("attn_split_merge, {v:?}"),
            &kern,
            (NUM_WARPS, 1, v),
            grid,
            bufs.clone(),
            &sc,
            8,
        );
    }
    let tickets = emulate(&kern, NUM_WARPS, 1, grid, &bufs, &sc)[7].to_f32s();
    assert_eq!(
        tickets,
        vec![0.0; heads],
        "the last programs put the tickets back"
    );
}

#[test]
fn split_attention_ahead_emulated_equals_split_attention() {
    if !have_gxx() {
        eprintln!("no g++: skipped");
        return;
    }
    // 3 splits of a 38-position context in 8-key tiles: 2 tiles a split, the last one
    // ragged, each loaded one iteration early. Its C against `attn_split`'s C: the same
    // partials bit for bit. (Against the interpreter both differ in the last bits once a
    // split has several tiles: the online softmax's rescales round differently there.)
    let ahead = split_attention(&attn_split_ahead::KERNEL, 17, 37, 8, 3, f32::NAN);
    let plain = split_attention(&attn_split::KERNEL, 17, 37, 8, 3, f32::NAN);
    let run = |a: &SplitAttention| emulate(&a.kern, NUM_WARPS, 1, a.grid, &a.bufs, &a.sc);
    let (got, want) = (run(&ahead), run(&plain));
    // With the loops' reuse barriers elided (`EmitOptions::elide_reuse_syncs`): the same bits.
    let synced = |a: &SplitAttention| {
        emulate_variant(
            &a.kern,
            NUM_WARPS,
            1,
            Variant {
                reuse_sync: true,
                ..Variant::default()
            },
            a.grid,
            &a.bufs,
            &a.sc,
        )
    };
    for (a, b, what) in [(&ahead, &got, "ahead"), (&plain, &want, "plain")] {
        let c = synced(a);
        for i in [4, 5, 6] {
            let bits = |v: Vec<f32>| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(c[i].to_f32s()),
                bits(b[i].to_f32s()),
                "{what}, reuse syncs elided"
            );
        }
    }
    let mut interp = ahead.bufs.clone();
    interpret(&ahead.kern, ahead.grid, &mut interp, &ahead.sc);
    for (i, what) in [(4, "m"), (5, "l"), (6, "acc")] {
        let (a, b) = (got[i].to_f32s(), want[i].to_f32s());
        assert!(a.iter().all(|x| x.is_finite()), "{what}: a split left NaN");
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(&a),
            bits(&b),
            "attn_split_ahead's {what} != attn_split's (emulated C)"
        );
        let worst = a
            .iter()
            .zip(interp[i].to_f32s())
            .map(|(x, y)| (x - y).abs() / y.abs().max(1.0))
            .fold(0f32, f32::max);
        assert!(worst < 1e-5, "{what}: emulated C vs interpreter {worst}");
    }
}

/// The buffers and scalars of `rmsnorm_qkv_rope` (and its tiles variant) for `heads` query
/// heads, `kv` KV heads of `d`, hidden `h`: random inputs, NaN outputs.
fn qkv_args(
    rng: &mut SplitMix64,
    (heads, kv, d, h): (usize, usize, usize, usize),
    max_seq: usize,
    pos: usize,
) -> (Vec<HostMem>, Vec<Scalar>) {
    let m = (heads + 2 * kv) * d;
    let bufs = vec![
        HostMem::from_f32s(DType::F32, &rand(rng, h, 2.0)), // the residual stream
        HostMem::from_f32s(DType::F32, &vec![f32::NAN; h]), // its copy (with COPY)
        HostMem::from_f32s(DType::BF16, &rand(rng, h, 1.5)),
        HostMem::from_f32s(DType::BF16, &rand(rng, m * h, 0.5)),
        HostMem::from_f32s(DType::BF16, &vec![f32::NAN; m]),
        HostMem::from_f32s(DType::BF16, &rand(rng, d, 1.5)),
        HostMem::from_f32s(DType::BF16, &rand(rng, d, 1.5)),
        rope_rows(d, max_seq),
        HostMem::from_f32s(DType::I32, &[pos as f32]),
        HostMem::from_f32s(DType::BF16, &vec![f32::NAN; heads * d]),
        HostMem::from_f32s(DType::BF16, &vec![0.0; kv * max_seq * d]),
        HostMem::from_f32s(DType::BF16, &vec![0.0; kv * max_seq * d]),
        HostMem::from_f32s(DType::I32, &vec![0.0; heads + 2 * kv]),
    ];
    let sc = [m, h, heads, kv, max_seq].map(|v| Scalar::I32(v as i32));
    (bufs, [&sc[..], &[Scalar::F32(1e-6)]].concat())
}

/// `rmsnorm_qkv_rope`'s outputs: qkv, q, the K and V caches, and the tickets.
const QKV_OUTS: [(&str, usize); 5] = [
    ("qkv", 4),
    ("q", 9),
    ("K cache", 10),
    ("V cache", 11),
    ("tickets", 12),
];

#[test]
fn qkv_gemv_with_its_head_epilogue_emulated_equals_the_interpreter() {
    if !have_gxx() {
        eprintln!("no g++: skipped");
        return;
    }
    let mut rng = SplitMix64::new(14);
    // 2 query heads, 1 KV head, head_dim 32, hidden 40 (a masked k tail), 8-row programs:
    // four programs a head, the last of which norms and ropes it (or copies V).
    let (heads, kv, d, h, bm, bk) = (2usize, 1usize, 32usize, 40usize, 8usize, 64usize);
    let m = (heads + 2 * kv) * d;
    let int = |v: usize| ConstVal::Int(v as i64);
    let kern = rmsnorm_qkv_rope::KERNEL
        .specialize(&[
            ("BM", int(bm)),
            ("BK", int(bk)),
            ("D", int(d)),
            ("COPIES", int(1)),
            ("COPY", ConstVal::Bool(false)),
            ("COPY_ROWS", int(1)),
            ("FINISH", ConstVal::Bool(true)),
        ])
        .unwrap();
    let (bufs, sc) = qkv_args(&mut rng, (heads, kv, d, h), 12, 7);
    let grid = [(m / bm) as u32, 1, 1];
    for (what, out) in &QKV_OUTS[..4] {
        same_as_interpreter(
            &format!("rmsnorm_qkv_rope: {what}"),
            &kern,
            NUM_WARPS,
            1,
            grid,
            bufs.clone(),
            &sc,
            *out,
        );
    }
    let tickets = emulate(&kern, NUM_WARPS, 1, grid, &bufs, &sc)[12].to_f32s();
    assert_eq!(
        tickets,
        vec![0.0; heads + 2 * kv],
        "the last programs put the tickets back"
    );
}

/// `rmsnorm_qkv_rope_tiles`' C (the weights carried across its loop, a ticket per tile)
/// writes the same bits as `rmsnorm_qkv_rope`'s C with one program per tile, as the GPU
/// runs them: tiles across heads, and a last program with tiles past the last row.
#[test]
fn qkv_tiles_emulated_equal_one_program_per_tile() {
    if !have_gxx() {
        eprintln!("no g++: skipped");
        return;
    }
    let mut rng = SplitMix64::new(18);
    let (heads, kv, d, h, bm, bk) = (2usize, 1usize, 32usize, 40usize, 8usize, 64usize);
    let m = (heads + 2 * kv) * d;
    let int = |v: usize| ConstVal::Int(v as i64);
    let one = rmsnorm_qkv_rope::KERNEL
        .specialize(&[
            ("BM", int(bm)),
            ("BK", int(bk)),
            ("D", int(d)),
            ("COPIES", int(1)),
            ("COPY", ConstVal::Bool(false)),
            ("COPY_ROWS", int(1)),
            ("FINISH", ConstVal::Bool(true)),
        ])
        .unwrap();
    let (bufs, sc) = qkv_args(&mut rng, (heads, kv, d, h), 12, 7);
    let want = emulate(&one, NUM_WARPS, 1, [(m / bm) as u32, 1, 1], &bufs, &sc);
    for tiles in [3usize, 16] {
        let many = rmsnorm_qkv_rope_tiles::KERNEL
            .specialize(&[
                ("BM", int(bm)),
                ("BK", int(bk)),
                ("D", int(d)),
                ("TILES", int(tiles)),
                ("COPIES", int(1)),
                ("COPY", ConstVal::Bool(false)),
                ("COPY_ROWS", int(1)),
                ("FINISH", ConstVal::Bool(true)),
            ])
            .unwrap();
        let grid = [(m / bm).div_ceil(tiles) as u32, 1, 1];
        let got = emulate(&many, NUM_WARPS, 1, grid, &bufs, &sc);
        for (what, out) in QKV_OUTS {
            let bits = |v: &HostMem| v.to_f32s().iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got[out]), bits(&want[out]), "{what}, TILES {tiles}");
        }
        assert!(
            got[9].to_f32s().iter().all(|x| x.is_finite()),
            "a query head not written"
        );
    }
}

/// With `COPY` (the megakernel's `Tiles::o_heads`), both QKV kernels' C copies the residual
/// into `x_copy` exactly (COPY_ROWS rows a program, masked past the hidden size) and
/// writes the same bits as without.
#[test]
fn qkv_copy_emulated_leaves_the_residual_rows() {
    if !have_gxx() {
        eprintln!("no g++: skipped");
        return;
    }
    let mut rng = SplitMix64::new(19);
    let (heads, kv, d, h, bm, bk) = (2usize, 1usize, 32usize, 40usize, 8usize, 64usize);
    let m = (heads + 2 * kv) * d;
    let int = |v: usize| ConstVal::Int(v as i64);
    let (bufs, sc) = qkv_args(&mut rng, (heads, kv, d, h), 12, 7);
    let bits = |v: &HostMem| v.to_f32s().iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    // (TILES: None for `rmsnorm_qkv_rope`), rows a program: 16 programs of 4 rows (24 of
    // them past the hidden size), 6 of 8.
    for (tiles, rows) in [(None, 4usize), (Some(3usize), 8usize)] {
        let kern = |copy: bool| {
            let mut c = vec![
                ("BM", int(bm)),
                ("BK", int(bk)),
                ("D", int(d)),
                ("COPIES", int(1)),
                ("COPY", ConstVal::Bool(copy)),
                ("COPY_ROWS", int(rows)),
                ("FINISH", ConstVal::Bool(true)),
            ];
            match tiles {
                None => rmsnorm_qkv_rope::KERNEL.specialize(&c).unwrap(),
                Some(t) => {
                    c.push(("TILES", int(t)));
                    rmsnorm_qkv_rope_tiles::KERNEL.specialize(&c).unwrap()
                }
            }
        };
        let grid = [(m / bm).div_ceil(tiles.unwrap_or(1)) as u32, 1, 1];
        let want = emulate(&kern(false), NUM_WARPS, 1, grid, &bufs, &sc);
        let got = emulate(&kern(true), NUM_WARPS, 1, grid, &bufs, &sc);
        for (what, out) in QKV_OUTS {
            assert_eq!(bits(&got[out]), bits(&want[out]), "{what}, TILES {tiles:?}");
        }
        assert_eq!(bits(&got[1]), bits(&bufs[0]), "the copy, TILES {tiles:?}");
    }
}

/// `gemv_head_residual`'s C (program (head, row block): the head's attention partials
/// merged, times its [BM, D] block of o_proj, added into the residual copy head % COPIES and
/// into the MLP's input with f32 atomics), as the GPU runs it, against plain Rust in f64:
/// rows past the hidden size, empty splits (m = -3e38, l = 0), two residual copies.
#[test]
fn o_proj_per_head_emulated_merges_and_adds() {
    if !have_gxx() {
        eprintln!("no g++: skipped");
        return;
    }
    let mut rng = SplitMix64::new(29);
    let int = |v: usize| ConstVal::Int(v as i64);
    // (heads, D, hidden, BM, SPLITS, COPIES)
    for (heads, d, h, bm, splits, copies) in [
        (4usize, 32usize, 40usize, 16usize, 4usize, 2usize),
        (2, 64, 24, 8, 2, 1),
    ] {
        let k = model::kernels::gemv::gemv_head_residual::KERNEL
            .specialize(&[
                ("BM", int(bm)),
                ("D", int(d)),
                ("SPLITS", int(splits)),
                ("COPIES", int(copies)),
            ])
            .unwrap();
        let q_dim = heads * d;
        let w = bf16s(rand(&mut rng, h * q_dim, 0.5));
        // Split s of each head busy unless s == splits - 1 (an empty split).
        let mut pm = rand(&mut rng, heads * splits, 2.0);
        let mut pl: Vec<f32> = rand(&mut rng, heads * splits, 1.0)
            .iter()
            .map(|v| 1.5 + v)
            .collect();
        for hd in 0..heads {
            pm[hd * splits + splits - 1] = -3.0e38;
            pl[hd * splits + splits - 1] = 0.0;
        }
        let pacc = rand(&mut rng, heads * splits * d, 3.0);
        let (res, xm) = (rand(&mut rng, copies * h, 1.0), rand(&mut rng, h, 1.0));
        let f32m = |v: &[f32]| HostMem::from_f32s(DType::F32, v);
        let bufs = vec![
            HostMem::from_f32s(DType::BF16, &w),
            f32m(&pm),
            f32m(&pl),
            f32m(&pacc),
            f32m(&res),
            f32m(&xm),
        ];
        let sc = [h as i32, q_dim as i32].map(Scalar::I32);
        let grid = [heads as u32, h.div_ceil(bm) as u32, 1];
        let got = emulate(&k, NUM_WARPS, 1, grid, &bufs, &sc);
        // With the split weights computed once per row (`EmitOptions::row_values_once`), on
        // the warps the kernel ships with and on one: the same sums, to the atomics' order.
        for (warps, v) in shipped_runs() {
            assert_close(
                &emulate_variant(&k, warps, 1, v, grid, &bufs, &sc),
                &got,
                &[("residual", 4), ("MLP input", 5)],
                &format!("{v:?}, {warps} warps"),
            );
        }
        // f64: each head merged, then o_proj per head.
        let mut want_res: Vec<f64> = res.iter().map(|&v| v as f64).collect();
        let mut want_xm: Vec<f64> = xm.iter().map(|&v| v as f64).collect();
        for hd in 0..heads {
            let s0 = hd * splits;
            let mx = (0..splits)
                .map(|s| pm[s0 + s] as f64)
                .fold(f64::MIN, f64::max);
            let wts: Vec<f64> = (0..splits)
                .map(|s| (pm[s0 + s] as f64 - mx).exp())
                .collect();
            let l: f64 = (0..splits).map(|s| pl[s0 + s] as f64 * wts[s]).sum();
            let a: Vec<f64> = (0..d)
                .map(|j| {
                    (0..splits)
                        .map(|s| pacc[(s0 + s) * d + j] as f64 * wts[s])
                        .sum::<f64>()
                        / l
                })
                .collect();
            for r in 0..h {
                let y: f64 = (0..d)
                    .map(|j| w[r * q_dim + hd * d + j] as f64 * a[j])
                    .sum();
                want_res[(hd % copies) * h + r] += y;
                want_xm[r] += y;
            }
        }
        for (what, idx, want) in [("residual", 4, &want_res), ("MLP input", 5, &want_xm)] {
            let g = got[idx].to_f32s();
            let err = g
                .iter()
                .zip(want.iter())
                .map(|(a, b)| (*a as f64 - b).abs() / (1.0 + b.abs()))
                .fold(0.0, f64::max);
            assert!(
                err < 1e-5,
                "{what}: error {err:.2e} (heads {heads}, hidden {h})"
            );
        }
    }
}

/// Buffers `outs` (name, index) of `got` within 1e-6 of `want`'s, relative to
/// max(|want|, 1): sums that f32 atomics add in whatever order the threads reach them.
fn assert_close(got: &[HostMem], want: &[HostMem], outs: &[(&str, usize)], ctx: &str) {
    for &(what, i) in outs {
        let (g, w) = (got[i].to_f32s(), want[i].to_f32s());
        let err = g
            .iter()
            .zip(&w)
            .map(|(a, b)| (a - b).abs() / b.abs().max(1.0))
            .fold(0.0f32, f32::max);
        assert!(err < 1e-6, "{what}: error {err:.2e} ({ctx})");
    }
}

/// `attn_head_residual`'s C (program (head, row block) attends its head over every
/// position itself, then adds its share of o_proj as `gemv_head_residual` does) against the
/// interpreter: one tile of context (where the decode step launches it) and five, ragged;
/// GQA, rows past the hidden size, two residual copies; also with its max and sum over the
/// keys reduced in each row group
/// (`EmitOptions::warp_replica_reductions`) and its per-row softmax weights computed once
/// per row (`EmitOptions::row_values_once`). The atomics land in whatever order the threads
/// reach them, so the sums are compared to 1e-6.
#[test]
fn attention_inside_o_proj_emulated_equals_the_interpreter() {
    if !have_gxx() {
        eprintln!("no g++: skipped");
        return;
    }
    let mut rng = SplitMix64::new(31);
    let int = |v: usize| ConstVal::Int(v as i64);
    // (heads, kv heads, D, max_seq, pos, BLOCK_N, hidden, BM, COPIES)
    for (heads, kv, d, max_seq, pos, block_n, h, bm, copies) in [
        (
            4usize, 2usize, 32usize, 40usize, 6usize, 8usize, 40usize, 16usize, 2usize,
        ),
        (2, 1, 16, 50, 37, 8, 24, 8, 1),
    ] {
        let k = model::kernels::gemv::attn_head_residual::KERNEL
            .specialize(&[
                ("BM", int(bm)),
                ("D", int(d)),
                ("BLOCK_N", int(block_n)),
                ("COPIES", int(copies)),
            ])
            .unwrap();
        let q_dim = heads * d;
        let bf = |v: Vec<f32>| HostMem::from_f32s(DType::BF16, &v);
        let f32m = |v: Vec<f32>| HostMem::from_f32s(DType::F32, &v);
        let bufs = vec![
            bf(rand(&mut rng, h * q_dim, 0.5)),
            bf(rand(&mut rng, q_dim, 2.0)),
            bf(rand(&mut rng, kv * max_seq * d, 2.0)),
            bf(rand(&mut rng, kv * max_seq * d, 1.0)),
            HostMem::from_f32s(DType::I32, &[pos as f32]),
            f32m(rand(&mut rng, copies * h, 1.0)),
            f32m(rand(&mut rng, h, 1.0)),
        ];
        let sc = [
            Scalar::I32((heads / kv) as i32),
            Scalar::I32(max_seq as i32),
            Scalar::F32(1.0 / (d as f32).sqrt()),
            Scalar::I32(h as i32),
            Scalar::I32(q_dim as i32),
        ];
        let grid = [heads as u32, h.div_ceil(bm) as u32, 1];
        let mut want = bufs.clone();
        interpret(&k, grid, &mut want, &sc);
        for v in lowerings_one_by_one() {
            let got = emulate_variant(&k, NUM_WARPS, 1, v, grid, &bufs, &sc);
            let ctx = format!("len {}, {v:?}", pos + 1);
            assert_close(&got, &want, &[("residual", 5), ("MLP input", 6)], &ctx);
        }
    }
}

/// `attn_rope_head_residual`'s C (program (head, row blocks) norms and ropes its head's q
/// and its KV head's k from the raw QKV output, attends with the new position's K and V
/// from registers, writes them into the cache from one program per KV head, and adds its
/// blocks' share of o_proj) against the interpreter: one tile of context and three (tiles of
/// 8 keys) or two (16), GQA 2, two row blocks a program with the last one's second past the
/// hidden size; with values computed once per row (`EmitOptions::row_values_once`), also on
/// one warp. The cache rows exactly; the atomics' sums to 1e-6.
#[test]
fn attention_inside_o_proj_with_the_rope_emulated_equals_the_interpreter() {
    if !have_gxx() {
        eprintln!("no g++: skipped");
        return;
    }
    let mut rng = SplitMix64::new(37);
    let int = |v: usize| ConstVal::Int(v as i64);
    // (heads, kv heads, D, max_seq, pos, BLOCK_N, hidden, BM, TILES)
    for (heads, kv, d, max_seq, pos, block_n, h, bm, tiles) in [
        (
            4usize, 2usize, 32usize, 40usize, 5usize, 8usize, 40usize, 16usize, 1usize,
        ),
        (4, 2, 32, 40, 21, 8, 40, 16, 2),
        (4, 2, 32, 40, 21, 16, 40, 16, 2),
    ] {
        let k = model::kernels::gemv::attn_rope_head_residual::KERNEL
            .specialize(&[
                ("BM", int(bm)),
                ("D", int(d)),
                ("BLOCK_N", int(block_n)),
                ("COPIES", int(2)),
                ("TILES", int(tiles)),
            ])
            .unwrap();
        let q_dim = heads * d;
        let bf = |v: Vec<f32>| HostMem::from_f32s(DType::BF16, &v);
        let f32m = |v: Vec<f32>| HostMem::from_f32s(DType::F32, &v);
        let bufs = vec![
            bf(rand(&mut rng, h * q_dim, 0.5)),
            bf(rand(&mut rng, (heads + 2 * kv) * d, 3.0)),
            bf(rand(&mut rng, d, 1.5)),
            bf(rand(&mut rng, d, 1.5)),
            rope_rows(d, max_seq),
            bf(rand(&mut rng, kv * max_seq * d, 2.0)),
            bf(rand(&mut rng, kv * max_seq * d, 1.0)),
            HostMem::from_f32s(DType::I32, &[pos as f32]),
            f32m(rand(&mut rng, 2 * h, 1.0)),
            f32m(rand(&mut rng, h, 1.0)),
        ];
        let sc = [
            Scalar::I32(heads as i32),
            Scalar::I32(kv as i32),
            Scalar::I32(max_seq as i32),
            Scalar::F32(1e-6),
            Scalar::F32(1.0 / (d as f32).sqrt()),
            Scalar::I32(h as i32),
            Scalar::I32(q_dim as i32),
        ];
        let grid = [heads as u32, h.div_ceil(bm * tiles) as u32, 1];
        let mut want = bufs.clone();
        interpret(&k, grid, &mut want, &sc);
        let bits = |m: &HostMem| m.to_f32s().iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        // Also on one warp: a [16, D] tile of keys then takes two passes over its rows.
        for (warps, v) in shipped_runs() {
            let got = emulate_variant(&k, warps, 1, v, grid, &bufs, &sc);
            for (what, i) in [("K cache", 5), ("V cache", 6)] {
                assert_eq!(bits(&got[i]), bits(&want[i]), "{what} (len {})", pos + 1);
            }
            let ctx = format!("len {}, TILES {tiles}, {warps} warps, {v:?}", pos + 1);
            assert_close(&got, &want, &[("residual", 8), ("MLP input", 9)], &ctx);
        }
    }
}

/// `rmsnorm_qkv_rope_pairs`' C (program p: the GEMV rows of BM / 2 dimensions of its head's
/// first half and of their RoPE partners, weighted by the head's norm and rotated, in f32,
/// into `qk_rot`, their sum of squares into `qk_ss[p]`; a V program's rows into the V cache)
/// and `attn_scale_head_residual`'s C (program (head, row block) scales its head's q and its
/// KV head's k by their 1/rms from `qk_ss`, attends, adds its block of o_proj, and one
/// program per KV head writes the new K row) against the interpreter. The QKV kernel: GQA 2
/// on two residual copies with `COPY` (8 rows a program, the hidden size ending inside one),
/// and 2 query heads over 2 KV heads of 16 on one copy without; the attention: one tile of
/// context and three, ragged (tiles of 8 keys), on random pairs, and two of 16 on the QKV
/// kernel's own (its residual and its copy as the residual and the MLP's input), GQA 2,
/// the last row block past the hidden size. Both with the shipped lowerings (`shipped()`),
/// also on one warp. The QKV outputs and the cache rows bit for bit; the atomics' sums to
/// 1e-6.
#[test]
fn qkv_pairs_and_the_scaled_heads_emulated_equal_the_interpreter() {
    if !have_gxx() {
        eprintln!("no g++: skipped");
        return;
    }
    let mut rng = SplitMix64::new(43);
    let int = |v: usize| ConstVal::Int(v as i64);
    let bf = |v: Vec<f32>| HostMem::from_f32s(DType::BF16, &v);
    let f32m = |v: Vec<f32>| HostMem::from_f32s(DType::F32, &v);
    let bits = |m: &HostMem| m.to_f32s().iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    // The first case's interpreted outputs, the attention's inputs in its last case.
    let mut pairs: Option<Vec<HostMem>> = None;
    // (heads, kv heads, D, hidden, BM, BK, max_seq, pos, COPIES, COPY_ROWS: 0 without COPY)
    for (heads, kv, d, h, bm, bk, max_seq, pos, copies, copy_rows) in [
        (
            4usize, 2usize, 32usize, 44usize, 8usize, 64usize, 40usize, 21usize, 2usize, 8usize,
        ),
        (2, 2, 16, 24, 4, 32, 30, 20, 1, 0),
    ] {
        let m = (heads + 2 * kv) * d;
        let units = heads + kv;
        let k = rmsnorm_qkv_rope_pairs::KERNEL
            .specialize(&[
                ("BM", int(bm)),
                ("BK", int(bk)),
                ("D", int(d)),
                ("COPIES", int(copies)),
                ("COPY", ConstVal::Bool(copy_rows > 0)),
                ("COPY_ROWS", int(copy_rows.max(1))),
            ])
            .unwrap();
        let bufs = vec![
            f32m(rand(&mut rng, copies * h, 2.0)), // the residual's copies
            f32m(vec![f32::NAN; h]),               // their sum (with COPY)
            bf(rand(&mut rng, h, 1.5)),
            bf(rand(&mut rng, m * h, 0.5)),
            bf(rand(&mut rng, d, 1.5)),
            bf(rand(&mut rng, d, 1.5)),
            rope_rows(d, max_seq),
            HostMem::from_f32s(DType::I32, &[pos as f32]),
            f32m(vec![f32::NAN; units * d]),
            f32m(vec![f32::NAN; units * d / bm]),
            bf(rand(&mut rng, kv * max_seq * d, 1.0)),
        ];
        let sc = [
            Scalar::I32(m as i32),
            Scalar::I32(h as i32),
            Scalar::I32(heads as i32),
            Scalar::I32(kv as i32),
            Scalar::I32(max_seq as i32),
            Scalar::F32(1e-6),
        ];
        let grid = [(m / bm) as u32, 1, 1];
        let mut want = bufs.clone();
        interpret(&k, grid, &mut want, &sc);
        for (what, i) in [("qk_rot", 8), ("qk_ss", 9)] {
            assert!(
                want[i].to_f32s().iter().all(|x| x.is_finite()),
                "{what}: interpreter left NaN"
            );
        }
        if copy_rows > 0 {
            let x = bufs[0].to_f32s();
            let sum: Vec<f32> = (0..h)
                .map(|r| (1..copies).fold(x[r], |s, c| s + x[c * h + r]))
                .collect();
            assert_eq!(bits(&want[1]), bits(&f32m(sum)), "x_copy: the copies' sum");
        }
        for (warps, v) in shipped_runs() {
            let got = emulate_variant(&k, warps, 1, v, grid, &bufs, &sc);
            for (what, i) in [("x_copy", 1), ("qk_rot", 8), ("qk_ss", 9), ("V cache", 10)] {
                assert_eq!(
                    bits(&got[i]),
                    bits(&want[i]),
                    "rmsnorm_qkv_rope_pairs: {what} (heads {heads}/{kv}, D {d}, {warps} warps)"
                );
            }
        }
        eprintln!("rmsnorm_qkv_rope_pairs (heads {heads}/{kv}, D {d}): emulated C = interpreter, bit for bit");
        pairs.get_or_insert(want);
    }
    let pairs = pairs.unwrap();
    // (heads, kv heads, D, max_seq, pos, BLOCK_N, hidden, BM, QBM, the QKV case's pairs)
    for (heads, kv, d, max_seq, pos, block_n, h, bm, qbm, chained) in [
        (
            4usize, 2usize, 32usize, 40usize, 5usize, 8usize, 40usize, 16usize, 8usize, false,
        ),
        (4, 2, 32, 40, 21, 8, 40, 16, 8, false),
        (4, 2, 32, 40, 21, 16, 44, 16, 8, true),
    ] {
        let k = model::kernels::gemv::attn_scale_head_residual::KERNEL
            .specialize(&[
                ("BM", int(bm)),
                ("D", int(d)),
                ("BLOCK_N", int(block_n)),
                ("COPIES", int(2)),
                ("QBM", int(qbm)),
            ])
            .unwrap();
        let q_dim = heads * d;
        let units = heads + kv;
        let w = bf(rand(&mut rng, h * q_dim, 0.5));
        let k_cache = bf(rand(&mut rng, kv * max_seq * d, 2.0));
        let bufs = if chained {
            vec![
                w,
                pairs[8].clone(),
                pairs[9].clone(),
                k_cache,
                pairs[10].clone(),
                pairs[7].clone(),
                pairs[0].clone(),
                pairs[1].clone(),
            ]
        } else {
            // Sums of squares of a program's qbm rows: 1 / rms of a head about 1 / 2.
            let ss: Vec<f32> = (0..units * d / qbm)
                .map(|_| d as f32 * (0.5 + 1.5 * rng.next_f64() as f32))
                .collect();
            vec![
                w,
                f32m(rand(&mut rng, units * d, 3.0)),
                f32m(ss),
                k_cache,
                bf(rand(&mut rng, kv * max_seq * d, 1.0)),
                HostMem::from_f32s(DType::I32, &[pos as f32]),
                f32m(rand(&mut rng, 2 * h, 1.0)),
                f32m(rand(&mut rng, h, 1.0)),
            ]
        };
        let sc = [
            Scalar::I32(heads as i32),
            Scalar::I32(kv as i32),
            Scalar::I32(max_seq as i32),
            Scalar::F32(1e-6),
            Scalar::F32(1.0 / (d as f32).sqrt()),
            Scalar::I32(h as i32),
            Scalar::I32(q_dim as i32),
        ];
        let grid = [heads as u32, h.div_ceil(bm) as u32, 1];
        let mut want = bufs.clone();
        interpret(&k, grid, &mut want, &sc);
        assert_ne!(bits(&want[3]), bits(&bufs[3]), "the new K rows not written");
        for (warps, v) in shipped_runs() {
            let got = emulate_variant(&k, warps, 1, v, grid, &bufs, &sc);
            let ctx = format!(
                "len {}, BLOCK_N {block_n}, chained {chained}, {warps} warps, {v:?}",
                pos + 1
            );
            for (what, i) in [("K cache", 3), ("V cache", 4)] {
                assert_eq!(bits(&got[i]), bits(&want[i]), "{what} ({ctx})");
            }
            assert_close(&got, &want, &[("residual", 6), ("MLP input", 7)], &ctx);
        }
        eprintln!("attn_scale_head_residual (len {}, BLOCK_N {block_n}, chained {chained}): emulated C = interpreter", pos + 1);
    }
}

/// `gemv_head_residual_tiles`' C (a head's TILES row blocks a program, the merge once, the
/// next block's weights carried across the loop) adds the same bits into the residual and
/// the MLP's input as `gemv_head_residual`'s C with one block per program: blocks past the
/// hidden size, more tiles than a head has blocks, two residual copies.
#[test]
fn o_proj_per_head_tiles_emulated_equal_one_block_per_program() {
    if !have_gxx() {
        eprintln!("no g++: skipped");
        return;
    }
    let mut rng = SplitMix64::new(31);
    let int = |v: usize| ConstVal::Int(v as i64);
    // (heads, D, hidden, BM, SPLITS, COPIES, TILES)
    for (heads, d, h, bm, splits, copies, tiles) in [
        (4usize, 32usize, 40usize, 8usize, 4usize, 2usize, 2usize),
        (2, 64, 24, 8, 2, 1, 5),
    ] {
        let spec = |def: &dsl_runtime::KernelDef, extra: Option<usize>| {
            let mut c = vec![
                ("BM", int(bm)),
                ("D", int(d)),
                ("SPLITS", int(splits)),
                ("COPIES", int(copies)),
            ];
            if let Some(t) = extra {
                c.push(("TILES", int(t)));
            }
            def.specialize(&c).unwrap()
        };
        let one = spec(&model::kernels::gemv::gemv_head_residual::KERNEL, None);
        let many = spec(
            &model::kernels::gemv::gemv_head_residual_tiles::KERNEL,
            Some(tiles),
        );
        let q_dim = heads * d;
        let f32m = |v: &[f32]| HostMem::from_f32s(DType::F32, v);
        let pl: Vec<f32> = rand(&mut rng, heads * splits, 1.0)
            .iter()
            .map(|v| 1.5 + v)
            .collect();
        let bufs = vec![
            HostMem::from_f32s(DType::BF16, &bf16s(rand(&mut rng, h * q_dim, 0.5))),
            f32m(&rand(&mut rng, heads * splits, 2.0)),
            f32m(&pl),
            f32m(&rand(&mut rng, heads * splits * d, 3.0)),
            f32m(&rand(&mut rng, copies * h, 1.0)),
            f32m(&rand(&mut rng, h, 1.0)),
        ];
        let sc = [h as i32, q_dim as i32].map(Scalar::I32);
        let blocks = h.div_ceil(bm);
        let want = emulate(
            &one,
            NUM_WARPS,
            1,
            [heads as u32, blocks as u32, 1],
            &bufs,
            &sc,
        );
        let grid = [heads as u32, blocks.div_ceil(tiles) as u32, 1];
        let got = emulate(&many, NUM_WARPS, 1, grid, &bufs, &sc);
        let bits = |v: &HostMem| v.to_f32s().iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        for (what, idx) in [("residual", 4), ("MLP input", 5)] {
            assert_eq!(bits(&got[idx]), bits(&want[idx]), "{what}, TILES {tiles}");
            assert_ne!(bits(&got[idx]), bits(&bufs[idx]), "{what}: nothing added");
        }
    }
}

/// `gemv_residual_tiles`' C (the weights carried across its loop, one atomic add per row)
/// adds the same bits into the residual as `gemv_residual`'s C with one program per tile,
/// as the GPU runs them. (Not against the interpreter: it sums a row in index order, the C
/// as a tree, so both kernels' C are an ulp off it in some rows here.)
#[test]
fn gemv_residual_tiles_emulated_equals_one_program_per_tile() {
    if !have_gxx() {
        eprintln!("no g++: skipped");
        return;
    }
    let mut rng = SplitMix64::new(17);
    let int = |v: usize| ConstVal::Int(v as i64);
    // (m, k, BM, BK, TILES): the last program's tiles past m, k < BK (masked columns), more
    // tiles a program than rows left.
    for (m, k, bm, bk, tiles) in [
        (37usize, 100usize, 4usize, 128usize, 3usize),
        (24, 48, 8, 64, 7),
    ] {
        let one = model::kernels::gemv::gemv_residual::KERNEL
            .specialize(&[("BM", int(bm)), ("BK", int(bk))])
            .unwrap();
        let many = gemv_residual_tiles::KERNEL
            .specialize(&[("BM", int(bm)), ("BK", int(bk)), ("TILES", int(tiles))])
            .unwrap();
        let res = rand(&mut rng, m, 1.0);
        let bufs = vec![
            HostMem::from_f32s(DType::BF16, &rand(&mut rng, m * k, 0.5)),
            HostMem::from_f32s(DType::BF16, &rand(&mut rng, k, 1.0)),
            HostMem::from_f32s(DType::F32, &res),
        ];
        let sc = [m, k].map(|v| Scalar::I32(v as i32));
        let run = |kern: &Kernel, programs: usize| {
            emulate(kern, NUM_WARPS, 1, [programs as u32, 1, 1], &bufs, &sc)[2].to_f32s()
        };
        let (want, got) = (
            run(&one, m.div_ceil(bm)),
            run(&many, m.div_ceil(bm * tiles)),
        );
        assert!(
            want.iter().zip(&res).all(|(a, r)| a != r),
            "{m}x{k}: a row not added to"
        );
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(&got),
            bits(&want),
            "{m}x{k} BM {bm} BK {bk} TILES {tiles}: emulated C"
        );
        eprintln!("gemv_residual_tiles {m}x{k} TILES {tiles}: emulated C = one program per tile, bit for bit");
    }
}

/// The fused MLP's C (`rmsnorm_mlp_tiles`: three weight tiles carried across the loop,
/// the sum over rows through shared memory, the vector atomics into x), as the GPU runs
/// it, against plain Rust in f64 with act rounded to bf16 as the kernel rounds it; and
/// `gemv_residual_copy`'s C adds the bits `gemv_residual`'s does and copies them.
#[test]
fn fused_mlp_emulated_adds_the_mlp_to_x() {
    if !have_gxx() {
        eprintln!("no g++: skipped");
        return;
    }
    let mut rng = SplitMix64::new(23);
    let int = |v: usize| ConstVal::Int(v as i64);
    // (inter, hidden, BM, BK, TILES): rows past inter, hidden < BK, more tiles than rows.
    for (inter, h, bm, bk, tiles) in [
        (37usize, 100usize, 4usize, 128usize, 3usize),
        (24, 48, 8, 64, 7),
    ] {
        let k = model::kernels::mlp::rmsnorm_mlp_tiles::KERNEL
            .specialize(&[
                ("BM", int(bm)),
                ("BK", int(bk)),
                ("TILES", int(tiles)),
                ("COPIES", int(1)),
            ])
            .unwrap();
        let (hv, nw, x0) = (
            rand(&mut rng, h, 2.0),
            bf16s(rand(&mut rng, h, 1.5)),
            rand(&mut rng, h, 1.0),
        );
        let (gu, dt) = (
            bf16s(rand(&mut rng, 2 * inter * h, 0.3)),
            bf16s(rand(&mut rng, inter * h, 0.3)),
        );
        let bufs = vec![
            HostMem::from_f32s(DType::F32, &hv),
            HostMem::from_f32s(DType::BF16, &nw),
            HostMem::from_f32s(DType::BF16, &gu),
            HostMem::from_f32s(DType::BF16, &dt),
            HostMem::from_f32s(DType::F32, &x0),
        ];
        let sc = [
            Scalar::I32(inter as i32),
            Scalar::I32(h as i32),
            Scalar::F32(1e-6),
        ];
        let programs = inter.div_ceil(bm * tiles) as u32;
        let got = emulate(&k, NUM_WARPS, 1, [programs, 1, 1], &bufs, &sc)[4].to_f32s();
        // The activations computed once per row of down's tile (`EmitOptions::
        // row_values_once`): the same bits up to the atomics' order.
        for v in [shipped(), reuse_barriers()] {
            let once =
                emulate_variant(&k, NUM_WARPS, 1, v, [programs, 1, 1], &bufs, &sc)[4].to_f32s();
            for (a, b) in once.iter().zip(&got) {
                assert!(
                    (a - b).abs() <= 1e-6 * b.abs().max(1.0),
                    "{v:?}: {a} vs {b}"
                );
            }
        }
        // Plain Rust, f64 sums.
        let ms = hv.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / h as f64;
        let inv = 1.0 / (ms + 1e-6).sqrt();
        let hn: Vec<f64> = (0..h).map(|j| hv[j] as f64 * inv * nw[j] as f64).collect();
        let dot = |row: &[f32]| row.iter().zip(&hn).map(|(w, x)| *w as f64 * x).sum::<f64>();
        let act: Vec<f64> = (0..inter)
            .map(|i| {
                let (g, u) = (dot(&gu[i * h..][..h]), dot(&gu[(inter + i) * h..][..h]));
                let a = (g / (1.0 + (-g).exp()) * u) as f32;
                dsl_runtime::bf16::from_f32(a).to_f32() as f64
            })
            .collect();
        let want: Vec<f64> = (0..h)
            .map(|j| {
                x0[j] as f64
                    + (0..inter)
                        .map(|i| dt[i * h + j] as f64 * act[i])
                        .sum::<f64>()
            })
            .collect();
        let scale = want.iter().fold(0f64, |m, v| m.max(v.abs()));
        let err = got
            .iter()
            .zip(&want)
            .map(|(g, w)| (*g as f64 - w).abs())
            .fold(0f64, f64::max)
            / scale;
        eprintln!("fused MLP {inter}x{h} TILES {tiles}: emulated C within {err:.1e} of f64");
        // f32 sums, and an act an ulp of bf16 off where f32 and f64 round it apart.
        assert!(
            err < 1e-3,
            "{inter}x{h} BM {bm} BK {bk} TILES {tiles}: {err}"
        );
        assert!(got.iter().zip(&x0).any(|(g, x)| g != x), "nothing added");
    }
    // o_proj's copy: the same bits as gemv_residual's C, twice.
    let (m, kk, bm, bk) = (37usize, 100usize, 8usize, 32usize);
    let cx = [("BM", int(bm)), ("BK", int(bk))];
    let plain = model::kernels::gemv::gemv_residual::KERNEL
        .specialize(&cx)
        .unwrap();
    let mut bufs = vec![
        HostMem::from_f32s(DType::BF16, &rand(&mut rng, m * kk, 0.5)),
        HostMem::from_f32s(DType::BF16, &rand(&mut rng, kk, 1.0)),
        HostMem::from_f32s(DType::F32, &rand(&mut rng, m, 1.0)),
    ];
    let sc = [Scalar::I32(m as i32), Scalar::I32(kk as i32)];
    let grid = [m.div_ceil(bm) as u32, 1, 1];
    let want = emulate(&plain, NUM_WARPS, 1, grid, &bufs, &sc)[2].to_f32s();
    bufs.push(HostMem::from_f32s(DType::F32, &vec![f32::NAN; m]));
    let bits = |v: Vec<f32>| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    // The residual rows first, or the weights (`WEIGHTS_FIRST`): the same bits.
    for weights_first in [false, true] {
        let copy = model::kernels::gemv::gemv_residual_copy::KERNEL
            .specialize(&[
                cx[0],
                cx[1],
                ("COPIES", int(1)),
                ("WEIGHTS_FIRST", ConstVal::Bool(weights_first)),
            ])
            .unwrap();
        let out = emulate(&copy, NUM_WARPS, 1, grid, &bufs, &sc);
        assert_eq!(
            bits(out[2].to_f32s()),
            bits(want.clone()),
            "res, {weights_first}"
        );
        assert_eq!(
            bits(out[3].to_f32s()),
            bits(want.clone()),
            "copy, {weights_first}"
        );
    }
}

/// The input norm + GEMV's C (`rmsnorm_gemv`) at Qwen3-4B's hidden 2560, with a BK of
/// 2560 (a tile width that is not a power of two) and with the rule's 4096 (the columns
/// past 2560 masked): both within bf16 rounding of plain Rust in f64, over masked rows
/// past m.
#[test]
fn rmsnorm_gemv_emulated_at_hidden_2560_with_either_bk() {
    if !have_gxx() {
        eprintln!("no g++: skipped");
        return;
    }
    let mut rng = SplitMix64::new(29);
    let (m, k, bm) = (20usize, 2560usize, 8usize);
    let int = |v: usize| ConstVal::Int(v as i64);
    let (x, g, w) = (
        rand(&mut rng, k, 2.0),
        bf16s(rand(&mut rng, k, 1.5)),
        bf16s(rand(&mut rng, m * k, 0.3)),
    );
    let bufs = vec![
        HostMem::from_f32s(DType::F32, &x),
        HostMem::from_f32s(DType::BF16, &g),
        HostMem::from_f32s(DType::BF16, &w),
        HostMem::from_f32s(DType::BF16, &vec![f32::NAN; m]),
    ];
    let sc = [
        Scalar::I32(m as i32),
        Scalar::I32(k as i32),
        Scalar::F32(1e-6),
    ];
    let ms = x.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / k as f64;
    let inv = 1.0 / (ms + 1e-6).sqrt();
    let want: Vec<f64> = (0..m)
        .map(|r| {
            (0..k)
                .map(|j| w[r * k + j] as f64 * x[j] as f64 * inv * g[j] as f64)
                .sum()
        })
        .collect();
    for bk in [2560usize, 4096] {
        let kern = model::kernels::gemv::rmsnorm_gemv::KERNEL
            .specialize(&[("BM", int(bm)), ("BK", int(bk))])
            .unwrap();
        let grid = [m.div_ceil(bm) as u32, 1, 1];
        let got = emulate(&kern, NUM_WARPS, 1, grid, &bufs, &sc)[3].to_f32s();
        for (r, (g, w)) in got.iter().zip(&want).enumerate() {
            // One bf16 rounding of the result (2^-8 relative), and f32 sums.
            assert!(
                (*g as f64 - w).abs() <= w.abs() / 128.0 + 1e-4,
                "BK {bk} row {r}: {g} against {w}"
            );
        }
        eprintln!("rmsnorm_gemv 20x2560 BK {bk}: emulated C within bf16 rounding of f64");
    }
}
