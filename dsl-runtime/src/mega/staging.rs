//! The staging ring of the persistent kernel: how a CTA keeps its weight stream running
//! across synchronisations.
//!
//! A stage whose body has staged loads (`cuda/staging.rs`: tile loads from memory no stage
//! writes) is *staged*: each of its programs takes `stage_bytes` of a ring in shared
//! memory. Every CTA walks, ahead of itself, the sequence of staged programs it will run
//! (the same loops, the same grid-stride order) and issues their loads (`<name>_issue`: one
//! bulk copy per staged load, completing one of [`MAX_IN_FLIGHT`] mbarriers) while the ring
//! has room: at the start and after every staged program. A program then waits only for
//! its own copies (the mbarrier's phase), not for DRAM latency behind a sync: while a CTA
//! waits for the stage that produces its input, the weights of this stage and the next
//! ones are already streaming in. Data nothing writes can be read at any time, so the
//! schedule's syncs are untouched.
//!
//! Shared memory after the stage bodies' scratch (`tsr_ctl`): the mbarriers, then two sets
//! of per-load byte ranges (an item's issue reduces into one while the previous item's is
//! being read and reset), then the ring.
//!
//! The ring's bookkeeping is the same in every thread of the CTA (uniform values):
//! `head`/`tail` count bytes issued/consumed (virtual, monotonic); a program's bytes start
//! at `tsr_pad(position, bytes)` (never straddling the ring's end); a program is issued when
//! it fits between the end of the last consumed program and a full ring. With every
//! program at most half the ring (`bodies::stage_bodies`), an empty ring always takes the
//! next one, so the walk never stalls the program order.
use super::cuda::{c_arg, c_expr, c_name};
use super::resolve::{Node, Resolved};
use std::fmt::Write;

/// Programs in flight at most: one mbarrier each.
pub const MAX_IN_FLIGHT: usize = 8;
/// Bytes before the ring in the staging control area: the mbarriers and the ranges.
pub const CONTROL_BYTES: usize = 512;

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

