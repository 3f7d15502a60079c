//! Hazards and syncs: where the persistent kernel must wait, and for what.
//!
//! # The execution model the schedule is for
//! Every CTA walks the same program (loops included). At a stage with `n` programs, CTA `c`
//! runs programs `c, c + G, …` (G = CTAs in the grid). Two ways to wait:
//! - a **counter wait** before stage C on stages {P…}: only CTAs with programs in C wait,
//!   until each P's counter reaches the number of P programs run so far (each CTA adds its
//!   program count to P's counter after its last P program). CTAs with no work in C run
//!   ahead to the next stage;
//! - a **grid barrier** before C: every CTA arrives, and waits for all G arrivals.
//!
//! # The analysis
//! An abstract state holds the stage runs that some CTA may not yet have seen finish
//! ("pending"), each with the runs it is known to imply: a stage whose programs all waited
//! for P can only finish after P did, so waiting for it covers P too. At each stage the
//! hazards against pending runs are RAW (it reads what one wrote), WAR (it writes what one
//! read) and WAW; two accesses conflict unless they use different pointer parameters
//! (distinct parameters must not overlap: the launch checks it) or windows of the same
//! parameter that are provably disjoint (`&w[a..b]` vs `&w[c..d]` with `c - b` a provably
//! non-negative affine expression, also across loop iterations). The stage then waits on
//! the fewest stages whose runs cover every hazard, or takes a barrier (forced by
//! `#[barrier]`, or when more than [`MAX_COUNTER_WAITS`] stages would be needed), which
//! empties the state. Loops are analysed to a fixed point: runs of the previous iteration
//! stay pending at the loop head, so hazards carried across iterations count.
//!
//! A counter counts every run of its stage, so a wait for "all programs so far" is exact
//! only if no program of a later run can bump it first: a stage whose counter some wait
//! has read since its previous run, that run still pending, waits for itself ("reuse").
use super::prove::{disjoint, Frame, Polys, Region};
use super::resolve::{Access, Node, Resolved};
use dsl_ir::ParamKind;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

/// More counters than this in one wait and a barrier is cheaper (and clears the state).
pub const MAX_COUNTER_WAITS: usize = 4;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HazardKind {
    /// Read after write.
    Raw,
    /// Write after read.
    War,
    /// Write after write.
    Waw,
    /// The stage's counter is reused by its next run (see the module doc).
    Reuse,
}

/// Where a pending run came from, relative to the stage that conflicts with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Carried {
    /// Earlier in the same iteration (or straight-line code).
    No,
    /// From an earlier iteration of this loop (by id).
    Iteration(usize),
    /// From a loop (by id) that had already finished: an earlier run of that whole loop.
    EarlierLoop(usize),
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Hazard {
    pub kind: HazardKind,
    /// The earlier stage.
    pub producer: usize,
    /// The megakernel pointer parameter both touch (None for `Reuse`).
    pub param: Option<usize>,
    pub carried: Carried,
    /// The stage whose counter covers this hazard (waited on directly when it is
    /// `producer`; else through what that stage waited for). None under a barrier.
    pub via: Option<usize>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncKind {
    Counter,
    Barrier,
}

/// One sync, placed before a stage.
#[derive(Clone, Debug, PartialEq)]
pub struct Sync {
    /// 0-based, in program order: what `drop_sync` / `break_sync` and error messages name.
    pub id: usize,
    pub stage: usize,
    pub kind: SyncKind,
    /// For counter waits: the stages whose counters are waited for.
    pub waits: Vec<usize>,
    /// Why: every hazard this sync resolves (empty for a `#[barrier]` with no hazard).
    pub hazards: Vec<Hazard>,
    /// True when `#[barrier]` asked for it.
    pub forced: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    pub syncs: Vec<Sync>,
    /// Per stage: the index in `syncs` of the sync before it.
    pub sync_before: Vec<Option<usize>>,
    /// Per stage: whether its programs bump a counter (some wait reads it).
    pub counted: Vec<bool>,
}

impl Schedule {
    /// The same schedule without sync `id`: for tests that show a needed sync is needed
    /// (the adversarial interpreter then gives a wrong answer).
    pub fn without_sync(&self, id: usize) -> Schedule {
        let mut s = self.clone();
        if let Some(i) = s.syncs.iter().position(|x| x.id == id) {
            s.syncs.remove(i);
            // Indices into `syncs` shift; ids stay as they were (errors keep naming them).
            s.sync_before = s
                .sync_before
                .iter()
                .map(|x| {
                    x.and_then(|k| {
                        if k == i {
                            None
                        } else if k > i {
                            Some(k - 1)
                        } else {
                            Some(k)
                        }
                    })
                })
                .collect();
        }
        s
    }

    pub fn sync_for(&self, stage: usize) -> Option<&Sync> {
        self.sync_before[stage].map(|i| &self.syncs[i])
    }
}

// ---- the abstract state ----

/// A pending stage run: the stage and how its loop variables relate to the current ones.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    stage: usize,
    frames: Vec<(usize, Frame)>,
}

