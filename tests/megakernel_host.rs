//! The persistent kernel itself, run on the CPU: the toy megakernel's generated CUDA C is
//! compiled with g++ against a small CUDA emulation (dsl-runtime/tests/host_emu: one OS
//! thread per CUDA thread, every CTA at once, C++ atomics for the sync words) and run over
//! a small persistent grid. Its outputs must equal the kernels launched one by one through
//! the interpreter. This checks what the interpreter cannot: the generated counters,
//! targets and waits, the grid-stride program loops and the last CTA's reset of the sync
//! words, without a GPU.
#[path = "../dsl-runtime/tests/host_emu/harness.rs"]
mod harness;
use half::bf16;
use std::path::PathBuf;
use tessera::check::Rng;
use tessera::kernels::vector_add::vector_add;
use tessera::runtime::mega::cuda::MegaSource;
use tessera::runtime::mega::cuda::SyncWords;
use tessera::runtime::mega::MegaOptions;
use tessera::runtime::Device;
use tessera::toy::{toy_mlp, toy_sequential, ToyBuffers};

const EPS: f32 = 1e-6;

/// A megakernel's generated source `src` (with `stages` stages), run on `ctas` emulated CTAs
/// over the buffers `bufs` (its pointer parameters' bytes, in order) and the C expressions
/// `scalars` (its scalar parameters, in order); returns the buffers after the run. Fails if
/// a wait gave up or a sync word was left set.
fn emulate_megakernel(
    src: &MegaSource,
    stages: usize,
    ctas: u32,
    bufs: &[Vec<u8>],
    scalars: &[String],
    ptr_types: &[&str],
) -> Vec<Vec<u8>> {
    let mut code = harness::swap_block(&src.code, "conversions", "conversions.h");
    code = harness::swap_block(&code, "synchronisation primitives", "mega.h");
    let dyn_decl = "  extern __shared__ __align__(128) unsigned char tsr_dyn[];";
    assert!(code.contains(dyn_decl));
    code = code.replace(
        dyn_decl,
        "  unsigned char* tsr_dyn = g_dyn;  // the emulated CTA's",
    );
    let dir = harness::tempdir("mega_emu");
    let mut main = String::from("int main(int argc, char** argv) {\n  (void)argc;\n");
    let mut args = vec![];
    for (i, (buf, ty)) in bufs.iter().zip(ptr_types).enumerate() {
        std::fs::write(dir.join(format!("b{i}.bin")), buf).unwrap();
        main += &format!("  auto b{i} = read_file(argv[{}]);\n", i + 1);
        args.push(format!("({ty}*)b{i}.data()"));
    }
    args.extend(scalars.iter().cloned());
    main += &format!(
        "  std::vector<unsigned> sync({}, 0u);\n",
        SyncWords::len(stages, ctas as usize)
    );
    args.push("sync.data()".into());
    args.push("10000000000ull".into()); // a 10 s watchdog
    main += &format!(
        "  launch_persistent(dim3{{{ctas}, 1, 1}}, {}, {}, [&] {{ {}({}); }});\n",
        src.block_threads,
        src.smem_bytes,
        src.entry,
        args.join(", ")
    );
    main += "  if (sync[0] != 0u) { std::fprintf(stderr, \"a wait gave up\\n\"); return 3; }\n";
    main += &format!(
        "  for (int i = 0; i < {}; ++i) if (sync[i] != 0u) {{ std::fprintf(stderr, \"sync word %d left at %u\\n\", i, sync[i]); return 4; }}\n",
        SyncWords::records(stages)
    );
    for i in 0..bufs.len() {
        main += &format!("  write_file(argv[{}], b{i}, b{i}.size() - 64);\n", i + 1);
    }
    main += "  return 0;\n}\n";
    let paths: Vec<PathBuf> = (0..bufs.len())
        .map(|i| dir.join(format!("b{i}.bin")))
        .collect();
    harness::compile_and_run(&format!("{code}\n{main}"), &dir, &paths, 300);
    let out = paths.iter().map(|p| std::fs::read(p).unwrap()).collect();
    let _ = std::fs::remove_dir_all(&dir);
    out
}

