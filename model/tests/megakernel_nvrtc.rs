//! The decode megakernel's CUDA C compiles with NVRTC at real Qwen3 shapes and at a test
//! checkpoint's, and so does the bench's bandwidth probe. Needs libnvrtc
//! (./scripts/test.sh installs it), not a GPU.
use dsl_runtime::{nvrtc, ConstVal};
use model::kernels::{qwen3_0_6b, Tiles};
use model::mega_engine::{constexprs, decode_step, MegakernelOptions};

fn need_nvrtc() {
    if let Err(e) = dsl_runtime::device::probe_nvrtc() {
        panic!("{e}\n(run the tests with ./scripts/test.sh, which installs it)");
    }
}

#[test]
fn decode_megakernel_compiles_with_nvrtc() {
    need_nvrtc();
    let qwen3_1_7b = model::Config {
        hidden_size: 2048,
        intermediate_size: 6144,
        ..qwen3_0_6b()
    };
    let tiny = model::Checkpoint::load(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/mha_tok_v5"),
        false,
    )
    .unwrap()
    .config;
    // The 0.6B shape also with the staging ring (the weights copied ahead, as an H100 allows).
    for (cfg, profile, staged) in [
        (qwen3_0_6b(), false, false),
        (qwen3_0_6b(), false, true),
        (qwen3_1_7b, true, false),
        (tiny, false, false),
    ] {
        let t = Tiles::for_config(&cfg);
        let mut opts = MegakernelOptions::default().mega.warps(t.warps);
        opts.profile = profile;
        opts.stage_ring = if staged { None } else { Some(0) };
        let cx = constexprs(&cfg, &t);
        let src = decode_step::MEGAKERNEL.cuda_source(&cx, &opts).unwrap();
        assert_eq!(src.code.contains("tsr_top_up("), staged);
        let t = std::time::Instant::now();
        if let Err(e) = nvrtc::compile(&src.code, "sm_90", false) {
            panic!("hidden {}: {e}", cfg.hidden_size);
        }
        eprintln!(
            "decode_step, hidden {}: {} lines of CUDA C, NVRTC {:.0} ms (sm_90, this machine)",
            cfg.hidden_size,
            src.code.lines().count(),
            t.elapsed().as_secs_f64() * 1e3
        );
    }
}

#[test]
fn bandwidth_probe_compiles_with_nvrtc() {
    need_nvrtc();
    let src = model::bench::stream_sum::KERNEL
        .cuda_source(
            &[("BLOCK", ConstVal::Int(2048)), ("STEPS", ConstVal::Int(8))],
            8,
        )
        .unwrap();
    nvrtc::compile(&src.code, "sm_90", false).unwrap();
}
