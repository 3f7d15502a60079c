//! Statement-by-statement lowering of a specialised tile kernel to CUDA C.
//!
//! Every tile value lives in one of three forms:
//! - registers: a per-thread array `T name[SLOTS]` in the layout of its shape
//!   (see `layout.rs`), filled by a fully unrolled `for (s ...)` loop;
//! - shared memory ("staged"): written at its logical index so threads of another layout
//!   can read it (broadcasts of loaded values, reduction results);
//! - virtual: pure index arithmetic (aranges, parameters, program ids and elementwise ops
//!   of these), recomputed wherever a reader needs it instead of being moved.
//!
//! Scalars are uniform: every thread holds the same value in an ordinary C variable.
#[path = "c_syntax.rs"]
mod c_syntax;
#[path = "dot.rs"]
mod dot;
#[path = "dot_plan.rs"]
mod dot_plan;
pub(crate) use dot::mma_helpers;
#[path = "memory.rs"]
mod memory;
#[path = "memory_order.rs"]
mod memory_order;
#[path = "pipeline.rs"]
mod pipeline;
#[path = "reduce.rs"]
mod reduce;
#[path = "wgmma.rs"]
mod wgmma;

use super::analysis::{self, Facts};
use super::layout::{self, Layout};
use super::CWriter;
use super::EmitOptions;
pub(crate) use c_syntax::C_KEYWORDS;
use c_syntax::*;
use dsl_ir::*;
use memory_order::{MemKind, MemOp};
use std::collections::{BTreeMap, HashSet};

type R<T> = Result<T, String>;

/// Shared memory one program may use (an H100's opt-in maximum; above 48 KiB the launch
/// raises the kernel's dynamic shared-memory limit).
pub const SMEM_LIMIT: usize = 227 * 1024;

/// How a reader asks for a tile value: at a slot of a layout (the common case, registers
/// when the value lives in that layout), or at a logical index given as C expressions.
#[derive(Clone)]
enum At {
    Slot { lay: usize, s: String },
    Idx(Vec<String>),
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Section {
    Prologue,
    Load,
    Math,
    Epilogue,
}

impl Section {
    fn name(self) -> &'static str {
        match self {
            Section::Prologue => "prologue",
            Section::Load => "load",
            Section::Math => "math",
            Section::Epilogue => "epilogue",
        }
    }
}

struct Region {
    name: String,
    cty: String,
    count: usize,
    offset: usize,
    what: String,
}

/// A block of statements that runs as a whole or not at all: a loop's body or a branch of a
/// run-time `if`.
pub(super) struct Block {
    pub(super) loop_body: bool,
    /// Whether a barrier has been written in it so far.
    pub(super) barrier: bool,
}

impl Block {
    fn new(loop_body: bool) -> Block {
        Block {
            loop_body,
            barrier: false,
        }
    }
}

pub(crate) struct Emitter<'a> {
    k: &'a Kernel,
    pub threads: usize,
    warps: usize,
    vec: usize,
    f: Facts,
    pub layouts: Vec<Layout>,
    shape_layout: BTreeMap<Vec<usize>, usize>,
    names: Vec<String>,
    /// A name for an unnamed value from the exact cast that consumes it (`x` for
    /// `let x = load(..).to(f32)`): the cast is then the same registers.
    hint: Vec<String>,
    var_names: Vec<String>,
    param_names: Vec<String>,
    regs: Vec<bool>,
    staged: Vec<Option<String>>,
    taken: HashSet<String>,
    /// The statements (the header is written after them: it declares only what they use).
    w: CWriter,
    regions: Vec<Region>,
    pub smem_top: usize,
    loop_depth: usize,
    /// The source line (and `Src::via`) the last `// line` comment named.
    last_line: (u32, String),
    pending_comment: Option<((u32, String), String)>,
    section: Option<Section>,
    pending_section: Option<Section>,
    cur_src: Src,
    /// Global memory accesses since the last barrier.
    pending: Vec<MemOp>,
    /// Each `dot`'s path (tensor cores or FMA) and why (`dot.rs`).
    dot_plans: BTreeMap<ValueId, dot_plan::DotPlan>,
    /// `[M, N]` shapes in the tensor-core accumulator layout.
    frag_shapes: BTreeMap<Vec<usize>, layout::Frag>,
    /// `EmitOptions::frag_rows`: per M, the fragment whose rows the `[M]` and `[M, 1]`
    /// tiles take (`Layout::rows_of`): one that the kernel reduces along its rows.
    row_frags: BTreeMap<usize, layout::Frag>,
    /// `EmitOptions::frag_rows`.
    pub(super) frag_rows: bool,
    /// `EmitOptions::fast_exp2`.
    fast_exp2: bool,
    /// Whether the code calls the `mma` helpers (`dot::MMA_HELPERS`).
    pub uses_mma: bool,
    /// The `wgmma` instructions the code calls (`wgmma.rs`): (N, f16 rather than bf16, B
    /// `[n][k]`).
    wgmma_insns: std::collections::BTreeSet<(usize, bool, bool)>,
    /// Loads pipelined through a `cp.async` ring (`pipeline.rs`).
    pipe: pipeline::Pipes,
    /// `EmitOptions::acq_rel_atomics`.
    pub(super) acq_rel_atomics: bool,
    /// `EmitOptions::vector_atomics`.
    pub(super) vector_atomics: bool,
    /// `EmitOptions::warp_replica_reductions`.
    pub(super) warp_replica_reductions: bool,
    /// `EmitOptions::row_values_once`.
    row_values_once: bool,
    /// `EmitOptions::elide_reuse_syncs`.
    pub(super) elide_reuse_syncs: bool,
    /// The blocks that run as a whole or not at all, innermost last
    /// (`memory_order::sync_before_reuse`).
    pub(super) blocks: Vec<Block>,
    /// While a slot loop is written: operands computed once per row before it
    /// (`broadcast_values_once`): their layout and array.
    once: BTreeMap<ValueId, (usize, String)>,
    /// `EmitOptions::dep_hook`: per parameter, read-only.
    dep_hook: Option<Vec<bool>>,
    /// A `tsr_dep()` call dominates the statements emitted from here on in this block.
    dep_covered: bool,
    /// Nesting of `body` calls (0: the kernel's top level).
    block_depth: usize,
}

