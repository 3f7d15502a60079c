//! `tessera generate` through the binary: output contract and bad input.
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("model/tests/data")
        .join(name)
}

fn tessera(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tessera"))
        .arg("generate")
        .args(args)
        .output()
        .expect("run tessera")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}
fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Fails with one `error:` line mentioning every part, and no panic.
fn assert_fails(o: &Output, parts: &[&str]) {
    let err = stderr(o);
    assert!(!o.status.success(), "should fail; stderr: {err}");
    assert!(!err.contains("panicked"), "panic: {err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("error: "))
        .unwrap_or_else(|| panic!("no error line: {err}"));
    for p in parts {
        assert!(line.contains(p), "{line:?} should mention {p:?}");
    }
}

fn copy(name: &str, tag: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "tessera-cli-test-{}-{}-{tag}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for e in std::fs::read_dir(data(name)).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dir.join(e.file_name())).unwrap();
    }
    dir
}

fn edit_config(dir: &Path, f: impl FnOnce(&mut Value)) {
    let p = dir.join("config.json");
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(p, v.to_string()).unwrap();
}

/// Replaces bytes in the safetensors JSON header (same length keeps the file valid).
fn patch_header(dir: &Path, from: &str, to: &str) {
    assert_eq!(from.len(), to.len());
    let p = dir.join("model.safetensors");
    let mut b = std::fs::read(&p).unwrap();
    let n = u64::from_le_bytes(b[..8].try_into().unwrap()) as usize;
    let at = b[8..8 + n]
        .windows(from.len())
        .position(|w| w == from.as_bytes())
        .expect("in header")
        + 8;
    b[at..at + to.len()].copy_from_slice(to.as_bytes());
    std::fs::write(p, b).unwrap();
}

fn json_of(o: &Output) -> Value {
    assert!(o.status.success(), "stderr: {}", stderr(o));
    let out = stdout(o);
    assert_eq!(
        out.trim().lines().count(),
        1,
        "exactly one JSON object on stdout: {out}"
    );
    serde_json::from_str(out.trim()).unwrap()
}

