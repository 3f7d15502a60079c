//! Running a megakernel on the host, two ways.
//!
//! - [`InterpMode::Sequential`]: stage by stage, each stage's programs in row-major order:
//!   exactly what launching the kernels one by one computes (the reference).
//! - [`InterpMode::Adversarial`]: simulates the persistent kernel as the CUDA code runs it:
//!   `ctas` CTAs, CTA `c` running programs `c, c + G, …` of every stage, counter waits only
//!   in CTAs with work in the stage, barriers in all, counters bumped after a CTA's last
//!   program of a stage. At every step a scheduler picks which CTA runs its next program:
//!   [`Policy::RunAhead`] always advances the CTA furthest along the program (ties: the
//!   highest CTA), so a consumer runs as early as the syncs allow and an overwrite comes as
//!   soon as it may; [`Policy::Shuffled`] picks at random. A sync that was needed but
//!   elided then lets a program read stale or clobbered data: a wrong answer on the CPU.
//!   No CTA able to move while some are unfinished is a deadlock, reported the way the
//!   GPU's watchdog reports a timed-out wait (naming the sync and stage).
//!
//! Memory is sequentially consistent here; the GPU's weaker ordering is handled by the
//! fences of the generated code, which this does not test.
use super::program::{ArgExpr, Env, MParam, Val};
use super::resolve::{Node, Resolved};
use super::schedule::{sync_text, Schedule, SyncKind};
use crate::interp::{splitmix64, HostMem, InterpArg, Interpreter};

