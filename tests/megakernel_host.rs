//! The persistent kernel itself, run on the CPU: the toy megakernel's generated CUDA C is
//! compiled with g++ against a small CUDA emulation (dsl-runtime/tests/host_emu: one OS
//! thread per CUDA thread, every CTA at once, C++ atomics for the sync words, bulk copies
//! as memcpy with mbarriers counted as the hardware counts them) and run over a small
//! persistent grid. Its outputs must equal the kernels launched one by one through the
//! interpreter. This checks what the interpreter cannot: the generated counters, targets
//! and waits, the grid-stride program loops, the last CTA's reset of the sync words, and
//! the staging ring (the producer warp's walk over each CTA's staged programs, the ring's
//! positions, the copies from the loads' boxes, the full and empty mbarriers' phases, the
//! compute warps' named barrier), without a GPU.
#[path = "../dsl-runtime/tests/host_emu/harness.rs"]
mod harness;
use half::bf16;
use std::path::PathBuf;
use tessera::check::Rng;
use tessera::runtime::mega::cuda::SyncWords;
use tessera::runtime::mega::MegaOptions;
use tessera::runtime::Device;
use tessera::toy::{toy_mlp, toy_sequential, ToyBuffers};

const EPS: f32 = 1e-6;

/// What an emulated run reports beside its outputs.
struct Counts {
    /// Bytes the copies held, and bytes staged loads then took from them.
    copied: u64,
    hits: u64,
    /// Copies whose headers came from boxes.
    boxed: u64,
    /// With a producer warp: programs the compute warps freed (empty-mbarrier arrivals).
    freed: u64,
    /// The ring's bytes (0: no ring).
    ring: u64,
}