fn ids(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

#[test]
fn json_output_matches_transformers_greedy() {
    let exp: Value = serde_json::from_str(
        &std::fs::read_to_string(data("untied_gqa4_v5").join("expected.json")).unwrap(),
    )
    .unwrap();
    let prompt: Vec<String> = ids(&exp["prompt_ids"]).iter().map(u64::to_string).collect();
    let model = data("untied_gqa4_v5");
    let o = tessera(&[
        "--model",
        model.to_str().unwrap(),
        "--prompt-ids",
        &prompt.join(","),
        "--max-new-tokens",
        "10",
        "--json",
        // The default engine depends on the machine (the megakernel where a GPU is present).
        "--engine",
        "reference",
        "--device",
        "cpu",
    ]);
    let j = json_of(&o);
    assert_eq!(ids(&j["prompt_ids"]), ids(&exp["prompt_ids"]));
    assert_eq!(ids(&j["generated_ids"]), ids(&exp["greedy_ids"])[..10]);
    assert_eq!(j["engine"], "reference");
    assert_eq!(j["device"], "cpu");
    assert!(j["text"].is_null(), "no tokenizer, no text");
    for k in [
        "prompt_tokens_per_s",
        "decode_tokens_per_s",
        "time_to_first_token_ms",
    ] {
        assert!(j["timings"][k].as_f64().unwrap() > 0.0, "{k}");
    }
    let err = stderr(&o);
    assert!(
        err.contains("tokens/s") && err.contains("time to first token"),
        "{err}"
    );
}

#[test]
fn chat_prompt_streams_text() {
    let exp: Value = serde_json::from_str(
        &std::fs::read_to_string(data("mha_tok_v5").join("expected.json")).unwrap(),
    )
    .unwrap();
    let model = data("mha_tok_v5");
    let user = exp["chat"]["user"].as_str().unwrap();
    let args = [
        "--model",
        model.to_str().unwrap(),
        "--prompt",
        user,
        "--no-thinking",
        "--max-new-tokens",
        "24",
    ];
    let j = json_of(&tessera(&[&args[..], &["--json"]].concat()));
    assert_eq!(
        ids(&j["prompt_ids"]),
        ids(&exp["chat"]["ids_no_thinking"]),
        "chat template applied"
    );
    let text = exp["chat"]["greedy_text"].as_str().unwrap();
    assert_eq!(j["text"], text);
    let o = tessera(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        format!("{text}\n"),
        "streamed text equals the decoded text"
    );
    // --raw skips the template.
    let raw = json_of(&tessera(&[
        "--model",
        model.to_str().unwrap(),
        "--prompt",
        "Hello",
        "--raw",
        "--json",
        "--max-new-tokens",
        "1",
    ]));
    assert!(ids(&raw["prompt_ids"]).len() < 6);
}

#[test]
fn embedded_default_runs_and_says_random() {
    let o = tessera(&["--prompt", "Hello", "--max-new-tokens", "5", "--json"]);
    let j = json_of(&o);
    assert_eq!(
        ids(&j["prompt_ids"]),
        vec![72, 101, 108, 108, 111],
        "raw bytes, no template"
    );
    assert!(ids(&j["generated_ids"]).len() <= 5);
    assert!(stderr(&o).to_lowercase().contains("random"));
    // Deterministic, and sampling follows the seed.
    let again = json_of(&tessera(&[
        "--prompt",
        "Hello",
        "--max-new-tokens",
        "5",
        "--json",
    ]));
    assert_eq!(j["generated_ids"], again["generated_ids"]);
    let s = |seed: &str| {
        json_of(&tessera(&[
            "--prompt",
            "Hi",
            "--max-new-tokens",
            "12",
            "--temperature",
            "1.5",
            "--seed",
            seed,
            "--json",
        ]))["generated_ids"]
            .clone()
    };
    assert_eq!(s("1"), s("1"));
    assert_ne!(s("1"), s("2"));
}

#[test]
fn stops_at_context_limit_and_eos() {
    let dir = copy("tied_gqa2_v4", "ctx");
    edit_config(&dir, |c| c["max_position_embeddings"] = 8.into());
    let o = tessera(&[
        "--model",
        dir.to_str().unwrap(),
        "--prompt-ids",
        "1,2,3,4,5",
        "--max-new-tokens",
        "50",
        "--json",
    ]);
    let j = json_of(&o);
    assert_eq!(
        ids(&j["generated_ids"]).len(),
        4,
        "positions 5..8 are filled, one more token sampled"
    );
    assert!(stderr(&o).contains("context limit"), "{}", stderr(&o));
    // Make the first greedy token an EOS id: generation stops right after it.
    let exp: Value = serde_json::from_str(
        &std::fs::read_to_string(data("tied_gqa2_v4").join("expected.json")).unwrap(),
    )
    .unwrap();
    let first = exp["greedy_ids"][0].as_u64().unwrap();
    let prompt: Vec<String> = ids(&exp["prompt_ids"]).iter().map(u64::to_string).collect();
    let dir = copy("tied_gqa2_v4", "eos");
    std::fs::write(
        dir.join("generation_config.json"),
        format!("{{\"eos_token_id\": [{first}]}}"),
    )
    .unwrap();
    let j = json_of(&tessera(&[
        "--model",
        dir.to_str().unwrap(),
        "--prompt-ids",
        &prompt.join(","),
        "--json",
    ]));
    assert_eq!(ids(&j["generated_ids"]), vec![first]);
    assert_eq!(j["stop_reason"], "eos");
}

#[test]
fn bad_checkpoints_fail_cleanly() {
    let ids_arg = ["--prompt-ids", "1,2"];
    let run = |dir: &Path| tessera(&[&["--model", dir.to_str().unwrap()][..], &ids_arg].concat());

    let dir = copy("tied_gqa2_v4", "malformed");
    std::fs::write(dir.join("config.json"), "{ not json").unwrap();
    assert_fails(&run(&dir), &["config.json", "malformed"]);

    let dir = copy("tied_gqa2_v4", "missing");
    std::fs::remove_file(dir.join("model.safetensors")).unwrap();
    assert_fails(&run(&dir), &["model.safetensors"]);

    let dir = copy("tied_gqa2_v4", "tensor");
    patch_header(&dir, "model.norm.weight", "model.norm.weigxt");
    assert_fails(&run(&dir), &["model.norm.weight", "missing"]);

    let dir = copy("tied_gqa2_v4", "dtype");
    patch_header(&dir, "\"BF16\",\"shape\":[64]", "\"I16\" ,\"shape\":[64]");
    assert_fails(&run(&dir), &["dtype", "I16"]);

    let dir = copy("tied_gqa2_v4", "shape");
    edit_config(&dir, |c| c["intermediate_size"] = 100.into());
    assert_fails(&run(&dir), &["gate_proj", "[100, 64]"]);

    let dir = copy("tied_gqa2_v4", "truncated");
    let p = dir.join("model.safetensors");
    let b = std::fs::read(&p).unwrap();
    std::fs::write(&p, &b[..b.len() - 100]).unwrap();
    assert_fails(&run(&dir), &["model.safetensors"]);

    let dir = copy("tied_gqa2_v4", "moe");
    edit_config(&dir, |c| c["model_type"] = "qwen3_moe".into());
    assert_fails(&run(&dir), &["unsupported", "qwen3_moe"]);
}

/// `--engine megakernel --device cpu`: the one-launch decode step through the interpreter
/// gives transformers' greedy tokens, and says where it ran.
#[test]
fn megakernel_on_the_cpu_matches_transformers_greedy() {
    let exp: Value = serde_json::from_str(
        &std::fs::read_to_string(data("tied_gqa2_v4").join("expected.json")).unwrap(),
    )
    .unwrap();
    let prompt: Vec<String> = ids(&exp["prompt_ids"]).iter().map(u64::to_string).collect();
    let model = data("tied_gqa2_v4");
    let o = tessera(&[
        "--model",
        model.to_str().unwrap(),
        "--prompt-ids",
        &prompt.join(","),
        "--max-new-tokens",
        "6",
        "--engine",
        "megakernel",
        "--device",
        "cpu",
        "--max-context",
        "64",
        "--json",
    ]);
    let j = json_of(&o);
    assert_eq!(ids(&j["generated_ids"]), ids(&exp["greedy_ids"])[..6]);
    assert_eq!(j["engine"], "megakernel");
    assert!(j["device"].as_str().unwrap().contains("interpreter"));
    // The prompt went through prefill (the reference engine steps through it instead).
    assert!(
        stderr(&o).contains("(prefill, chunks of up to"),
        "{}",
        stderr(&o)
    );
    // Temperature sampling runs on the device too (Gumbel-max): reproducible per seed.
    let sample = |seed: &str| {
        json_of(&tessera(&[
            "--model",
            model.to_str().unwrap(),
            "--prompt-ids",
            &prompt.join(","),
            "--max-new-tokens",
            "4",
            "--engine",
            "megakernel",
            "--device",
            "cpu",
            "--temperature",
            "0.9",
            "--seed",
            seed,
            "--json",
        ]))["generated_ids"]
            .clone()
    };
    assert_eq!(sample("5"), sample("5"));
}

#[test]
fn bad_prompts_and_flags_fail_cleanly() {
    let m = data("tied_gqa2_v4");
    let m = m.to_str().unwrap();
    assert_fails(
        &tessera(&["--model", m, "--prompt-ids", "1,two,3"]),
        &["\"two\"", "not a token id"],
    );
    assert_fails(
        &tessera(&["--model", m, "--prompt-ids", "1,997"]),
        &["997", "vocab_size 997"],
    );
    assert_fails(&tessera(&["--model", m, "--prompt-ids", ""]), &["empty"]);
    assert_fails(&tessera(&["--prompt", "   "]), &["empty prompt"]);
    let long: Vec<String> = (0..4097).map(|i| (i % 900).to_string()).collect();
    assert_fails(
        &tessera(&["--model", m, "--prompt-ids", &long.join(",")]),
        &["4097", "context"],
    );
    assert_fails(
        &tessera(&["--model", m, "--prompt", "hi"]),
        &["tokenizer.json", "--prompt-ids"],
    );
    assert_fails(
        &tessera(&[
            "--model",
            m,
            "--prompt-ids",
            "1",
            "--engine",
            "megakernel",
            "--device",
            "cpu",
            "--max-context",
            "5000",
        ]),
        &["--max-context 5000", "max_position_embeddings 4096"],
    );
    assert_fails(&tessera(&["--prompt", "hi", "--device", "cuda"]), &["cuda"]);
    assert_fails(
        &tessera(&["--model", "/nonexistent/ckpt", "--prompt", "hi"]),
        &["/nonexistent/ckpt"],
    );
    // --device auto picks the cpu for the reference engine.
    assert!(tessera(&[
        "--prompt",
        "hi",
        "--device",
        "auto",
        "--max-new-tokens",
        "1"
    ])
    .status
    .success());
}