/// The toy megakernel's generated source, run on `ctas` emulated CTAs over `b`'s data;
/// returns what it wrote (as `ToyBuffers::outputs` orders it).
fn run_emulated(
    opts: &MegaOptions,
    ctas: u32,
    b: &ToyBuffers,
    layers: usize,
    d: usize,
    f: usize,
) -> Vec<bf16> {
    let cx = toy_mlp::constexprs(d, f);
    let src = toy_mlp::MEGAKERNEL.cuda_source(&cx, opts).unwrap();
    let stages = toy_mlp::MEGAKERNEL
        .plan(&cx, opts)
        .unwrap()
        .resolved
        .stages
        .len();
    // The buffers in the order of the megakernel's pointer parameters.
    let bufs: Vec<Vec<u8>> = [
        &b.x, &b.res, &b.norm_w, &b.w_gate, &b.w_up, &b.w_down, &b.h, &b.g, &b.u, &b.a,
    ]
    .iter()
    .map(|buf| {
        buf.to_vec()
            .unwrap()
            .iter()
            .flat_map(|v| v.to_bits().to_le_bytes())
            .collect()
    })
    .collect();
    let scalars = [
        format!("{layers}"),
        format!("__uint_as_float({}u)", EPS.to_bits()),
    ];
    let out = emulate_megakernel(&src, stages, ctas, &bufs, &scalars, &["bf16_t"; 10]);
    let read_bf16 = |i: usize| -> Vec<bf16> {
        out[i]
            .chunks(2)
            .map(|c| bf16::from_bits(u16::from_le_bytes([c[0], c[1]])))
            .collect()
    };
    // x, res, h, g, u, a: as `ToyBuffers::outputs`.
    let mut outs = vec![];
    for i in [0, 1, 6, 7, 8, 9] {
        outs.extend(read_bf16(i));
    }
    outs
}

/// Within bf16 rounding of the reference (the emulator's libm `expf` may differ from the
/// interpreter's in the last bit, and a different rounding can carry through the layers).
fn assert_close(got: &[bf16], want: &[bf16], what: &str) {
    assert_eq!(got.len(), want.len());
    let scale = want.iter().map(|v| v.to_f32().abs()).fold(0.0, f32::max);
    let worst = got
        .iter()
        .zip(want)
        .map(|(a, b)| (a.to_f32() - b.to_f32()).abs())
        .fold(0.0, f32::max);
    assert!(
        worst <= 2e-2 * scale,
        "{what}: worst difference {worst} against max |value| {scale}"
    );
}

/// Random toy inputs from `seed`, and what the kernels launched one by one through the
/// interpreter make of them.
fn toy_case(seed: u64, layers: usize, d: usize, f: usize) -> (ToyBuffers, Vec<bf16>) {
    let dev = Device::interpreter();
    let reference = ToyBuffers::random(&dev, &mut Rng::new(seed), layers, d, f).unwrap();
    let input = reference.copy_to(&dev).unwrap();
    toy_sequential(&dev, &reference, layers, d, f, EPS).unwrap();
    (input, reference.outputs().unwrap())
}

/// The plain persistent kernel on emulated CTAs, on grids smaller and larger than a stage:
/// the interpreter's outputs (the kernels launched one by one), and the same bits on both
/// grids.
#[test]
fn toy_megakernel_on_emulated_ctas() {
    let (layers, d, f) = (3, 64, 128);
    let (input, want) = toy_case(11, layers, d, f);
    let opts = MegaOptions::default().warps(2);
    let narrow = run_emulated(&opts, 3, &input, layers, d, f);
    assert_close(&narrow, &want, "3 CTAs");
    let wide = run_emulated(&opts, 40, &input, layers, d, f);
    assert_eq!(wide, narrow, "40 CTAs against 3");
}

/// `MegaOptions::wait_in_body`: each stage's counter wait runs inside the first program's
/// body (inlined), before its first access another stage may write, and a CTA arrives only
/// after it waited. On emulated CTAs (one CTA, and grids smaller and larger than a stage):
/// the same bits as the waits before the programs, and the interpreter's outputs; also
/// with only some stages' waits in their bodies (`wait_in_body_only`).
#[test]
fn toy_megakernel_waits_inside_its_bodies_on_emulated_ctas() {
    let (layers, d, f) = (3, 64, 128);
    let (input, want) = toy_case(12, layers, d, f);
    let before = MegaOptions {
        wait_in_body: false,
        ..MegaOptions::default().warps(2)
    };
    let inside = MegaOptions {
        wait_in_body: true,
        ..before.clone()
    };
    let cx = toy_mlp::constexprs(d, f);
    let code = toy_mlp::MEGAKERNEL.cuda_source(&cx, &inside).unwrap().code;
    assert!(
        code.contains("if (!tsr_dep()) return;"),
        "no wait in a body"
    );
    assert!(
        code.contains("tsr_wait_inline(tsr_sync"),
        "the wait is not inlined"
    );
    let plain = run_emulated(&before, 3, &input, layers, d, f);
    assert_close(&plain, &want, "waits before the programs");
    for ctas in [1, 3, 40] {
        let got = run_emulated(&inside, ctas, &input, layers, d, f);
        assert_eq!(got, plain, "waits inside the bodies, {ctas} CTAs");
    }
    // Only the GEMVs' stages (`wait_in_body_only`): the others wait before their programs.
    let gemvs = MegaOptions {
        wait_in_body_only: vec!["gemv".into()],
        ..inside.clone()
    };
    let code = toy_mlp::MEGAKERNEL.cuda_source(&cx, &gemvs).unwrap().code;
    // A body's signature: it takes the wait (`tsr_dep`) when the stage waits in its body.
    let signature = |body: &str| {
        let at = code.find(&format!("void {body}_body(")).expect(body);
        code[at..at + code[at..].find('{').unwrap()].to_string()
    };
    for body in ["gemv_BM8_BK64", "gemv_BM4_BK64"] {
        let sig = signature(body);
        assert!(
            sig.contains("tsr_dep"),
            "{body} waits before its programs: {sig}"
        );
    }
    for body in ["add_rmsnorm", "silu_mul"] {
        let sig = signature(body);
        assert!(!sig.contains("tsr_dep"), "{body} waits in its body: {sig}");
    }
    for ctas in [3, 40] {
        let got = run_emulated(&gemvs, ctas, &input, layers, d, f);
        assert_eq!(
            got, plain,
            "the GEMVs wait inside their bodies, {ctas} CTAs"
        );
    }
}

