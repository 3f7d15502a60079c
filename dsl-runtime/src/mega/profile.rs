//! Where a megakernel's time goes: with `MegaOptions::profile`, every CTA stamps each stage
//! run with `%globaltimer` when it entered the stage, when it passed the stage's wait, and
//! when it was done (its programs run and its arrival counted). [`Profile::summary`] turns
//! the stamps into one row per stage of the program: how long the stage held the critical
//! path, how much of that was waiting for its producers, and the weight bandwidth it reached.
use super::program::{Env, Val};
use super::resolve::{Node, Resolved};
use super::schedule::weight_windows;
use std::fmt::Write;

/// One dynamic run of a stage (a stage inside a loop runs once per iteration).
#[derive(Clone, Debug)]
pub struct Run {
    pub stage: usize,
    /// Bytes of weight windows it reads (read-only parameters with a known extent).
    pub weight_bytes: u64,
}

/// The stage runs of one launch, in program order, from the constexprs and run-time scalars.
pub fn stage_runs(r: &Resolved, vals: &[Option<Val>]) -> Result<Vec<Run>, String> {
    fn walk(
        r: &Resolved,
        nodes: &[Node],
        vals: &[Option<Val>],
        vars: &mut Vec<Option<i64>>,
        out: &mut Vec<Run>,
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
                        (start.eval(&env, r.params())?, end.eval(&env, r.params())?)
                    else {
                        return Err(format!("loop `{var}`: bounds are not integers"));
                    };
                    for i in a..b {
                        vars[*id] = Some(i);
                        walk(r, body, vals, vars, out)?;
                    }
                    vars[*id] = None;
                }
                Node::Stage(s) => {
                    let env = Env { params: vals, vars };
                    let mut bytes = 0u64;
                    for a in weight_windows(r, *s) {
                        let size = match r.params()[a.param].kind {
                            dsl_ir::ParamKind::Ptr(d) => d.size_bytes() as u64,
                            _ => 1,
                        };
                        let end = a.end.as_ref().expect("weight windows have an end");
                        if let (Ok(Val::Int(lo)), Ok(Val::Int(hi))) =
                            (a.offset.eval(&env, r.params()), end.eval(&env, r.params()))
                        {
                            bytes += (hi - lo).max(0) as u64 * size;
                        }
                    }
                    out.push(Run {
                        stage: *s,
                        weight_bytes: bytes,
                    });
                }
            }
        }
        Ok(())
    }
    let mut out = vec![];
    walk(r, &r.body, vals, &mut vec![None; r.vars.len()], &mut out)?;
    Ok(out)
}

/// Stamps of one launch: per run, per CTA, (entered, past the wait or 0 if the CTA had no
/// program there, done), in ns of `%globaltimer`.
#[derive(Clone, Debug)]
pub struct Profile {
    pub labels: Vec<String>,
    pub runs: Vec<Run>,
    pub ctas: usize,
    pub stamps: Vec<[u64; 3]>,
}

/// One stage of the program, over its runs.
#[derive(Clone, Debug, serde::Serialize)]
pub struct StageRow {
    pub stage: usize,
    pub label: String,
    pub runs: usize,
    /// Total ns on the critical path: from the previous run's last CTA done to this run's.
    pub critical_ns: u64,
    /// Median per run: first CTA past its wait → last CTA done.
    pub span_ns: u64,
    /// Median per run: previous run's last CTA done → first CTA of this one past its wait
    /// (sync latency; negative when CTAs started before the previous run ended).
    pub gap_ns: i64,
    pub weight_bytes: u64,
    /// Weight bytes / median critical ns per run.
    pub gbps: Option<f64>,
}

impl Profile {
    pub fn new(r: &Resolved, runs: Vec<Run>, ctas: usize, raw: &[u32]) -> Profile {
        let word = |i: usize| {
            raw.get(2 * i).copied().unwrap_or(0) as u64
                | (raw.get(2 * i + 1).copied().unwrap_or(0) as u64) << 32
        };
        let stamps = (0..runs.len() * ctas)
            .map(|i| [word(3 * i), word(3 * i + 1), word(3 * i + 2)])
            .collect();
        Profile {
            labels: r.stages.iter().map(|s| s.label()).collect(),
            runs,
            ctas,
            stamps,
        }
    }

