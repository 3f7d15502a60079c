//! `tessera generate --engine kernels`: the decoder's kernels, one launch per op, through
//! the interpreter (`--device cpu`), give transformers' greedy tokens; sampling works.
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

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

fn ids(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

#[test]
fn kernels_engine_on_the_interpreter_matches_transformers_greedy() {
    let model = data("untied_gqa4_v5");
    let exp: Value =
        serde_json::from_str(&std::fs::read_to_string(model.join("expected.json")).unwrap())
            .unwrap();
    let prompt: Vec<String> = ids(&exp["prompt_ids"]).iter().map(u64::to_string).collect();
    let o = tessera(&[
        "--model",
        model.to_str().unwrap(),
        "--prompt-ids",
        &prompt.join(","),
        "--max-new-tokens",
        "6",
        "--engine",
        "kernels",
        "--device",
        "cpu",
        "--json",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let j: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(ids(&j["generated_ids"]), ids(&exp["greedy_ids"])[..6]);
    assert_eq!(j["engine"], "kernels");
    assert!(
        j["device"].as_str().unwrap().contains("interpreter"),
        "{}",
        j["device"]
    );
    assert!(
        err.contains("interpreter"),
        "says where the kernels run: {err}"
    );
}

#[test]
fn kernels_engine_samples_from_logits() {
    let o = tessera(&[
        "--prompt-ids",
        "1,2,3",
        "--max-new-tokens",
        "3",
        "--engine",
        "kernels",
        "--device",
        "cpu",
        "--temperature",
        "0.8",
        "--seed",
        "3",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(ids(&j["generated_ids"]).len(), 3);
}
