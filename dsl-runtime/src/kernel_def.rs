//! A kernel as the `#[kernel]` macro leaves it: its IR (JSON, parsed once), and everything
//! derived from it per constexpr binding: the specialised IR, the CUDA C, the loaded GPU
//! function. `launch` checks the arguments, then interprets or launches.
use crate::autotune::{self, Config};
use crate::cuda::{self, CudaSource, EmitOptions, DEFAULT_NUM_STAGES};
use crate::device::{lock, CudaDev, Device, HostBuffers, Kind};
use crate::error::{Error, Result};
use crate::interp::{self, InterpArg, InterpOptions};
use crate::launch_args::{self, Arg};
use crate::nvrtc;
use cudarc::driver::{CudaFunction, LaunchConfig};
use dsl_ir::{ConstVal, Kernel};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// The environment variable that turns on `EmitOptions::ring_unroll` (`1`) for every kernel
/// this process emits: a lowering of the pipelined loop with constant ring slots, off. On an
/// H100 it was faster on the matmul example and slower on the prefill GEMM with mma.sync,
/// and the other way round with wgmma (docs/PERF.md, session 15): no A/B showed it faster
/// overall. The generated C differs, so the disk caches (NVRTC's, keyed by the source; the
/// autotuner's, keyed by a hash of it) never mix the two; in memory a process has one value.
pub const RING_UNROLL_ENV: &str = "TESSERA_RING_UNROLL";

/// A process-wide switch of the lowering, read once from the environment variable `var`:
/// `1` on, `0` off, anything else (or unset) `default`.
fn switch(cell: &'static OnceLock<bool>, var: &str, default: bool) -> bool {
    *cell.get_or_init(|| match std::env::var(var).as_deref() {
        Ok("1") => true,
        Ok("0") => false,
        _ => default,
    })
}

/// Whether `TESSERA_RING_UNROLL=1` (read once: the one place the option comes from).
fn ring_unroll() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    switch(&ON, RING_UNROLL_ENV, false)
}

/// The environment variable that turns `EmitOptions::acq_rel_atomics` off (`0`) for every
/// kernel and megakernel this process emits. On by default: on an H100 it took 0.3-0.4 µs
/// off each decode layer's QKV stage (its tickets) in three profiles, and decode at context
/// 512 was faster in 6 of 6 pairs (docs/PERF.md, session 16). The generated C differs, so
/// the disk caches never mix the two (as `TESSERA_RING_UNROLL`).
pub const ACQ_REL_ATOMIC_ENV: &str = "TESSERA_ACQ_REL_ATOMIC";

/// `EmitOptions::acq_rel_atomics` unless `TESSERA_ACQ_REL_ATOMIC=0` (read once).
fn acq_rel_atomics() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    switch(&ON, ACQ_REL_ATOMIC_ENV, true)
}

/// The environment variable that turns `EmitOptions::vector_atomics` off (`0`) for every
/// kernel and megakernel this process emits. On by default: the decode step was as fast or
/// faster in 6 of 6 pairs on an H100 (by 0-1%; docs/PERF.md, session 16), and a fused split-k
/// stage will need it. The generated C differs, so the disk caches never mix the two.
pub const VECTOR_ATOMICS_ENV: &str = "TESSERA_VECTOR_ATOMICS";

/// `EmitOptions::vector_atomics` unless `TESSERA_VECTOR_ATOMICS=0` (read once).
fn vector_atomics() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    switch(&ON, VECTOR_ATOMICS_ENV, true)
}

/// The environment variable that turns `EmitOptions::warp_replica_reductions` off (`0`) for
/// every kernel and megakernel this process emits. On by default: with the megakernel's
/// `early_loads` the decode step was 2.1% faster at 0.6B (context 1; level at 512), 0.8% at
/// 1.7B and 2.1% at 4B on an H100, and alone 1.4% at 0.6B and 1.1% at 1.7B (docs/PERF.md,
/// session 25). The generated C differs, so the disk caches never mix the two.
pub const WARP_REDUCE_ENV: &str = "TESSERA_WARP_REDUCE";