impl Key {
    fn carried(&self) -> Carried {
        for (l, f) in &self.frames {
            match f {
                Frame::Earlier => return Carried::Iteration(*l),
                Frame::Exited => return Carried::EarlierLoop(*l),
                Frame::Current => {}
            }
        }
        Carried::No
    }
    fn map(&self, f: &dyn Fn(usize, Frame) -> Frame) -> Key {
        Key {
            stage: self.stage,
            frames: self.frames.iter().map(|&(l, fr)| (l, f(l, fr))).collect(),
        }
    }
}

/// What is known of a pending run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Info {
    /// Runs known to have finished before this one could finish.
    implies: BTreeSet<Key>,
    /// Some wait has read this stage's counter since the run: a later run of the stage
    /// must not bump the counter before this one is done (see "reuse").
    read: bool,
}

/// Pending runs and what is known of each.
type State = BTreeMap<Key, Info>;

/// Knowledge that holds on both paths: pending on either, implied on both, read on either.
fn merge(x: &mut Info, y: &Info) {
    x.implies = x.implies.intersection(&y.implies).cloned().collect();
    x.read |= y.read;
}

fn join(a: &State, b: &State) -> State {
    let mut out = a.clone();
    for (k, info) in b {
        match out.get_mut(k) {
            Some(x) => merge(x, info),
            None => {
                out.insert(k.clone(), info.clone());
            }
        }
    }
    out
}

fn map_state(s: &State, f: &dyn Fn(usize, Frame) -> Frame) -> State {
    let mut out = State::new();
    for (k, info) in s {
        let info = Info {
            implies: info.implies.iter().map(|i| i.map(f)).collect(),
            read: info.read,
        };
        match out.get_mut(&k.map(f)) {
            Some(x) => merge(x, &info),
            None => {
                out.insert(k.map(f), info);
            }
        }
    }
    out
}

#[derive(Clone, Debug, Default, PartialEq)]
struct Decision {
    barrier: bool,
    waits: BTreeSet<usize>,
}

struct Pass<'a> {
    r: &'a Resolved,
    decisions: Vec<Decision>,
    hazards: Vec<BTreeSet<Hazard>>,
}

