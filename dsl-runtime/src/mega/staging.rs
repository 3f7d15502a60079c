//! The staging ring of the persistent kernel: how a CTA keeps its weight stream running
//! across synchronisations.
//!
//! A stage whose body has staged loads (`cuda/staging.rs`: tile loads from memory no stage
//! writes, each copy's range from its load's box) is *staged*: each of its programs takes
//! `stage_bytes` of a ring in shared memory. One more warp per CTA, the producer, walks
//! the sequence of staged programs the CTA will run (the same loops, the same grid-stride
//! order) and, from its first lane, issues their loads (`<name>_issue`: one bulk copy per
//! staged load, completing the program's *full* mbarrier, one of [`MAX_IN_FLIGHT`]) as soon
//! as each fits. It waits only for bytes the compute warps have freed: their thread 0
//! arrives on the program's *empty* mbarrier once every compute warp is done with it. A
//! program waits only for its own copies, not for DRAM latency behind a sync: while the
//! compute warps wait for the stage that produces their input, the weights of this stage
//! and the next ones are streaming in. Data nothing writes can be read at any time, so the
//! schedule's syncs are untouched. The compute warps synchronise among themselves with a
//! named barrier (`tsr_consumers_sync`), which the producer warp never joins.
//!
//! Shared memory after the stage bodies' scratch (`tsr_ctl`): the full mbarriers, the
//! empty ones, then the ring.
//!
//! Both sides keep the same bookkeeping of the ring: `head`/`tail` count bytes
//! issued/consumed (virtual, monotonic); a program's bytes start at `tsr_pad(position,
//! bytes)` (never straddling the ring's end). The producer issues a program when it fits
//! between the end of the last freed program and a full ring; with every program at most
//! half the ring (`bodies::stage_bodies`), an empty ring always takes the next one.
use super::c_expr::{c_arg, c_expr, c_name};
use super::resolve::{Node, Resolved};
use crate::cuda::CWriter;

/// Programs in flight at most: one mbarrier each.
pub const MAX_IN_FLIGHT: usize = 8;
/// Bytes before the ring in the staging control area: the full and the empty mbarriers.
pub const CONTROL_BYTES: usize = 128;
/// Where the *empty* mbarriers start in the control area (the full ones are at 0).
pub const EMPTY_BARS: usize = 64;

/// The walk over the CTA's staged programs, flattened: stages (staged ones only) and the
/// loops that hold them.
#[derive(Clone, Debug)]
enum WalkOp {
    Stage(usize),
    /// A loop begins: `end` is the op after its matching `End`.
    Begin {
        id: usize,
        after: usize,
    },
    /// A loop ends: `body` is its first op.
    End {
        id: usize,
        body: usize,
    },
}

struct Flat {
    ops: Vec<WalkOp>,
    /// Per op: the enclosing loops (ids, outermost first) whose variables it reads.
    scope: Vec<Vec<usize>>,
}

fn flatten(nodes: &[Node], staged: &[bool], scope: &mut Vec<usize>, out: &mut Flat) {
    for n in nodes {
        match n {
            Node::Stage(s) if staged[*s] => {
                out.ops.push(WalkOp::Stage(*s));
                out.scope.push(scope.clone());
            }
            Node::Stage(_) => {}
            Node::Loop { id, body, .. } if holds_staged(body, staged) => {
                let begin = out.ops.len();
                out.ops.push(WalkOp::Begin { id: *id, after: 0 });
                out.scope.push(scope.clone());
                scope.push(*id);
                flatten(body, staged, scope, out);
                scope.pop();
                out.ops.push(WalkOp::End {
                    id: *id,
                    body: begin + 1,
                });
                out.scope.push(scope.clone());
                let after = out.ops.len();
                out.ops[begin] = WalkOp::Begin { id: *id, after };
            }
            Node::Loop { .. } => {}
        }
    }
}

