//! GPU benchmark of the shipped kernels at sizes well past L2, plus the launch path's host
//! cost and NVRTC compile times. Prints one JSON object on stdout (the table is made by
//! scripts/perf_table.py together with scripts/bench_peers.py's Triton/torch numbers).
//!
//! Bandwidth is counted as Triton's tutorials do: each tensor read once plus each written
//! once, divided by the median time. Run on a GPU: `cargo run --release --example bench_ops`.
use std::time::Instant;
use tessera::kernels::{gemv::gemv, rmsnorm::rmsnorm, softmax::softmax, vector_add::vector_add};
use tessera::runtime::{bf16, cdiv, Config, ConstVal::Int, Device, Launch, Tune};

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

/// Median seconds per call of `f`, after one warm-up, over `reps` timed batches of `n`.
fn median_s(
    dev: &Device,
    n: usize,
    reps: usize,
    mut f: impl FnMut() -> Result<(), String>,
) -> Result<f64, String> {
    f()?;
    dev.synchronize().map_err(|e| e.to_string())?;
    let mut t = vec![];
    for _ in 0..reps {
        let s = Instant::now();
        for _ in 0..n {
            f()?;
        }
        dev.synchronize().map_err(|e| e.to_string())?;
        t.push(s.elapsed().as_secs_f64() / n as f64);
    }
    t.sort_by(f64::total_cmp);
    Ok(t[t.len() / 2])
}