/// `EmitOptions::warp_replica_reductions` unless `TESSERA_WARP_REDUCE=0` (read once).
fn warp_replica_reductions() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    switch(&ON, WARP_REDUCE_ENV, true)
}

/// The environment variable that turns `EmitOptions::row_values_once` off (`0`) for every
/// kernel and megakernel this process emits. On by default: the decode step 4.9% / 5.0%
/// faster at 0.6B (contexts 1 / 512) and 1.7% / 3.3% at 1.7B on an H100, the attention
/// inside o_proj 3.55 -> 2.52 µs a layer (docs/PERF.md, session 27). The generated C
/// differs, so the disk caches never mix the two.
pub const ROW_VALUES_ENV: &str = "TESSERA_ROW_VALUES";

/// `EmitOptions::row_values_once` unless `TESSERA_ROW_VALUES=0` (read once).
fn row_values_once() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    switch(&ON, ROW_VALUES_ENV, true)
}

/// The environment variable that turns `EmitOptions::elide_reuse_syncs` off (`0`) for every
/// kernel and megakernel this process emits. On by default: on an H200 the attention example
/// 2.2% / 2.4% faster (B4 H32 S4096 D128, causal and not), the 0.6B decode step 0.2% / 0.9%
/// faster at contexts 1 / 512 and 0.5% slower at 2048, 1.7B 0.5% / 0.2% faster at 1 / 512,
/// time to first token level (docs/PERF.md, session 34). The generated C differs, so the
/// disk caches never mix the two.
pub const REUSE_SYNC_ENV: &str = "TESSERA_REUSE_SYNC";

/// `EmitOptions::elide_reuse_syncs` unless `TESSERA_REUSE_SYNC=0` (read once).
fn elide_reuse_syncs() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    switch(&ON, REUSE_SYNC_ENV, true)
}

/// The environment variable that turns `EmitOptions::frag_rows` off (`0`) for every kernel
/// and megakernel this process emits. On by default: on an H200 the attention example 2.3x
/// / 2.1x faster (B4 H32 S4096 D128, not causal / causal: 122 -> 278 and 113 -> 235
/// TFLOP/s), the time to first token at 8192 prompt tokens 104 -> 67 ms at prefill's old
/// attention tiles (docs/PERF.md, session 35). The generated C differs, so the disk caches
/// never mix the two.
pub const FRAG_ROWS_ENV: &str = "TESSERA_FRAG_ROWS";

/// `EmitOptions::frag_rows` unless `TESSERA_FRAG_ROWS=0` (read once).
fn frag_rows() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    switch(&ON, FRAG_ROWS_ENV, true)
}

/// The environment variable that turns `EmitOptions::fast_exp2` off (`0`) for every kernel
/// and megakernel this process emits. On by default: on an H200 the attention example 3.0% /
/// 4.5% faster (not causal / causal), the time to first token at 8192 prompt tokens 2.3%
/// shorter (docs/PERF.md, session 35). The generated C differs, so the disk caches never mix
/// the two.
pub const FAST_EXP2_ENV: &str = "TESSERA_FAST_EXP2";

/// `EmitOptions::fast_exp2` unless `TESSERA_FAST_EXP2=0` (read once).
fn fast_exp2() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    switch(&ON, FAST_EXP2_ENV, true)
}

