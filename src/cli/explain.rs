//! `tessera explain`: the generated CUDA C (or tile IR) of a kernel the library ships.
use crate::runtime::{ConstVal, Device, Shipped};

#[derive(clap::Args, Debug)]
pub struct ExplainArgs {
    /// The kernel's name (see --list).
    pub kernel: Option<String>,
    /// List the kernels that can be explained.
    #[arg(long)]
    pub list: bool,
    /// Bind a constexpr, e.g. --set BLOCK=512 (repeatable; defaults shown by --list).
    #[arg(long = "set", value_name = "NAME=VALUE")]
    pub set: Vec<String>,
    /// Warps per program.
    #[arg(long)]
    pub warps: Option<u32>,
    /// Print the specialised tile IR instead of CUDA C.
    #[arg(long)]
    pub ir: bool,
}

pub fn run(args: ExplainArgs) -> Result<(), String> {
    // The library's kernels, then the Qwen3 decoder's as `qwen3::NAME` (constexprs at
    // Qwen3-0.6B's dims).
    let named = |prefix: &str, v: Vec<Shipped>| {
        v.into_iter()
            .map(|k| (format!("{prefix}{}", k.kernel.name()), k))
            .collect::<Vec<_>>()
    };
    let mut all = named("", crate::kernels::shipped());
    all.extend(named("qwen3::", model::kernels::shipped()));
    if args.list || args.kernel.is_none() {
        for (n, k) in &all {
            let cx: Vec<String> = k
                .constexprs
                .iter()
                .map(|(n, v)| format!("{n}={}", show(v)))
                .collect();
            println!(
                "{n:<28} {}  [{} num_warps={}]",
                k.about,
                cx.join(" "),
                k.num_warps
            );
        }
        return Ok(());
    }
    let name = args.kernel.unwrap_or_default();
    let k = all
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, k)| k)
        .ok_or_else(|| {
            let names: Vec<&str> = all.iter().map(|(n, _)| n.as_str()).collect();
            format!("no kernel `{name}`; the kernels are: {}", names.join(", "))
        })?;
    let mut cx = k.constexprs.clone();
    for s in &args.set {
        let (n, v) = s
            .split_once('=')
            .ok_or_else(|| format!("--set takes NAME=VALUE, got `{s}`"))?;
        let slot = cx
            .iter_mut()
            .find(|(c, _)| *c == n)
            .ok_or_else(|| format!("kernel `{name}` has no constexpr `{n}`"))?;
        slot.1 = match v {
            "true" => ConstVal::Bool(true),
            "false" => ConstVal::Bool(false),
            _ => ConstVal::Int(
                v.parse()
                    .map_err(|_| format!("--set {n}: `{v}` is not an integer or bool"))?,
            ),
        };
    }
    let warps = args.warps.unwrap_or(k.num_warps);
    if args.ir {
        print!(
            "{}",
            k.kernel
                .specialize(&cx)
                .map_err(|e| e.to_string())?
                .to_text()
        );
        return Ok(());
    }
    let src = k
        .kernel
        .cuda_source(&cx, warps)
        .map_err(|e| e.to_string())?;
    print!("{}", src.code);
    // With a GPU, what the compiler made of it (stderr, so stdout stays compilable C).
    let dev = Device::auto();
    if dev.is_cuda() {
        match k.kernel.gpu_stats(&dev, &cx, warps) {
            Ok(s) => eprintln!("{} on {}: {s}", name, dev.describe()),
            Err(e) => eprintln!("could not compile on {}: {e}", dev.describe()),
        }
    }
    Ok(())
}

fn show(v: &ConstVal) -> String {
    match v {
        ConstVal::Int(i) => i.to_string(),
        ConstVal::Bool(b) => b.to_string(),
    }
}
