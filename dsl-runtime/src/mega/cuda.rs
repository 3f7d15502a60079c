//! The persistent kernel's CUDA C: one `__global__` that walks the program (loops kept as
//! loops), runs each stage's programs grid-stride over the resident CTAs by calling the
//! stage's `<name>_body` (from the CUDA emitter), and synchronises as the schedule says.
//!
//! Sync state is one array of u32 words in device memory (see [`SyncWords`]), zero when a
//! launch starts: the last CTA to finish zeroes it for the next launch (the host zeroes it
//! only after a launch that did not complete). Counters and the barrier's arrival count
//! only grow during a launch, so a wait is "value ≥ target" with a target each CTA computes the same way
//! (no reset, no ABA). Release: `__syncthreads()`, then thread 0 adds with `red.release.gpu`.
//! Acquire: thread 0 spins with `ld.acquire.gpu`, then `__syncthreads()` (no fence: the
//! acquire and the barrier order every thread's later reads).
//! Every spin is bounded by `%globaltimer`: past the timeout the CTA records the sync in the
//! error words and leaves; the others see the error word and leave too.
use super::c_expr::{c_arg, c_expr, c_name, c_ptr_type};
use super::resolve::{Node, Resolved};
use super::schedule::{hazard_lines, sync_text, Schedule, SyncKind};
use crate::cuda::CWriter;
use dsl_ir::{ConstKind, DType, ParamKind};

/// The layout of the sync words (u32 each).
pub struct SyncWords;

impl SyncWords {
    /// 0 while all is well; 1 once a wait has given up (every other wait then gives up too).
    pub const ERROR: usize = 0;
    /// Barrier arrivals (monotonic).
    pub const BARRIER: usize = 1;
    /// CTAs that finished: the last one out zeroes the words before it (`records`), so the
    /// next launch needs no memset.
    pub const EXIT: usize = 2;
    /// Counter of stage s: word `COUNTERS + s`.
    pub const COUNTERS: usize = 3;
    /// Per CTA, after the counters: the wait it gave up in, if any, as
    /// [step + 1 (0: none), 1 + sync id, value seen, target, innermost loop variable].
    /// The host reports the earliest step: later waits only wait on it.
    pub const RECORD: usize = 5;
    pub fn records(stages: usize) -> usize {
        Self::COUNTERS + stages
    }
    pub fn len(stages: usize, ctas: usize) -> usize {
        Self::records(stages) + Self::RECORD * ctas
    }
    /// `MegaOptions::profile`: after the records (8-byte aligned), per stage run and CTA,
    /// four u64 `%globaltimer` stamps: entered, past its wait (0: no program there), its
    /// programs run (0: none), done (its arrival published).
    pub fn profile_base(stages: usize, ctas: usize) -> usize {
        Self::len(stages, ctas).next_multiple_of(2)
    }
    pub const PROFILE_STAMPS: usize = 4;
}

/// One stage body as the emitter gives it.
#[derive(Clone, Debug)]
pub struct BodyCode {
    /// The stages (by index) that call it.
    pub stages: Vec<usize>,
    /// The C function: `<name>_body`.
    pub fn_name: String,
    pub code: String,
    pub smem_bytes: usize,
}

#[derive(Clone, Debug)]
pub struct GenOptions {
    pub num_warps: u32,
    /// Sync id whose wait is made unsatisfiable (the watchdog test).
    pub break_sync: Option<usize>,
    /// Per stage: before a CTA waits, it prefetches into L2 its share of the first
    /// this-many bytes of each weight window the stage reads (0: off): the weights stream
    /// in while the producers finish, instead of after (`MegaOptions::wait_prefetch_for`).
    pub wait_prefetch_bytes: Vec<u64>,
    /// Per stage, `MegaOptions::waits_in_body`: its bodies take its counter waits as the
    /// callable `tsr_dep` (`EmitOptions::dep_hook`), called once, inlined.
    pub wait_in_body: Vec<bool>,
    /// Record `%globaltimer` stamps per stage run and CTA (`SyncWords::profile_base`).
    pub profile: bool,
}

