//! The decode megakernel's CUDA C compiles with NVRTC at real Qwen3 shapes and at a test
//! checkpoint's, and so does the bench's bandwidth probe. Needs libnvrtc
//! (./scripts/test.sh installs it), not a GPU.
use dsl_runtime::{nvrtc, ConstVal};
use model::kernels::{qwen3_0_6b, Tiles};
use model::megakernel_engine::{constexprs, decode_step, MegakernelOptions};

/// The C of the body whose signature starts with `start` (to its closing brace), and where
/// in it the stage's wait is.
fn body_and_wait<'a>(code: &'a str, start: &str) -> (&'a str, usize) {
    let at = code.find(start).unwrap_or_else(|| panic!("no {start}"));
    let b = &code[at..];
    let b = &b[..b.find("\n}\n").unwrap()];
    let wait = b.find("if (!tsr_dep()) return;").expect("the wait");
    (b, wait)
}

fn need_nvrtc() {
    if let Err(e) = dsl_runtime::device::probe_nvrtc() {
        panic!("{e}\n(run the tests with ./scripts/test.sh, which installs it)");
    }
}

/// Qwen3-8B's shape.
fn qwen3_8b() -> model::Config {
    model::Config {
        hidden_size: 4096,
        intermediate_size: 12288,
        num_hidden_layers: 36,
        num_attention_heads: 32,
        tie_word_embeddings: false,
        ..qwen3_0_6b()
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
    // 8B: 4096-wide rows, 36 layers, 32 query heads (8-row QKV tiles, 4-row gate/up tiles).
    let qwen3_8b = qwen3_8b();
    let tiny = model::Checkpoint::load(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/mha_tok_v5"),
        false,
    )
    .unwrap()
    .config;
    // The 0.6B shape also with gate/up's row tiles spread over the CTAs (the norm once per
    // program: `Tiles::gate_up_tiles`, 0 = as many as that takes, the default) as
    // well as one per program, and the lm_head's blocks the same way; QKV's, o_proj's and
    // down's row tiles (`Tiles::with_qkv_tiles`, `Tiles::with_gemv_tiles`) at 0.6B (2 per
    // program: spread over the CTAs, 0, gives one there, 128 programs) and spread over the
    // CTAs at 8B (down re-derived for one k step: BM = 2, BK = 16384; QKV 6 tiles of 8).
    // The MLP as one stage (`Tiles::with_fused_mlp`, the candidate) at 0.6B, 1.7B profiled
    // and 8B (8B: 2-row tiles, 4096-wide rows summed over rows through 64 KB of shared
    // memory).
    for (cfg, profile, gate_up_tiles, gemv_tiles, fused) in [
        (qwen3_0_6b(), false, 1, 1, false),
        (qwen3_0_6b(), false, 0, 1, false),
        (qwen3_0_6b(), false, 0, 2, false),
        (qwen3_0_6b(), false, 0, 1, true),
        (qwen3_1_7b.clone(), true, 1, 1, false),
        (qwen3_1_7b, true, 0, 1, true),
        (qwen3_8b.clone(), false, 0, 1, false),
        (qwen3_8b.clone(), false, 0, 0, false),
        (qwen3_8b, false, 0, 1, true),
        (tiny, false, 1, 1, false),
    ] {
        // Fused, the residual in the engine's copies (2 up to hidden 2048).
        let t = Tiles::for_config(&cfg)
            .with_gate_up_tiles(&cfg, gate_up_tiles)
            .with_lm_head_tiles(&cfg, gate_up_tiles)
            .with_gemv_tiles(&cfg, gemv_tiles)
            .with_qkv_tiles(&cfg, gemv_tiles);
        let t = model::megakernel_engine::with_mlp(t, &cfg, fused, None);
        assert_eq!(t.gate_up_tiles == 1, gate_up_tiles == 1);
        assert_eq!(t.o_proj_tiles > 1 && t.down_tiles > 1, gemv_tiles != 1);
        assert_eq!(t.qkv_tiles > 1, gemv_tiles != 1);
        let mut opts = MegakernelOptions::default().mega.warps(t.warps);
        opts.profile = profile;
        let cx = constexprs(&cfg, &t);
        let src = decode_step::MEGAKERNEL.cuda_source(&cx, &opts).unwrap();
        assert_eq!(src.block_threads, 32 * t.warps);
        if gemv_tiles != 1 {
            assert_eq!(
                src.code
                    .matches("// ---- stage 2 rmsnorm_qkv_rope_tiles")
                    .count(),
                1
            );
            assert_eq!(
                src.code
                    .matches("// ---- stage 4 gemv_residual_tiles")
                    .count(),
                1
            );
            assert_eq!(
                src.code
                    .matches("// ---- stage 6 gemv_residual_tiles")
                    .count(),
                1
            );
        }
        for (stage, n) in [
            ("// ---- stage 4 gemv_residual_copy", fused as usize),
            ("// ---- stage 5 rmsnorm_mlp_tiles", fused as usize),
            ("rmsnorm_gate_up_silu", !fused as usize),
        ] {
            assert_eq!(src.code.matches(stage).count() > 0, n > 0, "{stage}");
        }
        // TESSERA_DUMP_DECODE=DIR: each configuration's C, for ptxas (registers, spills).
        if let Ok(dir) = std::env::var("TESSERA_DUMP_DECODE") {
            let f = format!(
                "{dir}/decode_h{}_gu{gate_up_tiles}_gemv{gemv_tiles}_p{}_f{}.cu",
                cfg.hidden_size, profile as u8, fused as u8
            );
            std::fs::write(f, &src.code).unwrap();
        }
        let t = std::time::Instant::now();
        if let Err(e) = nvrtc::compile(&src.code, "sm_90", false) {
            panic!("hidden {} (gemv tiles {gemv_tiles}): {e}", cfg.hidden_size);
        }
        eprintln!(
            "decode_step, hidden {}: {} lines of CUDA C, NVRTC {:.0} ms (sm_90, this machine)",
            cfg.hidden_size,
            src.code.lines().count(),
            t.elapsed().as_secs_f64() * 1e3
        );
    }
}

/// The prefill kernels compile with NVRTC at the GPU's tiles and pipelining depths, at
/// Qwen3's head_dim 128 and the committed checkpoints' (16, 24, 32), and their `dot`s take
/// the tensor-core path with cp.async-pipelined loads where the shapes allow (every GEMM;
/// attention at head_dim 128 and 32), as the generated code says.
#[test]
fn prefill_kernels_compile_with_nvrtc_on_tensor_cores() {
    use model::kernels::prefill::{
        embed_rows, gemm_nn_residual, gemm_nt, gemm_nt_gate_up_silu, gemm_nt_residual,
        prefill_attention, qk_norm_rope_rows,
    };
    need_nvrtc();
    let p = model::kernels::prefill::PrefillTiles::gpu();
    let int = |v: usize| ConstVal::Int(v as i64);
    let compile = |what: &str, code: &str| {
        for arch in ["sm_80", "sm_90"] {
            if let Err(e) = nvrtc::compile(code, arch, false) {
                panic!("{what} {arch}:\n{e}");
            }
        }
    };
    let gemm = [
        ("BM", int(p.gemm_bm)),
        ("BN", int(p.gemm_bn)),
        ("BK", int(p.gemm_bk)),
        ("GROUP_M", int(p.group_m)),
    ];
    for k in [
        &gemm_nt::KERNEL,
        &gemm_nt_residual::KERNEL,
        &gemm_nn_residual::KERNEL,
        &gemm_nt_gate_up_silu::KERNEL,
    ] {
        let src = k
            .cuda_source_staged(&gemm, p.gemm_warps, p.gemm_stages)
            .unwrap();
        let dots = src.code.matches("dot: tensor cores").count();
        assert!(dots >= 1, "{}: no tensor-core dot:\n{}", k.name(), src.code);
        assert!(
            src.code.contains("cp.async"),
            "{}: loads not pipelined",
            k.name()
        );
        compile(k.name(), &src.code);
    }
    for d in [128usize, 32, 24, 16] {
        let cx = [
            ("BM", int(p.attn_bm)),
            ("BN", int(p.attn_bn)),
            ("D", int(d)),
        ];
        let src = prefill_attention::KERNEL
            .cuda_source_staged(&cx, p.attn_warps, p.attn_stages)
            .unwrap();
        // 8 warps tile [64, D] in 16 x 16 pieces when D is a multiple of 32 (at 16 the
        // FMA fallback takes it, and says so).
        if d % 32 == 0 {
            assert_eq!(
                src.code.matches("dot: tensor cores").count(),
                2,
                "attention D={d}: both dots on tensor cores"
            );
        }
        compile(&format!("prefill_attention D={d}"), &src.code);
        let src = qk_norm_rope_rows::KERNEL
            .cuda_source(&[("D", int(d)), ("BT", int(p.rope_bt))], p.row_warps)
            .unwrap();
        compile(&format!("qk_norm_rope_rows D={d}"), &src.code);
    }
    let src = embed_rows::KERNEL
        .cuda_source(&[("BLOCK", int(1024))], p.row_warps)
        .unwrap();
    compile("embed_rows", &src.code);
}

/// `MegaOptions::wait_in_body` (the engine's default above hidden 2048,
/// `megakernel_engine::wait_in_body_rule`): the decode step compiles with each stage's wait
/// inside its bodies at 0.6B and 8B, and the QKV, o_proj and MLP bodies load their first
/// weight tile before they wait (what the option is for).
#[test]
fn decode_megakernel_with_the_wait_in_the_bodies_compiles_with_nvrtc() {
    need_nvrtc();
    for cfg in [qwen3_0_6b(), qwen3_8b()] {
        let rule = model::kernels::TileRule::default();
        let t = model::megakernel_engine::default_tiles(&cfg, &rule, 1);
        let t = model::megakernel_engine::with_mlp(t, &cfg, true, None);
        let forced = MegakernelOptions {
            wait_in_body: Some(true),
            ..Default::default()
        };
        let (t, opts) = model::megakernel_engine::with_wait_in_body(&cfg, t, &forced);
        assert!(t.o_weights_first);
        let opts = opts.warps(t.warps);
        let src = decode_step::MEGAKERNEL
            .cuda_source(&constexprs(&cfg, &t), &opts)
            .unwrap();
        // (8B's QKV is the tiles kernel: the same prefix.)
        for (body, weight) in [
            (
                "void rmsnorm_qkv_rope",
                "expand_dims(1) * k + cols.expand_dims(0)",
            ),
            (
                "void rmsnorm_mlp_tiles_body(",
                "let mut wg = load(w + offs0",
            ),
            (
                "void gemv_residual_copy_body(",
                "(gemv_rows): load(w + rows",
            ),
        ] {
            let (b, wait) = body_and_wait(&src.code, body);
            let load = b.find(weight).expect("the weight load");
            assert!(load < wait, "{body}: the weight load after the wait");
        }
        if let Err(e) = nvrtc::compile(&src.code, "sm_90", false) {
            panic!("hidden {}: {e}", cfg.hidden_size);
        }
    }
}

/// `MegaOptions::early_loads` (on by default; `TESSERA_EARLY_LOADS=0` off): in the 0.6B decode
/// step below one attention tile (o_proj's programs attend, waiting in their bodies) the
/// position is loaded before the wait (only the last stage writes it), the new q, K and V
/// after it (the QKV stage writes them); the step compiles with NVRTC.
#[test]
fn decode_megakernel_with_early_loads_compiles_with_nvrtc() {
    need_nvrtc();
    let cfg = qwen3_0_6b();
    let o = MegakernelOptions {
        mega: dsl_runtime::mega::MegaOptions {
            early_loads: true,
            ..Default::default()
        },
        ..Default::default()
    };
    let rule = model::kernels::TileRule::default();
    let t = model::megakernel_engine::default_tiles(&cfg, &rule, 1);
    let (t, opts) = model::megakernel_engine::with_options(&cfg, t, &o);
    let t = Tiles {
        attn_in_o: true,
        ..t
    };
    let opts = opts.warps(t.warps);
    let src = decode_step::MEGAKERNEL
        .cuda_source(&constexprs(&cfg, &t), &opts)
        .unwrap();
    let (b, wait) = body_and_wait(&src.code, "void attn_head_residual_body(");
    let pos = b.find("= *(pos);").expect("the position's load");
    assert!(pos < wait, "the position is loaded after the wait");
    // q's load is the next one (its address is computed before the wait), then K's and V's.
    assert!(!b[pos..wait].contains("---- load ----"), "a load between");
    for after in ["k_cache + cur", "v_cache + cur"] {
        let load = b.find(after).unwrap_or_else(|| panic!("no {after}"));
        assert!(load > wait, "{after} before the wait");
    }
    if let Err(e) = nvrtc::compile(&src.code, "sm_90", false) {
        panic!("{e}");
    }
}
