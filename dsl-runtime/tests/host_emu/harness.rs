//! Running generated CUDA C on the CPU, shared by dsl-runtime/tests/emit_host.rs (one kernel
//! body) and tests/megakernel_host.rs (a whole persistent kernel): swapping the PTX blocks
//! for the C++ versions in this folder, and compiling and running a program with g++.
#![allow(dead_code)]
use std::path::{Path, PathBuf};
use std::process::Command;

/// This folder (the emulation's headers).
pub fn emu_dir() -> PathBuf {
    PathBuf::from(file!())
        .parent()
        .map(|p| {
            // `file!()` is relative to the workspace root.
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .ancestors()
                .find(|a| a.join(p).exists())
                .map(|a| a.join(p))
                .unwrap_or_else(|| p.to_path_buf())
        })
        .expect("harness.rs lives in a folder")
}

/// `code` with the block `// -- NAME ...` .. `// -- end NAME --` replaced by the file `with`
/// of this folder.
pub fn swap_block(code: &str, name: &str, with: &str) -> String {
    let text = std::fs::read_to_string(emu_dir().join(with)).unwrap();
    let a = code
        .find(&format!("// -- {name} ("))
        .unwrap_or_else(|| panic!("no `{name}` block in the generated code"));
    let b = a + code[a..]
        .find(&format!("// -- end {name} --"))
        .unwrap_or_else(|| panic!("the `{name}` block has no end"));
    format!("{}{text}{}", &code[..a], &code[b..])
}

/// Compiles `cpp` (after `#include "cuda_host.h"`) in `dir` and runs it with `args` under a
/// time limit (a deadlock fails instead of hanging); returns its standard output.
pub fn compile_and_run(cpp: &str, dir: &Path, args: &[PathBuf], timeout_s: u32) -> String {
    try_compile_and_run(cpp, dir, args, timeout_s).unwrap_or_else(|e| panic!("{e}"))
}

/// [`compile_and_run`], a failed run (not a failed compile) returned as its message.
pub fn try_compile_and_run(
    cpp: &str,
    dir: &Path,
    args: &[PathBuf],
    timeout_s: u32,
) -> Result<String, String> {
    let cpp = format!(
        "#include \"{}\"\n{cpp}",
        emu_dir().join("cuda_host.h").display()
    );
    let src = dir.join("emu.cpp");
    std::fs::write(&src, &cpp).unwrap();
    let exe = dir.join("emu");
    let out = Command::new("g++")
        .args([
            "-std=c++20",
            "-O1",
            "-ffp-contract=off",
            "-pthread",
            "-w",
            "-o",
        ])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("g++ runs the generated CUDA C on the CPU: install it");
    if !out.status.success() {
        let numbered: String = cpp
            .lines()
            .enumerate()
            .map(|(i, l)| format!("{:5} {l}\n", i + 1))
            .collect();
        panic!(
            "g++ failed:\n{}\n{numbered}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let run = Command::new("timeout")
        .arg(timeout_s.to_string())
        .arg(&exe)
        .args(args)
        .output()
        .unwrap();
    if !run.status.success() {
        return Err(format!(
            "the emulated code failed ({}): {}",
            run.status,
            String::from_utf8_lossy(&run.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&run.stdout).into_owned())
}

/// A fresh temporary folder.
pub fn tempdir(what: &str) -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let d = std::env::temp_dir().join(format!(
        "tessera_{what}_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}
