//! The toy megakernel on the CPU: the schedule has exactly the syncs its hazards need; its
//! result equals the kernels launched one by one, stage by stage and under adversarial
//! CTA interleavings; every sync, removed, is caught by the adversarial interpreter; a
//! broken sync is a deadlock reported with its id and stage (the CPU twin of the GPU
//! watchdog).
use tessera::check::Rng;
use tessera::runtime::mega::{MegaOptions, Policy, SyncKind};
use tessera::runtime::{ConstVal, Device};
use tessera::toy::{toy_mlp, toy_sequential, ToyBuffers};

const EPS: f32 = 1e-6;

fn consts(d: usize, f: usize) -> Vec<(&'static str, ConstVal)> {
    toy_mlp::constexprs(d, f)
}

/// The megakernel's outputs and the sequential launches' outputs, from the same inputs.
fn run_both(
    opts: &MegaOptions,
    seed: u64,
    layers: usize,
    d: usize,
    f: usize,
) -> (Result<Vec<half::bf16>, String>, Vec<half::bf16>) {
    let dev = Device::interpreter();
    let mut rng = Rng::new(seed);
    let reference = ToyBuffers::random(&dev, &mut rng, layers, d, f).unwrap();
    let mega = reference.copy_to(&dev).unwrap();
    toy_sequential(&dev, &reference, layers, d, f, EPS).unwrap();
    let got = mega
        .megakernel(&dev, opts, layers, d, f, EPS)
        .map_err(|e| e.to_string())
        .and_then(|_| mega.outputs().map_err(|e| e.to_string()));
    (got, reference.outputs().unwrap())
}

#[test]
fn toy_schedule_has_exactly_the_syncs_its_hazards_need() {
    let plan = toy_mlp::MEGAKERNEL
        .plan(&consts(64, 128), &MegaOptions::default())
        .unwrap();
    let syncs: Vec<(usize, SyncKind, Vec<usize>)> = plan
        .schedule
        .syncs
        .iter()
        .map(|s| (s.stage, s.kind, s.waits.clone()))
        .collect();
    // Stages (0-based): 0 add_rmsnorm, 1 gemv gate, 2 gemv up, 3 silu_mul, 4 gemv down.
    assert_eq!(
        syncs,
        vec![
            (0, SyncKind::Counter, vec![4]), // reads x written by the previous layer's down GEMV
            (1, SyncKind::Counter, vec![0]), // reads h
            (2, SyncKind::Counter, vec![0]), // reads h (independent of the gate GEMV)
            (3, SyncKind::Counter, vec![1, 2]), // reads g and u
            (4, SyncKind::Counter, vec![3]), // reads a; its WAR on x is covered through stage 4
        ]
    );
    let text = toy_mlp::explain(&MegaOptions::default(), 64, 128).unwrap();
    println!("{text}");
    assert!(
        text.contains("RAW: reads `h` written by stage 1 add_rmsnorm"),
        "{text}"
    );
    assert!(
        text.contains(
            "RAW: reads `x` written by stage 5 gemv_BM4_BK64 (the previous iteration of `layer`)"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "WAR: writes `x` read by stage 1 add_rmsnorm (this iteration and the previous iteration of `layer`) [covered by waiting for stage 4 silu_mul]"
        ),
        "{text}"
    );
    // Two gemv bindings, two bodies.
    let names: Vec<&str> = plan
        .resolved
        .stages
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(
        names,
        [
            "add_rmsnorm",
            "gemv_BM8_BK64",
            "gemv_BM4_BK64",
            "silu_mul",
            "gemv_BM4_BK64"
        ]
    );
}

#[test]
fn toy_equals_sequential_launches_in_every_mode() {
    let mut modes = vec![MegaOptions::default()];
    for ctas in [1, 2, 3, 5, 8] {
        modes.push(MegaOptions::default().adversarial(ctas, Policy::RunAhead));
        modes.push(MegaOptions::default().adversarial(ctas, Policy::Shuffled(ctas as u64 * 7 + 1)));
    }
    for (layers, d, f) in [(1, 32, 64), (3, 64, 96), (2, 48, 200)] {
        for (i, opts) in modes.iter().enumerate() {
            let (got, want) = run_both(opts, 1000 + i as u64, layers, d, f);
            assert_eq!(
                got.unwrap(),
                want,
                "layers={layers} D={d} F={f} mode {:?}",
                opts.interp
            );
        }
    }
}

