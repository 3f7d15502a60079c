//! Reductions (`sum`, `max`, `min`, `argmax`, `argmin` over an axis): per-thread
//! partials, `__shfl_xor_sync` butterflies over the lanes that share a row, one
//! shared-memory exchange across warps, and every thread reads the result.
use super::*;

/// What every step of one reduction needs: the op, the input's layout and slot access,
/// the result's name and layout, the accumulator's C type and identity.
struct Red {
    id: ValueId,
    op: ReduceOp,
    d: DType,
    /// Argmax / argmin: an index accumulator beside the value.
    arg: bool,
    /// The result's C name, and the comment that names the reduction.
    n: String,
    what: String,
    acc_t: &'static str,
    ident: String,
    ident_i: String,
    /// The input's layout (blocked, after staging a tensor-core tile), its value at slot
    /// `s`, and the condition that the slot holds an element that counts.
    lay: usize,
    l: layout::Layout,
    xs: String,
    ok: Option<String>,
    /// None: a scalar result.
    out_lay: Option<usize>,
    /// Every row group reduces its own copy of a replicated row, and every thread has the
    /// result from the butterfly (`EmitOptions::warp_replica_reductions`).
    in_groups: bool,
}

impl Red {
    /// The result from an accumulator (and its index): argmax's index, a sum rounded to
    /// the input's dtype, a max or min as is.
    fn fin(&self, acc: &str, acc_i: &str) -> String {
        if self.arg {
            acc_i.to_string()
        } else if self.op == ReduceOp::Sum {
            round_c(self.d, acc)
        } else {
            acc.to_string()
        }
    }

    /// The C type of a per-row or per-column result in shared memory.
    fn res_t(&self) -> &'static str {
        if self.arg {
            "int"
        } else {
            self.acc_t
        }
    }

    fn per_pass(&self) -> usize {
        self.l.chunks * self.l.vec
    }
}

/// A reduction along rows: a thread holds `np` passes over its rows, each with an
/// accumulator (an array when `np > 1`, indexed by `a`).
struct RowPasses {
    np: usize,
    pa: Option<&'static str>,
    a_loop: String,
    /// The row a thread's pass `a` accumulates, and the condition that it is a real one.
    row: String,
    row_ok: Option<String>,
    rows: usize,
}

impl RowPasses {
    fn new(l: &layout::Layout) -> RowPasses {
        let np = l.passes;
        let pa: Option<&'static str> = if np == 1 { None } else { Some("a") };
        let rows = l.rows();
        let row = match (l.rpp, pa) {
            (1, None) => "0".to_string(),
            (1, Some(a)) => a.to_string(),
            (_, None) => format!("tid / {}", l.tpr),
            (_, Some(a)) => format!("tid / {} + {a} * {}", l.tpr, l.rpp),
        };
        RowPasses {
            np,
            pa,
            a_loop: if np == 1 {
                String::new()
            } else {
                format!("for (int a = 0; a < {np}; ++a) ")
            },
            row_ok: if l.passes * l.rpp == rows {
                None
            } else {
                Some(format!("{row} < {rows}"))
            },
            row,
            rows,
        }
    }

    fn acc(&self, a: Option<&str>) -> String {
        a.map_or("acc".to_string(), |a| format!("acc[{a}]"))
    }

    fn acc_i(&self, a: Option<&str>) -> String {
        a.map_or("acc_i".to_string(), |a| format!("acc_i[{a}]"))
    }

