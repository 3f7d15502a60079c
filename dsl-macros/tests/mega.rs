//! `#[megakernel]` end to end on small kernels: what the macro builds, and the scheduler's
//! rules (disjoint windows, carried hazards, barrier promotion and hints, nested loops),
//! checked through the schedule and the interpreter.
#![allow(clippy::too_many_arguments)]
use dsl_runtime::mega::{MegaOptions, Policy, SyncKind};
use dsl_runtime::prelude::*;
use dsl_runtime::Device;

/// y[i] = x[i] + 1 over n elements.
#[kernel]
fn inc(x: Ptr<f32>, y: Ptr<f32>, n: i32, #[constexpr] B: usize) {
    let offs = program_id(0) * B + arange(0, B);
    let m = offs < n;
    store(y + offs, load(x + offs, m, 0.0) + 1.0, m);
}

/// y[i] = v.
#[kernel]
fn fill(y: Ptr<f32>, v: f32, n: i32, #[constexpr] B: usize) {
    let offs = program_id(0) * B + arange(0, B);
    store(y + offs, zeros([B], f32) + v, offs < n);
}

/// y[0] = sum of x[0..n] (one program: every element of y depends on all of x).
#[kernel]
fn total(x: Ptr<f32>, y: Ptr<f32>, n: i32, #[constexpr] B: usize) {
    let offs = arange(0, B);
    let s = sum(load(x + offs, offs < n, 0.0), 0);
    store(y + arange(0, 1), zeros([1], f32) + s, arange(0, 1) < 1);
}

/// out = a + b + c + d + e (five inputs).
#[kernel]
fn sum5(
    a: Ptr<f32>,
    b: Ptr<f32>,
    c: Ptr<f32>,
    d: Ptr<f32>,
    e: Ptr<f32>,
    out: Ptr<f32>,
    n: i32,
    #[constexpr] B: usize,
) {
    let offs = program_id(0) * B + arange(0, B);
    let m = offs < n;
    let v = load(a + offs, m, 0.0)
        + load(b + offs, m, 0.0)
        + load(c + offs, m, 0.0)
        + load(d + offs, m, 0.0)
        + load(e + offs, m, 0.0);
    store(out + offs, v, m);
}

/// Each iteration writes its own window of `y`: no sync (proved disjoint across
/// iterations); then one stage reads all of `y`.
#[megakernel]
fn windows(x: Ptr<f32>, y: Ptr<f32>, z: Ptr<f32>, steps: i32, #[constexpr] N: usize) {
    for i in 0..steps {
        inc(grid(cdiv(N, 32)), x, &y[i * N..(i + 1) * N], N, 32);
    }
    total(grid(1), y, z, N, 128);
}

/// Overlapping windows (each writes two blocks, the next starts one block later): the
/// carried WAW needs a sync.
#[megakernel]
fn overlapping(x: Ptr<f32>, y: Ptr<f32>, steps: i32, #[constexpr] N: usize) {
    for i in 0..steps {
        inc(grid(cdiv(2 * N, 32)), x, &y[i * N..(i + 2) * N], 2 * N, 32);
    }
}

/// A run-time stride: disjointness cannot be proved (the stride could be 0).
#[megakernel]
fn runtime_stride(x: Ptr<f32>, y: Ptr<f32>, steps: i32, m: i32, #[constexpr] N: usize) {
    for i in 0..steps {
        inc(grid(cdiv(N, 32)), x, &y[i * m..i * m + N], N, 32);
    }
}

/// Five independent producers, one consumer of all five: a barrier beats five counters.
#[megakernel]
fn fan_in(
    a: Ptr<f32>,
    b: Ptr<f32>,
    c: Ptr<f32>,
    d: Ptr<f32>,
    e: Ptr<f32>,
    out: Ptr<f32>,
    #[constexpr] N: usize,
) {
    fill(grid(cdiv(N, 32)), a, 1.0, N, 32);
    fill(grid(cdiv(N, 32)), b, 2.0, N, 32);
    fill(grid(cdiv(N, 32)), c, 3.0, N, 32);
    fill(grid(cdiv(N, 32)), d, 4.0, N, 32);
    fill(grid(cdiv(N, 32)), e, 5.0, N, 32);
    sum5(grid(cdiv(N, 32)), a, b, c, d, e, out, N, 32);
    // Reads `a` (a fill wrote it, before the barrier: done) and overwrites `out` (sum5 wrote
    // it, after the barrier): a wait on sum5 alone.
    inc(grid(cdiv(N, 32)), a, out, N, 32);
}

