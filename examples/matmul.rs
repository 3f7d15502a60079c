//! C = silu(A·B + bias) as bf16, on tensor cores: `dot` in a K loop whose loads are
//! pipelined `num_stages` deep, a fused epilogue, grouped program order for L2 reuse, and
//! autotuning over tile sizes, warps and stages (src/kernels/matmul.rs).
//!
//! Run: `cargo run --release --example matmul` (self-check at an odd size, every edge
//! masked), `-- --explain` (the CUDA C, which says which `dot` path was chosen and why),
//! `-- --bench M N K` (GPU: the autotuned kernel's median time and TFLOP/s as one JSON
//! line, checked on sampled elements against f64).
use std::time::Instant;
use tessera::check::{run_example, Rng};
use tessera::kernels::matmul::{self as mmk, matmul, matmul_ref, rel_frob};
use tessera::runtime::{bf16, Config, ConstVal, Device, Launch, Tune};

/// The tuning space: tiles, warps and pipelining depth (Triton's matmul tutorial's, for
/// mma.sync).
fn configs() -> Vec<Config> {
    let c = |bm: i64, bn: i64, bk: i64, w: u32, s: u32| {
        Config::new(
            &[
                ("BM", ConstVal::Int(bm)),
                ("BN", ConstVal::Int(bn)),
                ("BK", ConstVal::Int(bk)),
                ("GROUP_M", ConstVal::Int(8)),
            ],
            w,
        )
        .stages(s)
    };
    // BK = 64 on 8 warps (Triton's mma.sync tile) fits in registers since the ldmatrix
    // addresses are per-lane bases and the warp grid is square (docs/PERF.md, session 13).
    vec![
        c(128, 256, 32, 8, 3),
        c(128, 128, 32, 4, 4),
        c(128, 128, 64, 4, 3),
        c(256, 128, 32, 8, 3),
        c(128, 256, 64, 8, 3),
        c(256, 128, 64, 8, 3),
    ]
}

fn tune(m: usize, n: usize, k: usize) -> Tune {
    Tune {
        configs: configs(),
        key: format!("{m}x{n}x{k}"),
        grid: Launch::grid_fn(move |c| {
            [
                mmk::grid(m, n, c.int("BM") as usize, c.int("BN") as usize),
                1,
                1,
            ]
        })
        .grid,
    }
}

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--bench") {
        let dims: Vec<usize> = args[i + 1..]
            .iter()
            .take(3)
            .filter_map(|x| x.parse().ok())
            .collect();
        return match bench(dims[0], dims[1], dims[2]) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("matmul bench: {e}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    let explain = configs()[1].clone();
    run_example(
        &matmul::KERNEL,
        &explain.constexprs,
        explain.num_warps,
        |dev, rng| {
            // Odd sizes: every edge of every tile is masked.
            let (m, n, k) = if dev.is_cuda() {
                (1000, 777, 1234)
            } else {
                (200, 130, 150)
            };
            let (a, b, bias) = (rng.vec_bf16(m * k), rng.vec_bf16(k * n), rng.vec_f32(n));
            let e = |x: tessera::runtime::Error| x.to_string();
            let (da, db, dbias) = (
                dev.upload(&a).map_err(e)?,
                dev.upload(&b).map_err(e)?,
                dev.upload(&bias).map_err(e)?,
            );
            let dc = dev.zeros::<bf16>(m * n).map_err(e)?;
            matmul::autotune(
                dev,
                &tune(m, n, k),
                &da,
                &db,
                &dbias,
                &dc,
                m as i32,
                n as i32,
                k as i32,
            )
            .map_err(e)?;
            let got: Vec<f32> = dc.to_vec().map_err(e)?.iter().map(|x| x.to_f32()).collect();
            let err = rel_frob(&got, &matmul_ref(&a, &b, &bias, m, n, k));
            eprintln!("matmul {m}x{n}x{k}: relative Frobenius error vs f64 {err:.2e} (bound 1e-2, bf16 output)");
            if err <= 1e-2 {
                Ok(())
            } else {
                Err(format!("error {err:e} > 1e-2"))
            }
        },
    )
}

fn bench(m: usize, n: usize, k: usize) -> Result<(), String> {
    let e = |x: tessera::runtime::Error| x.to_string();
    let dev = Device::cuda(0).map_err(e)?;
    let mut rng = Rng::new(1);
    let (a, b, bias) = (rng.vec_bf16(m * k), rng.vec_bf16(k * n), rng.vec_f32(n));
    let (da, db, dbias) = (
        dev.upload(&a).map_err(e)?,
        dev.upload(&b).map_err(e)?,
        dev.upload(&bias).map_err(e)?,
    );
    let dc = dev.zeros::<bf16>(m * n).map_err(e)?;
    let t = tune(m, n, k);
    let t0 = Instant::now();
    let run = || {
        matmul::autotune(
            &dev, &t, &da, &db, &dbias, &dc, m as i32, n as i32, k as i32,
        )
    };
    run().map_err(e)?; // measures every config once, then remembers the winner
    let tune_s = t0.elapsed().as_secs_f64();
    let mut times = vec![];
    for _ in 0..7 {
        dev.synchronize().map_err(e)?;
        let s = Instant::now();
        for _ in 0..5 {
            run().map_err(e)?;
        }
        dev.synchronize().map_err(e)?;
        times.push(s.elapsed().as_secs_f64() / 5.0);
    }
    times.sort_by(f64::total_cmp);
    let sec = times[times.len() / 2];
    // Sampled check against f64 (the full reference would take minutes on the CPU).
    let got = dc.to_vec().map_err(e)?;
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for _ in 0..256 {
        let (i, j) = ((rng.next_u64() as usize) % m, (rng.next_u64() as usize) % n);
        let mut z = bias[j] as f64;
        for kk in 0..k {
            z += a[i * k + kk].to_f64() * b[kk * n + j].to_f64();
        }
        let w = z / (1.0 + (-z).exp());
        num += (got[i * n + j].to_f64() - w).powi(2);
        den += w * w;
    }
    let err = (num / den).sqrt();
    println!(
        "{{\"kernel\": \"tessera matmul\", \"m\": {m}, \"n\": {n}, \"k\": {k}, \"ms\": {:.4}, \"tflops\": {:.1}, \"tune_s\": {tune_s:.1}, \"sampled_rel_err\": {err:.2e}, \"device\": \"{}\"}}",
        sec * 1e3,
        2.0 * (m * n * k) as f64 / sec / 1e12,
        dev.describe()
    );
    if err > 1e-2 {
        return Err(format!("sampled error {err:e} > 1e-2"));
    }
    Ok(())
}