#[test]
fn every_sync_removed_is_caught_by_the_adversarial_interpreter() {
    let plan = toy_mlp::MEGAKERNEL
        .plan(&consts(32, 64), &MegaOptions::default())
        .unwrap();
    for sync in &plan.schedule.syncs {
        let mut caught = None;
        'search: for ctas in [2, 3, 4, 7, 12, 17] {
            for policy in [
                Policy::RunAhead,
                Policy::Shuffled(1),
                Policy::Shuffled(2),
                Policy::Shuffled(3),
                Policy::Shuffled(4),
            ] {
                let mut opts = MegaOptions::default().adversarial(ctas, policy);
                opts.drop_syncs = vec![sync.id];
                let (got, want) = run_both(&opts, 7, 3, 32, 64);
                if got.unwrap() != want {
                    caught = Some((ctas, policy));
                    break 'search;
                }
            }
        }
        assert!(
            caught.is_some(),
            "dropping sync {} (before stage {}) went unnoticed",
            sync.id,
            sync.stage + 1
        );
        eprintln!(
            "sync {} removed: caught with {:?}",
            sync.id,
            caught.unwrap()
        );
        // The sequential mode runs stages in order: it cannot notice.
        let opts = MegaOptions {
            drop_syncs: vec![sync.id],
            ..MegaOptions::default()
        };
        let (got, want) = run_both(&opts, 7, 3, 32, 64);
        assert_eq!(got.unwrap(), want);
    }
}

/// `drop_all_syncs` (`tune --no-waits`) leaves out every sync of whatever schedule is
/// launched: none is left, the adversarial interpreter computes a wrong answer, the
/// sequential one (stages in order) the right one.
#[test]
fn dropping_all_syncs_leaves_none() {
    let none = MegaOptions {
        drop_all_syncs: true,
        ..MegaOptions::default()
    };
    let plan = toy_mlp::MEGAKERNEL.plan(&consts(32, 64), &none).unwrap();
    assert!(plan.schedule.syncs.is_empty());
    let (got, want) = run_both(&none, 7, 3, 32, 64);
    assert_eq!(got.unwrap(), want);
    let adversarial = MegaOptions {
        drop_all_syncs: true,
        ..MegaOptions::default().adversarial(3, Policy::RunAhead)
    };
    let (got, want) = run_both(&adversarial, 7, 3, 32, 64);
    assert_ne!(got.unwrap(), want);
}

#[test]
fn a_broken_sync_is_a_deadlock_naming_the_sync_and_stage() {
    for (sync, stage) in [(0, "stage 1 add_rmsnorm"), (3, "stage 4 silu_mul")] {
        let mut opts = MegaOptions::default().adversarial(4, Policy::RunAhead);
        opts.break_sync = Some(sync);
        let (got, _) = run_both(&opts, 3, 2, 32, 64);
        let e = got.unwrap_err();
        assert!(
            e.contains(&format!("sync {sync} (counter wait"))
                && e.contains(stage)
                && e.contains("never completes"),
            "{e}"
        );
    }
}

#[test]
fn megakernel_misuse_is_a_clear_error() {
    let dev = Device::interpreter();
    let mut rng = Rng::new(1);
    let b = ToyBuffers::random(&dev, &mut rng, 2, 32, 64).unwrap();
    // Windows past the end of a buffer: the interpreter names the stage, argument and layer.
    let e = b
        .megakernel(&dev, &MegaOptions::default(), 3, 32, 64, EPS)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("stage 1 add_rmsnorm at layer = 2")
            && e.contains("&norm_w[layer * D..(layer + 1) * D]"),
        "{e}"
    );
    // Two pointer parameters on one buffer that is written: refused.
    let e = toy_mlp::launch(
        &dev,
        &MegaOptions::default(),
        &b.x,
        &b.x,
        &b.norm_w,
        &b.w_gate,
        &b.w_up,
        &b.w_down,
        &b.h,
        &b.g,
        &b.u,
        &b.a,
        1,
        EPS,
        32,
        64,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("`x` and `res` overlap"), "{e}");
    // A sync that does not exist.
    let opts = MegaOptions {
        drop_syncs: vec![99],
        ..MegaOptions::default()
    };
    assert!(b
        .megakernel(&dev, &opts, 1, 32, 64, EPS)
        .unwrap_err()
        .to_string()
        .contains("no sync 99"));
}