    fn cta(&self, run: usize, cta: usize) -> [u64; 3] {
        self.stamps[run * self.ctas + cta]
    }

    /// (first CTA past its wait, last CTA done) of a run, over the CTAs with programs there.
    fn window(&self, run: usize) -> Option<(u64, u64)> {
        let busy = (0..self.ctas)
            .map(|c| self.cta(run, c))
            .filter(|t| t[1] != 0);
        busy.fold(None, |acc, t| match acc {
            None => Some((t[1], t[2])),
            Some((a, b)) => Some((a.min(t[1]), b.max(t[2]))),
        })
    }

    /// The launch's length: first stamp to last.
    pub fn total_ns(&self) -> u64 {
        let first = self.stamps.iter().map(|t| t[0]).filter(|&t| t != 0).min();
        let last = self.stamps.iter().map(|t| t[2]).max();
        match (first, last) {
            (Some(a), Some(b)) => b.saturating_sub(a),
            _ => 0,
        }
    }

    /// One row per stage of the program, in program order.
    pub fn rows(&self) -> Vec<StageRow> {
        let start = self
            .stamps
            .iter()
            .map(|t| t[0])
            .filter(|&t| t != 0)
            .min()
            .unwrap_or(0);
        let mut per: Vec<(Vec<u64>, Vec<u64>, Vec<i64>, u64, usize)> =
            vec![(vec![], vec![], vec![], 0, 0); self.labels.len()];
        let mut prev_done = start;
        for (i, run) in self.runs.iter().enumerate() {
            let Some((first, last)) = self.window(i) else {
                continue;
            };
            let e = &mut per[run.stage];
            e.0.push(last.saturating_sub(prev_done));
            e.1.push(last.saturating_sub(first));
            e.2.push(first as i64 - prev_done as i64);
            e.3 = run.weight_bytes;
            e.4 += 1;
            prev_done = last.max(prev_done);
        }
        fn median<T: Copy + Ord + Default>(v: &mut [T]) -> T {
            v.sort_unstable();
            v.get(v.len() / 2).copied().unwrap_or_default()
        }
        per.into_iter()
            .enumerate()
            .filter(|(_, e)| e.4 > 0)
            .map(|(s, (mut crit, mut span, mut gap, bytes, runs))| {
                let med = median(&mut crit);
                StageRow {
                    stage: s,
                    label: self.labels[s].clone(),
                    runs,
                    critical_ns: crit.iter().sum(),
                    span_ns: median(&mut span),
                    gap_ns: median(&mut gap),
                    weight_bytes: bytes,
                    gbps: (bytes > 0 && med > 0).then(|| bytes as f64 / med as f64),
                }
            })
            .collect()
    }

    /// A table for humans.
    pub fn summary(&self) -> String {
        let total = self.total_ns().max(1);
        let mut s = String::new();
        let _ = writeln!(
            s,
            "one launch: {:.1} µs over {} CTAs, {} stage runs",
            total as f64 / 1e3,
            self.ctas,
            self.runs.len()
        );
        let _ = writeln!(
            s,
            "| stage | runs | critical µs (total) | % | median span µs | median gap µs | weights KB | GB/s |"
        );
        let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|---:|---:|");
        for r in self.rows() {
            let _ = writeln!(
                s,
                "| {} | {} | {:.1} | {:.1} | {:.2} | {:.2} | {} | {} |",
                r.label,
                r.runs,
                r.critical_ns as f64 / 1e3,
                100.0 * r.critical_ns as f64 / total as f64,
                r.span_ns as f64 / 1e3,
                r.gap_ns as f64 / 1e3,
                r.weight_bytes / 1024,
                r.gbps.map_or("—".into(), |g| format!("{g:.0}")),
            );
        }
        s
    }
}