impl Pass<'_> {
    fn regions(&self, accs: &[Access], frames: &BTreeMap<usize, Frame>) -> Vec<Region> {
        let p = Polys { r: self.r, frames };
        accs.iter()
            .map(|a| Region {
                param: a.param,
                start: p.poly(&a.offset),
                end: a.end.as_ref().map(|e| p.poly(e)),
            })
            .collect()
    }

    fn stage(&mut self, s: usize, state: &mut State) {
        let st = &self.r.stages[s];
        let cur: BTreeMap<usize, Frame> = st.loops.iter().map(|&l| (l, Frame::Current)).collect();
        let (reads, writes) = (
            self.regions(&st.reads, &cur),
            self.regions(&st.writes, &cur),
        );
        // Hazards against every pending run.
        let mut found: Vec<(Key, HazardKind, Option<usize>)> = vec![];
        for k in state.keys() {
            let other = &self.r.stages[k.stage];
            let frames: BTreeMap<usize, Frame> = k.frames.iter().copied().collect();
            let (or, ow) = (
                self.regions(&other.reads, &frames),
                self.regions(&other.writes, &frames),
            );
            for (mine, theirs, kind) in [
                (&reads, &ow, HazardKind::Raw),
                (&writes, &or, HazardKind::War),
                (&writes, &ow, HazardKind::Waw),
            ] {
                for a in mine.iter() {
                    if theirs.iter().any(|b| !disjoint(a, b)) {
                        found.push((k.clone(), kind, Some(a.param)));
                    }
                }
            }
            if k.stage == s && state[k].read {
                found.push((k.clone(), HazardKind::Reuse, None));
            }
        }
        let d = &mut self.decisions[s];
        if st.barrier_hint {
            d.barrier = true;
        }
        let covered = |waits: &BTreeSet<usize>, k: &Key| -> Option<usize> {
            if waits.contains(&k.stage) {
                return Some(k.stage);
            }
            state
                .iter()
                .find(|(g, info)| waits.contains(&g.stage) && info.implies.contains(k))
                .map(|(g, _)| g.stage)
        };
        if !d.barrier {
            // Cover the uncovered hazards greedily: each step waits on the stage whose
            // pending runs imply the most uncovered hazards.
            loop {
                let open: BTreeSet<&Key> = found
                    .iter()
                    .map(|(k, _, _)| k)
                    .filter(|k| covered(&d.waits, k).is_none())
                    .collect();
                if open.is_empty() {
                    break;
                }
                let best = open
                    .iter()
                    .map(|k| {
                        let mut w = d.waits.clone();
                        w.insert(k.stage);
                        let n = open.iter().filter(|o| covered(&w, o).is_some()).count();
                        (n, std::cmp::Reverse(k.stage))
                    })
                    .max()
                    .map(|(_, std::cmp::Reverse(st))| st)
                    .expect("open is not empty");
                d.waits.insert(best);
            }
            if d.waits.len() > MAX_COUNTER_WAITS {
                d.barrier = true;
            }
        }
        let d = self.decisions[s].clone();
        for (k, kind, param) in &found {
            let via = if d.barrier {
                None
            } else {
                covered(&d.waits, k)
            };
            self.hazards[s].insert(Hazard {
                kind: *kind,
                producer: k.stage,
                param: *param,
                carried: k.carried(),
                via,
            });
        }
        let key = Key {
            stage: s,
            frames: st.loops.iter().map(|&l| (l, Frame::Current)).collect(),
        };
        let implies: BTreeSet<Key> = if d.barrier {
            state.clear();
            BTreeSet::new()
        } else {
            let mut imp = BTreeSet::new();
            for (g, gi) in state.iter_mut() {
                if d.waits.contains(&g.stage) {
                    imp.insert(g.clone());
                    imp.extend(gi.implies.iter().cloned());
                    // This wait reads the counter of every pending run of `g.stage`.
                    gi.read = true;
                }
            }
            imp
        };
        let info = Info {
            implies,
            read: false,
        };
        match state.get_mut(&key) {
            Some(x) => merge(x, &info),
            None => {
                state.insert(key, info);
            }
        }
    }

    fn nodes(&mut self, nodes: &[Node], state: &mut State) {
        for n in nodes {
            match n {
                Node::Stage(s) => self.stage(*s, state),
                Node::Loop { id, body, .. } => {
                    let l = *id;
                    let mut head = state.clone();
                    loop {
                        let before = (head.clone(), self.decisions.clone());
                        let mut s = head.clone();
                        self.nodes(body, &mut s);
                        // Around the back edge, this iteration's runs become earlier ones.
                        let back = map_state(&s, &|id, f| {
                            if id == l && f == Frame::Current {
                                Frame::Earlier
                            } else {
                                f
                            }
                        });
                        head = join(&head, &back);
                        if (head.clone(), self.decisions.clone()) == before {
                            break;
                        }
                    }
                    // The loop may run zero times: after it, the head's state, with the
                    // loop's variable no longer meaningful.
                    *state = map_state(&head, &|id, f| if id == l { Frame::Exited } else { f });
                }
            }
        }
    }
}