/// The generated persistent kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct MegaSource {
    pub entry: String,
    pub code: String,
    pub block_threads: u32,
    /// Dynamic shared memory per CTA (the abort flag, then the stage bodies' scratch).
    pub smem_bytes: usize,
    /// u32 words of sync state before the per-CTA records: the launch allocates
    /// `SyncWords::len(stages, ctas)` and zeroes them.
    pub sync_words: usize,
}

/// Bytes at the start of the dynamic shared memory before the bodies' scratch (the abort flag).
const HEAD: usize = 128;

/// Mega-level helpers (after the emitter's prelude).
const MEGA_PRELUDE: &str = r#"#ifndef TESSERA_MEGA_PRELUDE
#define TESSERA_MEGA_PRELUDE
// ---- tessera megakernel helpers: bounded waits, counters, L2 prefetch ----
// -- synchronisation primitives (PTX; a CPU emulator of the persistent kernel swaps this block) --
__device__ __forceinline__ unsigned long long tsr_now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ unsigned tsr_ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void tsr_fence() { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }
// A release add: everything this thread (and, after a bar.sync, its CTA) wrote is visible
// to whoever acquires the new value.
__device__ __forceinline__ void tsr_red_release(unsigned* p, unsigned v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}
// -- end synchronisation primitives --
__device__ __forceinline__ long long tsr_cdiv(long long a, long long b) { return (a + b - 1) / b; }
__device__ __forceinline__ long long tsr_min(long long a, long long b) { return a < b ? a : b; }
__device__ __forceinline__ long long tsr_max(long long a, long long b) { return a > b ? a : b; }

// Every thread of the CTA calls it after the CTA's programs: one add of `count` to
// word `w`, released after everything the CTA wrote.
__device__ __forceinline__ void tsr_arrive(unsigned* sync, int w, unsigned count) {
  __syncthreads();
  if (threadIdx.x == 0) {
    tsr_red_release(sync + w, count);  // after the bar.sync: the CTA's writes come first
  }
}

// Every thread calls it; thread 0 spins until word `w` reaches `target` (wrap-safe), at
// most `timeout_ns`. Returns false if the CTA must leave: this wait timed out, or another
// CTA's did. Either way the CTA records where it gave up in its record `rec` (the host
// reports the earliest step: the wait every other stuck one depends on).
// `tsr_wait` is a call (small code between stages); a body that waits inside itself
// (`MegaOptions::wait_in_body`) inlines `tsr_wait_inline`, so the weight tiles it holds in
// registers are not saved across a call.
__device__ __forceinline__ bool tsr_wait_inline(unsigned* sync, int w, unsigned target, unsigned code, unsigned step,
                                                unsigned long long timeout_ns, int where, unsigned* rec,
                                                volatile int* abort_flag) {
  if (threadIdx.x == 0) {
    const unsigned long long t0 = tsr_now();
    unsigned v;
    for (unsigned spin = 0; (int)((v = tsr_ld_acquire(sync + w)) - target) < 0; ++spin) {
      if ((spin & 255u) == 255u) {
        const bool other = *(volatile unsigned*)(sync + 0) != 0u;
        if (other || tsr_now() - t0 > timeout_ns) {
          rec[1] = code; rec[2] = v; rec[3] = target; rec[4] = (unsigned)where;
          tsr_fence();
          rec[0] = step + 1u;
          tsr_fence();
          atomicExch(sync + 0, 1u);
          *abort_flag = 1;
          break;
        }
      }
    }
    // No fence here: the acquire load that saw the target orders this thread's later
    // accesses, and the bar.sync below orders every other thread's after it.
  }
  __syncthreads();
  return *abort_flag == 0;
}
__device__ __noinline__ bool tsr_wait(unsigned* sync, int w, unsigned target, unsigned code, unsigned step,
                                      unsigned long long timeout_ns, int where, unsigned* rec,
                                      volatile int* abort_flag) {
  return tsr_wait_inline(sync, w, target, code, step, timeout_ns, where, rec, abort_flag);
}

