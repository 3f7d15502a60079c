//! Attention forward, FlashAttention-2 style (src/kernels/attention.rs): S = dot(q,
//! trans(k)) on tensor cores, an online softmax over key blocks, O accumulated by a second
//! `dot`; causal and not; head dim 64 and 128.
//!
//! Run: `cargo run --release --example attention` (self-check against f64 at odd sequence
//! lengths), `-- --explain` (the CUDA C), `-- --bench B H S D [--causal]` (GPU: the
//! autotuned kernel's median time and TFLOP/s as one JSON line, sampled rows checked).
use std::time::Instant;
use tessera::check::{run_example, Rng};
use tessera::kernels::attention::{self as att, attention, attention_ref};
use tessera::kernels::matmul::rel_frob;
use tessera::runtime::{bf16, Config, ConstVal, Device, Launch, Tune};

fn configs(d: usize, causal: bool) -> Vec<Config> {
    let c = |bm: i64, bn: i64, w: u32, s: u32| {
        Config::new(
            &[
                ("BM", ConstVal::Int(bm)),
                ("BN", ConstVal::Int(bn)),
                ("D", ConstVal::Int(d as i64)),
                ("CAUSAL", ConstVal::Bool(causal)),
            ],
            w,
        )
        .stages(s)
    };
    vec![c(128, 64, 8, 2), c(64, 64, 4, 3), c(128, 32, 8, 3)]
}

fn tune(bh: usize, s: usize, d: usize, causal: bool) -> Tune {
    Tune {
        configs: configs(d, causal),
        key: format!("{bh}x{s}x{d}{}", if causal { "c" } else { "" }),
        grid: Launch::grid_fn(move |c| {
            let (x, y) = att::grid(1, bh, s, c.int("BM") as usize);
            [x, y, 1]
        })
        .grid,
    }
}

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--bench") {
        let v: Vec<usize> = args[i + 1..]
            .iter()
            .take(4)
            .filter_map(|x| x.parse().ok())
            .collect();
        let causal = args.iter().any(|a| a == "--causal");
        return match bench(v[0], v[1], v[2], v[3], causal) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("attention bench: {e}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    let explain = configs(128, true)[1].clone();
    run_example(
        &attention::KERNEL,
        &explain.constexprs,
        explain.num_warps,
        |dev, rng| {
            let (bh, s) = if dev.is_cuda() { (8, 1000) } else { (2, 77) };
            for d in [64usize, 128] {
                for causal in [false, true] {
                    let (q, k, v) = (
                        rng.vec_bf16(bh * s * d),
                        rng.vec_bf16(bh * s * d),
                        rng.vec_bf16(bh * s * d),
                    );
                    let scale = 1.0 / (d as f32).sqrt();
                    let e = |x: tessera::runtime::Error| x.to_string();
                    let (dq, dk, dv) = (
                        dev.upload(&q).map_err(e)?,
                        dev.upload(&k).map_err(e)?,
                        dev.upload(&v).map_err(e)?,
                    );
                    let dout = dev.zeros::<bf16>(bh * s * d).map_err(e)?;
                    attention::autotune(
                        dev,
                        &tune(bh, s, d, causal),
                        &dq,
                        &dk,
                        &dv,
                        &dout,
                        s as i32,
                        scale,
                    )
                    .map_err(e)?;
                    let got: Vec<f32> = dout
                        .to_vec()
                        .map_err(e)?
                        .iter()
                        .map(|x| x.to_f32())
                        .collect();
                    let err = rel_frob(
                        &got,
                        &attention_ref(&q, &k, &v, bh, s, d, scale as f64, causal),
                    );
                    eprintln!("attention B*H={bh} S={s} D={d} causal={causal}: relative Frobenius error vs f64 {err:.2e} (bound 1e-2)");
                    if err > 1e-2 {
                        return Err(format!("D={d} causal={causal}: error {err:e} > 1e-2"));
                    }
                }
            }
            Ok(())
        },
    )
}

fn bench(b: usize, h: usize, s: usize, d: usize, causal: bool) -> Result<(), String> {
    let e = |x: tessera::runtime::Error| x.to_string();
    let dev = Device::cuda(0).map_err(e)?;
    let bh = b * h;
    let mut rng = Rng::new(2);
    let (q, k, v) = (
        rng.vec_bf16(bh * s * d),
        rng.vec_bf16(bh * s * d),
        rng.vec_bf16(bh * s * d),
    );
    let scale = 1.0 / (d as f32).sqrt();
    let (dq, dk, dv) = (
        dev.upload(&q).map_err(e)?,
        dev.upload(&k).map_err(e)?,
        dev.upload(&v).map_err(e)?,
    );
    let dout = dev.zeros::<bf16>(bh * s * d).map_err(e)?;
    let t = tune(bh, s, d, causal);
    let t0 = Instant::now();
    let run = || attention::autotune(&dev, &t, &dq, &dk, &dv, &dout, s as i32, scale);
    run().map_err(e)?;
    let tune_s = t0.elapsed().as_secs_f64();
    let mut times = vec![];
    for _ in 0..5 {
        dev.synchronize().map_err(e)?;
        let st = Instant::now();
        for _ in 0..3 {
            run().map_err(e)?;
        }
        dev.synchronize().map_err(e)?;
        times.push(st.elapsed().as_secs_f64() / 3.0);
    }
    times.sort_by(f64::total_cmp);
    let sec = times[times.len() / 2];
    // Sampled rows against f64.
    let got = dout.to_vec().map_err(e)?;
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for _ in 0..8 {
        let (hh, i) = (
            (rng.next_u64() as usize) % bh,
            (rng.next_u64() as usize) % s,
        );
        let at = |x: &[bf16], r: usize, c: usize| x[(hh * s + r) * d + c].to_f64();
        let n = if causal { i + 1 } else { s };
        let sc: Vec<f64> = (0..n)
            .map(|j| (0..d).map(|c| at(&q, i, c) * at(&k, j, c)).sum::<f64>() * scale as f64)
            .collect();
        let mx = sc.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let ex: Vec<f64> = sc.iter().map(|x| (x - mx).exp()).collect();
        let z: f64 = ex.iter().sum();
        for c in 0..d {
            let w = (0..n).map(|j| ex[j] * at(&v, j, c)).sum::<f64>() / z;
            num += (got[(hh * s + i) * d + c].to_f64() - w).powi(2);
            den += w * w;
        }
    }
    let err = (num / den).sqrt();
    let flops = 4.0 * (bh * s * s * d) as f64 * if causal { 0.5 } else { 1.0 };
    println!(
        "{{\"kernel\": \"tessera attention\", \"b\": {b}, \"h\": {h}, \"s\": {s}, \"d\": {d}, \"causal\": {causal}, \"ms\": {:.4}, \"tflops\": {:.1}, \"tune_s\": {tune_s:.1}, \"sampled_rel_err\": {err:.2e}, \"device\": \"{}\"}}",
        sec * 1e3,
        flops / sec / 1e12,
        dev.describe()
    );
    if err > 1e-2 {
        return Err(format!("sampled error {err:e} > 1e-2"));
    }
    Ok(())
}
