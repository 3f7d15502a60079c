//! What `#[megakernel]` emits a handle to: [`MegaDef`]. Binds constexprs, schedules,
//! explains, generates CUDA C, and launches: through the interpreter (sequential or
//! adversarial) or as one cooperative launch sized by the occupancy API.
use super::bodies::{stage_bodies, MegaFacts};
use super::cuda::{self, GenOptions, MegaSource, SyncWords};
use super::interp::{self, HostArg, InterpMode};
use super::program::{Program, Val};
use super::resolve::{resolve, Resolved};
use super::schedule::{schedule, sync_text, Schedule};
use crate::device::{lock, Device, HostBuffers, Kind, PtrArg, RawBuf};
use crate::error::{Error, Result};
use crate::kernel_def::Binding;
use crate::launch_args;
use crate::launch_args::Arg;
use cudarc::driver::{CudaFunction, CudaSlice, LaunchConfig, PushKernelArg};
use dsl_ir::ConstVal;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// How to run a megakernel.
#[derive(Clone, Debug)]
pub struct MegaOptions {
    /// Warps per CTA: every stage is lowered for this block size.
    pub num_warps: u32,
    /// GPU: CTAs in the persistent grid. Default: as many as the occupancy API says can be
    /// co-resident (memory-bound stages need the warps in flight); never more.
    pub ctas: Option<u32>,
    /// GPU: a wait that lasts longer than this aborts the launch with an error naming it.
    pub timeout_ms: u64,
    /// The interpreter's mode (ignored on a GPU).
    pub interp: InterpMode,
    /// Syncs (by id) to leave out: for tests that show a sync is needed.
    pub drop_syncs: Vec<usize>,
    /// Every sync of the schedule left out, whichever specialisation is launched (a
    /// diagnostic: the step with no waits, `tessera tune --no-waits`).
    pub drop_all_syncs: bool,
    /// A sync (by id) whose wait can never complete: for the watchdog test.
    pub break_sync: Option<usize>,
    /// GPU: wait for the launch and check the error word (a device→host copy). Off, the
    /// caller checks when it likes with [`MegaDef::check_errors`].
    pub check: bool,
    /// GPU: before a CTA waits, it prefetches its share of the first this-many bytes of
    /// each weight window of the stage into L2 (0: off).
    pub wait_prefetch_bytes: u64,
    /// `wait_prefetch_bytes` for the stages of these kernels instead (the Qwen3 engine's
    /// fused MLP: `megakernel_engine::wait_prefetch_rule`, `TESSERA_WAIT_PREFETCH=kernel=MiB,...`).
    pub wait_prefetch_by_kernel: Vec<(String, u64)>,
    /// GPU: a stage's counter wait runs inside its programs' bodies, right before each
    /// body's first access to memory another stage may write (`EmitOptions::dep_hook`), so
    /// the first program's weight loads are in flight while the CTA waits; the wait is
    /// inlined there. Off by default; the Qwen3 engine turns it on where it measured faster
    /// (`megakernel_engine::wait_in_body_rule`, docs/PERF.md session 18).
    pub wait_in_body: bool,
    /// With `wait_in_body`: only the stages of these kernels wait in their bodies (empty:
    /// every stage). A candidate's knob (`TESSERA_WAIT_IN_BODY=kernel,kernel`).
    pub wait_in_body_only: Vec<String>,
    /// GPU, with `wait_in_body`: a body also loads before its wait what no stage that may
    /// still be running writes (not only the weights), e.g. the decode step's `pos`, which
    /// only its last stage writes. On by default: with `EmitOptions::
    /// warp_replica_reductions` 2.1% faster at 0.6B and 4B on an H100, alone 1.0% at 0.6B
    /// (docs/PERF.md, session 25); `TESSERA_EARLY_LOADS=0` turns it off in the Qwen3 engine.
    pub early_loads: bool,
    /// GPU: record per stage run and CTA when it entered, passed its wait and finished;
    /// read with [`MegaDef::take_profile`] (waits for the launch).
    pub profile: bool,
}