// Threads `part * blockDim.x + threadIdx.x`, stepping by `parts * blockDim.x`, each
// prefetch 128-byte lines of [p, p + bytes) into L2.
__device__ __forceinline__ void tsr_prefetch_l2(const void* p, long long bytes, long long part, long long parts) {
  const char* c = (const char*)p;
  const long long lines = (bytes + 127) / 128;
  for (long long i = part * blockDim.x + threadIdx.x; i < lines; i += parts * blockDim.x)
    tsr_prefetch(c + i * 128);
}
#endif
"#;

/// The name of the generated `__global__`.
pub fn entry_name(r: &Resolved) -> String {
    format!("{}_mega", c_name(&r.program.name))
}

/// Generates the persistent kernel. `prelude` is the emitter's (pasted once); `bodies` has
/// one entry per distinct stage body (`Stage::name`).
pub fn generate(
    r: &Resolved,
    sched: &Schedule,
    prelude: &str,
    bodies: &[BodyCode],
    opts: &GenOptions,
) -> Result<MegaSource, String> {
    let block = 32 * opts.num_warps;
    let entry = entry_name(r);
    let body_of = |s: usize| {
        bodies
            .iter()
            .find(|b| b.stages.contains(&s))
            .ok_or_else(|| format!("no CUDA body for {}", r.stages[s].label()))
    };
    for s in &r.stages {
        body_of(s.index)?;
    }
    let smem = bodies.iter().map(|b| b.smem_bytes).max().unwrap_or(0);
    let mut w = CWriter::new(0);
    w.line(format!(
        "// megakernel `{}` ({}), generated by tessera: one persistent launch, {} stages.",
        r.program.name,
        r.program.file,
        r.stages.len()
    ));
    w.line("// The schedule (tessera explain):");
    for l in super::schedule::explain(r, sched).lines() {
        w.line(format!("//   {l}"));
    }
    w.paste(prelude);
    w.blank();
    w.paste(MEGA_PRELUDE);
    w.blank();
    for b in bodies {
        w.paste(&b.code);
        w.blank();
    }
    let mut params: Vec<String> = vec![];
    for (_, p) in r.program.runtime_params() {
        params.push(match p.kind {
            ParamKind::Ptr(d) => format!("{} {}", c_ptr_type(d), c_name(&p.name)),
            ParamKind::Scalar(DType::F32) => format!("float {}", c_name(&p.name)),
            ParamKind::Scalar(_) => format!("int {}", c_name(&p.name)),
            ParamKind::Constexpr(ConstKind::Int | ConstKind::Bool) => {
                unreachable!("run-time parameters only")
            }
        });
    }
    params.push("unsigned* tsr_sync".into());
    params.push("unsigned long long tsr_timeout_ns".into());
    w.open(format!(
        "extern \"C\" __global__ void __launch_bounds__({block}) {entry}({}) {{",
        params.join(", ")
    ));
    let fns: Vec<String> = r
        .stages
        .iter()
        .map(|s| body_of(s.index).map(|b| b.fn_name.clone()))
        .collect::<Result<_, _>>()?;
    let mut g = Gen {
        r,
        sched,
        opts,
        fns,
        smem: if smem > 0 { "smem" } else { "nullptr" },
        w,
        loops: vec![],
    };
    g.state(smem > 0);
    g.nodes(&r.body);
    g.last_out_zeroes();
    g.w.close("}");
    Ok(MegaSource {
        entry,
        code: g.w.finish(),
        block_threads: block,
        smem_bytes: HEAD + smem,
        sync_words: SyncWords::records(r.stages.len()),
    })
}

/// Writes the kernel's statements.
struct Gen<'a> {
    r: &'a Resolved,
    sched: &'a Schedule,
    opts: &'a GenOptions,
    /// Per stage: its body function.
    fns: Vec<String>,
    smem: &'static str,
    w: CWriter,
    /// Enclosing loop variables (C names), innermost last.
    loops: Vec<String>,
}

