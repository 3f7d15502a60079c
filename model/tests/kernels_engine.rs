//! The kernels engine (one launch per op, through the interpreter) against the reference
//! decoder and transformers' goldens, on every committed checkpoint.
mod common;
use common::*;
use dsl_runtime::Device;
use model::dsl_engine::{KernelEngine, KernelOptions, Output};
use model::{Checkpoint, Engine, Reference, StepOutput};
use std::sync::Arc;

fn kernels(name: &str, output: Output) -> KernelEngine {
    let ck = Checkpoint::load(&data_dir(name), false).unwrap();
    let opts = KernelOptions { output, ..Default::default() };
    KernelEngine::new(ck.config, &ck.weights, Device::interpreter(), opts).unwrap()
}

fn reference(name: &str) -> Reference {
    let ck = Checkpoint::load(&data_dir(name), false).unwrap();
    Reference::new(ck.config, Arc::new(ck.weights))
}

fn rel_err(got: &[f32], want: &[f32]) -> f32 {
    let max_ref = want.iter().fold(0f32, |m, x| m.max(x.abs()));
    got.iter().zip(want).fold(0f32, |m, (a, b)| m.max((a - b).abs())) / max_ref
}

#[test]
fn logits_track_the_reference() {
    for name in CHECKPOINTS {
        let exp = expected(name);
        let (mut k, mut r) = (kernels(name, Output::Logits), reference(name));
        let prompt = ids(&exp["prompt_ids"]);
        let greedy = ids(&exp["greedy_ids"]);
        let feed: Vec<u32> = prompt.iter().chain(&greedy).copied().collect();
        let mut worst = 0f32;
        for (pos, &t) in feed.iter().enumerate() {
            let want = r.forward(t, pos).unwrap();
            let StepOutput::Logits(got) = k.step(t, pos).unwrap() else { panic!("logits asked") };
            let e = rel_err(&got, &want);
            worst = worst.max(e);
            let top = model::sampling::argmax(&want);
            let margin = want[top as usize] - want.iter().enumerate().filter(|(i, _)| *i != top as usize).fold(f32::MIN, |m, (_, v)| m.max(*v));
            eprintln!("{name} pos {pos}: rel err {e:.2e}, ref top {top} margin {margin:.3}, ours {}", model::sampling::argmax(&got));
        }
        eprintln!("{name}: worst {worst:.2e}");
    }
}