/// `EmitOptions::new(num_warps)` with the lowerings this process's environment switches
/// (`TESSERA_ACQ_REL_ATOMIC`, `TESSERA_VECTOR_ATOMICS`, `TESSERA_WARP_REDUCE`,
/// `TESSERA_ROW_VALUES`, `TESSERA_REUSE_SYNC`, `TESSERA_FRAG_ROWS`, `TESSERA_FAST_EXP2`): what kernels and megakernels emit with.
pub(crate) fn switched_options(num_warps: u32) -> EmitOptions {
    EmitOptions {
        acq_rel_atomics: acq_rel_atomics(),
        vector_atomics: vector_atomics(),
        warp_replica_reductions: warp_replica_reductions(),
        row_values_once: row_values_once(),
        elide_reuse_syncs: elide_reuse_syncs(),
        frag_rows: frag_rows(),
        fast_exp2: fast_exp2(),
        ..EmitOptions::new(num_warps)
    }
}

/// The environment variable that picks the `wgmma` lowering (`EmitOptions::wgmma`) for the
/// kernels this process compiles for an sm_90 device (H100, H200), where the code is then
/// compiled for `sm_90a` and a GEMM main loop's `dot` runs on `wgmma` where its tile
/// allows: `2`, the default on such a device, with one iteration's wgmmas in flight
/// (`EmitOptions::wgmma_in_flight`: 485-593 TFLOP/s against mma.sync's 342-393 at 4096^3
/// and 8192^3 on an H100, docs/PERF.md session 15); `1`, waiting for each iteration's
/// wgmmas; `0`, mma.sync. Without a device (`tessera explain`, `cuda_source`) the code is
/// portable mma.sync unless the variable asks for 1 or 2. The generated C differs, so the
/// disk caches never mix them (as `TESSERA_RING_UNROLL`).
pub const WGMMA_ENV: &str = "TESSERA_WGMMA";

/// `TESSERA_WGMMA`'s level if set to 0, 1 or 2 (read once).
fn wgmma_env() -> Option<u8> {
    static ON: OnceLock<Option<u8>> = OnceLock::new();
    *ON.get_or_init(|| match std::env::var(WGMMA_ENV).as_deref() {
        Ok("0") => Some(0),
        Ok("1") => Some(1),
        Ok("2") => Some(2),
        _ => None,
    })
}

/// The `wgmma` level for code compiled for a device of architecture `arch` (`None`: no
/// device, as `explain` sees it): 2 on sm_90 unless `TESSERA_WGMMA` says otherwise, what
/// the variable says without a device, 0 elsewhere (`wgmma` exists on sm_90a only).
fn wgmma_for(arch: Option<&str>) -> u8 {
    match arch {
        Some("sm_90") => wgmma_env().unwrap_or(2),
        None => wgmma_env().unwrap_or(0),
        Some(_) => 0,
    }
}

/// A constexpr binding: `("BLOCK", ConstVal::Int(1024))`.
pub type Binding = (&'static str, ConstVal);

/// The constexprs of one launch, as a grid closure sees them.
pub struct Constexprs<'a>(pub &'a [Binding]);

impl Constexprs<'_> {
    /// The integer constexpr `name` (0 if it is not bound: the launch then fails with a
    /// clear message about the missing binding).
    pub fn int(&self, name: &str) -> i64 {
        self.0
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| match v {
                ConstVal::Int(i) => *i,
                ConstVal::Bool(b) => *b as i64,
            })
            .unwrap_or(0)
    }
}

/// The grid: fixed, or computed from the constexprs (so an autotuned tile size sets it).
#[derive(Clone)]
pub enum Grid {
    Fixed([u32; 3]),
    Fn(Arc<GridFn>),
}

/// A grid computed from the launch's constexprs.
pub type GridFn = dyn Fn(&Constexprs) -> [u32; 3] + Send + Sync;

impl Grid {
    fn resolve(&self, c: &[Binding]) -> [u32; 3] {
        match self {
            Grid::Fixed(g) => *g,
            Grid::Fn(f) => f(&Constexprs(c)),
        }
    }
}