fn holds_staged(nodes: &[Node], staged: &[bool]) -> bool {
    nodes.iter().any(|n| match n {
        Node::Stage(s) => staged[*s],
        Node::Loop { body, .. } => holds_staged(body, staged),
    })
}

fn find_loop(nodes: &[Node], id: usize) -> Option<&Node> {
    nodes.iter().find_map(|n| match n {
        Node::Loop { id: i, body, .. } => {
            if *i == id {
                Some(n)
            } else {
                find_loop(body, id)
            }
        }
        Node::Stage(_) => None,
    })
}

/// Writes the C of the ring: its state, the walk and the producer, for the kernel's
/// run-time parameters `params` (declarations) and `args` (names). `stage_bytes[s]`: bytes
/// of a program of stage `s` (0: not staged); `issue[s]`: its `_issue` function.
pub(crate) fn ring_code(
    w: &mut CWriter,
    r: &Resolved,
    stage_bytes: &[usize],
    issue: &[Option<String>],
    ring: usize,
    params: &[String],
    args: &[String],
) {
    let staged: Vec<bool> = stage_bytes.iter().map(|&b| b > 0).collect();
    let mut f = Flat {
        ops: vec![],
        scope: vec![],
    };
    flatten(&r.body, &staged, &mut vec![], &mut f);
    let params = params.join(", ");
    let ring_state = RingState { r, f, issue };
    ring_type(w, ring, r.vars.len().max(1));
    ring_state.walk(w, &params);
    ring_state.produce(w, stage_bytes, &params, &args.join(", "));
}

/// `tsr_ring_t` (the ring's bookkeeping) and `tsr_pad`.
fn ring_type(w: &mut CWriter, ring: usize, nloops: usize) {
    w.line(format!(
        "// ---- the staging ring ({ring} bytes): each CTA's producer warp issues its staged programs'"
    ));
    w.line(
        "// weight loads in the order it runs them, as far ahead as the ring has room (mega/staging.rs) ----",
    );
    w.line(format!("#define TSR_RING {ring}ull"));
    w.open("struct tsr_ring_t {");
    w.line("int pc; unsigned pid;           // the next program to issue: walk op, program (pc < 0: none left)");
    w.line(format!(
        "long long lv[{nloops}];            // its loop variables"
    ));
    w.line("unsigned long long head, tail;  // ring bytes issued / consumed (virtual, monotonic)");
    w.line("unsigned issued, used;          // programs issued / consumed");
    w.close("};");
    w.line("// Where `bytes` go at ring position v: never across the ring's end.");
    w.open("__device__ __forceinline__ unsigned long long tsr_pad(unsigned long long v, unsigned bytes) {");
    w.line("return v % TSR_RING + bytes > TSR_RING ? v + (TSR_RING - v % TSR_RING) : v;");
    w.close("}");
}

/// The walk over one program's staged stages, as the ring's functions write it.
struct RingState<'a> {
    r: &'a Resolved,
    f: Flat,
    issue: &'a [Option<String>],
}