    /// `if (first && row_ok) `, or nothing when neither applies.
    fn when(&self, first: Option<String>) -> String {
        let c: Vec<String> = first.into_iter().chain(self.row_ok.clone()).collect();
        if c.is_empty() {
            String::new()
        } else {
            format!("if ({}) ", c.join(" && "))
        }
    }
}

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
        if self.reduce_frag_rows(id, op, x, axis, src)? {
            return Ok(());
        }
        if !self.layouts[lay].blocked() {
            // The tensor-core layout (or its rows): read x through shared memory in a
            // blocked layout.
            if !self.recomputable(x) {
                self.stage(x)?;
            }
            lay = self.blocked_layout(&xt.dims());
        }
        let out_t = self.k.ty(id).clone();
        let n = self.value_name(id, src);
        let (ident, ident_i) = identity(op, d);
        let l = &self.layouts[lay];
        let in_groups =
            self.warp_replica_reductions && out_t.is_scalar() && l.replicated() && l.tpr <= 32;
        let r = Red {
            id,
            op,
            d,
            arg: matches!(op, ReduceOp::Argmax | ReduceOp::Argmin),
            what: format!("{}({n}) over axis {axis}", op.name()),
            n,
            acc_t: if d.is_float() { "float" } else { "int" },
            ident,
            ident_i,
            lay,
            l: self.layouts[lay].clone(),
            xs: self.access(x, &At::Slot { lay, s: "s".into() })?,
            // In groups, a replica's copy counts in its own group: every element it holds.
            ok: if in_groups {
                self.valid(lay, "s")
            } else {
                self.owned(lay, "s")
            },
            out_lay: if out_t.is_scalar() {
                None
            } else {
                Some(self.layout_of(&out_t.dims())?)
            },
            in_groups,
        };

        // Declare the result (filled below), then one block for the reduction's temporaries.
        let out_cty = reg_ty(out_t.elem);
        match r.out_lay {
            None => self.line(format!("{out_cty} {};", r.n)),
            Some(ol) => self.line(format!("{out_cty} {}[{}];", r.n, self.layouts[ol].slots())),
        }
        self.open(format!(
            "{{  // {}: per-thread partials, warp shuffles, then shared memory",
            r.what
        ));
        if axis + 1 == xt.rank() {
            self.reduce_along_rows(&r)?;
        } else {
            self.reduce_along_columns(&r)?;
        }
        self.close("}");
        Ok(())
    }

    /// `EmitOptions::frag_rows`: a tensor-core fragment reduced along its rows into the
    /// fragment's rows (`Layout::rows_of`): each thread folds its slots of a row in column
    /// order, the quad's four lanes combine theirs by butterfly (a + b = b + a: every lane
    /// the same bits), and with several warp columns each warp's partial goes through
    /// shared memory, every thread folding them in warp order. Returns false (nothing
    /// written) when the reduction is not of that form.
    fn reduce_frag_rows(
        &mut self,
        id: ValueId,
        op: ReduceOp,
        x: ValueId,
        axis: usize,
        src: &Src,
    ) -> R<bool> {
        if !self.frag_rows {
            return Ok(false);
        }
        let (xt, out_t) = (self.k.ty(x).clone(), self.k.ty(id).clone());
        let d = num(xt.elem);
        let xl = self.lay_of_value(x)?;
        let Some(f) = self.layouts[xl].frag else {
            return Ok(false);
        };
        if axis != 1
            || out_t.is_scalar()
            || !d.is_float()
            || !matches!(op, ReduceOp::Sum | ReduceOp::Max | ReduceOp::Min)
        {
            return Ok(false);
        }
        let ol = self.layout_of(&out_t.dims())?;
        let same_rows = self.layouts[ol].rows_of.is_some_and(|g| {
            (g.wm, g.wn, g.mt, g.interleaved) == (f.wm, f.wn, f.mt, f.interleaved)
        });
        if !same_rows {
            return Ok(false);
        }
        let n = self.value_name(id, src);
        let what = format!("{}({n}) over axis 1", op.name());
        let (ident, _) = identity(op, d);
        let rows = 2 * f.mt;
        let xs = self.access(
            x,
            &At::Slot {
                lay: xl,
                s: "s".into(),
            },
        )?;
        self.line(format!("float {n}[{rows}];"));
        self.open(format!(
            "{{  // {what}: per-thread partials of the fragment's rows, quad shuffles{}",
            if f.wn > 1 {
                ", then shared memory across warp columns"
            } else {
                ""
            }
        ));
        self.line(format!("float acc[{rows}];"));
        self.line("#pragma unroll");
        self.line(format!(
            "for (int a = 0; a < {rows}; ++a) acc[a] = {ident};"
        ));
        // Slot (mi, ni, r) is row slot 2 mi + r / 2 (`Frag`).
        let acc = format!("acc[s / {} * 2 + s % 4 / 2]", 4 * f.nt);
        self.step_over_slots(xl, &None, &step_c(op, &acc, "", &strip(&xs), ""));
        self.line("// combine the quad's four lanes (they hold the same rows): butterfly shuffles");
        self.line("#pragma unroll");
        self.open("for (int xor_off = 1; xor_off < 4; xor_off *= 2) {");
        let shfl = "__shfl_xor_sync(0xffffffffu, acc[a], xor_off)";
        self.line("#pragma unroll");
        self.line(format!(
            "for (int a = 0; a < {rows}; ++a) {}",
            step_c(op, "acc[a]", "", shfl, "")
        ));
        self.close("}");
        let fin = |e: &str| {
            if op == ReduceOp::Sum {
                round_c(d, e)
            } else {
                e.to_string()
            }
        };
        if f.wn == 1 {
            self.line("#pragma unroll");
            self.line(format!(
                "for (int a = 0; a < {rows}; ++a) {n}[a] = {};",
                fin("acc[a]")
            ));
        } else {
            let m = xt.dims()[0];
            let wn = f.wn;
            let part = self.region(
                &format!("{n}_part"),
                "float",
                m * wn,
                format!("{what}: one partial per row and warp column"),
            )?;
            self.sync_before_reuse();
            let row = format!("L{ol}_{}(a)", if out_t.rank() == 1 { "j" } else { "i" });
            self.line("#pragma unroll");
            self.line(format!(
                "for (int a = 0; a < {rows}; ++a) if (lane % 4 == 0) {part}[{row} * {wn} + warp % {wn}] = acc[a];"
            ));
            self.barrier("");
            self.line("#pragma unroll");
            self.open(format!("for (int a = 0; a < {rows}; ++a) {{"));
            self.line(format!("float r = {part}[{row} * {wn}];"));
            self.line(format!(
                "for (int pw = 1; pw < {wn}; ++pw) {}",
                step_c(op, "r", "", &format!("{part}[{row} * {wn} + pw]"), "")
            ));
            self.line(format!("{n}[a] = {};", fin("r")));
            self.close("}");
        }
        self.close("}");
        self.regs[id.0 as usize] = true;
        Ok(true)
    }

    /// Along the row: a row's elements are held by the `tpr` threads of one row group.
    /// Per-thread partials, a butterfly over the lanes of a row, then the result where the
    /// row's threads can all read it.
    fn reduce_along_rows(&mut self, r: &Red) -> R<()> {
        let l = &r.l;
        let p = RowPasses::new(l);
        let (acc_t, ident, ident_i) = (r.acc_t, &r.ident, &r.ident_i);
        let arr = if p.np == 1 {
            String::new()
        } else {
            format!("[{}]", p.np)
        };
        if p.np == 1 {
            self.line(format!("{acc_t} acc = {ident};"));
            if r.arg {
                self.line(format!("int acc_i = {ident_i};"));
            }
        } else {
            self.line(format!("{acc_t} acc{arr};"));
            if r.arg {
                self.line(format!("int acc_i{arr};"));
                self.unroll_passes(&p);
                self.line(format!(
                    "{}{{ {} = {ident}; {} = {ident_i}; }}",
                    p.a_loop,
                    p.acc(p.pa),
                    p.acc_i(p.pa)
                ));
            } else {
                self.unroll_passes(&p);
                self.line(format!("{}{} = {ident};", p.a_loop, p.acc(p.pa)));
            }
        }
        let pass = format!("s / {}", r.per_pass());
        let ps = if p.np == 1 { None } else { Some(pass.as_str()) };
        let step = step_c(
            r.op,
            &p.acc(ps),
            &p.acc_i(ps),
            &strip(&r.xs),
            &format!("L{}_j(s)", r.lay),
        );
        self.step_over_slots(r.lay, &r.ok, &step);
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
            let st = step_c(
                r.op,
                &p.acc(p.pa),
                &p.acc_i(p.pa),
                &shfl(p.acc(p.pa)),
                &shfl(p.acc_i(p.pa)),
            );
            self.unroll_passes(&p);
            self.line(format!("{}{st}", p.a_loop));
            self.close("}");
        }
        if r.out_lay.is_none() && (l.rpp == 1 || r.in_groups) && l.tpr <= 32 {
            // One warp holds the whole row (each row group a copy of it, in groups) and
            // every lane has the result.
            self.line(format!("{} = {};", r.n, r.fin("acc", "acc_i")));
            Ok(())
        } else if l.tpr <= 32 {
            self.rows_from_row_groups(r, &p)
        } else {
            self.rows_across_warps(r, &p)
        }
    }

    /// Each row's result sits in its row group's lanes: one lane writes it to shared memory.
    fn rows_from_row_groups(&mut self, r: &Red, p: &RowPasses) -> R<()> {
        let l = &r.l;
        let res = self.region(
            &format!("{}_res", r.n),
            r.res_t(),
            p.rows,
            format!("{}: one result per row", r.what),
        )?;
        self.sync_before_reuse();
        let first = if l.tpr > 1 {
            Some(format!("tid % {} == 0", l.tpr))
        } else {
            None
        };
        self.unroll_passes(p);
        self.line(format!(
            "{}{}{res}[{}] = {};",
            p.a_loop,
            p.when(first),
            p.row,
            r.fin(&p.acc(p.pa), &p.acc_i(p.pa))
        ));
        self.barrier("");
        self.finish_rows(&r.n, &res, r.out_lay, r.id)
    }

    /// A row spans several warps: each warp's partial through shared memory, then folded
    /// in warp order (every thread the same order: the same bits).
    fn rows_across_warps(&mut self, r: &Red, p: &RowPasses) -> R<()> {
        let l = &r.l;
        let (acc_t, ident, ident_i, rows) = (r.acc_t, &r.ident, &r.ident_i, p.rows);
        let wpr = l.tpr / 32;
        let (part, part_i) = self.partials(r, rows * wpr, "one partial per warp and row")?;
        self.sync_before_reuse();
        let slot = if rows == 1 {
            format!("(tid % {}) / 32", l.tpr)
        } else {
            format!("({}) * {wpr} + (tid % {}) / 32", p.row, l.tpr)
        };
        let slot = slot.replace(&format!("(tid % {}) / 32", self.threads), "warp");
        let mut st = format!("{part}[{slot}] = {};", p.acc(p.pa));
        if let Some(pi) = &part_i {
            st = format!("{{ {st} {pi}[{slot}] = {}; }}", p.acc_i(p.pa));
        }
        self.unroll_passes(p);
        self.line(format!(
            "{}{}{st}",
            p.a_loop,
            p.when(Some("lane == 0".into()))
        ));
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
                step_c(r.op, acc, acc_i, &format!("{part}[{at}]"), &xi)
            )
        };
        if r.out_lay.is_none() {
            // Every thread folds the warp partials in the same order: same bits.
            self.line(format!("acc = {ident};"));
            if r.arg {
                self.line(format!("acc_i = {ident_i};"));
            }
            self.line(fold("0", "acc", "acc_i"));
            self.line(format!("{} = {};", r.n, r.fin("acc", "acc_i")));
            Ok(())
        } else {
            let res = self.region(
                &format!("{}_res", r.n),
                r.res_t(),
                rows,
                format!("{}: one result per row", r.what),
            )?;
            self.open(format!(
                "for (int o = tid; o < {rows}; o += {}) {{",
                self.threads
            ));
            self.line(format!("{acc_t} r = {ident};"));
            if r.arg {
                self.line(format!("int r_i = {ident_i};"));
            }
            self.line(fold("o", "r", "r_i"));
            self.line(format!("{res}[o] = {};", r.fin("r", "r_i")));
            self.close("}");
            self.barrier("");
            self.finish_rows(&r.n, &res, r.out_lay, r.id)
        }
    }

    /// Along the columns of a 2-D tile: one partial per owned column, combined over the
    /// lanes of a warp that hold the same columns, then over thread groups in shared memory.
    fn reduce_along_columns(&mut self, r: &Red) -> R<()> {
        let l = &r.l;
        let (acc_t, ident, ident_i, per_pass) = (r.acc_t, &r.ident, &r.ident_i, r.per_pass());
        let cols = l.cols();
        self.line(format!("{acc_t} acc[{per_pass}];"));
        if r.arg {
            self.line(format!("int acc_i[{per_pass}];"));
        }
        self.line("#pragma unroll");
        self.line(format!(
            "for (int c = 0; c < {per_pass}; ++c) {{ acc[c] = {ident};{} }}",
            if r.arg {
                format!(" acc_i[c] = {ident_i};")
            } else {
                String::new()
            }
        ));
        let step = step_c(
            r.op,
            &format!("acc[s % {per_pass}]"),
            &format!("acc_i[s % {per_pass}]"),
            &strip(&r.xs),
            &format!("L{}_i(s)", r.lay),
        );
        self.step_over_slots(r.lay, &r.ok, &step);
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
                    step_c(
                        r.op,
                        "acc[c]",
                        "acc_i[c]",
                        &shfl("acc[c]"),
                        &shfl("acc_i[c]")
                    )
                ));
                self.close("}");
            }
            (self.warps, "warp".to_string(), format!("lane < {}", l.tpr))
        } else {
            (l.rpp, format!("tid / {}", l.tpr), "true".to_string())
        };
        let (part, part_i) = self.partials(r, groups * cols, "partials per thread group")?;
        let res = self.region(
            &format!("{}_res", r.n),
            r.res_t(),
            cols,
            format!("{}: one result per column", r.what),
        )?;
        self.sync_before_reuse();
        self.open(format!("if ({writer}) {{"));
        self.line("#pragma unroll");
        self.open(format!("for (int c = 0; c < {per_pass}; ++c) {{"));
        self.line(format!("const int j = L{}_j(c);", r.lay));
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
            step_c(r.op, "r", "r_i", &format!("{part}[g * {cols} + o]"), &oi)
        ));
        self.line(format!("{res}[o] = {};", r.fin("r", "r_i")));
        self.close("}");
        self.barrier("");
        self.finish_rows(&r.n, &res, r.out_lay, r.id)
    }

    /// Shared memory for `len` partial results (and, for argmax / argmin, their indices).
    fn partials(&mut self, r: &Red, len: usize, about: &str) -> R<(String, Option<String>)> {
        let part = self.region(
            &format!("{}_part", r.n),
            r.acc_t,
            len,
            format!("{}: {about}", r.what),
        )?;
        let part_i = if r.arg {
            Some(self.region(
                &format!("{}_part_i", r.n),
                "int",
                len,
                format!("{}: indices", r.what),
            )?)
        } else {
            None
        };
        Ok((part, part_i))
    }

    /// Loops over a register array's index must unroll (or the array goes to local memory).
    fn unroll_passes(&mut self, p: &RowPasses) {
        if p.np > 1 {
            self.line("#pragma unroll");
        }
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
