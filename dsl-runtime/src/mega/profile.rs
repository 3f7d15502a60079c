//! Where a megakernel's time goes: with `MegaOptions::profile`, every CTA stamps each stage
//! run with `%globaltimer` when it entered the stage, when it passed the stage's wait, when
//! its programs had run, and when its arrival was published. [`Profile::summary`] turns the
//! stamps into one row per stage of the program: how long the stage held the critical path,
//! the weight bandwidth it reached, and per CTA the timeline of a run: dependency wait,
//! compute (its programs: the weight loads, the arithmetic, the stores), and publishing the
//! arrival (its stores made visible: the release of everything the CTA wrote).
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
/// program there, programs run, done) in ns of `%globaltimer`.
#[derive(Clone, Debug)]
pub struct Profile {
    pub labels: Vec<String>,
    pub runs: Vec<Run>,
    pub ctas: usize,
    pub stamps: Vec<Stamps>,
}

/// One CTA's stamps for one stage run (`SyncWords::PROFILE_STAMPS`).
pub type Stamps = [u64; super::cuda::SyncWords::PROFILE_STAMPS];

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
    /// The timeline of a CTA with programs there, median over runs of the mean over CTAs:
    /// entered → past its wait (waiting for the producers).
    pub wait_ns: u64,
    /// Past its wait → programs run: loads (the weights' too), compute, stores.
    pub compute_ns: u64,
    /// Programs run → arrival published (the release: its writes made visible).
    pub publish_ns: u64,
    /// The run's last CTA done (the one that ends the run's share of the critical path),
    /// median over runs: the previous run's last CTA done → this CTA past its wait (the
    /// hop, when it waited for it: publish seen, wait released; negative when it passed
    /// its wait before the previous run ended) ...
    pub last_lag_ns: i64,
    /// ... → its programs run ...
    pub last_compute_ns: u64,
    /// ... → its arrival published.
    pub last_publish_ns: u64,
}

impl Profile {
    pub fn new(r: &Resolved, runs: Vec<Run>, ctas: usize, raw: &[u32]) -> Profile {
        let word = |i: usize| {
            raw.get(2 * i).copied().unwrap_or(0) as u64
                | (raw.get(2 * i + 1).copied().unwrap_or(0) as u64) << 32
        };
        let stamps = (0..runs.len() * ctas)
            .map(|i| {
                let k = super::cuda::SyncWords::PROFILE_STAMPS * i;
                std::array::from_fn(|j| word(k + j))
            })
            .collect();
        Profile {
            labels: r.stages.iter().map(|s| s.label()).collect(),
            runs,
            ctas,
            stamps,
        }
    }

    fn cta(&self, run: usize, cta: usize) -> Stamps {
        self.stamps[run * self.ctas + cta]
    }

    /// (first CTA past its wait, last CTA done) of a run, over the CTAs with programs there.
    fn window(&self, run: usize) -> Option<(u64, u64)> {
        let busy = (0..self.ctas)
            .map(|c| self.cta(run, c))
            .filter(|t| t[1] != 0);
        busy.fold(None, |acc, t| match acc {
            None => Some((t[1], t[3])),
            Some((a, b)) => Some((a.min(t[1]), b.max(t[3]))),
        })
    }

    /// Mean over the CTAs with programs in a run: (dependency wait, compute, publish) ns.
    fn timeline(&self, run: usize) -> Option<[u64; 3]> {
        let busy: Vec<Stamps> = (0..self.ctas)
            .map(|c| self.cta(run, c))
            .filter(|t| t[1] != 0 && t[2] != 0)
            .collect();
        if busy.is_empty() {
            return None;
        }
        let mean = |f: &dyn Fn(&Stamps) -> u64| busy.iter().map(f).sum::<u64>() / busy.len() as u64;
        Some([
            mean(&|t| t[1].saturating_sub(t[0])),
            mean(&|t| t[2].saturating_sub(t[1])),
            mean(&|t| t[3].saturating_sub(t[2])),
        ])
    }

