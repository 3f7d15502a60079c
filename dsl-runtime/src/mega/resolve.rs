//! Binding a megakernel's constexprs: every call is checked against its kernel's IR
//! (arity, kinds, dtypes, constant constexprs), specialised, and becomes a [`Stage`] with
//! the memory it reads and writes, expressed over the megakernel's pointer parameters.
use super::program::{ArgExpr, Call, ETy, Env, Expr, Item, MParam, Program, Val};
use dsl_ir::{ConstKind, ConstVal, DType, Kernel, ParamKind};
use std::collections::BTreeMap;

/// A window of a megakernel pointer parameter that a stage touches: elements
/// `[offset, end)` of `param` (`end: None`: to the end of the buffer).
#[derive(Clone, Debug, PartialEq)]
pub struct Access {
    pub param: usize,
    pub offset: Expr,
    pub end: Option<Expr>,
}

/// One call site, specialised.
#[derive(Clone, Debug)]
pub struct Stage {
    /// Position in program order (0-based; `explain` prints it 1-based).
    pub index: usize,
    /// Unique among the stages' bodies: the kernel's name, suffixed with its constexprs
    /// when the program calls the kernel with several bindings (`gemv_BM8_BK256`).
    pub name: String,
    pub kernel_name: &'static str,
    pub line: u32,
    /// The specialised IR, renamed to `name` (so the emitted body is `<name>_body`).
    pub kernel: Kernel,
    pub grid: [Expr; 3],
    /// The run-time arguments (pointers and scalars) in the kernel's parameter order.
    pub args: Vec<ArgExpr>,
    /// The kernel's name for each of `args`.
    pub arg_names: Vec<String>,
    pub reads: Vec<Access>,
    pub writes: Vec<Access>,
    /// Enclosing loop ids, outermost first.
    pub loops: Vec<usize>,
    pub barrier_hint: bool,
}

impl Stage {
    /// `stage 2 gemv` (1-based, as `explain` prints).
    pub fn label(&self) -> String {
        format!("stage {} {}", self.index + 1, self.name)
    }
}

/// The program's shape with calls replaced by stage indices.
#[derive(Clone, Debug)]
pub enum Node {
    Stage(usize),
    Loop {
        id: usize,
        var: String,
        start: Expr,
        end: Expr,
        body: Vec<Node>,
    },
}

/// A megakernel with its constexprs bound.
#[derive(Clone, Debug)]
pub struct Resolved {
    pub program: Program,
    pub constexprs: Vec<(String, ConstVal)>,
    pub stages: Vec<Stage>,
    pub body: Vec<Node>,
    /// Loop variable names by loop id.
    pub vars: Vec<String>,
    /// Per parameter: its value when it is a constexpr.
    pub const_env: Vec<Option<Val>>,
}

impl Resolved {
    pub fn params(&self) -> &[MParam] {
        &self.program.params
    }
    /// True if no stage writes through pointer parameter `p`.
    pub fn read_only(&self, p: usize) -> bool {
        self.stages
            .iter()
            .all(|s| s.writes.iter().all(|a| a.param != p))
    }
    pub fn show(&self, e: &Expr) -> String {
        e.show(self.params(), &self.vars)
    }
    pub fn show_arg(&self, a: &ArgExpr) -> String {
        a.show(self.params(), &self.vars)
    }
}

