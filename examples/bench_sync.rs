//! What a sync costs inside a persistent kernel, and what a megakernel saves over launches.
//! Needs a GPU; prints JSON on stdout. Run: `cargo run --release --example bench_sync`.
//!
//! 1. Sync cost, one CTA per SM: the same 2·S elementwise stages (one program per CTA) as
//!    one persistent launch with no sync (`chain_free`: every stage writes its own window,
//!    proven disjoint), with a counter wait before every stage (`chain_counter`), and with a
//!    grid barrier before every stage (`chain_barrier`). Per-sync cost = the difference / 2·S.
//! 2. The dependent chain of 2·S stages three ways: one megakernel (counter waits), 2·S
//!    separate launches, and a CUDA graph of those 2·S launches.
//! 3. The toy MLP (28 layers, D=1024, F=3072: 5 kernels per layer, narrow norm stages whose
//!    idle CTAs prefetch the next weights) the same three ways.
use std::time::Instant;
use tessera::check::Rng;
use tessera::kernels::vector_add::vector_add;
use tessera::runtime::mega::{graph, MegaOptions};
use tessera::runtime::{Device, Error, Launch};
use tessera::toy::{chain_barrier, chain_counter, chain_free, toy_sequential, ToyBuffers};

const BLOCK: usize = 256;

/// Mean wall time of `f` over `reps` runs after `warm` runs, in ms (the device is drained
/// before and after).
fn time(
    dev: &Device,
    warm: usize,
    reps: usize,
    mut f: impl FnMut() -> Result<(), Error>,
) -> Result<f64, Error> {
    for _ in 0..warm {
        f()?;
    }
    dev.synchronize()?;
    let t = Instant::now();
    for _ in 0..reps {
        f()?;
    }
    dev.synchronize()?;
    Ok(t.elapsed().as_secs_f64() * 1e3 / reps as f64)
}

fn main() -> Result<(), Error> {
    let base = Device::cuda(0)?;
    let dev = graph::capturable(&base)?;
    let sms = graph::sm_count(&dev).expect("a GPU");
    let n = sms as usize * BLOCK; // one program per CTA
    let steps: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000);
    let stages = 2 * steps;
    let x0: Vec<f32> = (0..n).map(|i| (i % 7) as f32 * 1e-3).collect();
    let x = dev.upload(&x0)?;
    let y = dev.zeros::<f32>(stages * n)?;
    let opts = MegaOptions {
        ctas: Some(sms),
        check: false,
        ..MegaOptions::default()
    };
    let s = steps as i32;
    let free = time(&dev, 2, 10, || {
        chain_free::launch(&dev, &opts, &x, &y, s, n, BLOCK)
    })?;
    let counter = time(&dev, 2, 10, || {
        chain_counter::launch(&dev, &opts, &x, &y, s, n, BLOCK)
    })?;
    let barrier = time(&dev, 2, 10, || {
        chain_barrier::launch(&dev, &opts, &x, &y, s, n, BLOCK)
    })?;
    // The check is off above: run each once with it on, so a timeout cannot hide.
    let mut checked = opts.clone();
    checked.check = true;
    chain_counter::launch(&dev, &checked, &x, &y, s, n, BLOCK)?;
    chain_barrier::launch(&dev, &checked, &x, &y, s, n, BLOCK)?;
    // The chain as separate launches, and as a CUDA graph of them.
    let g = Launch::grid(sms);
    let launches = |k: usize| -> Result<(), Error> {
        for _ in 0..k {
            vector_add::launch(&dev, &g, &x, &x, &y, n as i32, BLOCK)?;
            vector_add::launch(&dev, &g, &y, &y, &x, n as i32, BLOCK)?;
        }
        Ok(())
    };
    let separate = time(&dev, 1, 5, || launches(steps))?;
    let cg = graph::capture(&dev, || launches(steps))?;
    let graphed = time(&dev, 2, 10, || cg.launch())?;
    // The toy: a realistic mix of narrow and wide stages.
    let (layers, d, f) = (28usize, 1024usize, 3072usize);
    let toy = ToyBuffers::random(&dev, &mut Rng::new(1), layers, d, f)?;
    let topts = MegaOptions {
        check: false,
        ..MegaOptions::default()
    };
    let toy_mega = time(&dev, 2, 10, || {
        toy.megakernel(&dev, &topts, layers, d, f, 1e-6)
    })?;
    // The persistent grid's size and block size, swept.
    let mut sweep = vec![];
    for warps in [4u32, 8] {
        for per_sm in [1u32, 2, 4, 8, 0] {
            let mut o = topts.clone().warps(warps);
            o.ctas = if per_sm == 0 {
                None
            } else {
                Some(per_sm * sms)
            };
            let label = format!(
                "warps={warps} ctas={}",
                o.ctas.map_or("max".to_string(), |c| c.to_string())
            );
            match time(&dev, 1, 5, || toy.megakernel(&dev, &o, layers, d, f, 1e-6)) {
                Ok(ms) => sweep.push(serde_json::json!({"config": label, "ms": ms})),
                Err(e) => sweep.push(serde_json::json!({"config": label, "error": e.to_string()})),
            }
        }
    }
    let toy_launches = time(&dev, 1, 5, || {
        toy_sequential(&dev, &toy, layers, d, f, 1e-6)
    })?;
    let tg = graph::capture(&dev, || toy_sequential(&dev, &toy, layers, d, f, 1e-6))?;
    let toy_graph = time(&dev, 2, 10, || tg.launch())?;
    let weight_mb = (layers * (d + 3 * d * f) * 2) as f64 / 1e6;
    let us = |ms: f64| ms * 1e3;
    println!(
        "{}",
        serde_json::json!({
            "device": base.describe(),
            "ctas": sms,
            "block_threads": 128,
            "stages": stages,
            "sync_us": {
                "counter_wait": us(counter - free) / stages as f64,
                "grid_barrier": us(barrier - free) / stages as f64,
            },
            "chain_ms": {
                "megakernel_no_sync": free,
                "megakernel_counter_waits": counter,
                "megakernel_grid_barriers": barrier,
                "separate_launches": separate,
                "cuda_graph": graphed,
            },
            "toy_mlp": {
                "layers": layers, "d": d, "f": f, "weights_mb": weight_mb,
                "megakernel_ms": toy_mega,
                "megakernel_sweep": sweep,
                "separate_launches_ms": toy_launches,
                "cuda_graph_ms": toy_graph,
            },
            "per_stage_us": {
                "megakernel_counter_waits": us(counter) / stages as f64,
                "megakernel_grid_barriers": us(barrier) / stages as f64,
                "separate_launches": us(separate) / stages as f64,
                "cuda_graph": us(graphed) / stages as f64,
            }
        })
    );
    Ok(())
}
