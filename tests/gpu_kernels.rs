//! On a GPU: every shipped kernel gives what the interpreter gives on the same inputs
//! (within float reassociation), at odd sizes and several warp counts. Run on the device
//! with `--ignored`; without a GPU these tests do not run (they are not "passed").
use tessera::check::{compare, to_f32, Rng};
use tessera::kernels::*;
use tessera::runtime::{cdiv, Buffer, Device, Element, Launch};

fn gpu() -> Device {
    Device::cuda(0).unwrap_or_else(|e| panic!("these tests need a CUDA GPU: {e}"))
}

fn both<T: Element>(gpu: &Device, cpu: &Device, data: &[T]) -> (Buffer<T>, Buffer<T>) {
    (gpu.upload(data).unwrap(), cpu.upload(data).unwrap())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_vector_add_equals_interpreter() {
    let (g, c) = (gpu(), Device::interpreter());
    let mut rng = Rng::new(Rng::seed_from_env());
    for (n, block, warps) in [
        (1, 128, 1),
        (1000, 256, 4),
        (100_003, 1024, 4),
        (4099, 1000, 8),
    ] {
        let (x, y) = (rng.vec_f32(n), rng.vec_f32(n));
        let mut out = vec![];
        for dev in [&g, &c] {
            let (dx, dy, dz) = (
                dev.upload(&x).unwrap(),
                dev.upload(&y).unwrap(),
                dev.zeros::<f32>(n).unwrap(),
            );
            let l = Launch::grid(cdiv(n as i64, block as i64)).warps(warps);
            vector_add::vector_add::launch(dev, &l, &dx, &dy, &dz, n as i32, block).unwrap();
            out.push(dz.to_vec().unwrap());
        }
        assert_eq!(out[0], out[1], "n={n} BLOCK={block}");
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_rmsnorm_equals_interpreter() {
    let (g, c) = (gpu(), Device::interpreter());
    let mut rng = Rng::new(Rng::seed_from_env());
    for (rows, cols, block, warps) in [
        (1, 1, 16, 1),
        (3, 7, 4, 1),
        (5, 1000, 256, 4),
        (4, 4099, 1024, 4),
        (3, 4099, 1000, 8),
        (2, 8192, 2048, 8),
    ] {
        let (x, w) = (rng.vec_bf16(rows * cols), rng.vec_bf16(cols));
        let mut out = vec![];
        for dev in [&g, &c] {
            let (dx, dw, dy) = (
                dev.upload(&x).unwrap(),
                dev.upload(&w).unwrap(),
                dev.zeros(rows * cols).unwrap(),
            );
            let l = Launch::grid(rows as u32).warps(warps);
            rmsnorm::rmsnorm::launch(dev, &l, &dx, &dw, &dy, cols as i32, 1e-6, block).unwrap();
            out.push(to_f32(&dy.to_vec().unwrap()));
        }
        compare(&out[0], &out[1], 1e-2, 1e-2)
            .unwrap_or_else(|e| panic!("{rows}x{cols} BLOCK={block} warps={warps}: {e}"));
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_softmax_equals_interpreter() {
    let (g, c) = (gpu(), Device::interpreter());
    let mut rng = Rng::new(Rng::seed_from_env());
    for (rows, cols, block, warps) in [
        (1, 1, 1, 1),
        (4, 7, 8, 1),
        (3, 1000, 1000, 4),
        (2, 4099, 4099, 8),
        (2, 8192, 8192, 16),
    ] {
        let x: Vec<f32> = rng.vec_f32(rows * cols).iter().map(|v| v * 10.0).collect();
        let (gx, cx) = both(&g, &c, &x);
        let mut out = vec![];
        for (dev, dx) in [(&g, &gx), (&c, &cx)] {
            let dy = dev.zeros::<f32>(rows * cols).unwrap();
            softmax::softmax::launch(
                dev,
                &Launch::grid(rows as u32).warps(warps),
                dx,
                &dy,
                cols as i32,
                block,
            )
            .unwrap();
            out.push(dy.to_vec().unwrap());
        }
        compare(&out[0], &out[1], 1e-6, 1e-4)
            .unwrap_or_else(|e| panic!("{rows}x{cols} warps={warps}: {e}"));
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_gemv_equals_interpreter() {
    let (g, c) = (gpu(), Device::interpreter());
    let mut rng = Rng::new(Rng::seed_from_env());
    for (m, k, bm, bk, warps) in [
        (1, 1, 1, 16, 1),
        (7, 7, 4, 4, 1),
        (1000, 33, 8, 32, 4),
        (33, 1000, 16, 256, 4),
        (5, 4099, 2, 1000, 4),
        (4096, 1024, 8, 512, 4),
        (1000, 777, 16, 1024, 8),
        (10, 160, 1, 160, 4),
    ] {
        let (w, x) = (rng.vec_bf16(m * k), rng.vec_bf16(k));
        let mut out = vec![];
        for dev in [&g, &c] {
            let (dw, dx, dy) = (
                dev.upload(&w).unwrap(),
                dev.upload(&x).unwrap(),
                dev.zeros(m).unwrap(),
            );
            let l = Launch::grid(cdiv(m as i64, bm as i64)).warps(warps);
            gemv::gemv::launch(dev, &l, &dw, &dx, &dy, m as i32, k as i32, bm, bk).unwrap();
            out.push(to_f32(&dy.to_vec().unwrap()));
        }
        compare(&out[0], &out[1], 2e-2, 1e-2)
            .unwrap_or_else(|e| panic!("{m}x{k} BM={bm} BK={bk} warps={warps}: {e}"));
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_add_rmsnorm_equals_interpreter() {
    let (g, c) = (gpu(), Device::interpreter());
    let mut rng = Rng::new(Rng::seed_from_env());
    for (rows, cols, block, warps) in [
        (1, 1, 1, 1),
        (3, 7, 8, 1),
        (2, 1000, 1000, 4),
        (2, 4099, 4099, 8),
    ] {
        let (x, r, w) = (
            rng.vec_bf16(rows * cols),
            rng.vec_bf16(rows * cols),
            rng.vec_bf16(cols),
        );
        let mut out = vec![];
        for dev in [&g, &c] {
            let (dx, dr, dw, dy) = (
                dev.upload(&x).unwrap(),
                dev.upload(&r).unwrap(),
                dev.upload(&w).unwrap(),
                dev.zeros(rows * cols).unwrap(),
            );
            add_rmsnorm::add_rmsnorm::launch(
                dev,
                &Launch::grid(rows as u32).warps(warps),
                &dx,
                &dr,
                &dw,
                &dy,
                cols as i32,
                1e-6,
                block,
            )
            .unwrap();
            out.push((dr.to_vec().unwrap(), to_f32(&dy.to_vec().unwrap())));
        }
        assert_eq!(out[0].0, out[1].0, "{rows}x{cols}: residual");
        compare(&out[0].1, &out[1].1, 1e-2, 1e-2).unwrap_or_else(|e| panic!("{rows}x{cols}: {e}"));
    }
}