impl Default for MegaOptions {
    fn default() -> Self {
        MegaOptions {
            num_warps: 4,
            ctas: None,
            timeout_ms: 2000,
            interp: InterpMode::Sequential,
            drop_syncs: vec![],
            drop_all_syncs: false,
            break_sync: None,
            check: true,
            wait_prefetch_bytes: 4 << 20,
            wait_prefetch_by_kernel: vec![],
            wait_in_body: false,
            wait_in_body_only: vec![],
            early_loads: true,
            profile: false,
        }
    }
}

impl MegaOptions {
    /// The bytes of each weight window a stage of kernel `kernel` prefetches while it
    /// waits (`wait_prefetch_by_kernel`, else `wait_prefetch_bytes`).
    pub fn wait_prefetch_for(&self, kernel: &str) -> u64 {
        self.wait_prefetch_by_kernel
            .iter()
            .find(|(k, _)| k == kernel)
            .map_or(self.wait_prefetch_bytes, |&(_, b)| b)
    }
    /// Whether a stage of kernel `kernel` waits inside its bodies (`wait_in_body`).
    pub fn waits_in_body(&self, kernel: &str) -> bool {
        self.wait_in_body
            && (self.wait_in_body_only.is_empty()
                || self.wait_in_body_only.iter().any(|k| k == kernel))
    }
    pub fn warps(mut self, n: u32) -> Self {
        self.num_warps = n;
        self
    }
    pub fn adversarial(mut self, ctas: u32, policy: interp::Policy) -> Self {
        self.interp = InterpMode::Adversarial { ctas, policy };
        self
    }
}

/// A program resolved for one binding, and its schedule.
type ResolvedPlan = (Resolved, Schedule);

/// A megakernel: its program (built on first use) and everything derived per binding.
pub struct MegaDef {
    build: fn() -> Program,
    program: OnceLock<Program>,
    plans: OnceLock<Mutex<HashMap<PlanKey, Arc<ResolvedPlan>>>>,
    functions: OnceLock<Mutex<HashMap<FnKey, Arc<Compiled>>>>,
    /// Sync words per (stream, length), reused across launches: the kernel leaves them
    /// zeroed when it completes; the host zeroes them only after a launch that did not.
    sync_bufs: OnceLock<Mutex<HashMap<(usize, usize), SyncBuf>>>,
    /// The last profiled launch's stamps.
    profile: Mutex<Option<super::profile::Profile>>,
}

struct SyncBuf {
    words: CudaSlice<u32>,
    /// The grid it was sized for (the records: one per CTA).
    ctas: usize,
    /// False after a launch that may have left counters behind (a watchdog abort, an error).
    clean: bool,
}

/// A loaded persistent kernel's key: everything its source depends on, and the context
/// it was loaded into.
#[derive(Clone, PartialEq, Eq, Hash)]
struct FnKey {
    plan: PlanKey,
    /// 16-byte alignment and divisibility per parameter (`launch_args::facts`).
    facts: Vec<bool>,
    /// The CUDA context (its address).
    ctx: usize,
    gen: GenKey,
}

/// The options the generated source depends on (`gen_key`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct GenKey {
    num_warps: u32,
    drop_syncs: Vec<usize>,
    drop_all_syncs: bool,
    break_sync: Option<usize>,
    wait_prefetch_bytes: u64,
    wait_prefetch_by_kernel: Vec<(String, u64)>,
    wait_in_body: bool,
    wait_in_body_only: Vec<String>,
    early_loads: bool,
    profile: bool,
}