fn run() -> Result<(), String> {
    let e = |e: tessera::runtime::Error| e.to_string();
    let dev = Device::cuda(0).map_err(e)?;
    eprintln!("device: {}", dev.describe());
    let mut out = serde_json::Map::new();
    out.insert("device".into(), dev.describe().into());

    // NVRTC: cold (no disk cache) and warm (disk cache hit) compile of the RMSNorm kernel.
    let src = rmsnorm::KERNEL
        .cuda_source(&[("BLOCK", Int(1024))], 4)
        .map_err(e)?;
    let arch = if dev.describe().contains("sm_90") {
        "sm_90"
    } else {
        "sm_80"
    };
    let cold = tessera::runtime::nvrtc::compile(&src.code, arch, false).map_err(e)?;
    let t = Instant::now();
    let warm = tessera::runtime::nvrtc::compile(&src.code, arch, true).map_err(e)?;
    out.insert("nvrtc_cold_ms".into(), cold.compile_ms.into());
    out.insert(
        "nvrtc_warm_ms".into(),
        (t.elapsed().as_secs_f64() * 1e3).into(),
    );
    out.insert("nvrtc_warm_from_disk".into(), warm.from_disk_cache.into());

    // RMSNorm 8192 x 8192 bf16.
    let (rows, cols) = (8192usize, 8192usize);
    let x = dev
        .upload(&vec![bf16::from_f32(0.5); rows * cols])
        .map_err(e)?;
    let w = dev.upload(&vec![bf16::from_f32(1.0); cols]).map_err(e)?;
    let y = dev.zeros::<bf16>(rows * cols).map_err(e)?;
    let tune = Tune {
        configs: [(1024, 4), (2048, 8), (4096, 8), (8192, 16), (1024, 8)]
            .iter()
            .map(|&(b, nw)| Config::new(&[("BLOCK", Int(b))], nw))
            .collect(),
        key: format!("{cols}"),
        grid: Launch::grid(rows as u32).grid,
    };
    let s = median_s(&dev, 20, 5, || {
        rmsnorm::autotune(&dev, &tune, &x, &w, &y, cols as i32, 1e-6).map_err(|e| e.to_string())
    })?;
    let bytes = (2 * rows * cols * 2 + cols * 2) as f64;
    out.insert(
        "rmsnorm_8192x8192_bf16_gbps".into(),
        (bytes / s / 1e9).into(),
    );
    out.insert("rmsnorm_us".into(), (s * 1e6).into());
    drop((x, y));

    // Softmax 8192 x 8192 f32, one tile per row.
    let xs = dev.upload(&vec![0.25f32; rows * cols]).map_err(e)?;
    let ys = dev.zeros::<f32>(rows * cols).map_err(e)?;
    let tune = Tune {
        configs: [8, 16, 32]
            .iter()
            .map(|&nw| Config::new(&[("BLOCK", Int(cols as i64))], nw))
            .collect(),
        key: format!("{cols}"),
        grid: Launch::grid(rows as u32).grid,
    };
    let s = median_s(&dev, 20, 5, || {
        softmax::autotune(&dev, &tune, &xs, &ys, cols as i32).map_err(|e| e.to_string())
    })?;
    out.insert(
        "softmax_8192x8192_f32_gbps".into(),
        ((2 * rows * cols * 4) as f64 / s / 1e9).into(),
    );
    out.insert("softmax_us".into(), (s * 1e6).into());
    drop((xs, ys));

    // GEMV 151936 x 1024 bf16 (Qwen3's lm_head at M=1).
    let (m, k) = (151936usize, 1024usize);
    let wm = dev.upload(&vec![bf16::from_f32(0.01); m * k]).map_err(e)?;
    let xv = dev.upload(&vec![bf16::from_f32(1.0); k]).map_err(e)?;
    let yv = dev.zeros::<bf16>(m).map_err(e)?;
    let mut configs = vec![];
    let gemv_configs = [
        (4, 1024, 4),
        (8, 512, 4),
        (8, 1024, 8),
        (16, 512, 8),
        (16, 1024, 8),
        (32, 256, 8),
        (2, 1024, 4),
        (8, 1024, 4),
        (4, 1024, 2),
    ];
    for (bm, bk, nw) in gemv_configs {
        configs.push(Config::new(&[("BM", Int(bm)), ("BK", Int(bk))], nw));
    }
    let grid = Launch::grid_fn(move |c| [cdiv(m as i64, c.int("BM")), 1, 1]).grid;
    let tune = Tune {
        configs: configs.clone(),
        key: format!("{m}x{k}"),
        grid: grid.clone(),
    };
    let gemv_bytes = ((m * k + k + m) * 2) as f64;
    let s = median_s(&dev, 20, 5, || {
        gemv::autotune(&dev, &tune, &wm, &xv, &yv, m as i32, k as i32).map_err(|e| e.to_string())
    })?;
    out.insert(
        "gemv_151936x1024_bf16_gbps".into(),
        (gemv_bytes / s / 1e9).into(),
    );
    out.insert("gemv_us".into(), (s * 1e6).into());
    // Each config alone (a one-config tune under its own key), to see what the winner beat.
    let mut per = serde_json::Map::new();
    for ((bm, bk, nw), c) in gemv_configs.iter().zip(configs) {
        let one = Tune {
            configs: vec![c],
            key: format!("{m}x{k}/{bm}x{bk}x{nw}"),
            grid: grid.clone(),
        };
        let s = median_s(&dev, 20, 5, || {
            gemv::autotune(&dev, &one, &wm, &xv, &yv, m as i32, k as i32).map_err(|e| e.to_string())
        })?;
        per.insert(
            format!("BM={bm},BK={bk},warps={nw}"),
            (gemv_bytes / s / 1e9).into(),
        );
    }
    out.insert("gemv_gbps_per_config".into(), per.into());
    drop((wm, xv, yv));

    // The host cost of one launch: a tiny kernel, 2000 launches enqueued, then one sync.
    let n = 1024usize;
    let (a, b, c) = (
        dev.zeros::<f32>(n).map_err(e)?,
        dev.zeros::<f32>(n).map_err(e)?,
        dev.zeros::<f32>(n).map_err(e)?,
    );
    let l = Launch::grid(1u32);
    vector_add::launch(&dev, &l, &a, &b, &c, n as i32, 1024).map_err(e)?;
    dev.synchronize().map_err(e)?;
    let mut host = vec![];
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..2000 {
            vector_add::launch(&dev, &l, &a, &b, &c, n as i32, 1024).map_err(e)?;
        }
        host.push(t.elapsed().as_secs_f64() / 2000.0 * 1e6);
        dev.synchronize().map_err(e)?;
    }
    host.sort_by(f64::total_cmp);
    out.insert("launch_host_us".into(), host[2].into());
    println!("{}", serde_json::Value::Object(out));
    Ok(())
}