/// `#[barrier]` on a stage with no hazard; the stage after it then needs none either.
#[megakernel]
fn hinted(x: Ptr<f32>, y: Ptr<f32>, z: Ptr<f32>, #[constexpr] N: usize) {
    inc(grid(cdiv(N, 32)), x, y, N, 32);
    #[barrier]
    fill(grid(cdiv(N, 32)), z, 7.0, N, 32);
    inc(grid(cdiv(N, 32)), y, x, N, 32);
}

/// Nested loops: the inner window is disjoint within one outer iteration but the next outer
/// iteration rewrites the same windows (an inner variable from a finished loop is unknown).
#[megakernel]
fn nested(x: Ptr<f32>, y: Ptr<f32>, z: Ptr<f32>, outer: i32, #[constexpr] N: usize) {
    for o in 0..outer {
        for i in 0..4 {
            let w = &y[i * N..(i + 1) * N];
            inc(grid(cdiv(N, 32)), x, w, N, 32);
        }
        total(grid(1), y, z, 4 * N, 512);
    }
}

/// A variant chosen by a bool constexpr: `resolve` keeps one branch (`else if` chains too),
/// so the other's stages, syncs and loop do not exist.
#[megakernel]
fn variant(
    x: Ptr<f32>,
    y: Ptr<f32>,
    z: Ptr<f32>,
    #[constexpr] TWICE: bool,
    #[constexpr] FILL: bool,
    #[constexpr] N: usize,
) {
    if TWICE {
        for i in 0..2 {
            inc(grid(cdiv(N, 32)), x, y, N, 32);
            inc(grid(cdiv(N, 32)), y, x, N, 32);
        }
    } else if FILL {
        fill(grid(cdiv(N, 32)), x, 7.0, N, 32);
    } else {
        inc(grid(cdiv(N, 32)), x, y, N, 32);
    }
    total(grid(1), x, z, N, 512);
}

fn syncs(p: dsl_runtime::mega::Plan) -> Vec<(usize, SyncKind, Vec<usize>)> {
    p.schedule
        .syncs
        .iter()
        .map(|s| (s.stage, s.kind, s.waits.clone()))
        .collect()
}

#[test]
fn disjoint_windows_need_no_sync_and_a_reader_waits_for_all_of_them() {
    let p = windows::MEGAKERNEL
        .plan(&windows::constexprs(64), &MegaOptions::default())
        .unwrap();
    // Stage 0 (the loop) is free; the total waits for stage 0's counter (all its runs).
    assert_eq!(syncs(p), vec![(1, SyncKind::Counter, vec![0])]);
    let dev = Device::interpreter();
    for opts in [
        MegaOptions::default(),
        MegaOptions::default().adversarial(3, Policy::RunAhead),
        MegaOptions::default().adversarial(5, Policy::Shuffled(9)),
    ] {
        let x = dev
            .upload(&(0..64).map(|i| i as f32).collect::<Vec<_>>())
            .unwrap();
        let (y, z) = (
            dev.zeros::<f32>(3 * 64).unwrap(),
            dev.zeros::<f32>(1).unwrap(),
        );
        windows::launch(&dev, &opts, &x, &y, &z, 3, 64).unwrap();
        // y[0..64] = x + 1: total = 2016 + 64.
        assert_eq!(z.to_vec().unwrap(), vec![2080.0], "{:?}", opts.interp);
    }
}

#[test]
fn an_if_on_constexprs_keeps_one_branch() {
    let dev = Device::interpreter();
    // (TWICE, FILL): stages (call sites), and z = the total of x after them (x = 0..64 at
    // first: 2016).
    for (twice, fill, stages, want) in [
        (true, false, 3, 2016.0 + 4.0 * 64.0), // x += 2 per iteration (through y), two of them
        (false, true, 2, 7.0 * 64.0),
        (false, false, 2, 2016.0),
    ] {
        let p = variant::MEGAKERNEL
            .plan(
                &variant::constexprs(twice, fill, 64),
                &MegaOptions::default(),
            )
            .unwrap();
        assert_eq!(p.resolved.stages.len(), stages, "TWICE={twice} FILL={fill}");
        let x = dev
            .upload(&(0..64).map(|i| i as f32).collect::<Vec<_>>())
            .unwrap();
        let (y, z) = (dev.zeros::<f32>(64).unwrap(), dev.zeros::<f32>(1).unwrap());
        variant::launch(&dev, &MegaOptions::default(), &x, &y, &z, twice, fill, 64).unwrap();
        assert_eq!(z.to_vec().unwrap(), vec![want], "TWICE={twice} FILL={fill}");
    }
    let text = variant::explain(&MegaOptions::default(), false, true, 64).unwrap();
    assert!(
        text.contains("stage 1 fill") && !text.contains("inc"),
        "{text}"
    );
}

