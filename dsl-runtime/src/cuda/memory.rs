//! Loads and stores of tiles: vector accesses where the pointers are provably contiguous
//! and aligned (one predicate per vector when the mask allows), packed sub-word loads, and
//! stores by owners only (replicas and padding never write).
use super::*;

impl Emitter<'_> {
    /// Bytes per vector access when `ptr`'s chunks are provably contiguous and aligned.
    pub(super) fn vector_bytes(&self, ptr: ValueId, lay: usize, d: DType) -> Option<usize> {
        let a = self.f.aff[ptr.0 as usize];
        if a.stride != Some(1) || d == DType::Bool {
            return None;
        }
        let sz = d.size_bytes();
        let vb = (self.layouts[lay].vec * sz).min(16);
        if vb < 8 || !(a.div as usize * sz).is_multiple_of(vb) {
            return None;
        }
        Some(vb)
    }

    pub(super) fn load(
        &mut self,
        id: ValueId,
        ptr: ValueId,
        mask: Option<ValueId>,
        other: Option<ValueId>,
        src: &Src,
    ) -> R<()> {
        let mut m = self.mem_op_of(ptr, MemKind::Load);
        let replicated = !self.k.ty(ptr).is_scalar() && {
            let l = self.lay_of_value(ptr)?;
            self.layouts[l].has_replicas()
        };
        if replicated {
            // Replicas read what owners write: not "the same element by the same thread".
            m.key = None;
        }
        self.order_memory(m);
        let ty = self.k.ty(id).clone();
        let d = num(ty.elem);
        let cty = reg_ty(ty.elem);
        if ty.is_scalar() {
            let p = self.access(ptr, &At::Idx(vec![]))?;
            let n = self.value_name(id, src);
            let ld = load_c(d, &p);
            let e = match mask {
                Some(m) => {
                    let o = match other {
                        Some(o) => self.access(o, &At::Idx(vec![]))?,
                        None => zero_c(ty.elem),
                    };
                    format!("{} ? {ld} : {o}", self.access(m, &At::Idx(vec![]))?)
                }
                None => ld,
            };
            self.line(format!("{} = {e};", const_decl(ty.elem, &n)));
            return Ok(());
        }
        let lay = self.lay_of_value(id)?;
        let n = self.value_name(id, src);
        let k_slots = self.layouts[lay].slots();
        let at = |s: &str| At::Slot {
            lay,
            s: s.to_string(),
        };
        // The scalar path: each slot loads when it is a real, unmasked element.
        let cond = |me: &Self, s: &str| me.slot_cond(me.valid(lay, s), mask, lay, s);
        let scalar_path = |me: &mut Self| -> R<()> {
            let p = me.access(ptr, &at("s"))?;
            let ld = load_c(d, &p);
            let e = match cond(me, "s")? {
                Some(c) => {
                    let o = match other {
                        Some(o) => me.access(o, &at("s"))?,
                        None => zero_c(ty.elem),
                    };
                    format!("{c} ? {ld} : {}", strip(&o))
                }
                None => ld,
            };
            me.open_slots(lay, "s");
            me.line(format!("{n}[s] = {e};"));
            me.close("}");
            Ok(())
        };
        self.line(format!("{cty} {n}[{k_slots}];"));
        match self.vector_bytes(ptr, lay, d) {
            Some(vb) => {
                let epv = vb / d.size_bytes();
                let vty = if vb == 16 { "uint4" } else { "uint2" };
                let at_fn = match d {
                    DType::BF16 => "tsr_bf16_at",
                    DType::F16 => "tsr_f16_at",
                    DType::F32 => "tsr_f32_at",
                    _ => "tsr_i32_at",
                };
                self.open("{");
                if self.mask_per_vector(lay, epv, mask, other) {
                    let c = cond(self, &format!("q * {epv}"))?;
                    let p = self.access(ptr, &at(&format!("q * {epv}")))?;
                    let ld = format!("*(const {vty}*)({})", strip(&p));
                    let q = k_slots / epv;
                    self.line(format!("{vty} raw[{q}];"));
                    self.line("#pragma unroll");
                    match c {
                        Some(c) => {
                            let o = match other {
                                Some(o) => self.access(o, &at(&format!("q * {epv}")))?,
                                None => "0.0f".into(),
                            };
                            let o = strip(&o);
                            let word = match d {
                                _ if o == "0.0f" || o == "0" => "0u".to_string(),
                                DType::BF16 => format!("tsr_pack_bf16({o}, {o})"),
                                DType::F16 => format!("tsr_pack_f16({o}, {o})"),
                                DType::F32 => format!("__float_as_uint({o})"),
                                _ => format!("(unsigned)({o})"),
                            };
                            let fill = vec![word; vb / 4].join(", ");
                            self.line(format!(
                                "for (int q = 0; q < {q}; ++q)  // one load per {vb} bytes, one predicate for its elements"
                            ));
                            self.line(format!(
                                "  raw[q] = {} ? {ld} : {vty}{{{fill}}};",
                                strip(&c)
                            ));
                        }
                        None => {
                            self.line(format!("for (int q = 0; q < {q}; ++q) raw[q] = {ld};  // one load per {vb} bytes"));
                        }
                    }
                    self.open_slots(lay, "s");
                    self.line(format!("{n}[s] = {at_fn}(raw[s / {epv}], s % {epv});"));
                    self.close("}");
                    self.close("}");
                    self.regs[id.0 as usize] = true;
                    return Ok(());
                }
                if d.size_bytes() == 2 {
                    self.load_packed(&n, ptr, lay, d, vb, &cond(self, "s")?, other)?;
                    self.regs[id.0 as usize] = true;
                    return Ok(());
                }
                self.full_flag(lay, &cond(self, "s")?)?;
                self.open(format!(
                    "if (full) {{  // vector path: one load per {vb} bytes"
                ));
                let p = self.access(ptr, &at(&format!("q * {epv}")))?;
                self.line("#pragma unroll");
                self.open(format!("for (int q = 0; q < {}; ++q) {{", k_slots / epv));
                self.line(format!("const {vty} raw = *(const {vty}*)({});", strip(&p)));
                self.line("#pragma unroll");
                self.line(format!(
                    "for (int e = 0; e < {epv}; ++e) {n}[q * {epv} + e] = {at_fn}(raw, e);"
                ));
                self.close("}");
                self.reopen("} else {  // some element is masked or padding: element by element");
                scalar_path(self)?;
                self.close("}");
                self.close("}");
            }
            None => scalar_path(self)?,
        }
        self.regs[id.0 as usize] = true;
        Ok(())
    }

    /// The vector load of a 16-bit tile (inside the `{` the caller opened): both paths fill
    /// the same packed words, unpacked to floats once they merge, so only half as many
    /// registers are live across the branch (the weights of a GEMV are most of them).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn load_packed(
        &mut self,
        n: &str,
        ptr: ValueId,
        lay: usize,
        d: DType,
        vb: usize,
        cond: &Option<String>,
        other: Option<ValueId>,
    ) -> R<()> {
        let epv = vb / 2;
        let vty = if vb == 16 { "uint4" } else { "uint2" };
        let k_slots = self.layouts[lay].slots();
        let at = |s: &str| At::Slot {
            lay,
            s: s.to_string(),
        };
        let (at_fn, to_bits) = match d {
            DType::BF16 => ("tsr_bf16_at", "tsr_f32_to_bf16"),
            _ => ("tsr_f16_at", "tsr_f32_to_f16"),
        };
        self.line(format!("{vty} raw[{}];", k_slots / epv));
        self.full_flag(lay, cond)?;
        self.open(format!(
            "if (full) {{  // vector path: one load per {vb} bytes"
        ));
        let p = self.access(ptr, &at(&format!("q * {epv}")))?;
        self.line("#pragma unroll");
        self.line(format!(
            "for (int q = 0; q < {}; ++q) raw[q] = *(const {vty}*)({});",
            k_slots / epv,
            strip(&p)
        ));
        self.reopen(
            "} else {  // some element is masked or padding: element by element, same words",
        );
        let p = self.access(ptr, &at("s"))?;
        let e = match cond {
            Some(c) => {
                let o = match other {
                    Some(o) => self.access(o, &at("s"))?,
                    None => "0.0f".into(),
                };
                format!("{c} ? *({}) : {to_bits}({})", strip(&p), strip(&o))
            }
            None => format!("*({})", strip(&p)),
        };
        self.open_slots(lay, "s");
        self.line(format!("tsr_put16(raw[s / {epv}], s % {epv}, {e});"));
        self.close("}");
        self.close("}");
        self.open_slots(lay, "s");
        self.line(format!("{n}[s] = {at_fn}(raw[s / {epv}], s % {epv});"));
        self.close("}");
        self.close("}");
        Ok(())
    }

    /// Whether an access of `epv`-element vectors can take one predicate per vector: the
    /// mask (and a load's `other`) is constant over each vector (`Facts::cst`), and so is
    /// the padding (the row length is a multiple of `epv`).
    pub(super) fn mask_per_vector(
        &self,
        lay: usize,
        epv: usize,
        mask: Option<ValueId>,
        other: Option<ValueId>,
    ) -> bool {
        let c = |v: Option<ValueId>| v.is_none_or(|v| self.f.cst[v.0 as usize] >= epv as i64);
        c(mask) && c(other) && self.layouts[lay].cols().is_multiple_of(epv)
    }

    /// `bool full`: every slot of this thread is a real element and unmasked.
    pub(super) fn full_flag(&mut self, lay: usize, cond: &Option<String>) -> R<()> {
        match cond {
            None => self.line("const bool full = true;"),
            Some(c) => {
                self.line("bool full = true;");
                self.open_slots(lay, "s");
                self.line(format!("full = full && {c};"));
                self.close("}");
            }
        }
        Ok(())
    }

    /// A scalar atomic: once per program, by thread 0 between two barriers, with fences on
    /// both sides (acquire and release at GPU scope: what the program wrote is visible to
    /// whoever sees the new value, and what earlier programs released before their atomics
    /// is visible after it); every thread gets the old value through shared memory.
    pub(super) fn ordered_atomic(
        &mut self,
        op: AtomicOp,
        ptr: ValueId,
        value: ValueId,
        mask: Option<ValueId>,
        old: ValueId,
        src: &Src,
    ) -> R<()> {
        let d = self
            .k
            .ty(ptr)
            .elem
            .pointee()
            .ok_or_else(|| self.err("atomic through a non-pointer"))?;
        let cty = reg_ty(Elem::Num(d));
        let cty = cty.as_str();
        let p = self.access(ptr, &At::Idx(vec![]))?;
        let v = self.access(value, &At::Idx(vec![]))?;
        let name = self.value_name(old, src);
        let slot = self.region(
            &format!("{name}_old"),
            cty,
            1,
            format!("{name}: the old value, for every thread"),
        )?;
        self.barrier("  // the program's accesses so far, then its atomic");
        // One acquire-release atomic (`EmitOptions::acq_rel_atomics`), or fences around a
        // relaxed one.
        let acq_rel =
            self.acq_rel_atomics && op == AtomicOp::Add && matches!(d, DType::I32 | DType::F32);
        let rmw = if acq_rel {
            format!("tsr_atom_add_acq_rel({}, {})", strip(&p), strip(&v))
        } else {
            atomic_expr(op, d, strip(&p).as_str(), &v)
        };
        let rmw = match mask {
            Some(m) => format!("{} ? {rmw} : 0", self.access(m, &At::Idx(vec![]))?),
            None => rmw,
        };
        self.line(if acq_rel {
            format!("if (tid == 0) {slot}[0] = {rmw};  // acquire and release at GPU scope")
        } else {
            format!("if (tid == 0) {{ __threadfence(); {slot}[0] = {rmw}; __threadfence(); }}")
        });
        self.barrier("");
        self.line(format!("const {cty} {name} = {slot}[0];"));
        Ok(())
    }

    /// The condition of an access through a scalar pointer, made once per program (by
    /// thread 0), masked.
    fn once_cond(&self, mask: Option<ValueId>) -> R<String> {
        Ok(match mask {
            Some(m) => format!("tid == 0 && {}", self.access(m, &At::Idx(vec![]))?),
            None => "tid == 0".into(),
        })
    }

    /// `prefetch(ptrs, mask)`: one `tsr_prefetch` (an L2 prefetch, no value) per chunk of
    /// contiguous elements a thread owns, masked; through a scalar pointer, thread 0's one.
    /// Not a memory access: nothing orders it, and it needs no barrier.
    pub(super) fn prefetch(&mut self, ptr: ValueId, mask: Option<ValueId>) -> R<()> {
        let pt = self.k.ty(ptr).clone();
        if pt.is_scalar() {
            let p = self.access(ptr, &At::Idx(vec![]))?;
            let c = self.once_cond(mask)?;
            self.line(format!("if ({c}) tsr_prefetch({});", strip(&p)));
            return Ok(());
        }
        let lay = self.lay_of_value(ptr)?;
        let vec = self.layouts[lay].vec;
        let at = At::Slot {
            lay,
            s: "s".to_string(),
        };
        let p = self.access(ptr, &at)?;
        let mut c: Vec<String> = vec![];
        if vec > 1 {
            c.push(format!("s % {vec} == 0"));
        }
        c.extend(self.slot_cond(self.owned(lay, "s"), mask, lay, "s")?);
        self.open_slots(lay, "s");
        let call = format!("tsr_prefetch({});", strip(&p));
        match c.is_empty() {
            true => self.line(call),
            false => self.line(format!("if ({}) {call}", c.join(" && "))),
        }
        self.close("}");
        Ok(())
    }

    pub(super) fn store(
        &mut self,
        ptr: ValueId,
        value: ValueId,
        mask: Option<ValueId>,
        atomic: Option<AtomicOp>,
    ) -> R<()> {
        let kind = if atomic.is_some() {
            MemKind::Atomic
        } else {
            MemKind::Store
        };
        let m = self.mem_op_of(ptr, kind);
        self.order_memory(m);
        let pt = self.k.ty(ptr).clone();
        let d = pt
            .elem
            .pointee()
            .ok_or_else(|| self.err("store through a non-pointer"))?;
        let write = |p: &str, v: &str| -> String {
            match atomic {
                None => store_c(d, p, v),
                Some(op) => atomic_c(op, d, p, v),
            }
        };
        if pt.is_scalar() {
            // One thread writes: a scalar store (or atomic) happens once per program.
            let p = self.access(ptr, &At::Idx(vec![]))?;
            let v = self.access(value, &At::Idx(vec![]))?;
            let c = self.once_cond(mask)?;
            self.line(format!("if ({c}) {}", write(strip(&p).as_str(), &v)));
            return Ok(());
        }
        let lay = self.lay_of_value(ptr)?;
        let at = |s: &str| At::Slot {
            lay,
            s: s.to_string(),
        };
        let cond = |me: &Self, s: &str| me.slot_cond(me.owned(lay, s), mask, lay, s);
        let scalar_path = |me: &mut Self| -> R<()> {
            let p = me.access(ptr, &at("s"))?;
            let v = me.access(value, &at("s"))?;
            let w = write(strip(&p).as_str(), &strip(&v));
            me.open_slots(lay, "s");
            match cond(me, "s")? {
                Some(c) => me.line(format!("if ({c}) {w}")),
                None => me.line(w),
            }
            me.close("}");
            Ok(())
        };
        // f32 adds go by vector too with `EmitOptions::vector_atomics` (`tsr_red_add_v4`).
        let vector_add = self.vector_atomics && atomic == Some(AtomicOp::Add) && d == DType::F32;
        let vb = if atomic.is_none() || vector_add {
            self.vector_bytes(ptr, lay, d)
        } else {
            None
        };
        match vb {
            Some(vb) => {
                let sz = d.size_bytes();
                let epv = vb / sz;
                let vty = if vb == 16 { "uint4" } else { "uint2" };
                let k_slots = self.layouts[lay].slots();
                let per_vector = self.mask_per_vector(lay, epv, mask, None);
                let what = if vector_add { "add" } else { "store" };
                self.open("{");
                if per_vector {
                    let c = cond(self, &format!("q * {epv}"))?;
                    self.line("#pragma unroll");
                    self.open(format!(
                        "for (int q = 0; q < {}; ++q) {{  // one {what} per {vb} bytes{}",
                        k_slots / epv,
                        if c.is_some() {
                            ", one predicate for its elements"
                        } else {
                            ""
                        }
                    ));
                    if let Some(c) = &c {
                        self.open(format!("if ({}) {{", strip(c)));
                    }
                } else {
                    self.full_flag(lay, &cond(self, "s")?)?;
                    self.open(format!(
                        "if (full) {{  // vector path: one {what} per {vb} bytes"
                    ));
                    self.line("#pragma unroll");
                    self.open(format!("for (int q = 0; q < {}; ++q) {{", k_slots / epv));
                }
                let p = self.access(ptr, &at(&format!("q * {epv}")))?;
                if vector_add {
                    let els = (0..epv)
                        .map(|e| {
                            self.access(value, &at(&format!("q * {epv} + {e}")))
                                .map(|v| strip(&v))
                        })
                        .collect::<R<Vec<_>>>()?;
                    self.line(format!(
                        "tsr_red_add_v{epv}({}, {});",
                        strip(&p),
                        els.join(", ")
                    ));
                } else {
                    self.line(format!("{vty} raw;"));
                    for (w, field) in ["x", "y", "z", "w"].iter().enumerate().take(vb / 4) {
                        let el = |e: usize| self.access(value, &at(&format!("q * {epv} + {e}")));
                        let word = match d {
                            DType::BF16 => {
                                format!("tsr_pack_bf16({}, {})", el(2 * w)?, el(2 * w + 1)?)
                            }
                            DType::F16 => {
                                format!("tsr_pack_f16({}, {})", el(2 * w)?, el(2 * w + 1)?)
                            }
                            DType::F32 => format!("__float_as_uint({})", el(w)?),
                            _ => format!("(unsigned)({})", el(w)?),
                        };
                        self.line(format!("raw.{field} = {word};"));
                    }
                    self.line(format!("*({vty}*)({}) = raw;", strip(&p)));
                }
                if per_vector {
                    if cond(self, "s")?.is_some() {
                        self.close("}");
                    }
                    self.close("}");
                    self.close("}");
                    return Ok(());
                }
                self.close("}");
                self.reopen("} else {  // some element is masked or padding: element by element");
                scalar_path(self)?;
                self.close("}");
                self.close("}");
            }
            None => scalar_path(self)?,
        }
        Ok(())
    }

    /// When slot `s` of layout `lay` takes part in an access: `base` (it holds a real
    /// element, for a load; it owns it, for a store) and the mask's element there.
    fn slot_cond(
        &self,
        base: Option<String>,
        mask: Option<ValueId>,
        lay: usize,
        s: &str,
    ) -> R<Option<String>> {
        let mut c: Vec<String> = base.into_iter().collect();
        if let Some(m) = mask {
            let at = At::Slot {
                lay,
                s: s.to_string(),
            };
            c.push(self.access(m, &at)?);
        }
        Ok(if c.is_empty() {
            None
        } else {
            Some(c.join(" && "))
        })
    }
}
