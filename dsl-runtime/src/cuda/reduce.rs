//! Reductions (`sum`, `max`, `min`, `argmax`, `argmin` over an axis): per-thread
//! partials, `__shfl_xor_sync` butterflies over the lanes that share a row, one
//! shared-memory exchange across warps, and every thread reads the result.
use super::*;

impl Emitter<'_> {
    pub(super) fn reduce(
        &mut self,
        id: ValueId,
        op: ReduceOp,
        x: ValueId,
        axis: usize,
        src: &Src,
    ) -> R<()> {
        let xt = self.k.ty(x).clone();
        let d = num(xt.elem);
        let mut lay = self.lay_of_value(x)?;
        if self.layouts[lay].frag.is_some() {
            // The tensor-core layout: read x through shared memory in a blocked layout.
            if !self.recomputable(x) {
                self.stage(x)?;
            }
            lay = self.blocked_layout(&xt.dims());
        }
        let l = self.layouts[lay].clone();
        let out_t = self.k.ty(id).clone();
        let n = self.value_name(id, src);
        let arg = matches!(op, ReduceOp::Argmax | ReduceOp::Argmin);
        let acc_t = if d.is_float() { "float" } else { "int" };
        let out_cty = reg_ty(out_t.elem);
        let (ident, ident_i) = identity(op, d);
        let fin = |acc: &str, acc_i: &str| -> String {
            if arg {
                acc_i.to_string()
            } else if op == ReduceOp::Sum {
                round_c(d, acc)
            } else {
                acc.to_string()
            }
        };
        let nw = self.warps;
        let per_pass = l.chunks * l.vec;
        let xs = self.access(x, &At::Slot { lay, s: "s".into() })?;
        let ok = self.owned(lay, "s");
        let what = format!("{}({n}) over axis {axis}", op.name());

        // Declare the result (filled below), then one block for the reduction's temporaries.
        let out_lay = if out_t.is_scalar() {
            None
        } else {
            Some(self.layout_of(&out_t.dims())?)
        };
        match out_lay {
            None => self.line(format!("{out_cty} {n};")),
            Some(ol) => self.line(format!("{out_cty} {n}[{}];", self.layouts[ol].slots())),
        }
        self.line(format!(
            "{{  // {what}: per-thread partials, warp shuffles, then shared memory"
        ));
        self.indent += 1;

        if axis + 1 == xt.rank() {
            // Along the row: a row's elements are held by the tpr threads of one row group.
            let np = l.passes;
            let pa: Option<&str> = if np == 1 { None } else { Some("a") };
            let accn = |a: Option<&str>| a.map_or("acc".to_string(), |a| format!("acc[{a}]"));
            let accin = |a: Option<&str>| a.map_or("acc_i".to_string(), |a| format!("acc_i[{a}]"));
            let a_loop = if np == 1 {
                String::new()
            } else {
                format!("for (int a = 0; a < {np}; ++a) ")
            };
            // Loops over a register array's index must unroll (or the array goes to local memory).
            let unroll = |me: &mut Self| {
                if np > 1 {
                    me.line("#pragma unroll");
                }
            };
            let arr = if np == 1 {
                String::new()
            } else {
                format!("[{np}]")
            };
            if np == 1 {
                self.line(format!("{acc_t} acc = {ident};"));
                if arg {
                    self.line(format!("int acc_i = {ident_i};"));
                }
            } else {
                self.line(format!("{acc_t} acc{arr};"));
                if arg {
                    self.line(format!("int acc_i{arr};"));
                    unroll(self);
                    self.line(format!(
                        "{a_loop}{{ {} = {ident}; {} = {ident_i}; }}",
                        accn(pa),
                        accin(pa)
                    ));
                } else {
                    unroll(self);
                    self.line(format!("{a_loop}{} = {ident};", accn(pa)));
                }
            }
            let pass = format!("s / {per_pass}");
            let ps = if np == 1 { None } else { Some(pass.as_str()) };
            let step = step_c(
                op,
                &accn(ps),
                &accin(ps),
                &strip(&xs),
                &format!("L{lay}_j(s)"),
            );
            self.step_over_slots(lay, &ok, &step);
            let span = l.tpr.min(32);
            if span > 1 {
                self.line(format!(
                    "// combine the {span} lanes that share a row: butterfly shuffles"
                ));
                self.line("#pragma unroll");
                self.open(format!(
                    "for (int xor_off = {}; xor_off > 0; xor_off /= 2) {{",
                    span / 2
                ));
                let shfl = |v: String| format!("__shfl_xor_sync(0xffffffffu, {v}, xor_off)");
                let st = step_c(op, &accn(pa), &accin(pa), &shfl(accn(pa)), &shfl(accin(pa)));
                unroll(self);
                self.line(format!("{a_loop}{st}"));
                self.close("}");
            }
            let rows = l.rows();
            let row = match (l.rpp, pa) {
                (1, None) => "0".to_string(),
                (1, Some(a)) => a.to_string(),
                (_, None) => format!("tid / {}", l.tpr),
                (_, Some(a)) => format!("tid / {} + {a} * {}", l.tpr, l.rpp),
            };
            let row_ok = if l.passes * l.rpp == rows {
                None
            } else {
                Some(format!("{row} < {rows}"))
            };
            let when = |first: Option<String>| -> String {
                let c: Vec<String> = first.into_iter().chain(row_ok.clone()).collect();
                if c.is_empty() {
                    String::new()
                } else {
                    format!("if ({}) ", c.join(" && "))
                }
            };
            if out_lay.is_none() && l.rpp == 1 && l.tpr <= 32 {
                // One warp holds the whole row and every lane has the result.
                self.line(format!("{n} = {};", fin("acc", "acc_i")));
            } else if l.tpr <= 32 {
                // Each row's result sits in its row group's lanes: one lane writes it.
                let res = self.region(
                    &format!("{n}_res"),
                    if arg { "int" } else { acc_t },
                    rows,
                    format!("{what}: one result per row"),
                )?;
                self.sync_before_reuse();
                let first = if l.tpr > 1 {
                    Some(format!("tid % {} == 0", l.tpr))
                } else {
                    None
                };
                unroll(self);
                self.line(format!(
                    "{a_loop}{}{res}[{row}] = {};",
                    when(first),
                    fin(&accn(pa), &accin(pa))
                ));
                self.barrier("");
                self.finish_rows(&n, &res, out_lay, id)?;
            } else {
                // A row spans several warps: warp partials through shared memory.
                let wpr = l.tpr / 32;
                let part = self.region(
                    &format!("{n}_part"),
                    acc_t,
                    rows * wpr,
                    format!("{what}: one partial per warp and row"),
                )?;
                let part_i = if arg {
                    Some(self.region(
                        &format!("{n}_part_i"),
                        "int",
                        rows * wpr,
                        format!("{what}: indices"),
                    )?)
                } else {
                    None
                };
                self.sync_before_reuse();
                let slot = if rows == 1 {
                    format!("(tid % {}) / 32", l.tpr)
                } else {
                    format!("({row}) * {wpr} + (tid % {}) / 32", l.tpr)
                };
                let slot = slot.replace(&format!("(tid % {}) / 32", self.threads), "warp");
                let mut st = format!("{part}[{slot}] = {};", accn(pa));
                if let Some(pi) = &part_i {
                    st = format!("{{ {st} {pi}[{slot}] = {}; }}", accin(pa));
                }
                unroll(self);
                self.line(format!("{a_loop}{}{st}", when(Some("lane == 0".into()))));
                self.barrier("");
                let fold = |o: &str, acc: &str, acc_i: &str| {
                    let at = if rows == 1 {
                        "pw".to_string()
                    } else {
                        format!("{o} * {wpr} + pw")
                    };
                    let xi = part_i
                        .as_ref()
                        .map(|pi| format!("{pi}[{at}]"))
                        .unwrap_or_default();
                    format!(
                        "for (int pw = 0; pw < {wpr}; ++pw) {}",
                        step_c(op, acc, acc_i, &format!("{part}[{at}]"), &xi)
                    )
                };
                if out_lay.is_none() {
                    // Every thread folds the warp partials in the same order: same bits.
                    self.line(format!("acc = {ident};"));
                    if arg {
                        self.line(format!("acc_i = {ident_i};"));
                    }
                    self.line(fold("0", "acc", "acc_i"));
                    self.line(format!("{n} = {};", fin("acc", "acc_i")));
                } else {
                    let res = self.region(
                        &format!("{n}_res"),
                        if arg { "int" } else { acc_t },
                        rows,
                        format!("{what}: one result per row"),
                    )?;
                    self.open(format!(
                        "for (int o = tid; o < {rows}; o += {}) {{",
                        self.threads
                    ));
                    self.line(format!("{acc_t} r = {ident};"));
                    if arg {
                        self.line(format!("int r_i = {ident_i};"));
                    }
                    self.line(fold("o", "r", "r_i"));
                    self.line(format!("{res}[o] = {};", fin("r", "r_i")));
                    self.close("}");
                    self.barrier("");
                    self.finish_rows(&n, &res, out_lay, id)?;
                }
            }
        } else {
            // Along the columns of a 2-D tile: one partial per owned column.
            let cols = l.cols();
            self.line(format!("{acc_t} acc[{per_pass}];"));
            if arg {
                self.line(format!("int acc_i[{per_pass}];"));
            }
            self.line("#pragma unroll");
            self.line(format!(
                "for (int c = 0; c < {per_pass}; ++c) {{ acc[c] = {ident};{} }}",
                if arg {
                    format!(" acc_i[c] = {ident_i};")
                } else {
                    String::new()
                }
            ));
            let step = step_c(
                op,
                &format!("acc[s % {per_pass}]"),
                &format!("acc_i[s % {per_pass}]"),
                &strip(&xs),
                &format!("L{lay}_i(s)"),
            );
            self.step_over_slots(lay, &ok, &step);
            let (groups, group, writer) = if l.tpr <= 32 {
                if l.tpr < 32 {
                    self.line("// combine the lanes of a warp that hold the same columns");
                    self.line("#pragma unroll");
                    self.open(format!(
                        "for (int xor_off = {}; xor_off < 32; xor_off *= 2) {{",
                        l.tpr
                    ));
                    let shfl = |v: &str| format!("__shfl_xor_sync(0xffffffffu, {v}, xor_off)");
                    self.line("#pragma unroll");
                    self.line(format!(
                        "for (int c = 0; c < {per_pass}; ++c) {}",
                        step_c(op, "acc[c]", "acc_i[c]", &shfl("acc[c]"), &shfl("acc_i[c]"))
                    ));
                    self.close("}");
                }
                (nw, "warp".to_string(), format!("lane < {}", l.tpr))
            } else {
                (l.rpp, format!("tid / {}", l.tpr), "true".to_string())
            };
            let part = self.region(
                &format!("{n}_part"),
                acc_t,
                groups * cols,
                format!("{what}: partials per thread group"),
            )?;
            let part_i = if arg {
                Some(self.region(
                    &format!("{n}_part_i"),
                    "int",
                    groups * cols,
                    format!("{what}: indices"),
                )?)
            } else {
                None
            };
            let res = self.region(
                &format!("{n}_res"),
                if arg { "int" } else { acc_t },
                cols,
                format!("{what}: one result per column"),
            )?;
            self.sync_before_reuse();
            self.open(format!("if ({writer}) {{"));
            self.line("#pragma unroll");
            self.open(format!("for (int c = 0; c < {per_pass}; ++c) {{"));
            self.line(format!("const int j = L{lay}_j(c);"));
            let mut st = format!("{part}[({group}) * {cols} + j] = acc[c];");
            if let Some(pi) = &part_i {
                st = format!("{{ {st} {pi}[({group}) * {cols} + j] = acc_i[c]; }}");
            }
            self.line(format!("if (j < {cols}) {st}"));
            self.close("}");
            self.close("}");
            self.barrier("");
            self.open(format!(
                "for (int o = tid; o < {cols}; o += {}) {{",
                self.threads
            ));
            self.line(format!("{acc_t} r = {part}[o];"));
            if let Some(pi) = &part_i {
                self.line(format!("int r_i = {pi}[o];"));
            }
            let oi = part_i
                .as_ref()
                .map(|pi| format!("{pi}[g * {cols} + o]"))
                .unwrap_or_default();
            self.line(format!(
                "for (int g = 1; g < {groups}; ++g) {}",
                step_c(op, "r", "r_i", &format!("{part}[g * {cols} + o]"), &oi)
            ));
            self.line(format!("{res}[o] = {};", fin("r", "r_i")));
            self.close("}");
            self.barrier("");
            self.finish_rows(&n, &res, out_lay, id)?;
        }
        self.indent -= 1;
        self.line("}");
        Ok(())
    }

    /// A reduction's tile result: stays readable in shared memory (for broadcasts) and is
    /// copied into registers of its own layout.
    fn finish_rows(&mut self, n: &str, res: &str, out_lay: Option<usize>, id: ValueId) -> R<()> {
        match out_lay {
            None => self.line(format!("{n} = {res}[0];")),
            Some(ol) => {
                let j = format!("L{ol}_j(s)");
                let e = match self.valid(ol, "s") {
                    Some(c) => format!("{c} ? {res}[{j}] : {}", zero_c(self.k.ty(id).elem)),
                    None => format!("{res}[{j}]"),
                };
                self.open_slots(ol, "s");
                self.line(format!("{n}[s] = {e};"));
                self.close("}");
                self.regs[id.0 as usize] = true;
                self.staged[id.0 as usize] = Some(res.to_string());
            }
        }
        Ok(())
    }

    /// One accumulation `step` per slot of layout `lay`, under `ok` (the slot holds an
    /// element that counts: not padding, not a replica) when there is one.
    fn step_over_slots(&mut self, lay: usize, ok: &Option<String>, step: &str) {
        self.open_slots(lay, "s");
        match ok {
            Some(c) => self.line(format!("if ({c}) {step}")),
            None => self.line(step),
        }
        self.close("}");
    }
}