/// `c` is read by every stage of the loop and written only after it, as the decode step's
/// `pos` is by its last stage (`y = c + x`, `x = c + y`, then `c = x + x`).
#[tessera::megakernel]
fn read_before_written(
    x: Ptr<f32>,
    y: Ptr<f32>,
    c: Ptr<f32>,
    steps: i32,
    #[constexpr] N: usize,
    #[constexpr] BLOCK: usize,
) {
    for s in 0..steps {
        vector_add(grid(cdiv(N, BLOCK)), c, x, y, N, BLOCK);
        vector_add(grid(cdiv(N, BLOCK)), c, y, x, N, BLOCK);
    }
    vector_add(grid(cdiv(N, BLOCK)), x, x, c, N, BLOCK);
}

/// `MegaOptions::early_loads`: the loop's stages, which wait in their bodies, load `c`
/// (which no stage that may still be running writes) before their waits, and the last stage,
/// whose `x` the loop writes, after its wait. On emulated CTAs (1, 3 and 40) the
/// interpreter's bits, as with the weights-only rule.
#[test]
fn loads_of_what_only_a_later_stage_writes_go_before_the_wait_on_emulated_ctas() {
    let (n, block, steps) = (1000, 128, 3);
    let cx = read_before_written::constexprs(n, block);
    let weights_only = MegaOptions {
        wait_in_body: true,
        early_loads: false,
        ..MegaOptions::default().warps(2)
    };
    let early = MegaOptions {
        early_loads: true,
        ..weights_only.clone()
    };
    // Per body: whether it loads before its wait.
    let loads_first = |o: &MegaOptions| -> Vec<bool> {
        let code = read_before_written::MEGAKERNEL
            .cuda_source(&cx, o)
            .unwrap()
            .code;
        code.split("_body(int pid0")
            .skip(1)
            .map(|b| {
                let body = &b[..b.find("\n}\n").unwrap()];
                let wait = body.find("tsr_dep()").expect("a wait in the body");
                body.find("---- load ----").is_some_and(|l| l < wait)
            })
            .collect()
    };
    assert_eq!(loads_first(&weights_only), [false], "one body, waits first");
    assert_eq!(
        loads_first(&early),
        [true, false],
        "the loop's body loads c first"
    );

    let x0: Vec<f32> = (0..n).map(|i| (i % 7) as f32 - 3.0).collect();
    let c0: Vec<f32> = (0..n).map(|i| (i % 5) as f32 * 0.25).collect();
    let dev = Device::interpreter();
    let (x, y, c) = (
        dev.upload(&x0).unwrap(),
        dev.zeros::<f32>(n).unwrap(),
        dev.upload(&c0).unwrap(),
    );
    read_before_written::launch(&dev, &weights_only, &x, &y, &c, steps, n, block).unwrap();
    let want: Vec<Vec<f32>> = [x, y, c].iter().map(|b| b.to_vec().unwrap()).collect();
    assert!(want[2] != c0, "the last stage wrote c");

    let plan = read_before_written::MEGAKERNEL.plan(&cx, &early).unwrap();
    let src = read_before_written::MEGAKERNEL
        .cuda_source(&cx, &early)
        .unwrap();
    let bytes = |v: &[f32]| -> Vec<u8> { v.iter().flat_map(|f| f.to_le_bytes()).collect() };
    let bufs = [bytes(&x0), bytes(&vec![0.0; n]), bytes(&c0)];
    for ctas in [1, 3, 40] {
        let stages = plan.resolved.stages.len();
        let out = emulate_megakernel(
            &src,
            stages,
            ctas,
            &bufs,
            &[format!("{steps}")],
            &["float"; 3],
        );
        let got: Vec<Vec<f32>> = out
            .iter()
            .map(|b| {
                b.chunks(4)
                    .map(|w| f32::from_le_bytes([w[0], w[1], w[2], w[3]]))
                    .collect()
            })
            .collect();
        assert_eq!(got, want, "early loads, {ctas} CTAs");
    }
}
