//! `tessera bench` on the interpreter: its plan, table and plot, and the bandwidth probe.
use tessera::runtime::{nvrtc, ConstVal, Device};

/// `tessera bench`'s logic on the interpreter (no floor without a GPU), and its bandwidth
/// probe's sums.
#[test]
fn bench_runs_and_its_probe_sums() {
    let cfg = model::embedded::config();
    let w = model::embedded::weights(&cfg);
    let plan = tessera::bench::BenchPlan {
        positions: vec![1, 7, 100_000],
        tokens: 2,
        probe_bytes: 1 << 20,
        kernels_engine: true,
        prompts: vec![9, 100_000],
        prefill_repeats: 2,
        prefill_chunk: Some(4),
        stepwise_max: 9,
    };
    let r = tessera::bench::run("embedded", cfg, &w, Device::interpreter(), &plan, None).unwrap();
    assert_eq!(r.rows.iter().map(|r| r.context).collect::<Vec<_>>(), [1, 7]);
    // Time to first token at the prompt lengths that fit, in chunks of 4.
    assert_eq!(r.prefill_chunk, 4);
    assert_eq!(r.prefill_rows.len(), 1);
    let p = &r.prefill_rows[0];
    assert_eq!((p.prompt_tokens, p.runs_ms.len()), (9, 2));
    assert!(p.ttft_ms > 0.0 && p.prompt_tokens_per_s > 0.0 && p.flops > 0.0);
    assert!(p.floor_ms.is_none() && p.hf_ms.is_none());
    // The same prompt one decode step per token, beside it (--stepwise-max 9).
    assert!(p.stepwise_ms.is_some_and(|ms| ms > 0.0) && p.x_stepwise.is_some());
    // The kernels engine timed at every measured context, beside the megakernel.
    assert!(r
        .rows
        .iter()
        .all(|r| r.kernels_ms_per_token.is_some_and(|ms| ms > 0.0) && r.x_kernels.is_some()));
    assert_eq!(
        r.skipped.len(),
        2,
        "100000 is past the embedded model's context, as a position and as a prompt: {:?}",
        r.skipped
    );
    assert!(r.rows.iter().all(|r| r.floor_ms.is_none()));
    let table = tessera::bench::table(&r);
    assert!(table.contains("| 7 |"), "{table}");
    assert!(
        table.contains("Time to first token") && table.contains("| 9 |"),
        "{table}"
    );
    // --plot: both charts, with the floors and transformers' curves where there are values.
    let svg = tessera::bench::plot::svg(&r).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("time to first token"),
        "{svg}"
    );
    assert!(!svg.contains("bandwidth floor"), "no floor without a GPU");
    let mut with_peers = r.clone();
    for row in &mut with_peers.rows {
        row.floor_ms = Some(row.ms_per_token / 2.0);
        row.hf_eager_ms = Some(row.ms_per_token * 3.0);
    }
    with_peers.prefill_rows[0].hf_ms = Some(1.0);
    let svg = tessera::bench::plot::svg(&with_peers).unwrap();
    for name in [
        "bandwidth floor",
        "transformers eager",
        "transformers (bf16, sdpa)",
    ] {
        assert!(svg.contains(name), "{name} missing from the plot");
    }
    assert!(
        !svg.contains("transformers compiled"),
        "no compiled peer given"
    );

    let dev = Device::interpreter();
    let n: usize = 5000;
    let x: Vec<tessera::runtime::bf16> = (0..n)
        .map(|i| tessera::runtime::bf16::from_f32((i % 7) as f32))
        .collect();
    let xb = dev.upload(&x).unwrap();
    let (block, steps) = (64usize, 4usize);
    let programs = n.div_ceil(block * steps);
    let out = dev.zeros::<f32>(programs).unwrap();
    tessera::bench::stream_sum::launch(
        &dev,
        &tessera::runtime::Launch::grid(programs as u32),
        &xb,
        &out,
        n as i32,
        block,
        steps,
    )
    .unwrap();
    let total: f32 = out.to_vec().unwrap().iter().sum();
    assert_eq!(total, (0..n).map(|i| (i % 7) as f32).sum::<f32>());
}

#[test]
fn bandwidth_probe_compiles_with_nvrtc() {
    if let Err(e) = tessera::runtime::device::probe_nvrtc() {
        panic!("{e}\n(run the tests with ./scripts/test.sh, which installs it)");
    }
    let src = tessera::bench::stream_sum::KERNEL
        .cuda_source(
            &[("BLOCK", ConstVal::Int(2048)), ("STEPS", ConstVal::Int(8))],
            8,
        )
        .unwrap();
    nvrtc::compile(&src.code, "sm_90", false).unwrap();
}

/// `tessera tune --no-waits` (a diagnostic: every sync of the step left out) on the
/// interpreter: the run drops exactly the schedule's syncs (an id it does not have is an
/// error) and times the step; with `--launch-only` also the steps launched back to back.
#[test]
fn tune_without_the_waits_drops_every_sync() {
    let cfg = model::embedded::config();
    let w = model::embedded::weights(&cfg);
    let run = |no_waits: bool| {
        let timing = tessera::bench::tune::Timing {
            position: 3,
            tokens: 3,
            profile: false,
            no_waits,
            launch_only: no_waits,
            watchdog_ms: 2000,
        };
        let knobs = [tessera::bench::tune::Knobs::default()];
        let rows = tessera::bench::tune::run(&cfg, &w, &Device::interpreter(), &knobs, timing);
        rows.unwrap().remove(0)
    };
    for no_waits in [false, true] {
        let row = run(no_waits);
        assert_eq!(row.error, None, "no_waits {no_waits}");
        assert!(row.ms_per_token.is_some_and(|ms| ms > 0.0));
        // (`--launch-only` rides along with the waits left out.)
        assert_eq!(
            row.ms_per_launch_unread.is_some_and(|ms| ms > 0.0),
            no_waits
        );
    }
}

/// `tessera tune --o-heads-tiles 1,2,0` on the interpreter: every configuration of o_proj
/// per head's row blocks a program runs and decodes the first configuration's tokens (that
/// a retune takes the count: `megakernel_engine.rs`'s tests), and the table has its column.
#[test]
fn tune_sweeps_o_proj_per_head_blocks() {
    let cfg = model::embedded::config();
    let w = model::embedded::weights(&cfg);
    let timing = tessera::bench::tune::Timing {
        position: 3,
        tokens: 3,
        profile: false,
        no_waits: false,
        launch_only: false,
        watchdog_ms: 2000,
    };
    let knobs = [1, 2, 0].map(|o_heads_tiles| tessera::bench::tune::Knobs {
        o_heads_tiles: Some(o_heads_tiles),
        ..Default::default()
    });
    let rows = tessera::bench::tune::run(&cfg, &w, &Device::interpreter(), &knobs, timing);
    for row in rows.unwrap() {
        assert_eq!(row.error, None, "{:?}", row.knobs);
        assert_eq!(row.same_tokens, Some(true), "{:?}", row.knobs);
    }
    let table = tessera::bench::tune::table(&[]);
    assert!(table.contains("| o_proj per head tiles |"), "{table}");
}
