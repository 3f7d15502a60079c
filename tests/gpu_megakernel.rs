//! On a GPU: the toy megakernel (one cooperative launch) equals the same kernels launched
//! one by one, for several shapes and grid sizes; the chains with counters, barriers and
//! no sync equal the interpreter; the watchdog turns a broken wait into an error that names
//! the sync and the stage (and the device stays usable); an oversized grid is refused
//! before launch. Run on the device with `--ignored`.
use tessera::check::{compare, to_f32, Rng};
use tessera::runtime::mega::MegaOptions;
use tessera::runtime::Device;
use tessera::toy::{chain_barrier, chain_counter, chain_free, toy_sequential, ToyBuffers};

fn gpu() -> Device {
    Device::cuda(0).unwrap_or_else(|e| panic!("these tests need a CUDA GPU: {e}"))
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_toy_megakernel_equals_sequential_launches() {
    let dev = gpu();
    let cpu = Device::interpreter();
    let seed = Rng::seed_from_env();
    eprintln!("seed {seed}");
    for (layers, d, f) in [(1, 64, 128), (4, 256, 512), (3, 1024, 3072), (2, 96, 200)] {
        // (CTAs, warps)
        for (ctas, warps) in [(None, 4), (Some(3), 4), (Some(1), 2), (None, 8)] {
            let mut rng = Rng::new(seed);
            let reference = ToyBuffers::random(&dev, &mut rng, layers, d, f).unwrap();
            let mega = reference.copy_to(&dev).unwrap();
            let on_cpu = reference.copy_to(&cpu).unwrap();
            toy_sequential(&dev, &reference, layers, d, f, 1e-6).unwrap();
            toy_sequential(&cpu, &on_cpu, layers, d, f, 1e-6).unwrap();
            let mut opts = MegaOptions::default().warps(warps);
            opts.ctas = ctas;
            mega.megakernel(&dev, &opts, layers, d, f, 1e-6).unwrap();
            let (got, want, cpu_want) = (
                to_f32(&mega.outputs().unwrap()),
                to_f32(&reference.outputs().unwrap()),
                to_f32(&on_cpu.outputs().unwrap()),
            );
            let what = format!("layers={layers} D={d} F={f} ctas={ctas:?} warps={warps}");
            compare(&got, &want, 2e-2, 2e-2)
                .unwrap_or_else(|e| panic!("{what}: megakernel vs launches: {e}"));
            compare(&got, &cpu_want, 3e-2, 3e-2)
                .unwrap_or_else(|e| panic!("{what}: megakernel vs interpreter: {e}"));
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_chains_equal_the_interpreter() {
    let (dev, cpu) = (gpu(), Device::interpreter());
    let (steps, n, block) = (5usize, 4096usize, 128usize);
    let x0: Vec<f32> = (0..n).map(|i| (i % 7) as f32 - 3.0).collect();
    for which in ["counter", "barrier", "free"] {
        for ctas in [None, Some(2)] {
            let mut out = vec![];
            for d in [&dev, &cpu] {
                let (x, y) = (
                    d.upload(&x0).unwrap(),
                    d.zeros::<f32>(2 * steps * n).unwrap(),
                );
                let o = MegaOptions {
                    ctas,
                    ..MegaOptions::default()
                };
                let s = steps as i32;
                match which {
                    "counter" => chain_counter::launch(d, &o, &x, &y, s, n, block),
                    "barrier" => chain_barrier::launch(d, &o, &x, &y, s, n, block),
                    _ => chain_free::launch(d, &o, &x, &y, s, n, block),
                }
                .unwrap_or_else(|e| panic!("{which}: {e}"));
                out.push((x.to_vec().unwrap(), y.to_vec().unwrap()));
            }
            assert!(
                out[0] == out[1],
                "{which} ctas={ctas:?}: GPU and interpreter differ"
            );
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_watchdog_names_the_broken_sync_and_stage() {
    let dev = gpu();
    let mut rng = Rng::new(5);
    let b = ToyBuffers::random(&dev, &mut rng, 3, 256, 512).unwrap();
    // A counter wait that can never complete.
    let opts = MegaOptions {
        timeout_ms: 300,
        break_sync: Some(3),
        ..MegaOptions::default()
    };
    let t = std::time::Instant::now();
    let e = b
        .megakernel(&dev, &opts, 3, 256, 512, 1e-6)
        .unwrap_err()
        .to_string();
    eprintln!("{e}");
    assert!(
        e.contains("sync 3 (counter wait on stage 2 gemv_BM8_BK64, stage 3 gemv_BM4_BK64 before stage 4 silu_mul) timed out after 300 ms")
            && e.contains("at layer = 0"),
        "{e}"
    );
    assert!(
        t.elapsed().as_secs() < 20,
        "the watchdog took {:?}",
        t.elapsed()
    );
    // A grid barrier that can never complete.
    let (x, y) = (
        dev.zeros::<f32>(4096).unwrap(),
        dev.zeros::<f32>(4096).unwrap(),
    );
    let o = MegaOptions {
        timeout_ms: 300,
        break_sync: Some(1),
        ..MegaOptions::default()
    };
    let e = chain_barrier::launch(&dev, &o, &x, &y, 3, 4096, 128)
        .unwrap_err()
        .to_string();
    eprintln!("{e}");
    assert!(
        e.contains("sync 1 (grid barrier before stage 2 vector_add) timed out")
            && e.contains("at s = 0"),
        "{e}"
    );
    // The device is still usable, and the same megakernel, unbroken, still right.
    let mut rng = Rng::new(5);
    let reference = ToyBuffers::random(&dev, &mut rng, 3, 256, 512).unwrap();
    let mega = reference.copy_to(&dev).unwrap();
    toy_sequential(&dev, &reference, 3, 256, 512, 1e-6).unwrap();
    mega.megakernel(&dev, &MegaOptions::default(), 3, 256, 512, 1e-6)
        .unwrap();
    compare(
        &to_f32(&mega.outputs().unwrap()),
        &to_f32(&reference.outputs().unwrap()),
        2e-2,
        2e-2,
    )
    .unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_a_grid_that_cannot_be_co_resident_is_refused_before_launch() {
    let dev = gpu();
    let (x, y) = (
        dev.zeros::<f32>(4096).unwrap(),
        dev.zeros::<f32>(4096).unwrap(),
    );
    let o = MegaOptions {
        ctas: Some(1_000_000),
        ..MegaOptions::default()
    };
    let e = chain_counter::launch(&dev, &o, &x, &y, 1, 4096, 128)
        .unwrap_err()
        .to_string();
    assert!(e.contains("cannot be co-resident"), "{e}");
}
