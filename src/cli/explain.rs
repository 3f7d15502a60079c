//! `tessera explain`: the generated CUDA C (or tile IR) of a kernel the library ships, or
//! the schedule (`--cuda`: the CUDA C) of the Qwen3 decode megakernel, `qwen3::decode_step`.
use crate::runtime::{ConstVal, Device, Shipped};
use model::config::Config;
use std::path::Path;

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
    /// `qwen3::decode_step` (the decode megakernel at Qwen3-0.6B's shape): print its
    /// persistent kernel's CUDA C, not only its schedule.
    #[arg(long)]
    pub cuda: bool,
    /// `qwen3::decode_step` at this model's shape: a directory with a Qwen3 config.json
    /// (no weights are read).
    #[arg(long, value_name = "DIR")]
    pub model: Option<std::path::PathBuf>,
    /// `qwen3::decode_step` with o_proj and down at this many row tiles per program
    /// (`tessera tune --gemv-tiles`: 0 spreads them over the CTAs; 1, the default, is one
    /// per program).
    #[arg(long, value_name = "N", default_value_t = model::megakernel_engine::GEMV_TILES)]
    pub gemv_tiles: usize,
    /// `qwen3::decode_step` with the MLP as one stage split over the intermediate dimension
    /// (true, the engine's default) or as gate/up then down (false; `TESSERA_FUSED_MLP=0`).
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub fused_mlp: bool,
}

/// The decode step as one megakernel: its schedule, or with `--cuda` its CUDA C.
const DECODE_STEP: &str = "qwen3::decode_step";

pub fn run(args: ExplainArgs) -> Result<(), String> {
    // The library's kernels, then the Qwen3 decoder's (decode, then prefill) as
    // `qwen3::NAME` (constexprs at Qwen3-0.6B's dims).
    let named = |prefix: &str, v: Vec<Shipped>| {
        v.into_iter()
            .map(|k| (format!("{prefix}{}", k.kernel.name()), k))
            .collect::<Vec<_>>()
    };
    let mut all = named("", crate::kernels::shipped());
    all.extend(named("qwen3::", model::kernels::shipped()));
    all.extend(named("qwen3::", model::kernels::prefill_shipped()));
    if args.list || args.kernel.is_none() {
        println!(
            "{DECODE_STEP:<28} the whole Qwen3 decode step as one #[megakernel] (schedule; --cuda for its CUDA C)"
        );
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
    if name == DECODE_STEP {
        return decode_step(
            args.cuda,
            args.warps,
            args.model.as_deref(),
            args.gemv_tiles,
            args.fused_mlp,
        );
    }
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

fn decode_step(
    cuda: bool,
    warps: Option<u32>,
    model: Option<&Path>,
    gemv_tiles: usize,
    fused_mlp: bool,
) -> Result<(), String> {
    let cfg = match model {
        Some(dir) => Config::from_dir(dir).map_err(|e| e.to_string())?,
        None => model::kernels::qwen3_0_6b(),
    };
    print!(
        "{}",
        decode_step_text(&cfg, cuda, warps, gemv_tiles, fused_mlp)?
    );
    Ok(())
}

/// The decode megakernel at `cfg`'s shape with the engine's default options, o_proj and
/// down at `gemv_tiles` row tiles per program (`Tiles::with_gemv_tiles`; `GEMV_TILES` is
/// the default), the MLP fused into one stage or not (`Tiles::with_fused_mlp`): its
/// schedule, or with `cuda` its CUDA C.
pub fn decode_step_text(
    cfg: &Config,
    cuda: bool,
    warps: Option<u32>,
    gemv_tiles: usize,
    fused_mlp: bool,
) -> Result<String, String> {
    use model::kernels::TileRule;
    use model::megakernel_engine::{
        decode_step, default_tiles, with_options, MegakernelOptions, Specialisations,
    };
    let t = default_tiles(cfg, &TileRule::default(), gemv_tiles);
    let o = MegakernelOptions {
        fused_mlp,
        ..Default::default()
    };
    let (t, opts) = with_options(cfg, t, &o);
    let opts = opts.warps(warps.unwrap_or(t.warps));
    // The specialisation a step at position 0 launches, and which others run where.
    let variants = Specialisations::new(cfg, &t, &o);
    let cx = variants.constexprs(variants.at(0));
    let m = &decode_step::MEGAKERNEL;
    if cuda {
        Ok(m.cuda_source(cx, &opts).map_err(|e| e.to_string())?.code)
    } else {
        let text = m.explain(cx, &opts).map_err(|e| e.to_string())?;
        Ok(text + &variants.describe())
    }
}

fn show(v: &ConstVal) -> String {
    match v {
        ConstVal::Int(i) => i.to_string(),
        ConstVal::Bool(b) => b.to_string(),
    }
}