impl Gen<'_> {
    /// The CTA's state: shared memory, the abort flag, the sync and profile words, the
    /// counters it has seen.
    fn state(&mut self, has_scratch: bool) {
        let (r, w) = (self.r, &mut self.w);
        // Dynamic shared memory only (so an emulator can give every CTA its own): the abort
        // flag, then the stage bodies' scratch.
        w.line("extern __shared__ __align__(128) unsigned char tsr_dyn[];");
        w.line("volatile int& tsr_abort = *(volatile int*)tsr_dyn;  // set when a wait gave up");
        if has_scratch {
            w.line(format!(
                "unsigned char* smem = tsr_dyn + {HEAD};  // the stage bodies' scratch"
            ));
        }
        w.line("if (threadIdx.x == 0) tsr_abort = 0;");
        w.line("__syncthreads();");
        w.line("// Barriers passed and, per counted stage, programs run so far: the same in every CTA.");
        if self.sched.syncs.iter().any(|s| s.kind == SyncKind::Barrier) {
            w.line("unsigned tsr_bars = 0;  // grid barriers passed");
        }
        w.line("unsigned tsr_step = 0;  // stage runs so far");
        w.line(format!(
            "unsigned* tsr_rec = tsr_sync + {} + {} * blockIdx.x;  // where this CTA gave up, if it does",
            SyncWords::records(r.stages.len()),
            SyncWords::RECORD
        ));
        if self.opts.profile {
            w.line(format!(
                "// Profile: per stage run and CTA, {} %globaltimer stamps (entered, past the wait, programs run, published).",
                SyncWords::PROFILE_STAMPS
            ));
            w.line(format!(
                "unsigned long long* tsr_prof = (unsigned long long*)(tsr_sync + (({} + {} * gridDim.x + 1u) & ~1u));",
                SyncWords::records(r.stages.len()),
                SyncWords::RECORD
            ));
        }
        for s in &r.stages {
            if self.sched.counted[s.index] {
                w.line(format!(
                    "unsigned tsr_done_{} = 0;  // {}",
                    s.index,
                    s.label()
                ));
            }
        }
    }

    /// The end of the kernel: the last CTA out resets the sync words.
    fn last_out_zeroes(&mut self) {
        let w = &mut self.w;
        w.line(
            "// The last CTA out zeroes the sync words (not the records: they are zero unless a",
        );
        w.line("// wait gave up, and then no CTA gets here), so the next launch starts clean.");
        w.line("__syncthreads();");
        w.open("if (threadIdx.x == 0) {");
        w.line("__threadfence();");
        w.open(format!(
            "if (atomicAdd(tsr_sync + {}, 1u) == gridDim.x - 1u) {{",
            SyncWords::EXIT
        ));
        w.line(format!(
            "for (int i = 0; i < {}; ++i) tsr_sync[i] = 0u;",
            SyncWords::records(self.r.stages.len())
        ));
        w.line("__threadfence();");
        w.close("}");
        w.close("}");
    }

    fn nodes(&mut self, nodes: &[Node]) {
        for n in nodes {
            match n {
                Node::Loop {
                    var,
                    start,
                    end,
                    body,
                    ..
                } => {
                    let v = c_name(var);
                    self.w.open(format!(
                        "for (long long {v} = {}; {v} < {}; ++{v}) {{",
                        c_expr(self.r, start),
                        c_expr(self.r, end)
                    ));
                    self.loops.push(v);
                    self.nodes(body);
                    self.loops.pop();
                    self.w.close("}");
                }
                Node::Stage(s) => self.stage(*s),
            }
        }
    }

    /// One run of stage `s`: its sync, its programs grid-stride over the CTAs, its arrival.
    /// (A CTA with no program runs ahead to its next wait. Warming the next stages' weights
    /// into L2 there instead was 3% to 43% slower at every Qwen3 shape: docs/PERF.md,
    /// session 15.)
    fn stage(&mut self, s: usize) {
        let (r, sched) = (self.r, self.sched);
        let st = &r.stages[s];
        self.w
            .line(format!("// ---- {} (line {}) ----", st.label(), st.line));
        self.w.open("{");
        let g: Vec<String> = st
            .grid
            .iter()
            .map(|e| format!("(unsigned){}", c_expr(r, e)))
            .collect();
        self.w.line(format!(
            "const unsigned tsr_g0 = {}, tsr_g1 = {}, tsr_g2 = {};",
            g[0], g[1], g[2]
        ));
        self.w
            .line("const unsigned tsr_n = tsr_g0 * tsr_g1 * tsr_g2;");
        self.w.line("++tsr_step;");
        if self.opts.profile {
            self.w.line("const unsigned long long tsr_t0 = tsr_now();");
            self.w
                .line("unsigned long long tsr_t1 = 0ull, tsr_t2 = 0ull;");
        }
        let sync = sched.sync_for(s);
        if let Some(sy) = sync {
            self.w
                .line(format!("// sync {}: {}", sy.id, sync_text(r, sy)));
            for l in hazard_lines(r, s, &sy.hazards) {
                self.w.line(format!("//   {l}"));
            }
            if sy.kind == SyncKind::Barrier {
                // (One level deeper than the lines around it, as in the counter's wait.)
                self.w.indent();
                self.wait_prefetch(s, "blockIdx.x", "gridDim.x");
                self.w.dedent();
                self.w
                    .line(format!("tsr_arrive(tsr_sync, {}, 1u);", SyncWords::BARRIER));
                self.w.line(format!(
                    "if (!tsr_wait(tsr_sync, {}, (++tsr_bars) * gridDim.x{}, {}u, tsr_step, tsr_timeout_ns, {}, tsr_rec, &tsr_abort)) return;",
                    SyncWords::BARRIER,
                    self.broken(sy.id),
                    sy.id + 1,
                    self.where_()
                ));
            }
        }
        self.w.open("if (blockIdx.x < tsr_n) {");
        let counter = sync.filter(|sy| sy.kind == SyncKind::Counter);
        let hooked = self.opts.wait_in_body[s];
        if let Some(sy) = counter {
            self.w
                .line("// Only CTAs with programs here wait; the others run ahead.");
            self.wait_prefetch(s, "blockIdx.x", "tsr_min(tsr_n, gridDim.x)");
            let wait = if hooked {
                "tsr_wait_inline"
            } else {
                "tsr_wait"
            };
            let waits: Vec<String> = sy
                .waits
                .iter()
                .map(|&w| {
                    format!(
                        "{wait}(tsr_sync, {}, tsr_done_{w}{}, {}u, tsr_step, tsr_timeout_ns, {}, tsr_rec, &tsr_abort)",
                        SyncWords::COUNTERS + w,
                        self.broken(sy.id),
                        sy.id + 1,
                        self.where_()
                    )
                })
                .collect();
            if hooked {
                // The waits, once, from inside the first program (`MegaOptions::wait_in_body`):
                // its weight loads before its first dependent access are in flight meanwhile.
                self.w.line("bool tsr_pending = true, tsr_left = false;");
                self.w.open("auto tsr_dep = [&]() -> bool {");
                self.w.line("if (!tsr_pending) return !tsr_left;");
                self.w.line("tsr_pending = false;");
                for wt in &waits {
                    self.w
                        .line(format!("if (!{wt}) {{ tsr_left = true; return false; }}"));
                }
                if self.opts.profile {
                    self.w.line("tsr_t1 = tsr_now();");
                }
                self.w.line("return true;");
                self.w.close("};");
            } else {
                for wt in &waits {
                    self.w.line(format!("if (!{wt}) return;"));
                }
            }
        } else if hooked {
            self.w
                .line("auto tsr_dep = []() { return true; };  // nothing to wait for");
        }
        let dep = hooked && counter.is_some();
        self.programs(s, dep);
        if dep {
            // A CTA arrives only after it waited (what its counter tells the stages after it).
            self.w.line("if (!tsr_dep()) return;");
        }
        if sched.counted[s] {
            self.w.line(format!(
                "tsr_arrive(tsr_sync, {}, tsr_mine);",
                SyncWords::COUNTERS + s
            ));
        }
        self.w.close("}");
        if self.opts.profile {
            self.w.open("if (threadIdx.x == 0) {");
            self.w.line(format!("unsigned long long* p = tsr_prof + ((unsigned long long)(tsr_step - 1u) * gridDim.x + blockIdx.x) * {}ull;", SyncWords::PROFILE_STAMPS));
            self.w
                .line("p[0] = tsr_t0; p[1] = tsr_t1; p[2] = tsr_t2; p[3] = tsr_now();");
            self.w.close("}");
        }
        if sched.counted[s] {
            self.w.line(format!("tsr_done_{s} += tsr_n;"));
        }
        self.w.close("}");
    }

    /// Stage `s`'s programs in this CTA, grid-stride, counted in `tsr_mine`; `dep`: their
    /// bodies run the stage's wait (`tsr_dep`).
    fn programs(&mut self, s: usize, dep: bool) {
        let r = self.r;
        let args: Vec<String> = r.stages[s].args.iter().map(|a| c_arg(r, a)).collect();
        let hooked = self.opts.wait_in_body[s];
        let w = &mut self.w;
        if self.opts.profile && !dep {
            w.line("tsr_t1 = tsr_now();");
        }
        w.line("unsigned tsr_mine = 0;");
        w.open(
            "for (unsigned tsr_p = blockIdx.x; tsr_p < tsr_n; tsr_p += gridDim.x, ++tsr_mine) {",
        );
        w.line(format!(
            "{}(tsr_p % tsr_g0, (tsr_p / tsr_g0) % tsr_g1, tsr_p / (tsr_g0 * tsr_g1), tsr_g0, tsr_g1, tsr_g2, {}{}{}{});",
            self.fns[s],
            args.join(", "),
            if args.is_empty() { "" } else { ", " },
            self.smem,
            if hooked { ", tsr_dep" } else { "" }
        ));
        if dep {
            w.line("if (tsr_left) return;  // its wait gave up");
        }
        w.line("__syncthreads();  // the next program reuses shared memory");
        w.close("}");
        if self.opts.profile {
            w.line("tsr_t2 = tsr_now();");
        }
    }

    /// Productive waiting: stage `s`'s weights stream into L2 while the producers finish,
    /// each of threads `part` of `parts` taking its share.
    fn wait_prefetch(&mut self, s: usize, part: &str, parts: &str) {
        let bytes = self.opts.wait_prefetch_bytes[s];
        if bytes == 0 {
            return;
        }
        let wins = super::schedule::weight_windows(self.r, s);
        if wins.is_empty() {
            return;
        }
        self.w.line(format!(
            "// While waiting: the first {bytes} bytes of each weight window, into L2."
        ));
        for a in wins {
            let (name, size, lo, hi) = window_c(self.r, a);
            self.w.line(format!("tsr_prefetch_l2({name} + {lo}, tsr_min(({hi} - {lo}) * {size}LL, {bytes}LL), {part}, {parts});"));
        }
    }

    /// The watchdog test's broken wait: a target no CTA reaches.
    fn broken(&self, sync: usize) -> String {
        if self.opts.break_sync == Some(sync) {
            format!(
                " + {}u  /* BROKEN on purpose */",
                super::interp::BREAK_OFFSET
            )
        } else {
            String::new()
        }
    }

    /// Where a wait is, for its record: the innermost loop variable (-1: none).
    fn where_(&self) -> String {
        self.loops
            .last()
            .map_or("-1".to_string(), |v| format!("(int){v}"))
    }
}

/// A weight window as C: (pointer name, element size, first element, end element).
fn window_c(r: &Resolved, a: &super::resolve::Access) -> (String, usize, String, String) {
    let name = c_name(&r.params()[a.param].name);
    let size = match r.params()[a.param].kind {
        ParamKind::Ptr(d) => d.size_bytes(),
        _ => 1,
    };
    (
        name,
        size,
        c_expr(r, &a.offset),
        c_expr(r, a.end.as_ref().expect("weight windows have an end")),
    )
}
