//! CUDA C → PTX with NVRTC, cached in memory and on disk.
//!
//! The disk cache key is the generated source, the target arch and the NVRTC version, so a
//! new NVRTC or a changed lowering never reuses a stale PTX. The folder is
//! `$TESSERA_CACHE_DIR`, else `$XDG_CACHE_HOME/tessera`, else `~/.cache/tessera`.
use crate::device::probe_nvrtc;
use crate::error::{Error, Result};
use std::path::PathBuf;
use std::time::Instant;

pub const CACHE_ENV: &str = "TESSERA_CACHE_DIR";

/// PTX text and where it came from.
pub struct Compiled {
    pub ptx: String,
    pub from_disk_cache: bool,
    pub compile_ms: f64,
}

pub fn cache_dir() -> Option<PathBuf> {
    if let Ok(d) = std::env::var(CACHE_ENV) {
        return Some(PathBuf::from(d));
    }
    if let Ok(d) = std::env::var("XDG_CACHE_HOME") {
        return Some(PathBuf::from(d).join("tessera"));
    }
    std::env::var("HOME")
        .ok()
        .map(|h| PathBuf::from(h).join(".cache").join("tessera"))
}

/// NVRTC's version, `(major, minor)`.
pub fn version() -> Result<(i32, i32)> {
    probe_nvrtc()?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: the library is present (probed); nvrtcVersion writes two ints.
    unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
    Ok((major, minor))
}

/// Compiles `code` for `arch` (e.g. `sm_90`), using the disk cache unless `use_cache` is false.
pub fn compile(code: &str, arch: &'static str, use_cache: bool) -> Result<Compiled> {
    let (major, minor) = version()?;
    let key = format!(
        "{:016x}",
        fnv1a(&[
            code.as_bytes(),
            arch.as_bytes(),
            format!("{major}.{minor}").as_bytes()
        ])
    );
    let dir = cache_dir();
    if use_cache {
        if let Some(dir) = &dir {
            // The source is stored beside the PTX and compared, so a hash collision is harmless.
            let (src, ptx) = (
                dir.join(format!("{key}.cu")),
                dir.join(format!("{key}.ptx")),
            );
            if let (Ok(s), Ok(p)) = (std::fs::read_to_string(&src), std::fs::read_to_string(&ptx)) {
                if s == code {
                    return Ok(Compiled {
                        ptx: p,
                        from_disk_cache: true,
                        compile_ms: 0.0,
                    });
                }
            }
        }
    }
    let t = Instant::now();
    let opts = cudarc::nvrtc::CompileOptions {
        arch: Some(arch),
        options: vec!["--std=c++17".into()],
        ..Default::default()
    };
    let ptx = cudarc::nvrtc::compile_ptx_with_opts(code, opts)
        .map_err(|e| Error::Compile(describe_failure(&e, code)))?;
    let compile_ms = t.elapsed().as_secs_f64() * 1e3;
    let ptx = ptx.to_src();
    if let Some(dir) = &dir {
        // A cache that cannot be written only costs time later: ignore the failure.
        if std::fs::create_dir_all(dir).is_ok() {
            let _ = std::fs::write(dir.join(format!("{key}.cu")), code);
            let _ = std::fs::write(dir.join(format!("{key}.ptx")), &ptx);
        }
    }
    Ok(Compiled {
        ptx,
        from_disk_cache: false,
        compile_ms,
    })
}

/// What ptxas reports for a kernel compiled to machine code (`Used N registers`, spills).
#[derive(Clone, Debug)]
pub struct PtxasInfo {
    pub registers: u32,
    /// Bytes of spill stores plus spill loads per thread (0: no spills).
    pub spill_bytes: u32,
    pub log: String,
}

/// Compiles `code` for the real architecture `arch` (`sm_90a`, ...) to machine code, so ptxas
/// runs (and checks what PTX alone does not, such as `wgmma` needing sm_90a), and returns its
/// report for the last kernel. For tests and tuning; not cached.
pub fn ptxas_info(code: &str, arch: &str) -> Result<PtxasInfo> {
    use cudarc::nvrtc::result as nv;
    probe_nvrtc()?;
    let src = std::ffi::CString::new(code).map_err(|e| Error::Compile(e.to_string()))?;
    let prog = nv::create_program(&src, None).map_err(|e| Error::Compile(format!("{e:?}")))?;
    let opts = [
        format!("--gpu-architecture={arch}"),
        "--std=c++17".to_string(),
        "--ptxas-options=-v".to_string(),
    ];
    // SAFETY: `prog` was created above and is destroyed once, below.
    let (ok, log) = unsafe {
        let ok = nv::compile_program(prog, &opts);
        let log = nv::get_program_log(prog).unwrap_or_default();
        let _ = nv::destroy_program(prog);
        (ok, log)
    };
    let log: String = log
        .iter()
        .take_while(|c| **c != 0)
        .map(|c| *c as u8 as char)
        .collect();
    if ok.is_err() {
        return Err(Error::Compile(format!("NVRTC/ptxas for {arch}:\n{log}")));
    }
    // `ptxas info : Used 196 registers, ...` and `... 0 bytes spill stores, 0 bytes spill loads`.
    let number_before = |line: &str, what: &str| -> Option<u32> {
        let i = line.find(what)?;
        line[..i].split_whitespace().last()?.parse().ok()
    };
    let mut info = PtxasInfo {
        registers: 0,
        spill_bytes: 0,
        log: log.clone(),
    };
    for l in log.lines() {
        if let Some(r) = number_before(l, " registers") {
            info.registers = r;
        }
        if let (Some(st), Some(ld)) = (
            number_before(l, " bytes spill stores"),
            number_before(l, " bytes spill loads"),
        ) {
            info.spill_bytes = st + ld;
        }
    }
    Ok(info)
}

/// NVRTC's log, with each generated line it names quoted (and its neighbours), since the
/// user never saw the generated source.
fn describe_failure(e: &cudarc::nvrtc::CompileError, code: &str) -> String {
    let log = match e {
        cudarc::nvrtc::CompileError::CompileError { log, .. } => log.to_string_lossy().into_owned(),
        other => return format!("NVRTC failed: {other:?}"),
    };
    let lines: Vec<&str> = code.lines().collect();
    let mut out = format!("NVRTC rejected the generated CUDA C:\n{}", log.trim_end());
    let mut shown = std::collections::BTreeSet::new();
    for l in log.lines() {
        // NVRTC writes `default_program(LINE): error: ...`.
        let Some(n) = l
            .split_once('(')
            .and_then(|(_, r)| r.split_once(')'))
            .and_then(|(n, _)| n.parse::<usize>().ok())
        else {
            continue;
        };
        if !shown.insert(n) {
            continue;
        }
        out.push_str(&format!("\ngenerated source around line {n}:"));
        let first = n.saturating_sub(3);
        for (i, line) in lines.iter().enumerate().skip(first).take(n + 2 - first) {
            let mark = if i + 1 == n { ">" } else { " " };
            out.push_str(&format!("\n{mark}{:5} | {line}", i + 1));
        }
    }
    out
}

/// FNV-1a, 64-bit: a stable hash (std's hasher may change between Rust releases).
pub fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for p in parts {
        for &b in *p {
            h ^= b as u64;
            h = h.wrapping_mul(0x100000001b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}
