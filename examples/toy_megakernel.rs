//! The toy megakernel: a few layers of residual + RMSNorm + SwiGLU MLP (five kernels per
//! layer) as ONE persistent launch, checked against the same kernels launched one by one.
//!
//! Run: `cargo run --example toy_megakernel [-- --explain] [--cuda] [--layers N] [--d D] [--f F]`
//! - `--explain`: print the schedule (stages, syncs and the hazards behind them, prefetches);
//! - `--cuda`: with `--explain`, also print the generated CUDA C of the persistent kernel.
//!
//! On a GPU it launches cooperatively; without one, it runs the interpreter, once stage by
//! stage and once in the adversarial mode (CTAs interleaved as hostilely as the syncs allow).
use std::process::ExitCode;
use tessera::check::{compare, to_f32, Rng};
use tessera::runtime::mega::{MegaOptions, Policy};
use tessera::runtime::Device;
use tessera::toy::{toy_mlp, toy_sequential, ToyBuffers};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |f: &str| args.iter().any(|a| a == f);
    let num = |f: &str, default: usize| -> usize {
        args.iter()
            .position(|a| a == f)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let (layers, d, f, eps) = (
        num("--layers", 4),
        num("--d", 256),
        num("--f", 512),
        1e-6f32,
    );
    let opts = MegaOptions::default();
    if flag("--explain") {
        match toy_mlp::explain(&opts, d, f) {
            Ok(text) => print!("{text}"),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        }
        if flag("--cuda") {
            match toy_mlp::MEGAKERNEL.cuda_source(&toy_mlp::constexprs(d, f), &opts) {
                Ok(src) => print!("\n{}", src.code),
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
        return ExitCode::SUCCESS;
    }
    let dev = Device::auto();
    eprintln!("device: {}", dev.describe());
    let run = || -> Result<(), String> {
        let mut rng = Rng::new(Rng::seed_from_env());
        let reference =
            ToyBuffers::random(&dev, &mut rng, layers, d, f).map_err(|e| e.to_string())?;
        let mega = reference.copy_to(&dev).map_err(|e| e.to_string())?;
        toy_sequential(&dev, &reference, layers, d, f, eps).map_err(|e| e.to_string())?;
        let want = to_f32(&reference.outputs().map_err(|e| e.to_string())?);
        let mut modes = vec![("megakernel", opts.clone())];
        if !dev.is_cuda() {
            modes.push((
                "megakernel (adversarial interleaving, 6 CTAs)",
                opts.clone().adversarial(6, Policy::RunAhead),
            ));
        }
        for (what, o) in modes {
            // Every mode starts from the inputs the reference started from.
            let inputs = mega.copy_to(&dev).map_err(|e| e.to_string())?;
            let start = std::time::Instant::now();
            inputs
                .megakernel(&dev, &o, layers, d, f, eps)
                .map_err(|e| e.to_string())?;
            dev.synchronize().map_err(|e| e.to_string())?;
            let got = to_f32(&inputs.outputs().map_err(|e| e.to_string())?);
            // The same kernels on the same inputs: bit-identical on the interpreter; on a GPU,
            // reductions may associate differently between the two launches' block sizes.
            let tol = if dev.is_cuda() { 2e-2 } else { 0.0 };
            compare(&got, &want, tol, tol).map_err(|e| format!("{what}: {e}"))?;
            eprintln!(
                "{what}: equals {layers} layers × 5 separate launches ({:.1} ms)",
                start.elapsed().as_secs_f64() * 1e3
            );
        }
        Ok(())
    };
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