/// The C of the ring: its state, the walk and the top-up, for the kernel's run-time
/// parameters `params` (declarations) and `args` (names). `stage_bytes[s]`: bytes of a
/// program of stage `s` (0: not staged); `issue[s]`: its `_issue` function.
pub fn ring_code(
    r: &Resolved,
    stage_bytes: &[usize],
    issue: &[Option<String>],
    ring: usize,
    params: &[String],
    args: &[String],
) -> String {
    let staged: Vec<bool> = stage_bytes.iter().map(|&b| b > 0).collect();
    let mut f = Flat {
        ops: vec![],
        scope: vec![],
    };
    flatten(&r.body, &staged, &mut vec![], &mut f);
    let nloops = r.vars.len().max(1);
    let params = params.join(", ");
    let args = args.join(", ");
    let bind = |scope: &[usize], pad: &str| -> String {
        scope
            .iter()
            .map(|&id| {
                format!(
                    "{pad}const long long {} = tsr_q.lv[{id}]; (void){};\n",
                    c_name(&r.vars[id]),
                    c_name(&r.vars[id])
                )
            })
            .collect()
    };
    let grid = |s: usize| -> Vec<String> {
        r.stages[s]
            .grid
            .iter()
            .map(|e| format!("(unsigned){}", c_expr(r, e)))
            .collect()
    };
    let mut c = String::new();
    let _ = writeln!(
        c,
        "// ---- the staging ring ({ring} bytes): each CTA issues its staged programs' weight loads"
    );
    let _ = writeln!(
        c,
        "// in the order it runs them, as far ahead as the ring has room (mega/staging.rs) ----"
    );
    let _ = writeln!(c, "#define TSR_RING {ring}ull");
    let _ = writeln!(c, "struct tsr_ring_t {{");
    let _ = writeln!(
        c,
        "  int pc; unsigned pid;           // the next program to issue: walk op, program (pc < 0: none left)"
    );
    let _ = writeln!(
        c,
        "  long long lv[{nloops}];            // its loop variables"
    );
    let _ = writeln!(
        c,
        "  unsigned long long head, tail;  // ring bytes issued / consumed (virtual, monotonic)"
    );
    let _ = writeln!(
        c,
        "  unsigned issued, used;          // programs issued / consumed"
    );
    let _ = writeln!(c, "}};");
    let _ = writeln!(
        c,
        "// Where `bytes` go at ring position v: never across the ring's end."
    );
    let _ = writeln!(c, "__device__ __forceinline__ unsigned long long tsr_pad(unsigned long long v, unsigned bytes) {{");
    let _ = writeln!(
        c,
        "  return v % TSR_RING + bytes > TSR_RING ? v + (TSR_RING - v % TSR_RING) : v;"
    );
    let _ = writeln!(c, "}}");

    // The walk.
    let _ = writeln!(
        c,
        "// Points tsr_q at this CTA's first staged program at or after walk op `pc`, program `pid`."
    );
    let _ = writeln!(
        c,
        "__device__ __noinline__ void tsr_walk(tsr_ring_t& tsr_q, int tsr_pc, unsigned tsr_pid, {params}) {{"
    );
    let _ = writeln!(c, "  for (;;) {{");
    let _ = writeln!(c, "    switch (tsr_pc) {{");
    for (pc, op) in f.ops.iter().enumerate() {
        let b = bind(&f.scope[pc], "      ");
        match op {
            WalkOp::Stage(s) => {
                let st = &r.stages[*s];
                let g = grid(*s);
                let _ = writeln!(c, "    case {pc}: {{  // {} (line {})", st.label(), st.line);
                c.push_str(&b);
                let _ = writeln!(c, "      if (tsr_pid < {} * {} * {}) {{ tsr_q.pc = {pc}; tsr_q.pid = tsr_pid; return; }}", g[0], g[1], g[2]);
                let _ = writeln!(c, "      tsr_pc = {}; tsr_pid = blockIdx.x; break;", pc + 1);
                let _ = writeln!(c, "    }}");
            }
            WalkOp::Begin { id, after } => {
                let Some(Node::Loop { start, end, .. }) = find_loop(&r.body, *id) else {
                    unreachable!("a walk loop is a loop of the program")
                };
                let v = c_name(&r.vars[*id]);
                let _ = writeln!(c, "    case {pc}: {{  // for {v}: begins");
                c.push_str(&b);
                let _ = writeln!(c, "      tsr_q.lv[{id}] = {};", c_expr(r, start));
                let _ = writeln!(c, "      {{ const long long {v} = tsr_q.lv[{id}]; tsr_pc = {v} < {} ? {} : {after}; }}", c_expr(r, end), pc + 1);
                let _ = writeln!(c, "      tsr_pid = blockIdx.x; break;");
                let _ = writeln!(c, "    }}");
            }
            WalkOp::End { id, body } => {
                let Some(Node::Loop { end, .. }) = find_loop(&r.body, *id) else {
                    unreachable!("a walk loop is a loop of the program")
                };
                let v = c_name(&r.vars[*id]);
                let _ = writeln!(c, "    case {pc}: {{  // for {v}: next iteration");
                c.push_str(&b);
                let _ = writeln!(c, "      const long long {v} = ++tsr_q.lv[{id}];");
                let _ = writeln!(
                    c,
                    "      tsr_pc = {v} < {} ? {body} : {}; tsr_pid = blockIdx.x; break;",
                    c_expr(r, end),
                    pc + 1
                );
                let _ = writeln!(c, "    }}");
            }
        }
    }
    let _ = writeln!(c, "    default: tsr_q.pc = -1; return;");
    let _ = writeln!(c, "    }}");
    let _ = writeln!(c, "  }}");
    let _ = writeln!(c, "}}");

    // The top-up.
    let _ = writeln!(
        c,
        "// Issues this CTA's next staged programs, one mbarrier each, while the ring has room."
    );
    let _ = writeln!(
        c,
        "__device__ __noinline__ void tsr_top_up(tsr_ring_t& tsr_q, unsigned char* tsr_ctl, {params}) {{"
    );
    let _ = writeln!(
        c,
        "  // At most {MAX_IN_FLIGHT} programs in flight: one mbarrier each."
    );
    let _ = writeln!(
        c,
        "  unsigned long long* const tsr_bar = (unsigned long long*)tsr_ctl;"
    );
    let _ = writeln!(
        c,
        "  unsigned char* const tsr_ring = tsr_ctl + {CONTROL_BYTES};"
    );
    let _ = writeln!(
        c,
        "  while (tsr_q.pc >= 0 && tsr_q.issued - tsr_q.used < {MAX_IN_FLIGHT}u) {{"
    );
    let _ = writeln!(c, "    unsigned tsr_bytes = 0;");
    let _ = writeln!(c, "    switch (tsr_q.pc) {{");
    for (pc, op) in f.ops.iter().enumerate() {
        if let WalkOp::Stage(s) = op {
            let _ = writeln!(
                c,
                "      case {pc}: tsr_bytes = {}u; break;",
                stage_bytes[*s]
            );
        }
    }
    let _ = writeln!(c, "    }}");
    let _ = writeln!(
        c,
        "    const unsigned long long tsr_v = tsr_pad(tsr_q.head, tsr_bytes);"
    );
    let _ = writeln!(
        c,
        "    if (tsr_v + tsr_bytes - tsr_q.tail > TSR_RING) return;  // full: the oldest programs are still to run"
    );
    let _ = writeln!(
        c,
        "    unsigned char* tsr_dst = tsr_ring + tsr_v % TSR_RING;"
    );
    let _ = writeln!(c, "    const unsigned tsr_p = tsr_q.pid;");
    let _ = writeln!(
        c,
        "    unsigned long long* const tsr_range = (unsigned long long*)(tsr_ctl + 64) + (tsr_q.issued & 1u) * 16u;"
    );
    let _ = writeln!(
        c,
        "    unsigned long long* const tsr_b = tsr_bar + tsr_q.issued % {MAX_IN_FLIGHT}u;"
    );
    let _ = writeln!(c, "    switch (tsr_q.pc) {{");
    for (pc, op) in f.ops.iter().enumerate() {
        if let WalkOp::Stage(s) = op {
            let st = &r.stages[*s];
            let g = grid(*s);
            let a: Vec<String> = st.args.iter().map(|a| c_arg(r, a)).collect();
            let _ = writeln!(c, "    case {pc}: {{  // {}", st.label());
            c.push_str(&bind(&f.scope[pc], "      "));
            let _ = writeln!(
                c,
                "      const unsigned tsr_g0 = {}, tsr_g1 = {}, tsr_g2 = {};",
                g[0], g[1], g[2]
            );
            let _ = writeln!(
                c,
                "      {}(tsr_p % tsr_g0, (tsr_p / tsr_g0) % tsr_g1, tsr_p / (tsr_g0 * tsr_g1), tsr_g0, tsr_g1, tsr_g2, {}{}tsr_dst, tsr_range, tsr_b);",
                issue[*s].as_deref().expect("a staged stage has an issue function"),
                a.join(", "),
                if a.is_empty() { "" } else { ", " }
            );
            let _ = writeln!(c, "      break;");
            let _ = writeln!(c, "    }}");
        }
    }
    let _ = writeln!(c, "    }}");
    let _ = writeln!(c, "    tsr_q.head = tsr_v + tsr_bytes;");
    let _ = writeln!(c, "    ++tsr_q.issued;");
    let _ = writeln!(
        c,
        "    tsr_walk(tsr_q, tsr_q.pc, tsr_q.pid + gridDim.x, {args});"
    );
    let _ = writeln!(c, "  }}");
    let _ = writeln!(c, "}}");
    c
}
