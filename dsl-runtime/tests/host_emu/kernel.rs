//! One kernel's generated CUDA C body run on the CPU by the g++ emulation (harness.rs,
//! cuda_host.h, and the PTX blocks swapped for their models), over host buffers: what the
//! `dot` tests compare with the interpreter. Shared by dsl-runtime/tests/dot.rs and the
//! top-level tests/dot_kernels.rs.
#![allow(dead_code)]
#[path = "harness.rs"]
mod harness;
use dsl_ir::{DType, Kernel, ParamKind};
use dsl_runtime::cuda::{emit_body, prelude::PRELUDE, CudaBody, EmitOptions};
use dsl_runtime::interp::HostMem;

pub fn have_gxx() -> bool {
    std::process::Command::new("g++")
        .arg("--version")
        .output()
        .is_ok()
}

/// A scalar launch argument.
#[derive(Clone, Copy, Debug)]
pub enum Scalar {
    I32(i32),
    F32(f32),
}

/// The launch's facts: buffers are 16-byte aligned; an i32 is divisible by 16 or not.
pub fn facts(k: &Kernel, scalars: &[Scalar]) -> Vec<bool> {
    let mut ints = scalars.iter();
    k.params
        .iter()
        .map(|p| match p.kind {
            ParamKind::Ptr(_) => true,
            ParamKind::Scalar(_) => ints
                .next()
                .is_some_and(|v| matches!(v, Scalar::I32(x) if x % 16 == 0)),
            ParamKind::Constexpr(_) => false,
        })
        .collect()
}

/// Compiles `k`'s CUDA C body (warps, stages) for the CPU and runs it over `grid`;
/// returns the buffers after the run.
pub fn emulate(
    k: &Kernel,
    warps: u32,
    stages: u32,
    grid: [u32; 3],
    bufs: &[HostMem],
    scalars: &[Scalar],
) -> Vec<HostMem> {
    emulate_with(k, warps, stages, false, grid, bufs, scalars)
}

/// [`emulate`] with `EmitOptions::ring_unroll` set as given.
pub fn emulate_with(
    k: &Kernel,
    warps: u32,
    stages: u32,
    ring_unroll: bool,
    grid: [u32; 3],
    bufs: &[HostMem],
    scalars: &[Scalar],
) -> Vec<HostMem> {
    let v = Variant {
        ring_unroll,
        ..Variant::default()
    };
    emulate_variant(k, warps, stages, v, grid, bufs, scalars)
}

/// The candidate lowerings an emulation runs with (`EmitOptions`' switches).
#[derive(Clone, Copy, Debug, Default)]
pub struct Variant {
    pub ring_unroll: bool,
    /// `EmitOptions::wgmma`: the `wgmma` block swapped for its model (wgmma.h).
    pub wgmma: bool,
    /// `EmitOptions::wgmma_in_flight`.
    pub in_flight: bool,
    /// `EmitOptions::warp_replica_reductions`.
    pub warp_reduce: bool,
    /// `EmitOptions::row_values_once`.
    pub row_values: bool,
    /// `EmitOptions::elide_reuse_syncs`.
    pub reuse_sync: bool,
    /// `EmitOptions::frag_rows`.
    pub frag_rows: bool,
    /// `EmitOptions::fast_exp2` (emulated by the host's exp2f: the code around it checked).
    pub fast_exp2: bool,
}