pub trait IntoGrid {
    fn into_grid(self) -> [u32; 3];
}
impl IntoGrid for u32 {
    fn into_grid(self) -> [u32; 3] {
        [self, 1, 1]
    }
}
impl IntoGrid for usize {
    fn into_grid(self) -> [u32; 3] {
        [self as u32, 1, 1]
    }
}
impl IntoGrid for (u32,) {
    fn into_grid(self) -> [u32; 3] {
        [self.0, 1, 1]
    }
}
impl IntoGrid for (u32, u32) {
    fn into_grid(self) -> [u32; 3] {
        [self.0, self.1, 1]
    }
}
impl IntoGrid for (u32, u32, u32) {
    fn into_grid(self) -> [u32; 3] {
        [self.0, self.1, self.2]
    }
}
impl IntoGrid for [u32; 3] {
    fn into_grid(self) -> [u32; 3] {
        self
    }
}

/// How to launch: the grid of programs, the warps per program and the pipelining depth of
/// loads that feed a `dot` (`num_stages`, as Triton's launch option).
#[derive(Clone)]
pub struct Launch {
    pub grid: Grid,
    pub num_warps: u32,
    pub num_stages: u32,
}

impl Launch {
    /// A fixed grid (a number or a tuple of up to three), 4 warps per program.
    pub fn grid(g: impl IntoGrid) -> Launch {
        Launch {
            grid: Grid::Fixed(g.into_grid()),
            num_warps: 4,
            num_stages: DEFAULT_NUM_STAGES,
        }
    }
    /// A grid computed from the constexprs: `Launch::grid_fn(|c| [cdiv(n, c.int("BLOCK")), 1, 1])`.
    pub fn grid_fn(f: impl Fn(&Constexprs) -> [u32; 3] + Send + Sync + 'static) -> Launch {
        Launch {
            grid: Grid::Fn(Arc::new(f)),
            num_warps: 4,
            num_stages: DEFAULT_NUM_STAGES,
        }
    }
    pub fn warps(mut self, n: u32) -> Launch {
        self.num_warps = n;
        self
    }
    /// Pipelining depth for loads that feed a `dot` in a loop (1: none).
    pub fn stages(mut self, n: u32) -> Launch {
        self.num_stages = n;
        self
    }
}

/// `ceil(a / b)` for grid sizes.
pub fn cdiv(a: i64, b: i64) -> u32 {
    ((a + b - 1) / b.max(1)) as u32
}

/// Autotuning: the candidates, a key naming the problem size (the winner is remembered per
/// key, like Triton's `key=['D']`), and the grid as a function of the constexprs.
#[derive(Clone)]
pub struct Tune {
    pub configs: Vec<Config>,
    pub key: String,
    pub grid: Grid,
}

/// A kernel a crate ships for `tessera explain`: its handle, the constexprs and warps
/// `explain` uses by default, and one line on what it does.
pub struct Shipped {
    pub kernel: &'static KernelDef,
    pub constexprs: Vec<Binding>,
    pub num_warps: u32,
    pub about: &'static str,
}

/// What the macro emits for each kernel.
pub struct KernelDef {
    name: &'static str,
    json: &'static str,
    ir: OnceLock<std::result::Result<Kernel, String>>,
    specs: OnceLock<Mutex<HashMap<Vec<Binding>, Arc<Spec>>>>,
    tuned: OnceLock<Mutex<HashMap<String, usize>>>,
}

/// A loaded GPU function's key: what its source was generated for, and where it was loaded.
#[derive(Clone, PartialEq, Eq, Hash)]
struct FunctionKey {
    num_warps: u32,
    num_stages: u32,
    /// 16-byte alignment and divisibility per parameter (`launch_args::facts`).
    facts: Vec<bool>,
    /// The CUDA context (its address).
    ctx: usize,
}

/// A loaded function and the dynamic shared memory its launch asks for (0: static only).
type Loaded = (CudaFunction, u32);

/// A kernel specialised for one constexpr binding, and its GPU functions by lowering facts.
struct Spec {
    kernel: Kernel,
    functions: Mutex<HashMap<FunctionKey, Loaded>>,
    /// Launch shapes (grid, i32 arguments, buffer lengths) already bounds-checked.
    checked: Mutex<std::collections::HashSet<u64>>,
}

