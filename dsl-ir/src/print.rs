//! A readable text form of the IR (`tessera explain --ir`, test failure messages).
use crate::ir::*;
use std::fmt::Write;

impl Kernel {
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let params: Vec<String> = self
            .params
            .iter()
            .map(|p| match p.kind {
                ParamKind::Ptr(d) => format!("{}: Ptr<{d}>", p.name),
                ParamKind::Scalar(d) => format!("{}: {d}", p.name),
                ParamKind::Constexpr(ConstKind::Int) => format!("#[constexpr] {}: usize", p.name),
                ParamKind::Constexpr(ConstKind::Bool) => format!("#[constexpr] {}: bool", p.name),
            })
            .collect();
        let _ = writeln!(out, "kernel {}({}) {{", self.name, params.join(", "));
        self.body_text(&self.body, 1, &mut out);
        out.push_str("}\n");
        out
    }

    fn body_text(&self, body: &[Stmt], depth: usize, out: &mut String) {
        let pad = "    ".repeat(depth);
        for s in body {
            let line = match s {
                Stmt::Let { id, op, src } => format!(
                    "%{}: {} = {}    // {}: {}",
                    id.0,
                    self.ty(*id),
                    self.op_text(op),
                    src.line,
                    src.text
                ),
                Stmt::DeclVar { var, init, .. } => {
                    format!("var {} = %{}", self.vars[var.0 as usize].name, init.0)
                }
                Stmt::Assign { var, value, .. } => {
                    format!("{} = %{}", self.vars[var.0 as usize].name, value.0)
                }
                Stmt::Store {
                    ptr,
                    value,
                    mask,
                    src,
                } => format!(
                    "store %{} <- %{}{}    // {}: {}",
                    ptr.0,
                    value.0,
                    opt(" mask", *mask),
                    src.line,
                    src.text
                ),
                Stmt::Atomic {
                    op,
                    ptr,
                    value,
                    mask,
                    old,
                    src,
                } => format!(
                    "{}atomic_{op:?} %{} <- %{}{}    // {}: {}",
                    old.map_or(String::new(), |o| format!("%{} = ", o.0)),
                    ptr.0,
                    value.0,
                    opt(" mask", *mask),
                    src.line,
                    src.text
                )
                .to_lowercase(),
                Stmt::Prefetch { ptr, mask, src } => format!(
                    "prefetch %{}{}    // {}: {}",
                    ptr.0,
                    opt(" mask", *mask),
                    src.line,
                    src.text
                ),
                Stmt::For {
                    iv,
                    start,
                    end,
                    step,
                    body,
                    ..
                } => {
                    let _ = writeln!(
                        out,
                        "{pad}for %{} in (%{}..%{}).step_by(%{}) {{",
                        iv.0, start.0, end.0, step.0
                    );
                    self.body_text(body, depth + 1, out);
                    "}".to_string()
                }
                Stmt::If {
                    cond, then, els, ..
                } => {
                    let _ = writeln!(out, "{pad}if %{} {{", cond.0);
                    self.body_text(then, depth + 1, out);
                    if !els.is_empty() {
                        let _ = writeln!(out, "{pad}}} else {{");
                        self.body_text(els, depth + 1, out);
                    }
                    "}".to_string()
                }
            };
            let _ = writeln!(out, "{pad}{line}");
        }
    }

    fn op_text(&self, op: &Op) -> String {
        let v = |v: &ValueId| format!("%{}", v.0);
        match op {
            Op::ProgramId(a) => format!("program_id({a})"),
            Op::NumPrograms(a) => format!("num_programs({a})"),
            Op::Param(i) => format!("param {}", self.params[*i].name),
            Op::Const(e) => format!("const {e}"),
            Op::Lit(l) => match l {
                Lit::Int(i) => format!("{i}"),
                Lit::Float(f) => format!("{f:?}"),
                Lit::Bool(b) => format!("{b}"),
            },
            Op::Arange { start, end } => format!("arange({start}, {end})"),
            Op::Unary(u, x) => format!("{}({})", u.name(), v(x)),
            Op::Binary(b, x, y) => format!("{} {} {}", v(x), b.symbol(), v(y)),
            Op::Where(c, a, b) => format!("where_({}, {}, {})", v(c), v(a), v(b)),
            Op::Cast(x) => format!("cast {}", v(x)),
            Op::ExpandDims(x, a) => format!("expand_dims({}, {a})", v(x)),
            Op::Broadcast(x) => format!("broadcast {}", v(x)),
            Op::Load { ptr, mask, other } => format!(
                "load {}{}{}",
                v(ptr),
                opt(" mask", *mask),
                opt(" other", *other)
            ),
            Op::Reduce { op, x, axis } => format!("{}({}, {axis})", op.name(), v(x)),
            Op::ReadVar(var) => format!("read {}", self.vars[var.0 as usize].name),
            Op::Dot { a, b, acc } => match acc {
                Some(c) => format!("dot({}, {}, {})", v(a), v(b), v(c)),
                None => format!("dot({}, {})", v(a), v(b)),
            },
            Op::Trans(x) => format!("trans({})", v(x)),
        }
    }
}

fn opt(label: &str, v: Option<ValueId>) -> String {
    v.map(|v| format!("{label} %{}", v.0)).unwrap_or_default()
}