/// Computes the schedule.
pub fn schedule(r: &Resolved) -> Schedule {
    let n = r.stages.len();
    let mut p = Pass {
        r,
        decisions: vec![Decision::default(); n],
        hazards: vec![BTreeSet::new(); n],
    };
    p.nodes(&r.body, &mut State::new());
    let (decisions, hazards) = (p.decisions, p.hazards);
    let mut syncs = vec![];
    let mut sync_before = vec![None; n];
    for s in 0..n {
        let d = &decisions[s];
        if !d.barrier && d.waits.is_empty() {
            continue;
        }
        sync_before[s] = Some(syncs.len());
        syncs.push(Sync {
            id: syncs.len(),
            stage: s,
            kind: if d.barrier {
                SyncKind::Barrier
            } else {
                SyncKind::Counter
            },
            waits: if d.barrier {
                vec![]
            } else {
                d.waits.iter().copied().collect()
            },
            hazards: hazards[s].iter().cloned().collect(),
            forced: r.stages[s].barrier_hint,
        });
    }
    let mut counted_v = vec![false; n];
    for sy in &syncs {
        for &w in &sy.waits {
            counted_v[w] = true;
        }
    }
    Schedule {
        syncs,
        sync_before,
        counted: counted_v,
    }
}

/// The windows stage `s` reads from pointer parameters no stage writes (weights), whose
/// extent is known (`&w[a..b]`): what a waiting CTA may prefetch into L2.
pub fn weight_windows(r: &Resolved, s: usize) -> Vec<&Access> {
    r.stages[s]
        .reads
        .iter()
        .filter(|a| {
            a.end.is_some()
                && r.read_only(a.param)
                && matches!(r.params()[a.param].kind, ParamKind::Ptr(_))
        })
        .collect()
}

// ---- explain ----

fn kind_text(k: HazardKind) -> &'static str {
    match k {
        HazardKind::Raw => "RAW",
        HazardKind::War => "WAR",
        HazardKind::Waw => "WAW",
        HazardKind::Reuse => "reuse",
    }
}

/// One line per hazard: "RAW: reads `h` written by stage 1 add_rmsnorm".
pub fn hazard_text(r: &Resolved, stage: usize, h: &Hazard) -> String {
    hazard_line(r, stage, h, &[h.carried])
}

/// One line per (kind, producer, parameter, cover), the runs it concerns merged:
/// "RAW: reads `h` written by stage 1 add_rmsnorm (this and the previous iteration of `layer`)".
pub fn hazard_lines(r: &Resolved, stage: usize, hazards: &[Hazard]) -> Vec<String> {
    let mut groups: Vec<(&Hazard, Vec<Carried>)> = vec![];
    for h in hazards {
        let same = |g: &Hazard| {
            g.kind == h.kind && g.producer == h.producer && g.param == h.param && g.via == h.via
        };
        match groups.iter_mut().find(|(g, _)| same(g)) {
            Some((_, c)) => c.push(h.carried),
            None => groups.push((h, vec![h.carried])),
        }
    }
    groups
        .iter()
        .map(|(h, c)| hazard_line(r, stage, h, c))
        .collect()
}

