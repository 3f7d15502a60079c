//! Each stage's body from the CUDA emitter, with the lowering facts the megakernel can
//! prove: a pointer argument `p + offset` is 16-byte aligned when `p` is (checked at launch)
//! and `offset × element size` is a multiple of 16 for every value of the loop variables;
//! an i32 argument is divisible by 16 when its expression is. Facts allow vector loads;
//! without them the emitter takes the scalar path (always correct).
use super::cuda::BodyCode;
use super::program::{ArgExpr, Expr, Op, Val};
use super::resolve::Resolved;
use super::schedule::{HazardKind, Schedule};
use crate::cuda::{self, EmitOptions};
use dsl_ir::ParamKind;
use std::collections::BTreeSet;

/// What is known of the megakernel's run-time arguments, per parameter (same indexing as
/// `Program::params`): pointers 16-byte aligned, i32 scalars divisible by 16.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MegaFacts(pub Vec<bool>);

impl MegaFacts {
    /// Every pointer aligned and every i32 divisible by 16 (for showing CUDA C without a GPU,
    /// as `KernelDef::cuda_source` does).
    pub fn all(r: &Resolved) -> MegaFacts {
        MegaFacts(vec![true; r.params().len()])
    }
}

/// The largest power of two ≤ 16 known to divide every value of `e`.
fn divisor(r: &Resolved, facts: &MegaFacts, e: &Expr) -> i64 {
    let p2 = |v: i64| {
        if v == 0 {
            16
        } else {
            1i64 << v.unsigned_abs().trailing_zeros().min(4)
        }
    };
    match e {
        Expr::Int(v) => p2(*v),
        Expr::Param(i) => match r.const_env[*i] {
            Some(Val::Int(v)) => p2(v),
            _ if matches!(r.params()[*i].kind, ParamKind::Scalar(dsl_ir::DType::I32))
                && facts.0.get(*i).copied().unwrap_or(false) =>
            {
                16
            }
            _ => 1,
        },
        Expr::Neg(a) => divisor(r, facts, a),
        Expr::Bin(Op::Add | Op::Sub, a, b) => divisor(r, facts, a).min(divisor(r, facts, b)),
        Expr::Bin(Op::Mul, a, b) => (divisor(r, facts, a) * divisor(r, facts, b)).min(16),
        _ => 1,
    }
}

/// Per kernel parameter of stage `s`: the fact the emitter may assume.
pub fn stage_facts(r: &Resolved, s: usize, facts: &MegaFacts) -> Vec<bool> {
    let st = &r.stages[s];
    let mut out = vec![false; st.kernel.params.len()];
    for ((i, p), a) in st.kernel.runtime_params().zip(&st.args) {
        out[i] = match (p.kind, a) {
            (ParamKind::Ptr(d), ArgExpr::Ptr { param, offset, .. }) => {
                facts.0.get(*param).copied().unwrap_or(false)
                    && (divisor(r, facts, offset) * d.size_bytes() as i64) % 16 == 0
            }
            (ParamKind::Scalar(dsl_ir::DType::I32), ArgExpr::Value(e)) => {
                divisor(r, facts, e) == 16
            }
            _ => false,
        };
    }
    out
}

/// Per kernel parameter of stage `s`, whether a body may load through it before its
/// stage's wait (`EmitOptions::dep_hook`): a read-only pointer (a weight), and with `early`
/// (`MegaOptions::early_loads`) any pointer no run that may still be pending writes (no RAW
/// hazard at the stage's sync): what a later stage writes (the decode step's `pos`, written
/// by its last stage) is read before the stages that write it can start.
fn loads_before_wait(r: &Resolved, sched: &Schedule, s: usize, early: bool) -> Vec<bool> {
    let written: BTreeSet<usize> = sched
        .sync_for(s)
        .into_iter()
        .flat_map(|sy| &sy.hazards)
        .filter(|h| h.kind == HazardKind::Raw)
        .filter_map(|h| h.param)
        .collect();
    let st = &r.stages[s];
    let mut out = vec![false; st.kernel.params.len()];
    for ((i, _), a) in st.kernel.runtime_params().zip(&st.args) {
        out[i] = matches!(a, ArgExpr::Ptr { param, .. }
            if r.read_only(*param) || (early && !written.contains(param)));
    }
    out
}

/// The emitter's prelude and one body per distinct (stage body, facts); two call sites of
/// one kernel binding with different facts get two bodies (`name_v2`). For a stage that
/// waits in its bodies (`wait_in_body`, per stage), what it may load before the wait
/// ([`loads_before_wait`], `early_loads`) is part of a body too.
pub fn stage_bodies(
    r: &Resolved,
    sched: &Schedule,
    num_warps: u32,
    facts: &MegaFacts,
    wait_in_body: &[bool],
    early_loads: bool,
) -> Result<(String, Vec<BodyCode>), String> {
    type Group = (String, Vec<bool>, Option<Vec<bool>>, Vec<usize>);
    let mut groups: Vec<Group> = vec![];
    for s in &r.stages {
        let f = stage_facts(r, s.index, facts);
        let ro = wait_in_body[s.index].then(|| loads_before_wait(r, sched, s.index, early_loads));
        match groups
            .iter_mut()
            .find(|(n, ff, rr, _)| *n == s.name && *ff == f && *rr == ro)
        {
            Some(g) => g.3.push(s.index),
            None => groups.push((s.name.clone(), f, ro, vec![s.index])),
        }
    }
    let mut bodies = vec![];
    for (k, (name, f, ro, stages)) in groups.iter().enumerate() {
        let variant = groups[..k].iter().filter(|(n, ..)| n == name).count();
        let mut kernel = r.stages[stages[0]].kernel.clone();
        if variant > 0 {
            kernel.name = format!("{name}_v{}", variant + 1);
        }
        let b = cuda::emit_body(
            &kernel,
            &EmitOptions {
                divisible16: f.clone(),
                num_stages: 1,
                dep_hook: ro.clone(),
                ..crate::kernel_def::switched_options(num_warps)
            },
        )
        .map_err(|e| format!("{}: {e}", r.stages[stages[0]].label()))?;
        if b.block_threads != 32 * num_warps {
            return Err(format!(
                "{}: the emitter lowered it for {} threads, the megakernel runs {}",
                r.stages[stages[0]].label(),
                b.block_threads,
                32 * num_warps
            ));
        }
        bodies.push(BodyCode {
            stages: stages.clone(),
            fn_name: b.name,
            code: b.code,
            smem_bytes: b.smem_bytes,
        });
    }
    Ok((cuda::prelude::PRELUDE.to_string(), bodies))
}
