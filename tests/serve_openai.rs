//! The official `openai` Python client against `tessera serve`, streaming and not, as in
//! the README. Installs the package with pip (into the target directory) when Python
//! cannot import it; skipped, saying so, only when pip cannot install it.
mod serve_common;
use serde_json::Value;
use serve_common::*;
use std::path::PathBuf;
use std::process::Command;

/// A PYTHONPATH under which `import openai` works, or why there is none.
fn openai_package() -> Result<Option<PathBuf>, String> {
    let imports = |path: Option<&PathBuf>| {
        let mut c = Command::new("python3");
        c.args(["-c", "import openai"]);
        if let Some(p) = path {
            c.env("PYTHONPATH", p);
        }
        c.output().map(|o| o.status.success()).unwrap_or(false)
    };
    if imports(None) {
        return Ok(None);
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("python-openai");
    if imports(Some(&dir)) {
        return Ok(Some(dir));
    }
    let o = Command::new("python3")
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--target",
        ])
        .arg(&dir)
        .arg("openai")
        .output()
        .map_err(|e| format!("cannot run python3 -m pip: {e}"))?;
    if !o.status.success() || !imports(Some(&dir)) {
        return Err(format!(
            "pip install openai failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        ));
    }
    Ok(Some(dir))
}

#[test]
fn official_openai_python_client() {
    let pythonpath = match openai_package() {
        Ok(p) => p,
        Err(why) => {
            eprintln!("SKIPPED official_openai_python_client: the `openai` Python package is not available ({why})");
            return;
        }
    };
    let model = data("mha_tok_v5");
    let server = Server::start(&[
        "--model",
        model.to_str().unwrap(),
        "--engine",
        "reference",
        "--device",
        "cpu",
    ]);
    let exp: Value =
        serde_json::from_str(&std::fs::read_to_string(model.join("expected.json")).unwrap())
            .unwrap();
    let user = exp["chat"]["user"].as_str().unwrap();
    let mut cmd = Command::new("python3");
    cmd.arg(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/openai_client.py"
    ))
    .arg(&server.base)
    .arg(user);
    if let Some(p) = &pythonpath {
        cmd.env("PYTHONPATH", p);
    }
    let o = cmd.output().unwrap();
    assert!(
        o.status.success(),
        "python client failed:\n{}\nserver:\n{}",
        String::from_utf8_lossy(&o.stderr),
        server.stderr()
    );
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    let greedy = exp["chat"]["greedy_text"].as_str().unwrap();
    assert_eq!(r["model"], "mha_tok_v5");
    assert_eq!(r["chat"], greedy, "{r}");
    assert_eq!(r["streamed"], greedy, "{r}");
    assert!(r["stream_chunks"].as_u64().unwrap() >= 2, "{r}");
    assert_eq!(r["stream_usage"], r["chat_usage"]);
    let g = generate(&[
        "--model",
        model.to_str().unwrap(),
        "--prompt",
        "Hello world",
        "--raw",
        "--max-new-tokens",
        "12",
        "--engine",
        "reference",
        "--device",
        "cpu",
    ]);
    assert_eq!(r["text"], g["text"]);
    assert_eq!(r["text_stream"], g["text"]);
    assert_eq!(r["not_found"], 404);
    assert_eq!(r["too_long"], "context_length_exceeded");
}