impl KernelDef {
    pub const fn new(name: &'static str, ir_json: &'static str) -> KernelDef {
        KernelDef {
            name,
            json: ir_json,
            ir: OnceLock::new(),
            specs: OnceLock::new(),
            tuned: OnceLock::new(),
        }
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The kernel's tile IR, before specialisation.
    pub fn ir(&self) -> Result<&Kernel> {
        self.ir
            .get_or_init(|| Kernel::from_json(self.json))
            .as_ref()
            .map_err(|e| Error::Lower(format!("kernel `{}`: {e}", self.name)))
    }

    fn spec(&self, constexprs: &[Binding]) -> Result<Arc<Spec>> {
        let mut key = constexprs.to_vec();
        key.sort_by_key(|(n, _)| *n);
        let map = self.specs.get_or_init(Default::default);
        if let Some(s) = lock(map).get(&key) {
            return Ok(s.clone());
        }
        let kernel = self.ir()?.specialize(constexprs).map_err(Error::Lower)?;
        let spec = Arc::new(Spec {
            kernel,
            functions: Mutex::new(HashMap::new()),
            checked: Mutex::new(Default::default()),
        });
        lock(map).insert(key, spec.clone());
        Ok(spec)
    }

    /// The IR specialised for `constexprs`.
    pub fn specialize(&self, constexprs: &[Binding]) -> Result<Kernel> {
        Ok(self.spec(constexprs)?.kernel.clone())
    }

    /// The generated CUDA C for these constexprs (no GPU needed). Pointers are assumed
    /// 16-byte aligned and i32 arguments divisible by 16 (the common, fast case).
    pub fn cuda_source(&self, constexprs: &[Binding], num_warps: u32) -> Result<CudaSource> {
        self.cuda_source_staged(constexprs, num_warps, DEFAULT_NUM_STAGES)
    }

    /// [`KernelDef::cuda_source`] with a pipelining depth for loads that feed a `dot`.
    pub fn cuda_source_staged(
        &self,
        constexprs: &[Binding],
        num_warps: u32,
        num_stages: u32,
    ) -> Result<CudaSource> {
        self.source_for(constexprs, num_warps, num_stages, None)
    }

    /// [`KernelDef::cuda_source_staged`] for a device of architecture `arch` (`None`: none).
    fn source_for(
        &self,
        constexprs: &[Binding],
        num_warps: u32,
        num_stages: u32,
        arch: Option<&str>,
    ) -> Result<CudaSource> {
        let spec = self.spec(constexprs)?;
        let facts = vec![true; spec.kernel.params.len()];
        cuda::emit(
            &spec.kernel,
            &EmitOptions {
                divisible16: facts,
                num_stages,
                ring_unroll: ring_unroll(),
                wgmma: wgmma_for(arch) >= 1,
                wgmma_in_flight: wgmma_for(arch) == 2,
                ..switched_options(num_warps)
            },
        )
        .map_err(Error::Lower)
    }

    pub fn launch(
        &self,
        dev: &Device,
        launch: &Launch,
        args: &[Arg<'_>],
        constexprs: &[Binding],
    ) -> Result<()> {
        let spec = self.spec(constexprs)?;
        self.check_args(&spec.kernel, args)?;
        let grid = launch.grid.resolve(constexprs);
        if grid.contains(&0) || grid[1] > 65535 || grid[2] > 65535 {
            return Err(self.err(format!(
                "grid {grid:?} is empty or exceeds the limits (y, z ≤ 65535)"
            )));
        }
        if !(1..=32).contains(&launch.num_warps) {
            return Err(self.err(format!(
                "num_warps must be 1..=32, got {}",
                launch.num_warps
            )));
        }
        if !(1..=8).contains(&launch.num_stages) {
            return Err(self.err(format!(
                "num_stages must be 1..=8, got {}",
                launch.num_stages
            )));
        }
        match &*dev.0 {
            // The interpreter checks every access exactly as it runs.
            Kind::Interpreter { .. } => self.interpret(&spec.kernel, grid, args),
            Kind::Cuda(_) => {
                self.check_bounds(&spec, grid, args)?;
                self.launch_cuda(
                    dev,
                    &spec,
                    grid,
                    (launch.num_warps, launch.num_stages),
                    args,
                )
            }
        }
    }

    /// Rejects a GPU launch whose accesses provably leave a buffer (see [`crate::bounds`]);
    /// each distinct launch shape is analysed once.
    fn check_bounds(&self, spec: &Spec, grid: [u32; 3], args: &[Arg<'_>]) -> Result<()> {
        let n = spec.kernel.params.len();
        let (mut ints, mut lens) = (vec![None; n], vec![None; n]);
        for ((i, _), a) in spec.kernel.runtime_params().zip(args) {
            match a {
                Arg::I32(v) => ints[i] = Some(*v as i64),
                Arg::Ptr(p) => lens[i] = Some(p.len),
                Arg::F32(_) => {}
            }
        }
        // An in-memory key: std's hasher, no formatting on the launch path.
        let key = {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            (grid, &ints, &lens).hash(&mut h);
            h.finish()
        };
        if lock(&spec.checked).contains(&key) {
            return Ok(());
        }
        crate::bounds::check(&spec.kernel, grid, &ints, &lens).map_err(|m| self.err(m))?;
        lock(&spec.checked).insert(key);
        Ok(())
    }

    /// Launches with the fastest of `tune.configs` for `tune.key`, measuring each on the
    /// first call (kernels that update their inputs in place see several runs then).
    /// The interpreter has nothing to measure and takes the first config.
    pub fn autotune(&self, dev: &Device, tune: &Tune, args: &[Arg<'_>]) -> Result<()> {
        if tune.configs.is_empty() {
            return Err(self.err("autotune needs at least one config".into()));
        }
        let id = format!("{}|{}|{}", self.name, tune.key, dev.name());
        let pick = |i: usize| {
            let c = &tune.configs[i];
            self.launch(
                dev,
                &Launch {
                    grid: tune.grid.clone(),
                    num_warps: c.num_warps,
                    num_stages: c.num_stages,
                },
                args,
                &c.constexprs,
            )
        };
        let map = self.tuned.get_or_init(Default::default);
        if let Some(&i) = lock(map).get(&id) {
            return pick(i);
        }
        let best = if dev.is_cuda() {
            // On disk, the winner is also keyed by the code it was measured on, so a changed
            // lowering (a new tessera) measures again instead of trusting a stale choice.
            let mut code = vec![];
            for c in &tune.configs {
                code.push(
                    self.source_for(&c.constexprs, c.num_warps, c.num_stages, dev.arch())?
                        .code,
                );
            }
            let parts: Vec<&[u8]> = code.iter().map(|c| c.as_bytes()).collect();
            let disk_id = format!("{id}|{:016x}", nvrtc::fnv1a(&parts));
            autotune::choose(&disk_id, &tune.configs, dev, &|i| pick(i))?
        } else {
            0
        };
        lock(map).insert(id, best);
        pick(best)
    }

    /// Registers, shared memory and spills of the compiled kernel on `dev` (GPU only).
    pub fn gpu_stats(
        &self,
        dev: &Device,
        constexprs: &[Binding],
        num_warps: u32,
    ) -> Result<String> {
        let spec = self.spec(constexprs)?;
        let cuda_dev = dev
            .cuda_dev()
            .ok_or_else(|| self.err("not a GPU device".into()))?;
        let key = FunctionKey {
            num_warps,
            num_stages: DEFAULT_NUM_STAGES,
            facts: vec![true; spec.kernel.params.len()],
            ctx: Arc::as_ptr(&cuda_dev.ctx) as usize,
        };
        let (f, _) = self.function(cuda_dev, &spec, key)?;
        Ok(format!(
            "registers/thread: {}, static shared memory: {} B, local memory (spills): {} B/thread",
            f.num_regs()?,
            f.shared_size_bytes()?,
            f.local_size_bytes()?
        ))
    }

    fn err(&self, msg: String) -> Error {
        Error::Launch {
            kernel: self.name.to_string(),
            msg,
        }
    }

    fn check_args(&self, k: &Kernel, args: &[Arg<'_>]) -> Result<()> {
        launch_args::check(&sigs(k), args).map_err(|m| self.err(m))
    }

    fn interpret(&self, k: &Kernel, grid: [u32; 3], args: &[Arg<'_>]) -> Result<()> {
        let mut host = HostBuffers::default();
        let mut iargs = vec![];
        for a in args {
            iargs.push(match a {
                Arg::I32(v) => InterpArg::I32(*v),
                Arg::F32(v) => InterpArg::F32(*v),
                Arg::Ptr(p) => {
                    let buf = host.index(p).ok_or_else(|| {
                        self.err("a GPU buffer was passed to an interpreter launch".into())
                    })?;
                    InterpArg::Ptr {
                        buf,
                        offset: p.offset,
                        len: p.len,
                    }
                }
            });
        }
        interp::run(k, grid, &iargs, &mut host.mem, &InterpOptions::default())
            .map_err(|e| Error::Interp(e.to_string()))
    }

    fn function(&self, dev: &CudaDev, spec: &Spec, key: FunctionKey) -> Result<Loaded> {
        if let Some(f) = lock(&spec.functions).get(&key) {
            return Ok(f.clone());
        }
        let src = cuda::emit(
            &spec.kernel,
            &EmitOptions {
                divisible16: key.facts.clone(),
                num_stages: key.num_stages,
                ring_unroll: ring_unroll(),
                wgmma: wgmma_for(Some(dev.arch)) >= 1,
                wgmma_in_flight: wgmma_for(Some(dev.arch)) == 2,
                ..switched_options(key.num_warps)
            },
        )
        .map_err(Error::Lower)?;
        let dynamic = src.dynamic_smem_bytes;
        let f =
            launch_args::load_function(dev, &src.code, &src.entry, src.arch(dev.arch), dynamic)?;
        lock(&spec.functions).insert(key, (f.clone(), dynamic as u32));
        Ok((f, dynamic as u32))
    }

    fn launch_cuda(
        &self,
        dev: &Device,
        spec: &Spec,
        grid: [u32; 3],
        (num_warps, num_stages): (u32, u32),
        args: &[Arg<'_>],
    ) -> Result<()> {
        let cuda_dev = dev.cuda_dev().expect("checked by the caller");
        let packed = launch_args::Packed::new(args).map_err(|m| self.err(m))?;
        let key = FunctionKey {
            num_warps,
            num_stages,
            facts: launch_args::facts(&sigs(&spec.kernel), args, spec.kernel.params.len()),
            ctx: Arc::as_ptr(&cuda_dev.ctx) as usize,
        };
        let (f, dynamic) = self.function(cuda_dev, spec, key)?;
        let mut b = cuda_dev.stream.launch_builder(&f);
        packed.push(&mut b);
        let cfg = LaunchConfig {
            grid_dim: (grid[0], grid[1], grid[2]),
            block_dim: (32 * num_warps, 1, 1),
            shared_mem_bytes: dynamic,
        };
        // SAFETY: arguments were checked against the kernel's signature (count and types);
        // pointers come from live buffers of the right dtype.
        unsafe { b.launch(cfg) }?;
        Ok(())
    }
}

/// The kernel's run-time parameters, as `launch_args` checks them.
fn sigs(k: &Kernel) -> Vec<launch_args::Sig<'_>> {
    k.runtime_params()
        .map(|(index, p)| launch_args::Sig {
            index,
            name: &p.name,
            kind: p.kind,
        })
        .collect()
}