#[test]
fn overlapping_windows_and_runtime_strides_are_conservative() {
    let p = overlapping::MEGAKERNEL
        .plan(&overlapping::constexprs(64), &MegaOptions::default())
        .unwrap();
    assert_eq!(syncs(p), vec![(0, SyncKind::Counter, vec![0])]);
    let text = overlapping::explain(&MegaOptions::default(), 64).unwrap();
    assert!(text.contains("WAW: writes `y` also written by stage 1 inc (its run in the previous iteration of `i`)"), "{text}");
    let p = runtime_stride::MEGAKERNEL
        .plan(&runtime_stride::constexprs(64), &MegaOptions::default())
        .unwrap();
    assert_eq!(syncs(p), vec![(0, SyncKind::Counter, vec![0])]);
}

#[test]
fn many_producers_make_a_barrier_which_clears_the_state() {
    let p = fan_in::MEGAKERNEL
        .plan(&fan_in::constexprs(64), &MegaOptions::default())
        .unwrap();
    assert_eq!(
        syncs(p),
        vec![
            (5, SyncKind::Barrier, vec![]),
            (6, SyncKind::Counter, vec![5])
        ]
    );
    let dev = Device::interpreter();
    let bufs: Vec<_> = (0..6).map(|_| dev.zeros::<f32>(64).unwrap()).collect();
    fan_in::launch(
        &dev,
        &MegaOptions::default().adversarial(4, Policy::RunAhead),
        &bufs[0],
        &bufs[1],
        &bufs[2],
        &bufs[3],
        &bufs[4],
        &bufs[5],
        64,
    )
    .unwrap();
    assert_eq!(bufs[5].to_vec().unwrap(), vec![2.0; 64]); // out = a + 1 after the barrier
}

#[test]
fn a_barrier_hint_is_obeyed_and_clears_the_state() {
    let p = hinted::MEGAKERNEL
        .plan(&hinted::constexprs(64), &MegaOptions::default())
        .unwrap();
    assert_eq!(syncs(p), vec![(1, SyncKind::Barrier, vec![])]);
    let text = hinted::explain(&MegaOptions::default(), 64).unwrap();
    assert!(text.contains("sync 0: grid barrier (#[barrier])"), "{text}");
}

#[test]
fn nested_loops_carry_hazards_from_finished_inner_loops() {
    let p = nested::MEGAKERNEL
        .plan(&nested::constexprs(32), &MegaOptions::default())
        .unwrap();
    // The inner stage: free within one outer iteration (windows i are disjoint), but the
    // next outer iteration rewrites `y` that `total` read: a WAR covered by waiting on it.
    // `total` waits for the inner stage.
    assert_eq!(
        syncs(p),
        vec![
            (0, SyncKind::Counter, vec![1]),
            (1, SyncKind::Counter, vec![0])
        ]
    );
    let dev = Device::interpreter();
    let x = dev.upload(&[1.0f32; 32]).unwrap();
    for opts in [
        MegaOptions::default(),
        MegaOptions::default().adversarial(4, Policy::RunAhead),
    ] {
        let (y, z) = (
            dev.zeros::<f32>(4 * 32).unwrap(),
            dev.zeros::<f32>(1).unwrap(),
        );
        nested::launch(&dev, &opts, &x, &y, &z, 3, 32).unwrap();
        assert_eq!(z.to_vec().unwrap(), vec![256.0]);
    }
}

#[test]
fn the_macro_records_lines_windows_and_arguments() {
    let prog = windows::MEGAKERNEL.program();
    assert_eq!(prog.name, "windows");
    assert!(prog.file.ends_with("mega.rs"), "{}", prog.file);
    let p = windows::MEGAKERNEL
        .plan(&windows::constexprs(64), &MegaOptions::default())
        .unwrap();
    let st = &p.resolved.stages[0];
    assert_eq!(st.name, "inc");
    assert_eq!(p.resolved.show_arg(&st.args[1]), "&y[i * N..(i + 1) * N]");
    assert_eq!(st.loops, vec![0]);
    assert!(st.line > 40, "line {}", st.line);
}