/// The part of `opts` that changes the generated source. Every field is named, so a new
/// option does not compile until it is placed here or among the run-time ones (an option
/// left out of the key would reuse a kernel compiled without it: session 7's first A/B of
/// the copies' boxes timed one kernel twice that way).
fn gen_key(opts: &MegaOptions) -> GenKey {
    let MegaOptions {
        num_warps,
        ctas: _,
        timeout_ms: _,
        interp: _,
        drop_syncs,
        drop_all_syncs,
        break_sync,
        check: _,
        wait_prefetch_bytes,
        wait_prefetch_by_kernel,
        wait_in_body,
        wait_in_body_only,
        early_loads,
        profile,
    } = opts;
    GenKey {
        num_warps: *num_warps,
        drop_syncs: drop_syncs.clone(),
        drop_all_syncs: *drop_all_syncs,
        break_sync: *break_sync,
        wait_prefetch_bytes: *wait_prefetch_bytes,
        wait_prefetch_by_kernel: wait_prefetch_by_kernel.clone(),
        wait_in_body: *wait_in_body,
        wait_in_body_only: wait_in_body_only.clone(),
        early_loads: *early_loads,
        profile: *profile,
    }
}

/// A loaded persistent kernel.
struct Compiled {
    f: CudaFunction,
    block_threads: u32,
    smem_bytes: usize,
}

/// A plan as a launch uses it: the cached one, or a copy with syncs left out.
struct Planned {
    arc: Arc<ResolvedPlan>,
    modified: Option<Schedule>,
    key: PlanKey,
}

impl Planned {
    fn r(&self) -> &Resolved {
        &self.arc.0
    }
    fn s(&self) -> &Schedule {
        self.modified.as_ref().unwrap_or(&self.arc.1)
    }
}

type PlanKey = Vec<(String, ConstVal)>;

/// A bound, scheduled megakernel, for inspection.
pub struct Plan {
    pub resolved: Resolved,
    pub schedule: Schedule,
}

impl MegaDef {
    pub const fn new(build: fn() -> Program) -> MegaDef {
        MegaDef {
            build,
            program: OnceLock::new(),
            plans: OnceLock::new(),
            functions: OnceLock::new(),
            sync_bufs: OnceLock::new(),
            profile: Mutex::new(None),
        }
    }

    pub fn program(&self) -> &Program {
        self.program.get_or_init(self.build)
    }

    pub fn name(&self) -> &str {
        &self.program().name
    }

    fn err(&self, msg: impl Into<String>) -> Error {
        Error::Launch {
            kernel: self.name().to_string(),
            msg: msg.into(),
        }
    }

    fn planned(&self, constexprs: &[Binding], opts: &MegaOptions) -> Result<Planned> {
        let mut key: Vec<(String, ConstVal)> = constexprs
            .iter()
            .map(|(n, v)| (n.to_string(), *v))
            .collect();
        key.sort_by(|a, b| a.0.cmp(&b.0));
        let map = self.plans.get_or_init(Default::default);
        let cached = lock(map).get(&key).cloned();
        let arc = match cached {
            Some(p) => p,
            None => {
                let r = resolve(self.program(), constexprs).map_err(Error::Lower)?;
                let s = schedule(&r);
                let p = Arc::new((r, s));
                lock(map).insert(key.clone(), p.clone());
                p
            }
        };
        let mut modified: Option<Schedule> = None;
        for &d in &opts.drop_syncs {
            if !arc.1.syncs.iter().any(|s| s.id == d) {
                return Err(self.err(format!(
                    "there is no sync {d} to drop (the schedule has {})",
                    arc.1.syncs.len()
                )));
            }
            modified = Some(modified.as_ref().unwrap_or(&arc.1).without_sync(d));
        }
        if opts.drop_all_syncs {
            for s in &arc.1.syncs {
                modified = Some(modified.as_ref().unwrap_or(&arc.1).without_sync(s.id));
            }
        }
        if let Some(b) = opts.break_sync {
            if !arc.1.syncs.iter().any(|s| s.id == b) {
                return Err(self.err(format!("there is no sync {b} to break")));
            }
        }
        Ok(Planned { arc, modified, key })
    }

    /// The bound program and its schedule (with `opts.drop_syncs` left out).
    pub fn plan(&self, constexprs: &[Binding], opts: &MegaOptions) -> Result<Plan> {
        let p = self.planned(constexprs, opts)?;
        Ok(Plan {
            resolved: p.r().clone(),
            schedule: p.s().clone(),
        })
    }

    /// The schedule, for humans (`tessera explain`, `--explain`).
    pub fn explain(&self, constexprs: &[Binding], opts: &MegaOptions) -> Result<String> {
        let p = self.planned(constexprs, opts)?;
        Ok(super::schedule::explain(p.r(), p.s()))
    }