/// Names the generated code itself uses (beside `c_syntax::C_KEYWORDS`).
const GENERATED: &[&str] = &[
    "tid", "lane", "warp", "smem", "s", "a", "o", "pw", "q", "e", "xor_off", "acc", "r", "r_i",
    "g", "j", "c", "acc_i", "full", "raw", "pid0", "pid1", "pid2", "npid0", "npid1", "npid2", "dk",
    "dc", "kstep", "fa", "fb", "r4", "mi", "ni", "nj", "wrow", "wcol", "st", "ahead", "cq",
    "lds_a", "lds_b", "wgroup", "desc_a", "desc_b",
    // No longer generated (the staging ring's, deleted in session 16), but kept so that the
    // kernels' own `lo` and `hi` (attention's split bounds) keep their generated names.
    "lo", "hi",
];

impl<'a> Emitter<'a> {
    pub fn new(k: &'a Kernel, opts: &'a EmitOptions) -> R<Emitter<'a>> {
        let warps = opts.num_warps as usize;
        if !(1..=32).contains(&warps) || !warps.is_power_of_two() {
            return Err(format!(
                "kernel `{}`: num_warps must be a power of two in 1..=32, got {warps}",
                k.name
            ));
        }
        let n = k.values.len();
        let mut e = Emitter {
            k,
            threads: 32 * warps,
            warps,
            vec: analysis::preferred_vec(k),
            f: analysis::analyse(k, &opts.divisible16),
            layouts: vec![],
            shape_layout: BTreeMap::new(),
            names: vec![String::new(); n],
            hint: vec![String::new(); n],
            var_names: vec![],
            param_names: vec![],
            regs: vec![false; n],
            staged: vec![None; n],
            taken: c_syntax::C_KEYWORDS
                .iter()
                .chain(GENERATED)
                .map(|s| s.to_string())
                .collect(),
            w: CWriter::new(1),
            regions: vec![],
            smem_top: 0,
            loop_depth: 0,
            last_line: (0, String::new()),
            pending_comment: None,
            section: None,
            pending_section: None,
            cur_src: Src::default(),
            pending: vec![],
            dot_plans: BTreeMap::new(),
            frag_shapes: BTreeMap::new(),
            row_frags: BTreeMap::new(),
            frag_rows: opts.frag_rows,
            fast_exp2: opts.fast_exp2,
            uses_mma: false,
            wgmma_insns: Default::default(),
            pipe: pipeline::Pipes::default(),
            acq_rel_atomics: opts.acq_rel_atomics,
            vector_atomics: opts.vector_atomics,
            warp_replica_reductions: opts.warp_replica_reductions,
            row_values_once: opts.row_values_once,
            elide_reuse_syncs: opts.elide_reuse_syncs,
            blocks: vec![],
            once: BTreeMap::new(),
            dep_hook: opts.dep_hook.clone(),
            dep_covered: false,
            block_depth: 0,
        };
        (e.dot_plans, e.frag_shapes) = dot_plan::plan_dots(k, e.threads, opts.frag_rows);
        e.pipe = pipeline::plan(k, &e.f, &e.dot_plans, opts.num_stages, opts.ring_unroll);
        if opts.wgmma {
            dot_plan::plan_wgmma(
                k,
                &e.f.defs,
                e.warps,
                &mut e.dot_plans,
                &mut e.frag_shapes,
                &mut e.pipe,
            );
            if opts.wgmma_in_flight {
                pipeline::keep_wgmma_in_flight(k, &e.dot_plans, &mut e.pipe);
            }
        }
        if opts.frag_rows {
            e.row_frags = dot_plan::row_frags(k, &e.frag_shapes);
            for a in e.casts_packed_by_mma() {
                e.f.needs_regs[a.0 as usize] = false;
            }
        }
        walk(&k.body, &mut |s| {
            if let Stmt::Let {
                id,
                op: Op::Cast(x),
                src,
            } = s
            {
                if exact_cast(k, *id, *x) && !src.name.is_empty() {
                    e.hint[x.0 as usize] = src.name.clone();
                }
            }
        });
        for p in &k.params {
            let n = e.fresh(&p.name);
            e.param_names.push(n);
        }
        for v in &k.vars {
            let n = e.fresh(&v.name);
            e.var_names.push(n);
        }
        Ok(e)
    }

    // ---- names and text -------------------------------------------------------------------

    /// A valid, unused C identifier from a source name (`x`, then `x_1`, `x_2`...).
    fn fresh(&mut self, base: &str) -> String {
        let mut b: String = base
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        if b.is_empty() || b.starts_with(|c: char| c.is_ascii_digit()) {
            b.insert(0, 'v');
        }
        // Reserved for the generated code: layout helpers `L3_j` and the prelude's `tsr_`.
        if b.starts_with("tsr_")
            || b.starts_with("__")
            || (b.starts_with('L') && b[1..].starts_with(|c: char| c.is_ascii_digit()))
        {
            b.insert(0, 'u');
        }
        let mut name = b.clone();
        let mut i = 1;
        while self.taken.contains(&name) {
            name = format!("{b}_{i}");
            i += 1;
        }
        self.taken.insert(name.clone());
        name
    }

    pub(super) fn value_name(&mut self, id: ValueId, src: &Src) -> String {
        let i = id.0 as usize;
        let n = if !src.name.is_empty() {
            src.name.clone()
        } else if !self.hint[i].is_empty() {
            self.hint[i].clone()
        } else {
            format!("v{}", id.0)
        };
        let n = self.fresh(&n);
        self.names[id.0 as usize] = n.clone();
        n
    }

    /// A statement's line, after the section banner and source line it starts, if any.
    fn line(&mut self, s: impl AsRef<str>) {
        self.flush_notes();
        self.w.line(s);
    }

    /// The pending section banner and `// line N:` comment, at the depth of the next line.
    fn flush_notes(&mut self) {
        if let Some(sec) = self.pending_section.take() {
            if self.section != Some(sec) {
                self.w.blank();
                self.w.line(format!("// ---- {} ----", sec.name()));
                self.section = Some(sec);
            }
        }
        if let Some(((l, via), text)) = self.pending_comment.take() {
            if via.is_empty() {
                self.w.line(format!("// line {l}: {text}"));
            } else {
                self.w.line(format!("// line {l} ({via}): {text}"));
            }
            self.last_line = (l, via);
        }
    }

    fn open(&mut self, s: impl AsRef<str>) {
        self.flush_notes();
        self.w.open(s);
    }
    fn close(&mut self, s: &str) {
        self.w.dedent();
        self.line(s);
    }
    /// `} else {`: closes one block and opens the next.
    fn reopen(&mut self, s: &str) {
        self.w.dedent();
        self.open(s);
    }
    /// `#pragma unroll` + a loop over a layout's slots (constant trip count).
    fn open_slots(&mut self, lay: usize, var: &str) {
        let n = self.layouts[lay].slots();
        self.line("#pragma unroll");
        self.open(format!("for (int {var} = 0; {var} < {n}; ++{var}) {{"));
    }

    fn err(&self, msg: impl AsRef<str>) -> String {
        let s = &self.cur_src;
        if s.line != 0 {
            format!(
                "kernel `{}`, line {} (`{}`): {}",
                self.k.name,
                s.line,
                s.text,
                msg.as_ref()
            )
        } else {
            format!("kernel `{}`: {}", self.k.name, msg.as_ref())
        }
    }

    // ---- layouts and shared memory -------------------------------------------------------

    fn layout_of(&mut self, dims: &[usize]) -> R<usize> {
        if let Some(&l) = self.shape_layout.get(dims) {
            return Ok(l);
        }
        if dims.len() > 2 {
            return Err(self.err("tiles of rank > 2 are not supported"));
        }
        let rows_of = match dims {
            [m] | [m, 1] => self.row_frags.get(m),
            _ => None,
        };
        let l = match (self.frag_shapes.get(dims), rows_of) {
            (Some(f), _) => Layout::of_frag(*f),
            (None, Some(f)) => Layout::rows_of(*f, dims.len()),
            (None, None) => Layout::new(dims, self.threads, self.vec),
        };
        if l.slots() > 1024 {
            return Err(self.err(format!(
                "tile {dims:?} needs {} registers per thread with {} threads: use more warps or a smaller tile",
                l.slots(),
                self.threads
            )));
        }
        self.layouts.push(l);
        let id = self.layouts.len() - 1;
        self.taken.insert(format!("L{id}_i"));
        self.shape_layout.insert(dims.to_vec(), id);
        Ok(id)
    }

    /// A row-major blocked layout of `dims` that no value lives in (for reading a value of
    /// the tensor-core layout through shared memory in a layout reductions understand).
    fn blocked_layout(&mut self, dims: &[usize]) -> usize {
        let l = Layout::new(dims, self.threads, self.vec);
        if let Some(i) = self.layouts.iter().position(|x| *x == l) {
            return i;
        }
        self.layouts.push(l);
        let id = self.layouts.len() - 1;
        self.taken.insert(format!("L{id}_i"));
        id
    }

    fn lay_of_value(&mut self, v: ValueId) -> R<usize> {
        let d = self.k.ty(v).dims();
        self.layout_of(&d)
    }

    fn idx_exprs(&self, lay: usize, s: &str) -> Vec<String> {
        if self.layouts[lay].rank() == 1 {
            vec![format!("L{lay}_j({s})")]
        } else {
            vec![format!("L{lay}_i({s})"), format!("L{lay}_j({s})")]
        }
    }

    /// Whether slot `s` holds a real element (a replica's copy counts): loads and reads.
    pub(super) fn valid(&self, lay: usize, s: &str) -> Option<String> {
        self.layouts[lay]
            .valid_expr(&format!("L{lay}"), s)
            .map(|_| format!("L{lay}_ok({s})"))
    }

    /// Whether this thread owns slot `s`'s element (real, and not a replica's copy):
    /// stores, staging and reductions, where each element must count once.
    fn owned(&self, lay: usize, s: &str) -> Option<String> {
        let c: Vec<String> = self
            .valid(lay, s)
            .into_iter()
            .chain(
                self.layouts[lay]
                    .owner_expr()
                    .map(|_| format!("L{lay}_owner")),
            )
            .collect();
        (!c.is_empty()).then(|| c.join(" && "))
    }

    /// Reserves a shared-memory array of `count` elements of C type `cty`.
    pub(super) fn region(
        &mut self,
        base: &str,
        cty: &str,
        count: usize,
        what: String,
    ) -> R<String> {
        self.region_aligned(base, cty, count, what, 16)
    }

    /// [`Self::region`] at an offset that is a multiple of `align` bytes (a power of two,
    /// at least 16) from `smem`.
    pub(super) fn region_aligned(
        &mut self,
        base: &str,
        cty: &str,
        count: usize,
        what: String,
        align: usize,
    ) -> R<String> {
        let size = match cty {
            "bool" => 1,
            "unsigned short" => 2,
            c if c.ends_with('*') => 8,
            _ => 4,
        };
        let offset = self.smem_top.div_ceil(align) * align;
        self.smem_top = offset + count * size;
        if self.smem_top > SMEM_LIMIT {
            return Err(self.err(format!(
                "needs {} bytes of shared memory (limit {} KiB)",
                self.smem_top,
                SMEM_LIMIT / 1024
            )));
        }
        let name = self.fresh(base);
        self.regions.push(Region {
            name: name.clone(),
            cty: cty.to_string(),
            count,
            offset,
            what,
        });
        Ok(name)
    }

    // ---- reading values ------------------------------------------------------------------

    fn recomputable(&self, v: ValueId) -> bool {
        let i = v.0 as usize;
        if self.k.ty(v).is_scalar() || self.staged[i].is_some() {
            return true;
        }
        match &self.f.defs[i] {
            Some(Op::Arange { .. }) => true,
            Some(
                Op::Unary(_, x)
                | Op::Cast(x)
                | Op::ExpandDims(x, _)
                | Op::Broadcast(x)
                | Op::Trans(x),
            ) => self.recomputable(*x),
            Some(Op::Binary(_, x, y)) => self.recomputable(*x) && self.recomputable(*y),
            Some(Op::Where(c, x, y)) => {
                self.recomputable(*c) && self.recomputable(*x) && self.recomputable(*y)
            }
            _ => false,
        }
    }

    /// A C expression for value `v` where a reader needs it.
    fn access(&self, v: ValueId, at: &At) -> R<String> {
        let i = v.0 as usize;
        let t = self.k.ty(v);
        if t.is_scalar() {
            return Ok(self.names[i].clone());
        }
        let dims = t.dims();
        if let At::Slot { lay, s } = at {
            if self.regs[i] && self.shape_layout.get(&dims) == Some(lay) {
                return Ok(format!("{}[{s}]", self.names[i]));
            }
            if let Some((l, name)) = self.once.get(&v) {
                if l == lay {
                    // A pass's slots share their row: slot s is in pass s / per.
                    let per = self.layouts[*l].chunks * self.layouts[*l].vec;
                    return Ok(format!("{name}[({s}) / {per}]"));
                }
            }
        }
        let idx = match at {
            At::Slot { lay, s } => self.idx_exprs(*lay, s),
            At::Idx(x) => x.clone(),
        };
        if let Some(buf) = &self.staged[i] {
            // Padding lanes (past a tile's end) read too: clamp them onto the tile, so they
            // never leave the buffer. Their values are never used; real lanes are unchanged.
            let padded = match at {
                At::Slot { lay, s } => self.valid(*lay, s).is_some(),
                At::Idx(_) => true,
            };
            let idx: Vec<String> = if padded {
                idx.iter()
                    .zip(&dims)
                    .map(|(e, &d)| {
                        if d == 1 {
                            "0".to_string()
                        } else {
                            format!("({e} < {d} ? {e} : {})", d - 1)
                        }
                    })
                    .collect()
            } else {
                idx
            };
            return Ok(format!("{buf}[{}]", linear(&dims, &idx)));
        }
        match &self.f.defs[i] {
            Some(Op::Arange { start, .. }) => {
                let st = start.as_lit().unwrap_or(0);
                let j = strip(idx.last().unwrap());
                Ok(if st == 0 { j } else { format!("({st} + {j})") })
            }
            Some(Op::ExpandDims(x, axis)) => {
                if self.k.ty(*x).is_scalar() {
                    return Ok(self.names[x.0 as usize].clone());
                }
                let mut sub = idx.clone();
                sub.remove(*axis as usize);
                self.access(*x, &At::Idx(sub))
            }
            Some(Op::Broadcast(x)) => {
                let tx = self.k.ty(*x);
                if tx.is_scalar() {
                    return Ok(self.names[x.0 as usize].clone());
                }
                let sub: Vec<String> = tx
                    .dims()
                    .iter()
                    .zip(&dims)
                    .zip(&idx)
                    .map(|((&dx, &dv), e)| {
                        if dx == 1 && dv != 1 {
                            "0".to_string()
                        } else {
                            e.clone()
                        }
                    })
                    .collect();
                self.access(*x, &At::Idx(sub))
            }
            Some(Op::Trans(x)) => {
                let sub: Vec<String> = idx.iter().rev().cloned().collect();
                self.access(*x, &At::Idx(sub))
            }
            Some(op @ (Op::Unary(..) | Op::Binary(..) | Op::Where(..) | Op::Cast(..))) => {
                let at = match at {
                    At::Slot { .. } => at.clone(),
                    At::Idx(_) => At::Idx(idx),
                };
                self.op_expr(v, op, &at)
            }
            _ => Err(self.err(format!(
                "internal: value %{} is not available in this layout",
                v.0
            ))),
        }
    }

    /// The C expression of an elementwise op, operands read at `at`.
    fn op_expr(&self, id: ValueId, op: &Op, at: &At) -> R<String> {
        let ty = self.k.ty(id);
        Ok(match op {
            Op::Unary(UnaryOp::Exp2, x)
                if self.fast_exp2 && self.k.ty(*x).elem == Elem::Num(DType::F32) =>
            {
                format!("tsr_ex2({})", strip(&self.access(*x, at)?))
            }
            Op::Unary(u, x) => {
                let d = num(self.k.ty(*x).elem);
                unary_c(*u, d, &self.access(*x, at)?)
            }
            Op::Binary(b, x, y) => {
                let (a, c) = (self.access(*x, at)?, self.access(*y, at)?);
                match self.k.ty(*x).elem {
                    Elem::Ptr(_) => {
                        format!("({a} {} {c})", if *b == BinOp::Sub { "-" } else { "+" })
                    }
                    Elem::Num(d) => binary_c(*b, d, &a, &c),
                }
            }
            Op::Where(c, x, y) => {
                format!(
                    "({} ? {} : {})",
                    self.access(*c, at)?,
                    self.access(*x, at)?,
                    self.access(*y, at)?
                )
            }
            Op::Cast(x) => cast_c(num(self.k.ty(*x).elem), num(ty.elem), &self.access(*x, at)?),
            _ => return Err(self.err("internal: not an elementwise op")),
        })
    }

    // ---- statements ----------------------------------------------------------------------

    pub fn body(&mut self, body: &[Stmt]) -> R<()> {
        let covered = self.dep_covered;
        self.block_depth += 1;
        for s in body {
            self.dep_guard(s);
            self.stmt(s)?;
        }
        self.block_depth -= 1;
        // A call in a loop or a branch does not dominate what follows it; at the top level
        // it does.
        if self.block_depth > 0 {
            self.dep_covered = covered;
        }
        Ok(())
    }

    /// `EmitOptions::dep_hook`: the stage's wait before `s` when `s` is the first statement
    /// of its block to touch memory another stage may write (any store or atomic, any load
    /// not of a read-only parameter) and no earlier call dominates it. A loop is entered
    /// instead (the wait goes before its first such statement, in its first iteration:
    /// `tsr_dep` waits once), and so is an `if` (each branch waits before its own first such
    /// statement; the condition is uniform over the program), so the weight loads in them
    /// stay ahead of the wait; a loop with a `dot` (its loads may be pipelined ahead of
    /// their statements) is not.
    fn dep_guard(&mut self, s: &Stmt) {
        let Some(ro) = &self.dep_hook else { return };
        if self.dep_covered || !self.touches_dependent(ro, s) {
            return;
        }
        let enter = match s {
            Stmt::For { body, .. } => !body.iter().any(has_dot),
            Stmt::If { .. } => true,
            _ => false,
        };
        if !enter {
            self.line("if (!tsr_dep()) return;  // the stage's wait, before the first access another stage may write");
            self.dep_covered = true;
        }
    }

    /// Whether `s` (or a statement in it) stores, runs an atomic, or loads through a
    /// pointer not rooted in a read-only parameter (`read_only`, per parameter). A
    /// prefetch reads nothing: it never waits.
    fn touches_dependent(&self, read_only: &[bool], s: &Stmt) -> bool {
        match s {
            Stmt::Let {
                op: Op::Load { ptr, .. },
                ..
            } => !self
                .ptr_root(*ptr)
                .is_some_and(|p| read_only.get(p).copied().unwrap_or(false)),
            Stmt::Store { .. } | Stmt::Atomic { .. } => true,
            Stmt::For { body, .. } => body.iter().any(|b| self.touches_dependent(read_only, b)),
            Stmt::If { then, els, .. } => then
                .iter()
                .chain(els)
                .any(|b| self.touches_dependent(read_only, b)),
            _ => false,
        }
    }

    fn note_src(&mut self, src: &Src) {
        self.cur_src = src.clone();
        let at = (src.line, src.via.clone());
        if src.line != 0 && at != self.last_line {
            let text = self
                .f
                .line_text
                .get(&at)
                .cloned()
                .unwrap_or_else(|| src.text.clone());
            self.pending_comment = Some((at, text));
        }
    }

    fn section_of(&self, s: &Stmt) -> Option<Section> {
        match s {
            Stmt::Let { id, op, .. } => {
                let is_load =
                    |v: &ValueId| matches!(self.f.defs[v.0 as usize], Some(Op::Load { .. }));
                match op {
                    Op::Load { .. } => Some(Section::Load),
                    Op::Cast(x) if is_load(x) => Some(Section::Load),
                    _ if self.f.pure[id.0 as usize] => {
                        if self.section.is_none() {
                            Some(Section::Prologue)
                        } else {
                            None
                        }
                    }
                    _ => Some(Section::Math),
                }
            }
            Stmt::DeclVar { .. } | Stmt::Assign { .. } => Some(Section::Math),
            Stmt::Store { .. } | Stmt::Atomic { .. } => Some(Section::Epilogue),
            Stmt::Prefetch { .. } => Some(Section::Load),
            Stmt::For { .. } | Stmt::If { .. } => None,
        }
    }

    fn stmt(&mut self, s: &Stmt) -> R<()> {
        let src = match s {
            Stmt::Let { src, .. }
            | Stmt::DeclVar { src, .. }
            | Stmt::Assign { src, .. }
            | Stmt::Store { src, .. }
            | Stmt::Atomic { src, .. }
            | Stmt::Prefetch { src, .. }
            | Stmt::For { src, .. }
            | Stmt::If { src, .. } => src,
        };
        self.note_src(src);
        if let Some(sec) = self.section_of(s) {
            self.pending_section = Some(sec);
        }
        match s {
            Stmt::Let { id, op, src } => self.let_(*id, op, src),
            Stmt::DeclVar { var, init, .. } => {
                let name = self.var_names[var.0 as usize].clone();
                let ty = self.k.var_ty(*var).clone();
                let cty = reg_ty(ty.elem);
                if ty.is_scalar() {
                    let e = self.access(*init, &At::Idx(vec![]))?;
                    self.line(format!("{cty} {name} = {};", strip(&e)));
                } else {
                    let lay = self.layout_of(&ty.dims())?;
                    self.line(format!("{cty} {name}[{}];", self.layouts[lay].slots()));
                    self.fill(lay, &name, *init)?;
                }
                Ok(())
            }
            Stmt::Assign { var, value, .. } => {
                let name = self.var_names[var.0 as usize].clone();
                let ty = self.k.var_ty(*var).clone();
                if ty.is_scalar() {
                    let e = self.access(*value, &At::Idx(vec![]))?;
                    self.line(format!("{name} = {};", strip(&e)));
                } else {
                    let lay = self.layout_of(&ty.dims())?;
                    self.fill(lay, &name, *value)?;
                }
                Ok(())
            }
            Stmt::Store {
                ptr, value, mask, ..
            } => self.store(*ptr, *value, *mask, None),
            Stmt::Atomic {
                op,
                ptr,
                value,
                mask,
                old: Some(old),
                src,
            } => self.ordered_atomic(*op, *ptr, *value, *mask, *old, src),
            Stmt::Atomic {
                op,
                ptr,
                value,
                mask,
                ..
            } => self.store(*ptr, *value, *mask, Some(*op)),
            Stmt::Prefetch { ptr, mask, .. } => self.prefetch(*ptr, *mask),
            Stmt::For {
                iv,
                start,
                end,
                step,
                body,
                src,
            } => {
                let name = self.value_name(*iv, src);
                let (a, b, c) = (
                    self.access(*start, &At::Idx(vec![]))?,
                    self.access(*end, &At::Idx(vec![]))?,
                    self.access(*step, &At::Idx(vec![]))?,
                );
                let bounds = [strip(&a), strip(&b), strip(&c)];
                self.hoist_operands(body)?;
                self.pipe_prologue(*iv, &bounds)?;
                let passes = self.pipe_open_passes(*iv, &name, &bounds);
                if !passes {
                    self.open(format!(
                        "for (int {name} = {}; {name} < {}; {name} += {}) {{",
                        strip(&a),
                        strip(&b),
                        strip(&c)
                    ));
                }
                self.blocks.push(Block::new(true));
                self.pipe_iteration(*iv, &bounds)?;
                // The previous iteration's accesses are pending too, at other addresses.
                let carried: Vec<MemOp> = self
                    .mem_ops(body)
                    .into_iter()
                    .map(|(p, m)| MemOp {
                        other_iteration_of: if self.disjoint_across_iterations(p, *iv, *step) {
                            m.key.clone()
                        } else {
                            None
                        },
                        key: None,
                        ..m
                    })
                    .collect();
                self.pending.extend(carried.iter().cloned());
                self.loop_depth += 1;
                self.body(body)?;
                self.pipe_end(*iv);
                self.blocks.pop();
                self.loop_depth -= 1;
                self.pending.extend(carried);
                if passes {
                    self.pipe_close_passes(*iv);
                } else {
                    self.close("}");
                }
                let held = self.wgmma_carried(body);
                self.pipe_after(*iv, &held);
                Ok(())
            }
            Stmt::If {
                cond, then, els, ..
            } => {
                // On a constexpr (a literal once specialised): only the branch taken, so the
                // other costs no code and no shared memory.
                if let Some(Op::Lit(Lit::Bool(b))) = self.f.defs[cond.0 as usize] {
                    self.open(format!("{{  // if {b} (a constexpr): only this branch"));
                    self.body(if b { then } else { els })?;
                    self.close("}");
                    return Ok(());
                }
                let c = self.access(*cond, &At::Idx(vec![]))?;
                self.open(format!("if ({}) {{", strip(&c)));
                let before = self.pending.clone();
                self.branch(then)?;
                let after_then = std::mem::replace(&mut self.pending, before);
                if !els.is_empty() {
                    self.reopen("} else {");
                    self.branch(els)?;
                }
                self.pending.extend(after_then);
                self.close("}");
                Ok(())
            }
        }
    }

    /// A branch of a run-time `if`: a block of its own (it may not run).
    fn branch(&mut self, body: &[Stmt]) -> R<()> {
        self.blocks.push(Block::new(false));
        let r = self.body(body);
        self.blocks.pop();
        r
    }

    /// `dst[s] = value` over a layout's slots.
    fn fill(&mut self, lay: usize, dst: &str, value: ValueId) -> R<()> {
        let e = self.access(value, &At::Slot { lay, s: "s".into() })?;
        self.open_slots(lay, "s");
        self.line(format!("{dst}[s] = {};", strip(&e)));
        self.close("}");
        Ok(())
    }

    fn let_(&mut self, id: ValueId, op: &Op, src: &Src) -> R<()> {
        let i = id.0 as usize;
        let ty = self.k.ty(id).clone();
        match op {
            Op::Param(p) => {
                self.names[i] = self.param_names[*p].clone();
                Ok(())
            }
            Op::Lit(l) => {
                let text = lit_c(*l, num(ty.elem));
                if src.name.is_empty() {
                    self.names[i] = text;
                } else {
                    let n = self.value_name(id, src);
                    self.line(format!("{} = {text};", const_decl(ty.elem, &n)));
                }
                Ok(())
            }
            Op::Const(c) => match c.as_lit() {
                Some(v) => self.let_(
                    id,
                    &Op::Lit(if num(ty.elem) == DType::Bool {
                        Lit::Bool(v != 0)
                    } else {
                        Lit::Int(v)
                    }),
                    src,
                ),
                None => Err(self.err("the kernel is not specialised (unbound constexpr)")),
            },
            Op::ProgramId(a) | Op::NumPrograms(a) => {
                let n = self.value_name(id, src);
                let what = if matches!(op, Op::ProgramId(_)) {
                    "pid"
                } else {
                    "npid"
                };
                self.line(format!("const int {n} = {what}{a};"));
                Ok(())
            }
            Op::Load { .. } if self.pipelined_load(id, src)? => Ok(()),
            Op::Load { ptr, mask, other } => self.load(id, *ptr, *mask, *other, src),
            Op::Reduce { op, x, axis } => self.reduce(id, *op, *x, *axis as usize, src),
            Op::Dot { a, b, acc } => self.dot_let(id, *a, *b, *acc, src),
            Op::Trans(x) => self.trans_let(id, *x),
            Op::ReadVar(var) => {
                let n = self.value_name(id, src);
                let vn = self.var_names[var.0 as usize].clone();
                let cty = reg_ty(ty.elem);
                if ty.is_scalar() {
                    self.line(format!("{} = {vn};", const_decl(ty.elem, &n)));
                } else {
                    let lay = self.layout_of(&ty.dims())?;
                    self.line(format!("{cty} {n}[{}];", self.layouts[lay].slots()));
                    self.open_slots(lay, "s");
                    self.line(format!("{n}[s] = {vn}[s];"));
                    self.close("}");
                    self.regs[i] = true;
                }
                Ok(())
            }
            Op::ExpandDims(x, _) | Op::Broadcast(x) => {
                if ty.is_scalar() {
                    // Broadcast of a scalar to a scalar (no-op).
                    self.names[i] = self.names[x.0 as usize].clone();
                    return Ok(());
                }
                self.view(id, *x, src)
            }
            Op::Cast(x)
                if !ty.is_scalar() && exact_cast(self.k, id, *x) && self.regs[x.0 as usize] =>
            {
                // Same float registers: the cast is a new name for them, no code.
                self.names[i] = self.names[x.0 as usize].clone();
                self.regs[i] = true;
                Ok(())
            }
            Op::Cast(x)
                if ty.is_scalar() && matches!(self.f.defs[x.0 as usize], Some(Op::Lit(_))) =>
            {
                // A literal converted to another dtype is a literal of that dtype.
                let Some(Op::Lit(l)) = self.f.defs[x.0 as usize] else {
                    unreachable!()
                };
                let text = lit_c(l, num(ty.elem));
                if src.name.is_empty() {
                    self.names[i] = text;
                } else {
                    let n = self.value_name(id, src);
                    self.line(format!("{} = {text};", const_decl(ty.elem, &n)));
                }
                Ok(())
            }
            Op::Arange { .. } | Op::Unary(..) | Op::Binary(..) | Op::Where(..) | Op::Cast(..) => {
                if ty.is_scalar() {
                    let e = self.op_expr(id, op, &At::Idx(vec![]))?;
                    let n = self.value_name(id, src);
                    self.line(format!("{} = {};", const_decl(ty.elem, &n), strip(&e)));
                    return Ok(());
                }
                let lay = self.lay_of_value(id)?;
                if !self.f.needs_regs[i] {
                    return Ok(()); // recomputed by its readers
                }
                let n = self.value_name(id, src);
                self.broadcast_values_once(op, lay, &n)?;
                let e = match op {
                    Op::Arange { .. } => self.access(id, &At::Slot { lay, s: "s".into() })?,
                    _ => self.op_expr(id, op, &At::Slot { lay, s: "s".into() })?,
                };
                self.once.clear();
                self.line(format!(
                    "{} {n}[{}];",
                    reg_ty(ty.elem),
                    self.layouts[lay].slots()
                ));
                self.open_slots(lay, "s");
                self.line(format!("{n}[s] = {};", strip(&e)));
                self.close("}");
                self.regs[i] = true;
                Ok(())
            }
        }
    }

    /// `EmitOptions::row_values_once`: each operand of `op` (written in layout `lay`) that
    /// broadcasts an `[R, 1]` value along the columns and is recomputed where it is read (not
    /// index arithmetic: it comes from memory, a reduction or a variable) is computed once
    /// per pass over the rows into `{n}_rows`, before the slot loop; `access` reads it from
    /// there until the loop is written. A pass's slots share their row.
    fn broadcast_values_once(&mut self, op: &Op, lay: usize, n: &str) -> R<()> {
        let l = &self.layouts[lay];
        let (per, passes) = (l.chunks * l.vec, l.passes);
        if !self.row_values_once || per <= 1 || !l.blocked() || l.rank() != 2 {
            return Ok(());
        }
        let operands: Vec<ValueId> = match op {
            Op::Unary(_, x) | Op::Cast(x) => vec![*x],
            Op::Binary(_, x, y) => vec![*x, *y],
            Op::Where(c, x, y) => vec![*c, *x, *y],
            _ => vec![],
        };
        for x in operands {
            let Some(Op::Broadcast(z)) = &self.f.defs[x.0 as usize] else {
                continue;
            };
            let zt = self.k.ty(*z);
            if zt.is_scalar()
                || !matches!(zt.dims()[..], [_, 1])
                || self.f.pure[z.0 as usize]
                || self.once.contains_key(&x)
                || !self.recomputable(x)
            {
                continue;
            }
            // Row a's value, computed at its pass's first slot.
            let e = self.access(
                x,
                &At::Slot {
                    lay,
                    s: format!("a * {per}"),
                },
            )?;
            let name = self.fresh(&format!("{n}_rows"));
            self.line(format!(
                "{} {name}[{passes}];  // once per row this thread holds, not per element",
                reg_ty(self.k.ty(x).elem)
            ));
            self.line("#pragma unroll");
            self.line(format!(
                "for (int a = 0; a < {passes}; ++a) {name}[a] = {};",
                strip(&e)
            ));
            self.once.insert(x, (lay, name));
        }
        Ok(())
    }

    /// A broadcast or expand_dims of a tile: recomputed, a register copy when every
    /// thread already holds what it needs, or else staged through shared memory.
    fn view(&mut self, id: ValueId, x: ValueId, src: &Src) -> R<()> {
        if self.k.ty(x).is_scalar() || self.recomputable(x) {
            return Ok(());
        }
        let (dl, sl) = (self.lay_of_value(id)?, self.lay_of_value(x)?);
        let (vd, xd) = (self.k.ty(id).dims(), self.k.ty(x).dims());
        let map = |i: usize, j: usize| -> (usize, usize) {
            // Destination (row, col) to source (row, col); 1-D values use row 0.
            let full: Vec<usize> = if vd.len() == 1 { vec![j] } else { vec![i, j] };
            let src_idx: Vec<usize> = if xd.len() < vd.len() {
                // expand_dims: drop the inserted axis (the one of size 1 the source lacks).
                let ax = (0..vd.len())
                    .find(|&a| vd[a] == 1 && (a >= xd.len() || xd[a] != 1))
                    .unwrap_or(0);
                full.iter()
                    .enumerate()
                    .filter(|(a, _)| *a != ax)
                    .map(|(_, &v)| v)
                    .collect()
            } else {
                full.iter()
                    .zip(&xd)
                    .map(|(&v, &d)| if d == 1 { 0 } else { v })
                    .collect()
            };
            if src_idx.len() == 1 {
                (0, src_idx[0])
            } else {
                (src_idx[0], src_idx[1])
            }
        };
        // expand_dims: the inserted axis is known from the op; recompute the map from it.
        let map: Box<dyn Fn(usize, usize) -> (usize, usize)> = match &self.f.defs[id.0 as usize] {
            Some(Op::ExpandDims(_, ax)) => {
                let ax = *ax as usize;
                let vd = vd.clone();
                Box::new(move |i, j| {
                    let full: Vec<usize> = if vd.len() == 1 { vec![j] } else { vec![i, j] };
                    let s: Vec<usize> = full
                        .iter()
                        .enumerate()
                        .filter(|(a, _)| *a != ax)
                        .map(|(_, &v)| v)
                        .collect();
                    if s.len() == 1 {
                        (0, s[0])
                    } else {
                        (s[0], s[1])
                    }
                })
            }
            _ => Box::new(map),
        };
        let cty = reg_ty(self.k.ty(id).elem);
        if let Some(slots) = layout::register_view(&self.layouts[dl], &self.layouts[sl], &*map) {
            let n = self.value_name(id, src);
            let xn = self.names[x.0 as usize].clone();
            self.line(format!(
                "{cty} {n}[{}];  // each thread already holds these elements: a register copy",
                slots.len()
            ));
            let k = self.layouts[sl].slots();
            if slots
                .iter()
                .enumerate()
                .all(|(s, m)| m.is_none_or(|m| m == s))
                && slots.len() == k
            {
                self.open_slots(dl, "s");
                self.line(format!("{n}[s] = {xn}[s];"));
                self.close("}");
            } else if slots
                .iter()
                .enumerate()
                .all(|(s, m)| m.is_none_or(|m| m == s % k))
            {
                // The same columns in every pass over the rows.
                self.open_slots(dl, "s");
                self.line(format!("{n}[s] = {xn}[s % {k}];"));
                self.close("}");
            } else if let Some(f) = self.layouts[dl].frag.filter(|f| {
                self.layouts[sl].rows_of.is_some()
                    && slots
                        .iter()
                        .enumerate()
                        .all(|(s, m)| *m == Some(s / (4 * f.nt) * 2 + s % 4 / 2))
            }) {
                // A row value over the fragment: slot (mi, ni, r) reads row slot 2 mi + r / 2.
                self.open_slots(dl, "s");
                self.line(format!("{n}[s] = {xn}[s / {} * 2 + s % 4 / 2];", 4 * f.nt));
                self.close("}");
            } else {
                for (s, m) in slots.iter().enumerate() {
                    match m {
                        Some(m) => self.line(format!("{n}[{s}] = {xn}[{m}];")),
                        None => self.line(format!("{n}[{s}] = {};", zero_c(self.k.ty(id).elem))),
                    }
                }
            }
            self.regs[id.0 as usize] = true;
            return Ok(());
        }
        self.stage(x)
    }

    /// Writes a register tile to shared memory at its logical indices, so that any thread
    /// can read any element (after the barrier).
    fn stage(&mut self, x: ValueId) -> R<()> {
        let i = x.0 as usize;
        if !self.regs[i] {
            return Err(self.err(format!(
                "internal: cannot stage %{}, it has no registers",
                x.0
            )));
        }
        let ty = self.k.ty(x).clone();
        let dims = ty.dims();
        let lay = self.lay_of_value(x)?;
        let xn = self.names[i].clone();
        let cty = reg_ty(ty.elem);
        let buf = self.region(
            &format!("{xn}_smem"),
            &cty,
            dims.iter().product(),
            format!("`{xn}` ({ty}) for threads of another layout"),
        )?;
        self.line(format!(
            "// `{xn}` is needed by threads that do not hold it: through shared memory"
        ));
        self.sync_before_reuse();
        let idx = self.idx_exprs(lay, "s");
        let ok = self.owned(lay, "s");
        self.open_slots(lay, "s");
        let st = format!("{buf}[{}] = {xn}[s];", strip(&linear(&dims, &idx)));
        match ok {
            Some(c) => self.line(format!("if ({c}) {st}")),
            None => self.line(st),
        }
        self.close("}");
        self.barrier("");
        self.staged[i] = Some(buf);
        Ok(())
    }

    // ---- assembling the translation unit -------------------------------------------------

    /// Writes into `w` the declarations that precede the statements: thread coordinates,
    /// the layout helpers the statements use and shared-memory regions.
    pub fn header(&self, w: &mut CWriter) {
        let out = self.w.text();
        w.line("const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;");
        w.line("(void)lane; (void)warp; (void)pid0; (void)pid1; (void)pid2; (void)npid0; (void)npid1; (void)npid2;");
        for (i, l) in self.layouts.iter().enumerate() {
            w.line(format!("// layout L{i} = {}", l.describe()));
            // Only the helpers the statements use (directly or through `_ok`).
            let ok = l
                .valid_expr(&format!("L{i}"), "s")
                .filter(|_| out.contains(&format!("L{i}_ok(")));
            let uses = |f: &str| {
                out.contains(&format!("L{i}_{f}("))
                    || ok
                        .as_ref()
                        .is_some_and(|c| c.contains(&format!("L{i}_{f}(")))
            };
            if uses("i") {
                w.line(format!(
                    "auto L{i}_i = [&](int s) {{ return {}; }};",
                    strip(&l.row_expr("s"))
                ));
            }
            if uses("j") {
                w.line(format!(
                    "auto L{i}_j = [&](int s) {{ return {}; }};",
                    strip(&l.col_expr("s"))
                ));
            }
            if let Some(c) = ok {
                w.line(format!(
                    "auto L{i}_ok = [&](int s) {{ return {c}; }};  // false for padding"
                ));
            }
            if let Some(c) = l
                .owner_expr()
                .filter(|_| out.contains(&format!("L{i}_owner")))
            {
                w.line(format!(
                    "const bool L{i}_owner = {c};  // false for replicas: they never store or reduce"
                ));
            }
        }
        if !self.regions.is_empty() {
            w.line("// shared memory");
            for r in &self.regions {
                w.line(format!(
                    "{}* {} = ({}*)(smem + {});  // [{}] {}",
                    r.cty, r.name, r.cty, r.offset, r.count, r.what
                ));
            }
        }
    }

    pub fn statements(&self) -> &str {
        self.w.text()
    }

    pub fn params_c(&self) -> Vec<(String, String)> {
        self.k
            .params
            .iter()
            .enumerate()
            .filter_map(|(i, p)| {
                let ty = match p.kind {
                    ParamKind::Ptr(d) => format!("{}*", storage_c(d)),
                    ParamKind::Scalar(d) => reg_ty(Elem::Num(d)),
                    ParamKind::Constexpr(_) => return None,
                };
                Some((ty, self.param_names[i].clone()))
            })
            .collect()
    }
}

/// Whether `s` (or a statement in it) is a `dot`.
fn has_dot(s: &Stmt) -> bool {
    match s {
        Stmt::Let {
            op: Op::Dot { .. }, ..
        } => true,
        Stmt::For { body, .. } => body.iter().any(has_dot),
        Stmt::If { then, els, .. } => then.iter().chain(els).any(has_dot),
        _ => false,
    }
}