impl RingState<'_> {
    /// The loop variables walk op `pc` reads, from the ring's state.
    fn bind(&self, w: &mut CWriter, pc: usize) {
        for &id in &self.f.scope[pc] {
            let v = c_name(&self.r.vars[id]);
            w.line(format!("const long long {v} = tsr_q.lv[{id}]; (void){v};"));
        }
    }

    fn grid(&self, s: usize) -> Vec<String> {
        self.r.stages[s]
            .grid
            .iter()
            .map(|e| format!("(unsigned){}", c_expr(self.r, e)))
            .collect()
    }

    /// `tsr_walk`: a switch over the walk ops (case labels at the switch's depth).
    fn walk(&self, w: &mut CWriter, params: &str) {
        let r = self.r;
        w.line("// Points tsr_q at this CTA's first staged program at or after walk op `pc`, program `pid`.");
        w.open(format!(
            "__device__ __noinline__ void tsr_walk(tsr_ring_t& tsr_q, int tsr_pc, unsigned tsr_pid, {params}) {{"
        ));
        w.open("for (;;) {");
        w.line("switch (tsr_pc) {");
        for (pc, op) in self.f.ops.iter().enumerate() {
            match op {
                WalkOp::Stage(s) => {
                    let st = &r.stages[*s];
                    let g = self.grid(*s);
                    w.open(format!(
                        "case {pc}: {{  // {} (line {})",
                        st.label(),
                        st.line
                    ));
                    self.bind(w, pc);
                    w.line(format!("if (tsr_pid < {} * {} * {}) {{ tsr_q.pc = {pc}; tsr_q.pid = tsr_pid; return; }}", g[0], g[1], g[2]));
                    w.line(format!("tsr_pc = {}; tsr_pid = blockIdx.x; break;", pc + 1));
                    w.close("}");
                }
                WalkOp::Begin { id, after } => {
                    let Some(Node::Loop { start, end, .. }) = find_loop(&r.body, *id) else {
                        unreachable!("a walk loop is a loop of the program")
                    };
                    let v = c_name(&r.vars[*id]);
                    w.open(format!("case {pc}: {{  // for {v}: begins"));
                    self.bind(w, pc);
                    w.line(format!("tsr_q.lv[{id}] = {};", c_expr(r, start)));
                    w.line(format!("{{ const long long {v} = tsr_q.lv[{id}]; tsr_pc = {v} < {} ? {} : {after}; }}", c_expr(r, end), pc + 1));
                    w.line("tsr_pid = blockIdx.x; break;");
                    w.close("}");
                }
                WalkOp::End { id, body } => {
                    let Some(Node::Loop { end, .. }) = find_loop(&r.body, *id) else {
                        unreachable!("a walk loop is a loop of the program")
                    };
                    let v = c_name(&r.vars[*id]);
                    w.open(format!("case {pc}: {{  // for {v}: next iteration"));
                    self.bind(w, pc);
                    w.line(format!("const long long {v} = ++tsr_q.lv[{id}];"));
                    w.line(format!(
                        "tsr_pc = {v} < {} ? {body} : {}; tsr_pid = blockIdx.x; break;",
                        c_expr(r, end),
                        pc + 1
                    ));
                    w.close("}");
                }
            }
        }
        w.line("default: tsr_q.pc = -1; return;");
        w.line("}");
        w.close("}");
        w.close("}");
    }

    /// `tsr_produce`: the producer lane issues every staged program of the CTA in order,
    /// freeing the oldest ones in flight (their empty mbarriers) when the next does not fit.
    fn produce(&self, w: &mut CWriter, stage_bytes: &[usize], params: &str, args: &str) {
        w.line("// The producer warp's first lane: issues every staged program of this CTA, in the order the");
        w.line("// compute warps run them, as soon as it fits; it waits only for bytes they have freed.");
        w.open(format!(
            "__device__ __noinline__ void tsr_produce(unsigned char* tsr_ctl, volatile int* tsr_abort, {params}) {{"
        ));
        w.line("unsigned long long* const tsr_bar = (unsigned long long*)tsr_ctl;  // full: a program's copies landed");
        w.line(format!(
            "unsigned long long* const tsr_empty = (unsigned long long*)(tsr_ctl + {EMPTY_BARS});  // empty: its bytes were read"
        ));
        w.line(format!(
            "unsigned char* const tsr_ring = tsr_ctl + {CONTROL_BYTES};"
        ));
        w.line(format!(
            "unsigned long long tsr_end[{MAX_IN_FLIGHT}];  // where each program in flight ends in the ring"
        ));
        w.line("tsr_ring_t tsr_q;");
        w.line("tsr_q.head = tsr_q.tail = 0ull; tsr_q.issued = tsr_q.used = 0u;");
        w.open(format!(
            "for (tsr_walk(tsr_q, 0, blockIdx.x, {args}); tsr_q.pc >= 0; tsr_walk(tsr_q, tsr_q.pc, tsr_q.pid + gridDim.x, {args})) {{"
        ));
        self.program_bytes(w, stage_bytes);
        w.line("const unsigned long long tsr_v = tsr_pad(tsr_q.head, tsr_bytes);");
        w.line("// Until it fits and has an mbarrier: wait for the compute warps to free the oldest program.");
        w.open(format!(
            "while (tsr_q.issued - tsr_q.used == {MAX_IN_FLIGHT}u || tsr_v + tsr_bytes - tsr_q.tail > TSR_RING) {{"
        ));
        w.line(format!(
            "while (!tsr_stage_done(tsr_empty + tsr_q.used % {MAX_IN_FLIGHT}u, (tsr_q.used / {MAX_IN_FLIGHT}u) & 1u))"
        ));
        w.line(
            "  if (*tsr_abort) return;  // the compute warps gave up a wait: nothing more is freed",
        );
        w.line(format!(
            "tsr_q.tail = tsr_end[tsr_q.used % {MAX_IN_FLIGHT}u];"
        ));
        w.line("++tsr_q.used;");
        w.close("}");
        self.issue(w);
        w.line(format!(
            "tsr_end[tsr_q.issued % {MAX_IN_FLIGHT}u] = tsr_q.head = tsr_v + tsr_bytes;"
        ));
        w.line("++tsr_q.issued;");
        w.close("}");
        w.close("}");
    }

    /// `tsr_bytes`: the ring bytes of the program at `tsr_q.pc`.
    fn program_bytes(&self, w: &mut CWriter, stage_bytes: &[usize]) {
        w.line("unsigned tsr_bytes = 0;");
        w.open("switch (tsr_q.pc) {");
        for (pc, op) in self.f.ops.iter().enumerate() {
            if let WalkOp::Stage(s) = op {
                w.line(format!(
                    "case {pc}: tsr_bytes = {}u; break;",
                    stage_bytes[*s]
                ));
            }
        }
        w.close("}");
    }

    /// Issues the copies of the program at `tsr_q` to ring position `tsr_v`, completing
    /// mbarrier `tsr_q.issued` (modulo the in-flight count).
    fn issue(&self, w: &mut CWriter) {
        let r = self.r;
        w.line("unsigned char* tsr_dst = tsr_ring + tsr_v % TSR_RING;");
        w.line("const unsigned tsr_p = tsr_q.pid;");
        w.line(format!(
            "unsigned long long* const tsr_b = tsr_bar + tsr_q.issued % {MAX_IN_FLIGHT}u;"
        ));
        w.line("switch (tsr_q.pc) {");
        for (pc, op) in self.f.ops.iter().enumerate() {
            if let WalkOp::Stage(s) = op {
                let st = &r.stages[*s];
                let g = self.grid(*s);
                let a: Vec<String> = st.args.iter().map(|a| c_arg(r, a)).collect();
                w.open(format!("case {pc}: {{  // {}", st.label()));
                self.bind(w, pc);
                w.line(format!(
                    "const unsigned tsr_g0 = {}, tsr_g1 = {}, tsr_g2 = {};",
                    g[0], g[1], g[2]
                ));
                w.line(format!(
                    "{}(tsr_p % tsr_g0, (tsr_p / tsr_g0) % tsr_g1, tsr_p / (tsr_g0 * tsr_g1), tsr_g0, tsr_g1, tsr_g2, {}{}tsr_dst, nullptr, tsr_b);",
                    self.issue[*s].as_deref().expect("a staged stage has an issue function"),
                    a.join(", "),
                    if a.is_empty() { "" } else { ", " }
                ));
                w.line("break;");
                w.close("}");
            }
        }
        w.line("}");
    }
}