/// Binds `constexprs` (every constexpr of the megakernel, by name) and checks every call.
pub fn resolve(program: &Program, constexprs: &[(&str, ConstVal)]) -> Result<Resolved, String> {
    let pname = &program.name;
    for (n, _) in constexprs {
        if !program
            .params
            .iter()
            .any(|p| p.name == *n && matches!(p.kind, ParamKind::Constexpr(_)))
        {
            return Err(format!("megakernel `{pname}` has no constexpr `{n}`"));
        }
    }
    let mut const_env = vec![None; program.params.len()];
    let mut bound = vec![];
    for (i, p) in program.params.iter().enumerate() {
        if let ParamKind::Constexpr(k) = p.kind {
            let v = constexprs
                .iter()
                .find(|(n, _)| *n == p.name)
                .map(|(_, v)| *v)
                .ok_or_else(|| {
                    format!("megakernel `{pname}`: constexpr `{}` is not bound", p.name)
                })?;
            const_env[i] = Some(match (k, v) {
                (ConstKind::Int, ConstVal::Int(x)) => Val::Int(x),
                (ConstKind::Bool, ConstVal::Bool(b)) => Val::Bool(b),
                _ => {
                    return Err(format!(
                        "megakernel `{pname}`: constexpr `{}` bound to the wrong kind ({v:?})",
                        p.name
                    ))
                }
            });
            bound.push((p.name.clone(), v));
        }
    }
    let mut r = Resolved {
        program: program.clone(),
        constexprs: bound,
        stages: vec![],
        body: vec![],
        vars: program.loop_vars(),
        const_env,
    };
    let mut calls = vec![];
    r.body = nodes(&program.body, &mut vec![], &mut calls, &r)?;
    // Bind each call: constexpr arguments are constants, so specialisation happens here.
    let mut bindings: Vec<(&'static str, Binding)> = vec![];
    for (index, (call, loops)) in calls.iter().enumerate() {
        let (stage, b) = stage(&r, index, call, loops)?;
        if !bindings
            .iter()
            .any(|(k, bb)| *k == call.kernel.name() && *bb == b)
        {
            bindings.push((call.kernel.name(), b.clone()));
        }
        r.stages.push(stage);
    }
    // Unique body names: a kernel called with two bindings gets two bodies.
    // Body name → the (kernel, binding) it stands for: two different bodies never share one.
    let mut used = BTreeMap::<String, (&'static str, Vec<(String, ConstVal)>)>::new();
    for s in &mut r.stages {
        let distinct = bindings.iter().filter(|(k, _)| *k == s.kernel_name).count();
        let mut name = s.kernel_name.to_string();
        if distinct > 1 {
            let suffix: Vec<String> = s
                .kernel
                .bound
                .iter()
                .map(|(n, v)| format!("{n}{v}"))
                .collect();
            name = format!("{}_{}", s.kernel_name, suffix.join("_"));
        }
        let me = (s.kernel_name, s.kernel.bound.clone());
        let mut n = 1;
        let base = name.clone();
        while used.get(&name).is_some_and(|o| *o != me) {
            n += 1;
            name = format!("{base}_{n}");
        }
        used.insert(name.clone(), me);
        s.name = name.clone();
        s.kernel.name = name;
    }
    Ok(r)
}

fn nodes(
    items: &[Item],
    loops: &mut Vec<usize>,
    calls: &mut Vec<(Call, Vec<usize>)>,
    r: &Resolved,
) -> Result<Vec<Node>, String> {
    let mut out = vec![];
    for it in items {
        match it {
            Item::Call(c) => {
                out.push(Node::Stage(calls.len()));
                calls.push((c.clone(), loops.clone()));
            }
            Item::Loop(l) => {
                for (what, e) in [("start", &l.start), ("end", &l.end)] {
                    check_scope(r, e, loops, &format!("the {what} of loop `{}`", l.var))?;
                    if e.ty(r.params())? != ETy::Int {
                        return Err(format!(
                            "megakernel `{}`: the {what} of loop `{}` is not an integer",
                            r.program.name, l.var
                        ));
                    }
                }
                loops.push(l.id);
                let body = nodes(&l.body, loops, calls, r)?;
                loops.pop();
                out.push(Node::Loop {
                    id: l.id,
                    var: l.var.clone(),
                    start: l.start.clone(),
                    end: l.end.clone(),
                    body,
                });
            }
            Item::If(i) => {
                let what = format!("megakernel `{}`: the condition of an `if`", r.program.name);
                if i.cond.ty(r.params())? != ETy::Bool || !i.cond.is_const(r.params()) {
                    return Err(format!("{what} must be a bool of constexprs and literals"));
                }
                let env = Env {
                    params: &r.const_env,
                    vars: &[],
                };
                let taken = match i.cond.eval(&env, r.params()) {
                    Ok(Val::Bool(b)) => b,
                    Ok(v) => return Err(format!("{what} is {v:?}, not a bool")),
                    Err(e) => return Err(format!("{what}: {e}")),
                };
                out.extend(nodes(
                    if taken { &i.then } else { &i.els },
                    loops,
                    calls,
                    r,
                )?);
            }
        }
    }
    Ok(out)
}

/// Every loop variable an expression names must be in scope.
/// A call's constexpr arguments, by the callee's parameter names.
type Binding = Vec<(&'static str, ConstVal)>;

fn check_scope(r: &Resolved, e: &Expr, loops: &[usize], what: &str) -> Result<(), String> {
    let mut vs = vec![];
    e.vars(&mut vs);
    match vs.iter().find(|v| !loops.contains(v)) {
        Some(v) => Err(format!(
            "megakernel `{}`: {what} uses loop variable `{}` outside its loop",
            r.program.name,
            r.vars.get(*v).map_or("?", |s| s.as_str())
        )),
        None => Ok(()),
    }
}

fn stage(
    r: &Resolved,
    index: usize,
    call: &Call,
    loops: &[usize],
) -> Result<(Stage, Binding), String> {
    let kname = call.kernel.name();
    let at = format!(
        "megakernel `{}`, line {}: `{kname}`",
        r.program.name, call.line
    );
    let ir: &'static Kernel = call.kernel.ir().map_err(|e| format!("{at}: {e}"))?;
    let params = r.params();
    if call.args.len() != ir.params.len() {
        let names: Vec<&str> = ir.params.iter().map(|p| p.name.as_str()).collect();
        return Err(format!(
            "{at} takes {} arguments after the grid ({}), got {}",
            ir.params.len(),
            names.join(", "),
            call.args.len()
        ));
    }
    let env = Env {
        params: &r.const_env,
        vars: &[],
    };
    let mut binding = vec![];
    let (mut args, mut arg_names, mut ptr_of) = (vec![], vec![], BTreeMap::new());
    for (n, (p, a)) in ir.params.iter().zip(&call.args).enumerate() {
        let here = format!("{at}, argument {} (`{}`)", n + 1, p.name);
        match (p.kind, a) {
            (ParamKind::Ptr(d), ArgExpr::Ptr { param, offset, end }) => {
                let mp = params
                    .get(*param)
                    .ok_or_else(|| format!("{here}: no such parameter"))?;
                if mp.kind != ParamKind::Ptr(d) {
                    return Err(format!(
                        "{here} expects Ptr<{d}>, got `{}`: {}",
                        mp.name,
                        kind_str(mp.kind)
                    ));
                }
                for e in std::iter::once(offset).chain(end) {
                    check_scope(r, e, loops, &here)?;
                    if e.ty(params).map_err(|m| format!("{here}: {m}"))? != ETy::Int {
                        return Err(format!("{here}: a pointer offset must be an integer"));
                    }
                }
                ptr_of.insert(
                    n,
                    Access {
                        param: *param,
                        offset: offset.clone(),
                        end: end.clone(),
                    },
                );
                args.push(a.clone());
                arg_names.push(p.name.clone());
            }
            (ParamKind::Scalar(d), ArgExpr::Value(e)) => {
                check_scope(r, e, loops, &here)?;
                let t = e.ty(params).map_err(|m| format!("{here}: {m}"))?;
                let want = if d == DType::F32 {
                    ETy::Float
                } else {
                    ETy::Int
                };
                if t != want {
                    return Err(format!("{here} expects {d}, got {t} (`{}`)", r.show(e)));
                }
                args.push(a.clone());
                arg_names.push(p.name.clone());
            }
            (ParamKind::Constexpr(k), ArgExpr::Value(e)) => {
                if !e.is_const(params) {
                    return Err(format!(
                        "{here} is a constexpr: `{}` must use only literals and constexprs",
                        r.show(e)
                    ));
                }
                let v = match (k, e.eval(&env, params).map_err(|m| format!("{here}: {m}"))?) {
                    (ConstKind::Int, Val::Int(v)) => ConstVal::Int(v),
                    (ConstKind::Bool, Val::Bool(b)) => ConstVal::Bool(b),
                    (_, v) => {
                        return Err(format!(
                            "{here} expects a {} constexpr, got {v:?}",
                            if k == ConstKind::Int {
                                "integer"
                            } else {
                                "bool"
                            }
                        ))
                    }
                };
                binding.push((p.name.as_str(), v));
            }
            (kind, a) => {
                return Err(format!(
                    "{here} expects {}, got `{}`",
                    kind_str(kind),
                    r.show_arg(a)
                ));
            }
        }
    }
    for (a, e) in call.grid.iter().enumerate() {
        check_scope(r, e, loops, &format!("{at}: the grid"))?;
        if e.ty(params).map_err(|m| format!("{at}: grid: {m}"))? != ETy::Int {
            return Err(format!("{at}: grid dimension {a} is not an integer"));
        }
    }
    let kernel = call
        .kernel
        .specialize(&binding)
        .map_err(|e| format!("{at}: {e}"))?;
    // Memory effects, mapped from the kernel's pointer parameters to the megakernel's.
    let eff = kernel.effects();
    let map = |set: &std::collections::BTreeSet<usize>| -> Vec<Access> {
        let mut v: Vec<Access> = set.iter().filter_map(|i| ptr_of.get(i).cloned()).collect();
        v.dedup();
        v
    };
    let stage = Stage {
        index,
        name: kname.to_string(),
        kernel_name: kname,
        line: call.line,
        reads: map(&eff.reads),
        writes: map(&eff.writes),
        kernel,
        grid: call.grid.clone(),
        args,
        arg_names,
        loops: loops.to_vec(),
        barrier_hint: call.hints.barrier,
    };
    Ok((stage, binding))
}

fn kind_str(k: ParamKind) -> String {
    match k {
        ParamKind::Ptr(d) => format!("Ptr<{d}>"),
        ParamKind::Scalar(d) => d.to_string(),
        ParamKind::Constexpr(ConstKind::Int) => "an integer constexpr".into(),
        ParamKind::Constexpr(ConstKind::Bool) => "a bool constexpr".into(),
    }
}