/// Added to a broken sync's target: no run of the program ever reaches it.
pub const BREAK_OFFSET: u64 = 1 << 30;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    RunAhead,
    Shuffled(u64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum InterpMode {
    #[default]
    Sequential,
    Adversarial {
        ctas: u32,
        policy: Policy,
    },
}

/// A megakernel parameter's value on the host: a window of a buffer in `mem`, or a scalar.
#[derive(Clone, Copy, Debug)]
pub enum HostArg {
    Ptr {
        buf: usize,
        offset: usize,
        len: usize,
    },
    Val(Val),
}

/// A sync as one run of it sees it.
#[derive(Clone, Debug)]
enum SyncRun {
    /// (stage, counter value to reach) per waited stage.
    Counter { id: usize, waits: Vec<(usize, u64)> },
    /// Wait for this many arrivals in all (1-based barrier number × G, + the break offset).
    Barrier {
        id: usize,
        number: u64,
        broken: bool,
    },
}

/// One run of a stage in the unrolled program.
struct Run {
    stage: usize,
    grid: [u32; 3],
    args: Vec<InterpArg>,
    /// Loop variables in scope: (name, value).
    vars: Vec<(String, i64)>,
    sync: Option<SyncRun>,
}

/// Unrolls the program with concrete loop bounds, evaluating every argument and the
/// counter targets (the same for every CTA, as on the GPU).
fn unroll(
    r: &Resolved,
    sched: &Schedule,
    args: &[HostArg],
    break_sync: Option<usize>,
) -> Result<Vec<Run>, String> {
    let params = r.params();
    // Constexprs come from the binding; the rest from the arguments.
    let vals: Vec<Option<Val>> = args
        .iter()
        .zip(&r.const_env)
        .map(|(a, c)| match (c, a) {
            (Some(c), _) => Some(*c),
            (None, HostArg::Val(v)) => Some(*v),
            (None, HostArg::Ptr { .. }) => None,
        })
        .collect();
    let mut vars: Vec<Option<i64>> = vec![None; r.vars.len()];
    let mut done = vec![0u64; r.stages.len()];
    let mut barriers = 0u64;
    let mut runs = vec![];
    #[allow(clippy::too_many_arguments)]
    fn walk(
        r: &Resolved,
        sched: &Schedule,
        nodes: &[Node],
        args: &[HostArg],
        vals: &[Option<Val>],
        params: &[MParam],
        vars: &mut Vec<Option<i64>>,
        done: &mut Vec<u64>,
        barriers: &mut u64,
        runs: &mut Vec<Run>,
        break_sync: Option<usize>,
    ) -> Result<(), String> {
        for n in nodes {
            match n {
                Node::Loop {
                    id,
                    var,
                    start,
                    end,
                    body,
                } => {
                    let env = Env { params: vals, vars };
                    let (Val::Int(a), Val::Int(b)) =
                        (start.eval(&env, params)?, end.eval(&env, params)?)
                    else {
                        return Err(format!("loop `{var}`: bounds are not integers"));
                    };
                    for i in a..b {
                        vars[*id] = Some(i);
                        walk(
                            r, sched, body, args, vals, params, vars, done, barriers, runs,
                            break_sync,
                        )?;
                    }
                    vars[*id] = None;
                }
                Node::Stage(s) => {
                    let st = &r.stages[*s];
                    let in_scope: Vec<(String, i64)> = st
                        .loops
                        .iter()
                        .filter_map(|&l| vars[l].map(|v| (r.vars[l].clone(), v)))
                        .collect();
                    let at = || {
                        let v: Vec<String> =
                            in_scope.iter().map(|(n, v)| format!("{n} = {v}")).collect();
                        if v.is_empty() {
                            format!("megakernel `{}`: {}", r.program.name, st.label())
                        } else {
                            format!(
                                "megakernel `{}`: {} at {}",
                                r.program.name,
                                st.label(),
                                v.join(", ")
                            )
                        }
                    };
                    let env = Env { params: vals, vars };
                    let mut grid = [1u32; 3];
                    for (a, g) in st.grid.iter().enumerate() {
                        match g.eval(&env, params).map_err(|m| format!("{}: {m}", at()))? {
                            Val::Int(v) if (1..=i32::MAX as i64).contains(&v) => grid[a] = v as u32,
                            v => {
                                return Err(format!(
                                    "{}: grid dimension {a} (`{}`) is {v:?}: it must be at least 1",
                                    at(),
                                    r.show(g)
                                ))
                            }
                        }
                    }
                    let mut iargs = vec![];
                    for (a, name) in st.args.iter().zip(&st.arg_names) {
                        iargs.push(match a {
                            ArgExpr::Ptr { param, offset, end } => {
                                let HostArg::Ptr { buf, offset: base, len } = args[*param] else {
                                    return Err(format!("{}: `{}` is not a pointer argument", at(), params[*param].name));
                                };
                                let ev = |e: &super::program::Expr| match e.eval(&env, params) {
                                    Ok(Val::Int(v)) => Ok(v),
                                    Ok(v) => Err(format!("{}: `{}` is {v:?}", at(), r.show(e))),
                                    Err(m) => Err(format!("{}: {m}", at())),
                                };
                                let lo = ev(offset)?;
                                let hi = match end {
                                    Some(e) => ev(e)?,
                                    None => len as i64,
                                };
                                if lo < 0 || hi < lo || hi > len as i64 {
                                    return Err(format!(
                                        "{}: argument `{name}` = `{}` is elements {lo}..{hi} of `{}`, which has {len}",
                                        at(),
                                        r.show_arg(a),
                                        params[*param].name
                                    ));
                                }
                                InterpArg::Ptr { buf, offset: base + lo as usize, len: (hi - lo) as usize }
                            }
                            ArgExpr::Value(e) => match e.eval(&env, params).map_err(|m| format!("{}: {m}", at()))? {
                                Val::Int(v) => InterpArg::I32(i32::try_from(v).map_err(|_| format!("{}: argument `{name}` = {v} does not fit in i32", at()))?),
                                Val::Float(v) => InterpArg::F32(v),
                                Val::Bool(b) => InterpArg::I32(b as i32),
                            },
                        });
                    }
                    let sync = sched.sync_for(*s).map(|sy| {
                        let broken = break_sync == Some(sy.id);
                        match sy.kind {
                            SyncKind::Counter => SyncRun::Counter {
                                id: sy.id,
                                waits: sy
                                    .waits
                                    .iter()
                                    .map(|&w| (w, done[w] + if broken { BREAK_OFFSET } else { 0 }))
                                    .collect(),
                            },
                            SyncKind::Barrier => {
                                *barriers += 1;
                                SyncRun::Barrier {
                                    id: sy.id,
                                    number: *barriers,
                                    broken,
                                }
                            }
                        }
                    });
                    done[*s] += grid.iter().map(|&g| g as u64).product::<u64>();
                    runs.push(Run {
                        stage: *s,
                        grid,
                        args: iargs,
                        vars: in_scope,
                        sync,
                    });
                }
            }
        }
        Ok(())
    }
    walk(
        r,
        sched,
        &r.body,
        args,
        &vals,
        params,
        &mut vars,
        &mut done,
        &mut barriers,
        &mut runs,
        break_sync,
    )?;
    Ok(runs)
}

fn pid_of(p: u32, grid: [u32; 3]) -> [u32; 3] {
    [
        p % grid[0],
        (p / grid[0]) % grid[1],
        p / (grid[0] * grid[1]),
    ]
}

/// Runs the megakernel on `mem`. `args` has one entry per megakernel parameter
/// (constexprs included; their entry is ignored).
pub fn run(
    r: &Resolved,
    sched: &Schedule,
    args: &[HostArg],
    mem: &mut [HostMem],
    mode: InterpMode,
    break_sync: Option<usize>,
) -> Result<(), String> {
    let runs = unroll(r, sched, args, break_sync)?;
    let mut its = Vec::with_capacity(runs.len());
    for run in &runs {
        its.push(
            Interpreter::new(&r.stages[run.stage].kernel, &run.args, mem)
                .map_err(|e| format!("megakernel `{}`: {e}", r.program.name))?,
        );
    }
    let fail = |e: crate::interp::InterpError| format!("megakernel `{}`: {e}", r.program.name);
    let (ctas, policy) = match mode {
        InterpMode::Sequential => {
            for (run, it) in runs.iter().zip(&its) {
                let n: u32 = run.grid.iter().product();
                for p in 0..n {
                    it.run_program(pid_of(p, run.grid), run.grid, mem)
                        .map_err(fail)?;
                }
            }
            return Ok(());
        }
        InterpMode::Adversarial { ctas, policy } => (ctas.max(1), policy),
    };
    let g = ctas as u64;
    let mut counters = vec![0u64; r.stages.len()];
    let mut arrivals = 0u64;
    // Per CTA: (index of the run it is in, programs of that run it has finished, arrived at
    // the run's barrier).
    let mut at = vec![(0usize, 0u64, false); ctas as usize];
    let mut rng = match policy {
        Policy::Shuffled(s) => s,
        Policy::RunAhead => 0,
    };
    let programs = |run: &Run| run.grid.iter().map(|&x| x as u64).product::<u64>();
    let mine = |run: &Run, c: u64| {
        let n = programs(run);
        if c < n {
            (n - c).div_ceil(g)
        } else {
            0
        }
    };
    loop {
        // Settle every CTA: take every non-blocking step (arrivals, satisfied waits, runs in
        // which it has no program) until it must run a program, blocks, or ends.
        // A CTA blocked early in a pass may be freed by arrivals later in it: repeat until
        // nothing moves.
        let (mut enabled, mut blocked) = (vec![], vec![]);
        loop {
            let before = (at.clone(), arrivals);
            enabled.clear();
            blocked.clear();
            for (c, cta) in at.iter_mut().enumerate() {
                loop {
                    let (i, k, arrived) = *cta;
                    let Some(run) = runs.get(i) else { break };
                    let has = mine(run, c as u64);
                    if k == 0 {
                        let ok = match &run.sync {
                            None => true,
                            Some(SyncRun::Counter { waits, .. }) => {
                                has == 0 || waits.iter().all(|&(s, t)| counters[s] >= t)
                            }
                            Some(SyncRun::Barrier { number, broken, .. }) => {
                                if !arrived {
                                    arrivals += 1;
                                    cta.2 = true;
                                }
                                arrivals >= number * g + if *broken { BREAK_OFFSET } else { 0 }
                            }
                        };
                        if !ok {
                            blocked.push(c);
                            break;
                        }
                    }
                    if k < has {
                        enabled.push(c);
                        break;
                    }
                    *cta = (i + 1, 0, false);
                }
            }
            if !enabled.is_empty() || (at.clone(), arrivals) == before {
                break;
            }
        }
        if enabled.is_empty() {
            // The earliest blocked CTA in program order: the later ones wait on it.
            let Some(&c) = blocked.iter().min_by_key(|&&c| (at[c].0, c)) else {
                return Ok(());
            };
            let run = &runs[at[c].0];
            let sy = r.stages[run.stage].label();
            let sched_sync = sched
                .sync_for(run.stage)
                .expect("a blocked CTA waits at a sync");
            let (id, seen) = match run.sync.as_ref().expect("blocked at a sync") {
                SyncRun::Counter { id, waits } => {
                    let w: Vec<String> = waits
                        .iter()
                        .map(|&(s, t)| {
                            format!("counter of stage {} at {} of {t}", s + 1, counters[s])
                        })
                        .collect();
                    (*id, w.join(", "))
                }
                SyncRun::Barrier { id, number, broken } => (
                    *id,
                    format!(
                        "{arrivals} of {} arrivals",
                        number * g + if *broken { BREAK_OFFSET } else { 0 }
                    ),
                ),
            };
            let vars: Vec<String> = run.vars.iter().map(|(n, v)| format!("{n} = {v}")).collect();
            return Err(format!(
                "megakernel `{}`: sync {id} ({} before {sy}) never completes: CTA {c} waits{} ({seen}); deadlock",
                r.program.name,
                sync_text(r, sched_sync),
                if vars.is_empty() { String::new() } else { format!(" at {}", vars.join(", ")) },
            ));
        }
        let c = match policy {
            Policy::RunAhead => *enabled
                .iter()
                .max_by_key(|&&c| (at[c].0, c))
                .expect("not empty"),
            Policy::Shuffled(_) => enabled[(splitmix64(&mut rng) % enabled.len() as u64) as usize],
        };
        let (i, k, _) = at[c];
        let run = &runs[i];
        let p = c as u64 + k * g;
        its[i]
            .run_program(pid_of(p as u32, run.grid), run.grid, mem)
            .map_err(fail)?;
        at[c].1 += 1;
        if at[c].1 == mine(run, c as u64) {
            counters[run.stage] += at[c].1;
        }
    }
}