/// [`emulate`] with the candidate lowerings of `v`.
pub fn emulate_variant(
    k: &Kernel,
    warps: u32,
    stages: u32,
    v: Variant,
    grid: [u32; 3],
    bufs: &[HostMem],
    scalars: &[Scalar],
) -> Vec<HostMem> {
    let Variant {
        ring_unroll,
        wgmma,
        in_flight,
        warp_reduce,
        row_values,
        reuse_sync,
        frag_rows,
        fast_exp2,
    } = v;
    let div16 = facts(k, scalars);
    let src = emit_body(
        k,
        &EmitOptions {
            num_warps: warps,
            divisible16: div16,
            num_stages: stages,
            ring_unroll,
            wgmma,
            wgmma_in_flight: in_flight,
            acq_rel_atomics: false,
            vector_atomics: false,
            warp_replica_reductions: warp_reduce,
            row_values_once: row_values,
            elide_reuse_syncs: reuse_sync,
            frag_rows,
            fast_exp2,
            dep_hook: None,
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    run_body(k, &src, grid, bufs, scalars).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs a generated body (perhaps edited) over `grid`; the buffers after the run, or how
/// the run failed (a model's check, a crash).
pub fn run_body(
    k: &Kernel,
    src: &CudaBody,
    grid: [u32; 3],
    bufs: &[HostMem],
    scalars: &[Scalar],
) -> Result<Vec<HostMem>, String> {
    let prelude = harness::swap_block(PRELUDE, "conversions", "conversions.h");
    let mut body = src.code.clone();
    for (block, model) in [("mma", "mma.h"), ("wgmma", "wgmma.h")] {
        if body.contains(&format!("// -- {block} (")) {
            body = harness::swap_block(&body, block, model);
        }
    }
    let dir = harness::tempdir("dot");
    let mut main = String::from("int main(int argc, char** argv) {\n  (void)argc;\n");
    let mut call = vec!["(int)blockIdx.x, (int)blockIdx.y, (int)blockIdx.z, (int)gridDim.x, (int)gridDim.y, (int)gridDim.z".to_string()];
    let mut paths = vec![];
    let ptrs: Vec<DType> = k
        .params
        .iter()
        .filter_map(|p| match p.kind {
            ParamKind::Ptr(d) => Some(d),
            _ => None,
        })
        .collect();
    for (i, (m, d)) in bufs.iter().zip(&ptrs).enumerate() {
        let path = dir.join(format!("b{i}.bin"));
        std::fs::write(&path, &m.bytes).unwrap();
        main.push_str(&format!("  auto b{i} = read_file(argv[{}]);\n", i + 1));
        let cty = match d {
            DType::BF16 => "bf16_t",
            DType::F16 => "f16_t",
            DType::F32 => "float",
            _ => "int",
        };
        call.push(format!("({cty}*)b{i}.data()"));
        paths.push(path);
    }
    call.extend(scalars.iter().map(|v| match v {
        Scalar::I32(x) => x.to_string(),
        Scalar::F32(x) => format!("__uint_as_float({}u)", x.to_bits()),
    }));
    // 1024-byte aligned, as the generated entry declares it for wgmma (whose swizzle is on
    // address bits).
    main.push_str(&format!(
        "  alignas(1024) static unsigned char smem[{0}];\n  g_smem_window = smem;\n  g_smem_bytes = {0};\n",
        src.smem_bytes.max(16)
    ));
    call.push("smem".into());
    main.push_str(&format!(
        "  launch(dim3{{{}, {}, {}}}, {}, [&] {{ {}({}); }});\n",
        grid[0],
        grid[1],
        grid[2],
        src.block_threads,
        src.name,
        call.join(", ")
    ));
    for (i, m) in bufs.iter().enumerate() {
        main.push_str(&format!(
            "  write_file(argv[{}], b{i}, {});\n",
            i + 1,
            m.bytes.len()
        ));
    }
    main.push_str("  return 0;\n}\n");
    let run =
        harness::try_compile_and_run(&format!("{prelude}\n{body}\n{main}"), &dir, &paths, 300);
    if let Err(e) = run {
        let _ = std::fs::remove_dir_all(&dir);
        return Err(e);
    }
    let out = bufs
        .iter()
        .zip(&paths)
        .map(|(m, p)| HostMem {
            dtype: m.dtype,
            bytes: std::fs::read(p).unwrap(),
        })
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    Ok(out)
}