#[test]
fn toy_megakernel_cuda_compiles_with_nvrtc() {
    if let Err(e) = tessera::runtime::device::probe_nvrtc() {
        panic!("{e}\n(run the tests with ./scripts/test.sh, which installs it)");
    }
    for (d, f, warps, profile) in [(256, 512, 4, false), (256, 512, 2, true)] {
        let mut opts = MegaOptions::default().warps(warps);
        opts.profile = profile;
        let src = toy_mlp::MEGAKERNEL
            .cuda_source(&consts(d, f), &opts)
            .unwrap();
        // Profiled: four stamps per stage run and CTA (entered, past the wait, programs
        // run, published).
        assert_eq!(
            src.code
                .contains("p[0] = tsr_t0; p[1] = tsr_t1; p[2] = tsr_t2; p[3] = tsr_now();"),
            profile
        );
        assert_eq!(src.entry, "toy_mlp_mega");
        // A CTA about to wait warms its stage's weights into L2.
        assert!(
            src.code
                .contains("tsr_prefetch_l2(w_gate + ((layer * 512LL) * 256LL)"),
            "the wait prefetch of w_gate"
        );
        // One persistent loop over layers; every stage's programs grid-stride over the CTAs;
        // the waits the schedule asked for.
        for needle in [
            "for (long long layer = 0LL; layer < (long long)n_layers; ++layer)",
            "for (unsigned tsr_p = blockIdx.x; tsr_p < tsr_n; tsr_p += gridDim.x, ++tsr_mine)",
            "if (!tsr_wait(tsr_sync, 7, tsr_done_4, 1u, tsr_step, tsr_timeout_ns, (int)layer, tsr_rec, &tsr_abort)) return;",
            "gemv_BM8_BK64_body(",
        ] {
            assert!(src.code.contains(needle), "missing `{needle}` in:\n{}", src.code);
        }
        for arch in ["sm_80", "sm_90"] {
            if let Err(e) = tessera::runtime::nvrtc::compile(&src.code, arch, false) {
                panic!("D={d} F={f} warps={warps} {arch}:\n{e}");
            }
        }
    }
}

/// `MegaOptions::wait_prefetch_by_kernel`: the stages of the named kernel prefetch that many
/// bytes of each weight window while they wait (0: none), the others the default's.
#[test]
fn wait_prefetch_bytes_by_kernel() {
    let src = |by: Vec<(String, u64)>| {
        let opts = MegaOptions {
            wait_prefetch_by_kernel: by,
            ..MegaOptions::default()
        };
        toy_mlp::MEGAKERNEL
            .cuda_source(&consts(256, 512), &opts)
            .unwrap()
            .code
    };
    let line = |code: &str, w: &str| {
        code.lines()
            .find(|l| l.contains(&format!("tsr_prefetch_l2({w} ")))
            .map(str::to_string)
    };
    let default = src(vec![]);
    let gemv_1k = src(vec![("gemv".into(), 1000)]);
    let gemv_none = src(vec![("gemv".into(), 0)]);
    for w in ["w_gate", "w_up", "w_down"] {
        assert!(line(&default, w).unwrap().contains(", 4194304LL)"), "{w}");
        assert!(line(&gemv_1k, w).unwrap().contains(", 1000LL)"), "{w}");
        assert_eq!(line(&gemv_none, w), None, "{w}");
    }
    for code in [&default, &gemv_1k, &gemv_none] {
        assert!(line(code, "norm_w").unwrap().contains(", 4194304LL)"));
    }
}

/// The chains' C: one with grid barriers counts the barriers it passed (`tsr_bars`), one
/// with counter waits only declares no such counter; both compile with NVRTC.
#[test]
fn chain_megakernels_cuda_compile_with_nvrtc() {
    if let Err(e) = tessera::runtime::device::probe_nvrtc() {
        panic!("{e}\n(run the tests with ./scripts/test.sh, which installs it)");
    }
    use tessera::toy::{chain_barrier, chain_counter};
    let o = MegaOptions::default();
    let barrier = chain_barrier::MEGAKERNEL
        .cuda_source(&chain_barrier::constexprs(1000, 128), &o)
        .unwrap();
    let counter = chain_counter::MEGAKERNEL
        .cuda_source(&chain_counter::constexprs(1000, 128), &o)
        .unwrap();
    assert!(barrier.code.contains("(++tsr_bars) * gridDim.x"));
    assert!(!counter.code.contains("tsr_bars"), "{}", counter.code);
    for src in [barrier, counter] {
        if let Err(e) = tessera::runtime::nvrtc::compile(&src.code, "sm_90", false) {
            panic!("{}:\n{e}", src.entry);
        }
    }
}

/// x, y after `chain_*` with `steps` on the interpreter, in `opts`' mode.
fn chain(
    which: &str,
    opts: &MegaOptions,
    steps: usize,
    n: usize,
    block: usize,
) -> (Vec<f32>, Vec<f32>) {
    use tessera::toy::{chain_barrier, chain_counter, chain_free};
    let dev = Device::interpreter();
    let x0: Vec<f32> = (0..n).map(|i| (i % 7) as f32 - 3.0).collect();
    let x = dev.upload(&x0).unwrap();
    let y = dev.zeros::<f32>(2 * steps * n).unwrap();
    let s = steps as i32;
    match which {
        "counter" => chain_counter::launch(&dev, opts, &x, &y, s, n, block),
        "barrier" => chain_barrier::launch(&dev, opts, &x, &y, s, n, block),
        _ => chain_free::launch(&dev, opts, &x, &y, s, n, block),
    }
    .unwrap();
    (x.to_vec().unwrap(), y.to_vec().unwrap())
}