    /// The persistent kernel's CUDA C (no GPU needed).
    pub fn cuda_source(&self, constexprs: &[Binding], opts: &MegaOptions) -> Result<MegaSource> {
        let p = self.planned(constexprs, opts)?;
        generate(p.r(), p.s(), opts, &MegaFacts::all(p.r()))
    }

    /// Runs the megakernel. `args`: the run-time parameters in declaration order.
    pub fn launch(
        &self,
        dev: &Device,
        opts: &MegaOptions,
        args: &[Arg<'_>],
        constexprs: &[Binding],
    ) -> Result<()> {
        if !(1..=32).contains(&opts.num_warps) {
            return Err(self.err(format!("num_warps must be 1..=32, got {}", opts.num_warps)));
        }
        let plan = self.planned(constexprs, opts)?;
        self.check_args(plan.r(), args)?;
        match &*dev.0 {
            Kind::Interpreter { .. } => self.interpret(&plan, opts, args),
            Kind::Cuda(_) => self.launch_cuda(dev, &plan, opts, args),
        }
    }

    fn check_args(&self, r: &Resolved, args: &[Arg<'_>]) -> Result<()> {
        let sigs = sigs(r);
        launch_args::check(&sigs, args).map_err(|m| self.err(m))?;
        let ptrs: Vec<(usize, &PtrArg)> = sigs
            .iter()
            .zip(args)
            .filter_map(|(p, a)| match a {
                Arg::Ptr(pa) => Some((p.index, pa)),
                _ => None,
            })
            .collect();
        // The schedule assumes distinct pointer parameters never overlap (as Rust's `&mut`):
        // two that do, one of them written, could hide a hazard.
        for (x, (i, a)) in ptrs.iter().enumerate() {
            for (j, b) in &ptrs[x + 1..] {
                if (r.read_only(*i) && r.read_only(*j)) || !overlap(a, b) {
                    continue;
                }
                return Err(self.err(format!(
                    "parameters `{}` and `{}` overlap in memory; the schedule assumes distinct pointer parameters do not alias (pass one buffer once)",
                    r.params()[*i].name,
                    r.params()[*j].name
                )));
            }
        }
        Ok(())
    }

    fn interpret(&self, plan: &Planned, opts: &MegaOptions, args: &[Arg<'_>]) -> Result<()> {
        let r = plan.r();
        let mut buffers = HostBuffers::default();
        let mut host = vec![HostArg::Val(Val::Int(0)); r.params().len()];
        for ((i, _), a) in r.program.runtime_params().zip(args) {
            host[i] = match a {
                Arg::I32(v) => HostArg::Val(Val::Int(*v as i64)),
                Arg::F32(v) => HostArg::Val(Val::Float(*v)),
                Arg::Ptr(p) => {
                    let buf = buffers.index(p).ok_or_else(|| {
                        self.err("a GPU buffer was passed to an interpreter launch")
                    })?;
                    HostArg::Ptr {
                        buf,
                        offset: p.offset,
                        len: p.len,
                    }
                }
            };
        }
        let res = interp::run(
            r,
            plan.s(),
            &host,
            &mut buffers.mem,
            opts.interp,
            opts.break_sync,
        );
        res.map_err(Error::Interp)
    }

    fn launch_cuda(
        &self,
        dev: &Device,
        plan: &Planned,
        opts: &MegaOptions,
        args: &[Arg<'_>],
    ) -> Result<()> {
        let cuda_dev = dev.cuda_dev().expect("checked by the caller");
        let r = plan.r();
        let facts = MegaFacts(launch_args::facts(&sigs(r), args, r.params().len()));
        let key = FnKey {
            plan: plan.key.clone(),
            facts: facts.0.clone(),
            ctx: Arc::as_ptr(&cuda_dev.ctx) as usize,
            gen: gen_key(opts),
        };
        let fmap = self.functions.get_or_init(Default::default);
        let cached = lock(fmap).get(&key).cloned();
        let k = match cached {
            Some(k) => k,
            None => {
                let src = generate(r, plan.s(), opts, &facts)?;
                if src.smem_bytes > cuda_dev.smem_optin {
                    return Err(self.err(format!(
                        "needs {} B of shared memory per CTA, the GPU gives a block at most {}",
                        src.smem_bytes, cuda_dev.smem_optin
                    )));
                }
                let f = launch_args::load_function(
                    cuda_dev,
                    &src.code,
                    &src.entry,
                    cuda_dev.arch,
                    src.smem_bytes,
                )?;
                let k = Arc::new(Compiled {
                    f,
                    block_threads: src.block_threads,
                    smem_bytes: src.smem_bytes,
                });
                lock(fmap).insert(key, k.clone());
                k
            }
        };
        // Co-residency is checked, not hoped for: a persistent grid larger than what fits
        // would wait forever on CTAs that never start.
        let per_sm = k.f.occupancy_max_active_blocks_per_multiprocessor(
            k.block_threads,
            k.smem_bytes,
            None,
        )?;
        if per_sm == 0 {
            return Err(self.err(format!(
                "a CTA of {} threads with {} B of shared memory does not fit on an SM",
                k.block_threads, k.smem_bytes
            )));
        }
        let max = per_sm * cuda_dev.sms;
        let ctas = opts.ctas.unwrap_or(max);
        if ctas == 0 || ctas > max {
            return Err(self.err(format!(
                "{ctas} CTAs cannot be co-resident: at most {per_sm} per SM × {} SMs = {max}",
                cuda_dev.sms
            )));
        }
        let stream = &cuda_dev.stream;
        let packed = launch_args::Packed::new(args).map_err(|m| self.err(m))?;
        let timeout_ns: u64 = opts.timeout_ms.saturating_mul(1_000_000);
        let bufs = self.sync_bufs.get_or_init(Default::default);
        let mut bufs = lock(bufs);
        let stages = r.stages.len();
        // Profiled: the stage runs this launch makes (one stamp triple per run and CTA).
        let runs = if opts.profile {
            super::profile::stage_runs(r, &self.host_vals(r, args)).map_err(|e| self.err(e))?
        } else {
            vec![]
        };
        let steps = runs.len();
        let words_len = if opts.profile {
            SyncWords::profile_base(stages, ctas as usize)
                + 2 * SyncWords::PROFILE_STAMPS * steps * ctas as usize
        } else {
            SyncWords::len(stages, ctas as usize)
        };
        let bkey = (Arc::as_ptr(stream) as usize, words_len);
        let sync = match bufs.entry(bkey) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => e.insert(SyncBuf {
                words: stream.alloc_zeros::<u32>(words_len)?,
                ctas: ctas as usize,
                clean: true,
            }),
        };
        // Counters only grow during a launch, so each starts from zero: the previous launch
        // left them so, unless it did not complete.
        if !sync.clean {
            stream.memset_zeros(&mut sync.words)?;
        }
        sync.clean = false;
        let mut b = stream.launch_builder(&k.f);
        packed.push(&mut b);
        b.arg(&sync.words);
        b.arg(&timeout_ns);
        let cfg = LaunchConfig {
            grid_dim: (ctas, 1, 1),
            block_dim: (k.block_threads, 1, 1),
            shared_mem_bytes: k.smem_bytes as u32,
        };
        // SAFETY: arguments were checked against the megakernel's signature; pointers come
        // from live buffers of the right dtype; the grid fits co-resident (checked above, and
        // the cooperative launch refuses otherwise).
        unsafe { b.launch_cooperative(cfg) }?;
        sync.clean = true;
        if opts.check || opts.profile {
            // One word on the happy path; the records only when a wait gave up.
            let e = stream.clone_dtoh(&sync.words.slice(SyncWords::ERROR..SyncWords::ERROR + 1))?;
            if e[0] != 0 {
                sync.clean = false;
                let w = stream.clone_dtoh(&sync.words)?;
                let w = &w[..SyncWords::len(stages, sync.ctas)];
                return Err(self.err(timeout_message(r, plan.s(), w, opts.timeout_ms)));
            }
        }
        if opts.profile {
            let base = SyncWords::profile_base(stages, ctas as usize);
            let raw = stream.clone_dtoh(&sync.words.slice(base..words_len))?;
            let p = super::profile::Profile::new(r, runs, ctas as usize, &raw);
            *lock(&self.profile) = Some(p);
        }
        Ok(())
    }

    /// The run-time scalars' values (pointers: None), for host-side evaluation.
    fn host_vals(&self, r: &Resolved, args: &[Arg<'_>]) -> Vec<Option<Val>> {
        let mut vals = r.const_env.clone();
        for ((i, _), a) in r.program.runtime_params().zip(args) {
            vals[i] = match a {
                Arg::I32(v) => Some(Val::Int(*v as i64)),
                Arg::F32(v) => Some(Val::Float(*v)),
                Arg::Ptr(_) => None,
            };
        }
        vals
    }

    /// The stamps of the last launch with `MegaOptions::profile` (None if there was none).
    pub fn take_profile(&self) -> Option<super::profile::Profile> {
        lock(&self.profile).take()
    }

    /// Reads the error word of every launch so far on `dev` (for launches with
    /// `MegaOptions::check` off): the watchdog's message if a wait gave up. Waits for the
    /// stream. `constexprs` and `opts`: as launched (they name the sync in the message).
    pub fn check_errors(
        &self,
        dev: &Device,
        constexprs: &[Binding],
        opts: &MegaOptions,
    ) -> Result<()> {
        let Some(cuda_dev) = dev.cuda_dev() else {
            return Ok(());
        };
        let stream = &cuda_dev.stream;
        let Some(bufs) = self.sync_bufs.get() else {
            return Ok(());
        };
        let mut bufs = lock(bufs);
        for ((s, _), buf) in bufs.iter_mut() {
            if *s != Arc::as_ptr(stream) as usize {
                continue;
            }
            let e = stream.clone_dtoh(&buf.words.slice(SyncWords::ERROR..SyncWords::ERROR + 1))?;
            if e[0] != 0 {
                buf.clean = false;
                let w = stream.clone_dtoh(&buf.words)?;
                let plan = self.planned(constexprs, opts)?;
                let w = &w[..SyncWords::len(plan.r().stages.len(), buf.ctas).min(w.len())];
                return Err(self.err(timeout_message(plan.r(), plan.s(), w, opts.timeout_ms)));
            }
        }
        Ok(())
    }
}

/// The persistent kernel's CUDA C.
fn generate(
    r: &Resolved,
    s: &Schedule,
    opts: &MegaOptions,
    facts: &MegaFacts,
) -> Result<MegaSource> {
    let gen = gen_options(r, opts);
    let (prelude, bodies) = stage_bodies(
        r,
        s,
        opts.num_warps,
        facts,
        &gen.wait_in_body,
        opts.early_loads,
    )
    .map_err(Error::Lower)?;
    cuda::generate(r, s, &prelude, &bodies, &gen).map_err(Error::Lower)
}

fn gen_options(r: &Resolved, opts: &MegaOptions) -> GenOptions {
    GenOptions {
        num_warps: opts.num_warps,
        break_sync: opts.break_sync,
        wait_prefetch_bytes: r
            .stages
            .iter()
            .map(|s| opts.wait_prefetch_for(s.kernel_name))
            .collect(),
        wait_in_body: r
            .stages
            .iter()
            // By kernel: a kernel bound twice has two stage names (`gemv_BM8_BK64`).
            .map(|s| opts.waits_in_body(s.kernel_name))
            .collect(),
        profile: opts.profile,
    }
}

/// The error the host reports when the watchdog fired: the earliest wait (in program
/// order) that some CTA gave up in (the later ones only wait on it), before which stage,
/// in which CTA, where in the loop, and what it saw.
pub fn timeout_message(r: &Resolved, s: &Schedule, w: &[u32], timeout_ms: u64) -> String {
    let base = SyncWords::records(r.stages.len());
    let root = w[base..]
        .chunks_exact(SyncWords::RECORD)
        .enumerate()
        .filter(|(_, rec)| rec[0] != 0)
        .min_by_key(|(cta, rec)| (rec[0], *cta));
    let Some((cta, rec)) = root else {
        return "a wait gave up but recorded nothing (the sync words were overwritten?)".into();
    };
    let id = rec[1] as usize - 1;
    let Some(sy) = s.syncs.iter().find(|x| x.id == id) else {
        return format!("a wait timed out (sync {id}, unknown to this schedule)");
    };
    let st = &r.stages[sy.stage];
    let at = match st.loops.last() {
        Some(&l) => format!(" at {} = {}", r.vars[l], rec[4] as i32),
        None => String::new(),
    };
    format!(
        "sync {id} ({} before {}) timed out after {timeout_ms} ms: CTA {cta} waited{at}, saw {} of {}; the schedule or a kernel is wrong (no CTA can make progress)",
        sync_text(r, sy),
        st.label(),
        rec[2],
        rec[3],
    )
}

fn overlap(a: &PtrArg, b: &PtrArg) -> bool {
    let span = |p: &PtrArg| -> (usize, u64, u64) {
        let size = p.dtype.size_bytes() as u64;
        match p.raw {
            RawBuf::Host(h) => (
                Arc::as_ptr(h) as usize,
                p.offset as u64 * size,
                (p.offset + p.len) as u64 * size,
            ),
            RawBuf::Cuda(_) => {
                let lo = p.device_addr().unwrap_or(0);
                (0, lo, lo + p.len as u64 * size)
            }
        }
    };
    let (ia, la, ha) = span(a);
    let (ib, lb, hb) = span(b);
    ia == ib && la < hb && lb < ha
}

/// The megakernel's run-time parameters, as `launch_args` checks them.
fn sigs(r: &Resolved) -> Vec<launch_args::Sig<'_>> {
    r.program
        .runtime_params()
        .map(|(index, p)| launch_args::Sig {
            index,
            name: &p.name,
            kind: p.kind,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each option that changes the generated source changes the compiled-kernel key, so
    /// tuning over it compiles each value instead of reusing the first.
    #[test]
    fn every_generation_option_is_in_the_kernel_key() {
        let base = MegaOptions::default();
        let variants: Vec<(&str, MegaOptions)> = vec![
            ("num_warps", base.clone().warps(8)),
            (
                "drop_syncs",
                MegaOptions {
                    drop_syncs: vec![1],
                    ..base.clone()
                },
            ),
            (
                "drop_all_syncs",
                MegaOptions {
                    drop_all_syncs: true,
                    ..base.clone()
                },
            ),
            (
                "break_sync",
                MegaOptions {
                    break_sync: Some(0),
                    ..base.clone()
                },
            ),
            (
                "wait_prefetch_bytes",
                MegaOptions {
                    wait_prefetch_bytes: 0,
                    ..base.clone()
                },
            ),
            (
                "wait_prefetch_by_kernel",
                MegaOptions {
                    wait_prefetch_by_kernel: vec![("gemv".into(), 1 << 20)],
                    ..base.clone()
                },
            ),
            (
                "wait_in_body",
                MegaOptions {
                    wait_in_body: !base.wait_in_body,
                    ..base.clone()
                },
            ),
            (
                "wait_in_body_only",
                MegaOptions {
                    wait_in_body_only: vec!["gemv".into()],
                    ..base.clone()
                },
            ),
            (
                "early_loads",
                MegaOptions {
                    early_loads: !base.early_loads,
                    ..base.clone()
                },
            ),
            (
                "profile",
                MegaOptions {
                    profile: true,
                    ..base.clone()
                },
            ),
        ];
        for (what, o) in variants {
            assert_ne!(gen_key(&o), gen_key(&base), "{what} is not in the key");
        }
        // Run-time options share a kernel.
        let run_time = MegaOptions {
            timeout_ms: 1,
            check: false,
            ctas: Some(3),
            ..base.clone()
        };
        assert_eq!(gen_key(&run_time), gen_key(&base));
    }
}