fn hazard_line(r: &Resolved, stage: usize, h: &Hazard, carried: &[Carried]) -> String {
    let p = h
        .param
        .map(|p| r.params()[p].name.clone())
        .unwrap_or_default();
    let prod = r.stages[h.producer].label();
    let parts: Vec<String> = carried
        .iter()
        .map(|c| match c {
            Carried::No => "this iteration".to_string(),
            Carried::Iteration(l) => format!("the previous iteration of `{}`", r.vars[*l]),
            Carried::EarlierLoop(l) => format!("an earlier run of loop `{}`", r.vars[*l]),
        })
        .collect();
    let when = match carried {
        [Carried::No] => String::new(),
        [Carried::Iteration(_)] if h.producer == stage => format!(" (its run in {})", parts[0]),
        _ => format!(" ({})", parts.join(" and ")),
    };
    let what = match h.kind {
        HazardKind::Raw => format!("reads `{p}` written by {prod}{when}"),
        HazardKind::War => format!("writes `{p}` read by {prod}{when}"),
        HazardKind::Waw => format!("writes `{p}` also written by {prod}{when}"),
        HazardKind::Reuse => format!(
            "its counter is reused: {prod}{when} must finish before this run's programs count"
        ),
    };
    let via = match h.via {
        Some(v) if v == h.producer => String::new(),
        Some(v) => format!(" [covered by waiting for {}]", r.stages[v].label()),
        None => String::new(),
    };
    format!("{}: {what}{via}", kind_text(h.kind))
}

/// A short description of sync `s`: "counter wait on stage 5 gemv" / "grid barrier".
pub fn sync_text(r: &Resolved, s: &Sync) -> String {
    match s.kind {
        SyncKind::Barrier => "grid barrier".into(),
        SyncKind::Counter => {
            let w: Vec<String> = s.waits.iter().map(|&w| r.stages[w].label()).collect();
            format!("counter wait on {}", w.join(", "))
        }
    }
}

/// The schedule, for humans: stages in program order inside their loops, each sync with its
/// kind and the hazards that caused it.
pub fn explain(r: &Resolved, sched: &Schedule) -> String {
    let mut out = String::new();
    let consts: Vec<String> = r
        .constexprs
        .iter()
        .map(|(n, v)| format!("{n}={v}"))
        .collect();
    let nb = sched
        .syncs
        .iter()
        .filter(|s| s.kind == SyncKind::Barrier)
        .count();
    let _ = writeln!(
        out,
        "megakernel `{}` ({}){}: {} stages, {} syncs ({} counter waits, {} grid barriers)",
        r.program.name,
        r.program.file,
        if consts.is_empty() {
            String::new()
        } else {
            format!(" with {}", consts.join(", "))
        },
        r.stages.len(),
        sched.syncs.len(),
        sched.syncs.len() - nb,
        nb
    );
    fn walk(r: &Resolved, sched: &Schedule, nodes: &[Node], ind: usize, out: &mut String) {
        let pad = " ".repeat(ind);
        for n in nodes {
            match n {
                Node::Loop {
                    var,
                    start,
                    end,
                    body,
                    ..
                } => {
                    let _ = writeln!(
                        out,
                        "{pad}for {var} in {}..{} {{",
                        r.show(start),
                        r.show(end)
                    );
                    walk(r, sched, body, ind + 2, out);
                    let _ = writeln!(out, "{pad}}}");
                }
                Node::Stage(s) => {
                    let st = &r.stages[*s];
                    let grid: Vec<String> = st.grid.iter().map(|g| r.show(g)).collect();
                    let args: Vec<String> = st.args.iter().map(|a| r.show_arg(a)).collect();
                    let _ = writeln!(
                        out,
                        "{pad}{}  grid ({})  line {}: {}({})",
                        st.label(),
                        grid.join(", "),
                        st.line,
                        st.kernel_name,
                        args.join(", ")
                    );
                    match sched.sync_for(*s) {
                        None => {
                            let _ = writeln!(
                                out,
                                "{pad}  no sync: no hazard with a run that may be pending"
                            );
                        }
                        Some(sy) => {
                            let forced = if sy.forced { " (#[barrier])" } else { "" };
                            let _ = writeln!(
                                out,
                                "{pad}  sync {}: {}{forced}",
                                sy.id,
                                sync_text(r, sy)
                            );
                            for l in hazard_lines(r, *s, &sy.hazards) {
                                let _ = writeln!(out, "{pad}    {l}");
                            }
                        }
                    }
                    if sched.counted[*s] {
                        let _ = writeln!(out, "{pad}  finished programs bump counter {}", s);
                    }
                }
            }
        }
    }
    walk(r, sched, &r.body, 0, &mut out);
    out
}