    /// The busy CTA of a run that was done last: (past its wait − `prev_done`, compute,
    /// publish) ns.
    fn last_cta(&self, run: usize, prev_done: u64) -> Option<(i64, u64, u64)> {
        (0..self.ctas)
            .map(|c| self.cta(run, c))
            .filter(|t| t[1] != 0 && t[2] != 0)
            .max_by_key(|t| t[3])
            .map(|t| {
                (
                    t[1] as i64 - prev_done as i64,
                    t[2].saturating_sub(t[1]),
                    t[3].saturating_sub(t[2]),
                )
            })
    }

    /// The launch's length: first stamp to last.
    pub fn total_ns(&self) -> u64 {
        let first = self.stamps.iter().map(|t| t[0]).filter(|&t| t != 0).min();
        let last = self.stamps.iter().map(|t| t[3]).max();
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
        #[derive(Clone, Default)]
        struct Acc {
            crit: Vec<u64>,
            span: Vec<u64>,
            gap: Vec<i64>,
            timeline: [Vec<u64>; 3],
            last: (Vec<i64>, Vec<u64>, Vec<u64>),
            bytes: u64,
            runs: usize,
        }
        let mut per = vec![Acc::default(); self.labels.len()];
        let mut prev_done = start;
        for (i, run) in self.runs.iter().enumerate() {
            let Some((first, last)) = self.window(i) else {
                continue;
            };
            let e = &mut per[run.stage];
            e.crit.push(last.saturating_sub(prev_done));
            e.span.push(last.saturating_sub(first));
            e.gap.push(first as i64 - prev_done as i64);
            if let Some(t) = self.timeline(i) {
                for (v, x) in e.timeline.iter_mut().zip(t) {
                    v.push(x);
                }
            }
            if let Some((lag, compute, publish)) = self.last_cta(i, prev_done) {
                e.last.0.push(lag);
                e.last.1.push(compute);
                e.last.2.push(publish);
            }
            e.bytes = run.weight_bytes;
            e.runs += 1;
            prev_done = last.max(prev_done);
        }
        fn median<T: Copy + Ord + Default>(v: &mut [T]) -> T {
            v.sort_unstable();
            v.get(v.len() / 2).copied().unwrap_or_default()
        }
        per.into_iter()
            .enumerate()
            .filter(|(_, e)| e.runs > 0)
            .map(|(s, mut e)| {
                let med = median(&mut e.crit);
                let [w, c, u] = &mut e.timeline;
                let (ll, lc, lp) = &mut e.last;
                StageRow {
                    stage: s,
                    label: self.labels[s].clone(),
                    runs: e.runs,
                    critical_ns: e.crit.iter().sum(),
                    span_ns: median(&mut e.span),
                    gap_ns: median(&mut e.gap),
                    weight_bytes: e.bytes,
                    gbps: (e.bytes > 0 && med > 0).then(|| e.bytes as f64 / med as f64),
                    wait_ns: median(w),
                    compute_ns: median(c),
                    publish_ns: median(u),
                    last_lag_ns: median(ll),
                    last_compute_ns: median(lc),
                    last_publish_ns: median(lp),
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
            "| stage | runs | critical µs (total) | % | median span µs | median gap µs | weights KB | GB/s | CTA: dependency wait µs | compute µs | publish µs | last CTA: hop µs | compute µs | publish µs |"
        );
        let _ = writeln!(
            s,
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        let us = |ns: u64| ns as f64 / 1e3;
        for r in self.rows() {
            let _ = writeln!(
                s,
                "| {} | {} | {:.1} | {:.1} | {:.2} | {:.2} | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
                r.label,
                r.runs,
                us(r.critical_ns),
                100.0 * r.critical_ns as f64 / total as f64,
                us(r.span_ns),
                r.gap_ns as f64 / 1e3,
                r.weight_bytes / 1024,
                r.gbps.map_or("—".into(), |g| format!("{g:.0}")),
                us(r.wait_ns),
                us(r.compute_ns),
                us(r.publish_ns),
                r.last_lag_ns as f64 / 1e3,
                us(r.last_compute_ns),
                us(r.last_publish_ns),
            );
        }
        let _ = writeln!(
            s,
            "CTA columns: per CTA with programs in a run (mean), median over runs: waiting for the stages it depends on; its programs (loads, the weights' too, compute, stores); publishing its arrival (its stores made visible). Last CTA columns: the CTA done last in a run (it ends the run's share of the critical path), median over runs: the previous run's last CTA done to this one past its wait (the hop: publish seen, wait released), its programs, its publish."
        );
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two stages, two CTAs, synthetic stamps: the timeline columns are each CTA's
    /// (dependency wait, compute, publish), averaged over the CTAs with programs, median
    /// over runs.
    #[test]
    fn timeline_per_stage_from_stamps() {
        let runs = vec![
            Run {
                stage: 0,
                weight_bytes: 1000,
            },
            Run {
                stage: 1,
                weight_bytes: 0,
            },
            Run {
                stage: 0,
                weight_bytes: 1000,
            },
        ];
        // ns after the launch's first stamp (%globaltimer is never 0; 0 marks "no program").
        #[rustfmt::skip]
        let rel: Vec<[u64; 4]> = vec![
            // run 0 (stage 0): CTA 0 waits 10, runs 100, publishes 4; CTA 1 waits 30,
            // runs 50, publishes 2
            [1, 10, 110, 114], [1, 30, 80, 82],
            // run 1 (stage 1): only CTA 1 has a program; CTA 0 idles (past-wait stamp 0)
            [114, 0, 0, 120], [82, 200, 300, 310],
            // run 2 (stage 0): both wait 20, run 60, publish 6
            [310, 330, 390, 396], [310, 330, 390, 396],
        ];
        let base = 1_000_000u64;
        let stamps = rel
            .iter()
            .map(|t| t.map(|x| if x == 0 { 0 } else { base + x }))
            .collect();
        let p = Profile {
            labels: vec!["gemv".into(), "attn".into()],
            runs,
            ctas: 2,
            stamps,
        };
        let rows = p.rows();
        assert_eq!(rows.len(), 2);
        let (g, a) = (&rows[0], &rows[1]);
        assert_eq!((g.label.as_str(), g.runs), ("gemv", 2));
        // Run 0: mean wait (9+29)/2 = 19, compute (100+50)/2 = 75, publish 3; run 2: 20, 60,
        // 6. Medians of two values take the upper one.
        let t = |r: &StageRow| (r.wait_ns, r.compute_ns, r.publish_ns);
        assert_eq!(t(g), (20, 75, 6));
        assert_eq!(t(a), (118, 100, 10));
        // The critical path: from the first stamp (1), run 0 ends at 114, run 1 at 310, run 2 at 396.
        assert_eq!(g.critical_ns, (114 - 1) + (396 - 310));
        assert_eq!(a.critical_ns, 310 - 114);
        assert_eq!(p.total_ns(), 396 - 1);
        let table = p.summary();
        assert!(
            table.contains("| CTA: dependency wait µs | compute µs | publish µs |"),
            "{table}"
        );
        assert!(table.contains("| 0.02 | 0.07 | 0.01 |"), "{table}");
        // The last CTA done: run 0 CTA 0 (past its wait 9 after the launch's first stamp,
        // 100, 4), run 2 either CTA (20 after run 1's end, 60, 6); run 1 CTA 1 (86 after
        // run 0's end at 114, 100, 10).
        let last = |r: &StageRow| (r.last_lag_ns, r.last_compute_ns, r.last_publish_ns);
        assert_eq!(last(g), (20, 100, 6));
        assert_eq!(last(a), (86, 100, 10));
        assert!(
            table.contains("| last CTA: hop µs | compute µs | publish µs |"),
            "{table}"
        );
    }
}
