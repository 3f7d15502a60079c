//! Snapshots of generated code, so a change to what the compiler emits shows in review as
//! a diff of committed text: the toy and the Qwen3 decode megakernels' `explain` (stages,
//! syncs and the hazards behind them, prefetches) and the CUDA C of three shipped kernels
//! (rmsnorm, softmax, gemv) at the constexprs and warps `tessera explain` uses.
//!
//! Expected files live in `tests/snapshots/`. After a change you mean to make, rewrite them
//! and review the diff:
//!
//! ```text
//! TESSERA_BLESS=1 cargo test --test snapshots
//! git diff tests/snapshots/
//! ```
//!
//! The decode megakernel's CUDA C (~3500 lines) is not snapshotted: its schedule is, and
//! its stage bodies are the shipped kernels' own lowering.
use std::path::PathBuf;
use tessera::runtime::mega::MegaOptions;
use tessera::toy::toy_mlp;

/// Compares `actual` with `tests/snapshots/<name>`, or rewrites that file when
/// `TESSERA_BLESS=1`.
fn check(name: &str, actual: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/snapshots")
        .join(name);
    if std::env::var("TESSERA_BLESS").is_ok_and(|v| v == "1") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
        eprintln!("blessed {}", path.display());
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read {}: {e}\nrun `TESSERA_BLESS=1 cargo test --test snapshots` to create it",
            path.display()
        )
    });
    if expected == actual {
        return;
    }
    // The first lines that differ, so the failure says what changed without a diff tool.
    let (exp, act): (Vec<&str>, Vec<&str>) = (expected.lines().collect(), actual.lines().collect());
    let first = exp
        .iter()
        .zip(&act)
        .position(|(e, a)| e != a)
        .unwrap_or(exp.len().min(act.len()));
    let show = |lines: &[&str]| {
        lines
            .iter()
            .enumerate()
            .skip(first)
            .take(8)
            .map(|(i, l)| format!("  {:>5} | {l}\n", i + 1))
            .collect::<String>()
    };
    panic!(
        "{name}: generated output differs from {} from line {} on ({} lines expected, {} now)\n\
         expected:\n{}now:\n{}\
         If the change is intended: TESSERA_BLESS=1 cargo test --test snapshots, then review \
         `git diff tests/snapshots/`.",
        path.display(),
        first + 1,
        exp.len(),
        act.len(),
        show(&exp),
        show(&act),
    );
}

#[test]
fn toy_megakernel_explain() {
    // The example's default shape (`cargo run --example toy_megakernel -- --explain`).
    let text = toy_mlp::explain(&MegaOptions::default(), 256, 512).unwrap();
    check("toy_mlp.explain.txt", &text);
}

#[test]
fn qwen3_decode_step_explain() {
    // `tessera explain qwen3::decode_step`: Qwen3-0.6B's shape, the engine's options.
    let text = tessera::cli::explain::decode_step_text(
        &model::kernels::qwen3_0_6b(),
        false,
        None,
        1,
        true,
    )
    .unwrap();
    check("qwen3_decode_step.explain.txt", &text);
}

#[test]
fn qwen3_decode_step_explain_at_a_models_shape() {
    // `tessera explain qwen3::decode_step --model DIR`: the shape and tiles of DIR's config.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("model/tests/data/mha_tok_v5");
    let cfg = model::config::Config::from_dir(&dir).unwrap();
    let text = tessera::cli::explain::decode_step_text(&cfg, false, None, 1, true).unwrap();
    let head = text.lines().next().unwrap();
    assert!(
        head.contains(&format!("HIDDEN={},", cfg.hidden_size))
            && head.contains(&format!("LAYERS={},", cfg.num_hidden_layers)),
        "{head}"
    );
    assert_ne!(cfg.hidden_size, model::kernels::qwen3_0_6b().hidden_size);
    // A directory without a config: a clear error naming it, from the command line.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args([
            "explain",
            "qwen3::decode_step",
            "--model",
            "/nonexistent/qwen3",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("/nonexistent/qwen3"),
        "{err}"
    );
}

/// The CUDA C of a shipped kernel, as `tessera explain NAME` prints it.
fn shipped_cuda(name: &str) -> String {
    let k = tessera::kernels::shipped()
        .into_iter()
        .find(|k| k.kernel.name() == name)
        .unwrap_or_else(|| panic!("no shipped kernel `{name}`"));
    k.kernel
        .cuda_source(&k.constexprs, k.num_warps)
        .unwrap()
        .code
}

#[test]
fn rmsnorm_cuda() {
    check("rmsnorm.cu", &shipped_cuda("rmsnorm"));
}

#[test]
fn softmax_cuda() {
    check("softmax.cu", &shipped_cuda("softmax"));
}

#[test]
fn gemv_cuda() {
    check("gemv.cu", &shipped_cuda("gemv"));
}