#[test]
fn chains_schedule_counters_barriers_or_nothing() {
    use tessera::toy::{chain_barrier, chain_counter, chain_free};
    let o = MegaOptions::default();
    let kinds = |p: tessera::runtime::mega::Plan| {
        p.schedule
            .syncs
            .iter()
            .map(|s| (s.stage, s.kind, s.waits.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        kinds(
            chain_counter::MEGAKERNEL
                .plan(&chain_counter::constexprs(1000, 128), &o)
                .unwrap()
        ),
        vec![
            (0, SyncKind::Counter, vec![1]),
            (1, SyncKind::Counter, vec![0])
        ]
    );
    assert_eq!(
        kinds(
            chain_barrier::MEGAKERNEL
                .plan(&chain_barrier::constexprs(1000, 128), &o)
                .unwrap()
        ),
        vec![
            (0, SyncKind::Barrier, vec![]),
            (1, SyncKind::Barrier, vec![])
        ]
    );
    // Disjoint windows of `y`, within an iteration and across iterations: no sync.
    assert_eq!(
        kinds(
            chain_free::MEGAKERNEL
                .plan(&chain_free::constexprs(1000, 128), &o)
                .unwrap()
        ),
        vec![]
    );
}

#[test]
fn chains_equal_their_sequential_runs_under_adversarial_interleavings() {
    for which in ["counter", "barrier", "free"] {
        let want = chain(which, &MegaOptions::default(), 3, 300, 32);
        for ctas in [1, 3, 4, 11] {
            for policy in [Policy::RunAhead, Policy::Shuffled(ctas as u64)] {
                let got = chain(
                    which,
                    &MegaOptions::default().adversarial(ctas, policy),
                    3,
                    300,
                    32,
                );
                assert!(
                    got == want,
                    "{which} ctas={ctas} {policy:?}: results differ"
                );
            }
        }
        // (Removing a sync here goes unnoticed, rightly: program p of each stage only reads
        // what program p of the previous stage wrote, and both run on the same CTA.)
    }
}

#[test]
fn a_broken_barrier_is_a_deadlock_naming_it() {
    let dev = Device::interpreter();
    let x = dev.zeros::<f32>(64).unwrap();
    let y = dev.zeros::<f32>(64).unwrap();
    let mut o = MegaOptions::default().adversarial(3, Policy::RunAhead);
    o.break_sync = Some(1);
    let e = tessera::toy::chain_barrier::launch(&dev, &o, &x, &y, 2, 64, 16)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("sync 1 (grid barrier before stage 2 vector_add) never completes")
            && e.contains("at s = 0"),
        "{e}"
    );
}

/// `toy_mlp::launch_with` (named `Args` and `Consts`) runs the same program as the
/// positional `launch`, bit for bit; and `Consts::bindings` is `constexprs(..)`.
#[test]
fn named_arguments_launch_the_same_program() {
    use tessera::runtime::ptr;
    let dev = Device::interpreter();
    let (layers, d, f) = (2, 32, 64);
    let positional = ToyBuffers::random(&dev, &mut Rng::new(5), layers, d, f).unwrap();
    let named = ToyBuffers::random(&dev, &mut Rng::new(5), layers, d, f).unwrap();
    let opts = MegaOptions::default();
    positional
        .megakernel(&dev, &opts, layers, d, f, EPS)
        .unwrap();
    let b = &named;
    let consts = toy_mlp::Consts { D: d, F: f };
    assert_eq!(consts.bindings()[..], toy_mlp::constexprs(d, f)[..]);
    toy_mlp::launch_with(
        &dev,
        &opts,
        &toy_mlp::Args {
            x: ptr(&b.x),
            res: ptr(&b.res),
            norm_w: ptr(&b.norm_w),
            w_gate: ptr(&b.w_gate),
            w_up: ptr(&b.w_up),
            w_down: ptr(&b.w_down),
            h: ptr(&b.h),
            g: ptr(&b.g),
            u: ptr(&b.u),
            a: ptr(&b.a),
            n_layers: layers as i32,
            eps: EPS,
        },
        &consts,
    )
    .unwrap();
    let bits = |buf: &tessera::runtime::Buffer<tessera::runtime::bf16>| {
        buf.to_vec()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect::<Vec<_>>()
    };
    assert_eq!(bits(&positional.x), bits(&named.x));
    assert_ne!(
        bits(&named.x),
        bits(
            &ToyBuffers::random(&dev, &mut Rng::new(5), layers, d, f)
                .unwrap()
                .x
        ),
        "the launch changed x"
    );
}