/// The toy megakernel's generated source, run on `ctas` emulated CTAs over `b`'s data;
/// returns what it wrote (as `ToyBuffers::outputs` orders it) and its counts.
fn run_emulated(
    opts: &MegaOptions,
    ctas: u32,
    b: &ToyBuffers,
    layers: usize,
    d: usize,
    f: usize,
) -> (Vec<bf16>, Counts) {
    let cx = toy_mlp::constexprs(d, f);
    let src = toy_mlp::MEGAKERNEL.cuda_source(&cx, opts).unwrap();
    let stages = toy_mlp::MEGAKERNEL
        .plan(&cx, opts)
        .unwrap()
        .resolved
        .stages
        .len();
    let mut code = harness::swap_block(&src.code, "conversions", "conversions.h");
    code = harness::swap_block(&code, "staging", "staging.h");
    code = harness::swap_block(&code, "synchronisation primitives", "mega.h");
    // A ring asked for: the compute warps' barrier (and, with something staged, a producer).
    let producer = code.contains("tsr_produce(");
    if opts.stage_ring != Some(0) {
        code = harness::swap_block(&code, "producer", "producer.h");
    }
    let ring = code
        .lines()
        .find_map(|l| l.trim().strip_prefix("#define TSR_RING "))
        .map_or(0, |n| n.trim_end_matches("ull").parse().unwrap());
    let dyn_decl = "  extern __shared__ __align__(128) unsigned char tsr_dyn[];";
    assert!(code.contains(dyn_decl));
    code = code.replace(
        dyn_decl,
        "  unsigned char* tsr_dyn = g_dyn;  // the emulated CTA's",
    );

    // The buffers in the order of the megakernel's pointer parameters.
    let bufs = [
        &b.x, &b.res, &b.norm_w, &b.w_gate, &b.w_up, &b.w_down, &b.h, &b.g, &b.u, &b.a,
    ];
    let dir = harness::tempdir("mega_emu");
    let mut main = String::from("int main(int argc, char** argv) {\n  (void)argc;\n");
    let mut args = vec![];
    for (i, buf) in bufs.iter().enumerate() {
        let bytes: Vec<u8> = buf
            .to_vec()
            .unwrap()
            .iter()
            .flat_map(|v| v.to_bits().to_le_bytes())
            .collect();
        std::fs::write(dir.join(format!("b{i}.bin")), bytes).unwrap();
        main += &format!("  auto b{i} = read_file(argv[{}]);\n", i + 1);
        args.push(format!("(bf16_t*)b{i}.data()"));
    }
    args.push(format!("{layers}"));
    args.push(format!("__uint_as_float({}u)", EPS.to_bits()));
    main += &format!(
        "  std::vector<unsigned> sync({}, 0u);\n",
        SyncWords::len(stages, ctas as usize)
    );
    args.push("sync.data()".into());
    args.push("10000000000ull".into()); // a 10 s watchdog
                                        // Named barrier 1 (the compute warps') leaves out a producer warp.
    let named = if producer { src.block_threads - 32 } else { 0 };
    main += &format!(
        "  launch_persistent(dim3{{{ctas}, 1, 1}}, {}, {}, [&] {{ {}({}); }}, {named});\n",
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
    let freed = if opts.stage_ring != Some(0) {
        "tsr_emu_freed.load()"
    } else {
        "0ull"
    };
    main += &format!("  std::printf(\"staged %llu %llu %llu %llu\\n\", tsr_emu_staged.load(), tsr_emu_hits.load(), tsr_emu_boxed.load(), {freed});\n  return 0;\n}}\n");
    let paths: Vec<PathBuf> = (0..bufs.len())
        .map(|i| dir.join(format!("b{i}.bin")))
        .collect();
    let stdout = harness::compile_and_run(&format!("{code}\n{main}"), &dir, &paths, 300);
    let c = harness::staged_counts(&stdout);
    let counts = Counts {
        copied: c[0],
        hits: c[1],
        boxed: c[2],
        freed: c[3],
        ring,
    };
    assert_eq!(
        producer,
        ring > 0,
        "a producer warp exactly when there is a ring"
    );
    let read_bf16 = |i: usize| -> Vec<bf16> {
        std::fs::read(&paths[i])
            .unwrap()
            .chunks(2)
            .map(|c| bf16::from_bits(u16::from_le_bytes([c[0], c[1]])))
            .collect()
    };
    // x, res, h, g, u, a: as `ToyBuffers::outputs`.
    let mut outs = vec![];
    for i in [0, 1, 6, 7, 8, 9] {
        outs.extend(read_bf16(i));
    }
    let _ = std::fs::remove_dir_all(&dir);
    (outs, counts)
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

/// The staging ring's producer protocol (issue 10): a producer warp per CTA issues the
/// ring, the compute warps free each program's bytes on its empty mbarrier. On emulated
/// CTAs, with rings from smaller than one CTA's share of a stage (every CTA wraps it, and
/// the producer waits for freed bytes) to larger than the whole launch, grids smaller and
/// larger than a stage, and more programs per CTA than mbarriers (their phases wrap): the
/// same bits as the kernel without staging, every copied byte read, and the interpreter's
/// outputs (the kernels launched one by one).
#[test]
fn toy_megakernel_with_a_producer_warp_on_emulated_ctas() {
    let (layers, d, f) = (3, 64, 128);
    let dev = Device::interpreter();
    let reference = ToyBuffers::random(&dev, &mut Rng::new(11), layers, d, f).unwrap();
    let input = reference.copy_to(&dev).unwrap();
    toy_sequential(&dev, &reference, layers, d, f, EPS).unwrap();
    let want = reference.outputs().unwrap();
    // Without a ring, on grids smaller and larger than a stage.
    let plain = MegaOptions::default().warps(2);
    assert_eq!(plain.stage_ring, Some(0));
    let (unstaged, c) = run_emulated(&plain, 3, &input, layers, d, f);
    assert_eq!((c.ring, c.copied, c.hits), (0, 0, 0));
    assert_close(&unstaged, &want, "no staging");
    let (wide, _) = run_emulated(&plain, 40, &input, layers, d, f);
    assert_eq!(wide, unstaged, "no staging, 40 CTAs");
    // (warps, CTAs, ring bytes: None is the GPU default's)
    let configs = [
        (2, 3, None),
        (2, 3, Some(8 << 10)),
        (4, 5, None),
        (2, 40, None),
        (2, 1, Some(8 << 10)),
    ];
    for (warps, ctas, ring) in configs {
        let mut opts = MegaOptions::default().warps(warps);
        opts.stage_ring = ring;
        let what = format!("producer, {warps} warps, {ctas} CTAs, ring {ring:?}");
        let (got, c) = run_emulated(&opts, ctas, &input, layers, d, f);
        assert!(c.ring > 0, "{what}: nothing was staged");
        assert!(
            c.boxed > 0 && c.freed > 0,
            "{what}: boxed {}, freed {}",
            c.boxed,
            c.freed
        );
        // Each staged program's copies carry its header(s), one box per staged load, and the
        // compute warps free it once: as many frees as programs staged, at least one box each.
        assert!(
            c.boxed >= c.freed,
            "{what}: {} boxes for {} programs",
            c.boxed,
            c.freed
        );
        assert_eq!(c.hits, c.copied, "{what}: a copy held bytes nobody read");
        let gate_up = (layers * 2 * f * d * 2) as u64;
        assert!(
            c.copied >= gate_up,
            "{what}: the copies held {} bytes",
            c.copied
        );
        if ring == Some(8 << 10) {
            // More bytes per CTA than the ring holds: the producer wrapped it.
            assert!(
                c.copied / ctas as u64 > c.ring,
                "{what}: {} bytes over {ctas} CTAs never wrap a {}-byte ring",
                c.copied,
                c.ring
            );
        }
        assert_close(&got, &want, &what);
        if warps == 2 {
            assert_eq!(
                got, unstaged,
                "{what}: differs from the kernel without staging"
            );
        }
    }
}
