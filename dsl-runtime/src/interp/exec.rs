//! The statement executor: argument checks, then one program at a time.
use super::dot;
use super::ops;
use super::value::{broadcast, round1, round_f64, Data, Tile};
use super::{ErrorKind, HostMem, InterpArg, InterpError};
use dsl_ir::spec::MAX_TILE_ELEMS;
use dsl_ir::{AtomicOp, DType, Elem, Kernel, Lit, Op, ParamKind, Src, Stmt, ValueId};
use half::{bf16, f16};

/// A pointer argument, resolved against the kernel's parameters.
#[derive(Clone, Debug)]
struct PtrArg {
    buf: usize,
    offset: usize,
    len: usize,
    dtype: DType,
    name: String,
}

/// A kernel bound to its launch arguments: checked once, then run program by program.
pub struct Interpreter<'k> {
    kernel: &'k Kernel,
    /// Each value's element type and concrete dims, indexed by `ValueId`.
    tys: Vec<(Elem, Vec<usize>)>,
    /// For each kernel parameter, the index of its launch argument (None for constexprs).
    param_arg: Vec<Option<usize>>,
    args: Vec<InterpArg>,
    /// For each launch argument, its pointer facts when it is a pointer.
    ptrs: Vec<Option<PtrArg>>,
}

fn lit_dims(t: &dsl_ir::Type) -> Option<Vec<usize>> {
    t.shape
        .iter()
        .map(|d| d.as_lit().filter(|&v| v >= 0).map(|v| v as usize))
        .collect()
}

impl<'k> Interpreter<'k> {
    /// Checks the kernel (specialised) and the arguments against its run-time parameters and
    /// the buffers in `mem`.
    pub fn new(
        kernel: &'k Kernel,
        args: &[InterpArg],
        mem: &[HostMem],
    ) -> Result<Interpreter<'k>, InterpError> {
        let fail = |kind, message: String| InterpError {
            kind,
            kernel: kernel.name.clone(),
            program: None,
            line: None,
            message,
        };
        let mut tys = Vec::with_capacity(kernel.values.len());
        for t in &kernel.values {
            let dims = lit_dims(t).ok_or_else(|| {
                fail(
                    ErrorKind::Malformed,
                    format!("the kernel is not specialised (a value has type {t})"),
                )
            })?;
            if dims
                .iter()
                .try_fold(1usize, |a, &d| a.checked_mul(d))
                .is_none_or(|n| n as i64 > MAX_TILE_ELEMS)
            {
                return Err(fail(
                    ErrorKind::Malformed,
                    format!("a value of type {t} exceeds {MAX_TILE_ELEMS} elements"),
                ));
            }
            tys.push((t.elem, dims));
        }
        let mut unspecialised = false;
        dsl_ir::walk(&kernel.body, &mut |s| {
            if let Stmt::Let {
                op: Op::Const(_), ..
            } = s
            {
                unspecialised = true;
            }
        });
        if unspecialised || kernel.vars.iter().any(|v| lit_dims(&v.ty).is_none()) {
            return Err(fail(
                ErrorKind::Malformed,
                "the kernel is not specialised (call `specialize` first)".into(),
            ));
        }
        let runtime: Vec<_> = kernel.runtime_params().collect();
        if runtime.len() != args.len() {
            let names: Vec<&str> = runtime.iter().map(|(_, p)| p.name.as_str()).collect();
            return Err(fail(
                ErrorKind::Args,
                format!(
                    "takes {} run-time arguments ({}), got {}",
                    runtime.len(),
                    names.join(", "),
                    args.len()
                ),
            ));
        }
        let mut param_arg = vec![None; kernel.params.len()];
        let mut ptrs = vec![None; args.len()];
        for (ai, ((pi, p), arg)) in runtime.iter().zip(args).enumerate() {
            param_arg[*pi] = Some(ai);
            match (p.kind, *arg) {
                (ParamKind::Ptr(d), InterpArg::Ptr { buf, offset, len }) => {
                    ptrs[ai] = Some(PtrArg {
                        buf,
                        offset,
                        len,
                        dtype: d,
                        name: p.name.clone(),
                    });
                }
                (ParamKind::Scalar(DType::I32), InterpArg::I32(_))
                | (ParamKind::Scalar(DType::F32), InterpArg::F32(_)) => {}
                (kind, arg) => {
                    let want = match kind {
                        ParamKind::Ptr(d) => format!("a Ptr<{d}>"),
                        ParamKind::Scalar(d) => format!("an {d} scalar"),
                        ParamKind::Constexpr(_) => "a constexpr".into(),
                    };
                    return Err(fail(
                        ErrorKind::Args,
                        format!("argument {ai} (`{}`) must be {want}, got {arg:?}", p.name),
                    ));
                }
            }
        }
        let it = Interpreter {
            kernel,
            tys,
            param_arg,
            args: args.to_vec(),
            ptrs,
        };
        it.check_mem(mem).map_err(|m| fail(ErrorKind::Args, m))?;
        Ok(it)
    }

    /// Checks every pointer argument against the buffers.
    fn check_mem(&self, mem: &[HostMem]) -> Result<(), String> {
        for p in self.ptrs.iter().flatten() {
            let Some(m) = mem.get(p.buf) else {
                return Err(format!(
                    "pointer `{}` names buffer {}, but there are {}",
                    p.name,
                    p.buf,
                    mem.len()
                ));
            };
            if m.dtype != p.dtype {
                return Err(format!(
                    "pointer `{}` is Ptr<{}> but buffer {} holds {}",
                    p.name, p.dtype, p.buf, m.dtype
                ));
            }
            if p.offset.checked_add(p.len).is_none_or(|end| end > m.len()) {
                return Err(format!(
                    "pointer `{}` reaches elements {}..{}+{} of buffer {}, which has {} elements",
                    p.name,
                    p.offset,
                    p.offset,
                    p.len,
                    p.buf,
                    m.len()
                ));
            }
        }
        Ok(())
    }

    pub fn kernel(&self) -> &Kernel {
        self.kernel
    }

    /// Runs program `pid` of `grid` on `mem` (the buffers the arguments were checked against).
    pub fn run_program(
        &self,
        pid: [u32; 3],
        grid: [u32; 3],
        mem: &mut [HostMem],
    ) -> Result<(), InterpError> {
        let fail = |message: String| InterpError {
            kind: ErrorKind::Args,
            kernel: self.kernel.name.clone(),
            program: None,
            line: None,
            message,
        };
        if (0..3).any(|a| pid[a] >= grid[a]) {
            return Err(fail(format!(
                "program {pid:?} is outside the grid {grid:?}"
            )));
        }
        self.check_mem(mem).map_err(fail)?;
        let mut f = Frame {
            it: self,
            mem,
            pid,
            grid,
            vals: vec![None; self.tys.len()],
            vars: vec![None; self.kernel.vars.len()],
        };
        f.block(&self.kernel.body)
    }
}

/// A store's or atomic's pointer facts, offsets, mask and value.
type WriteOperands = (PtrArg, Vec<i64>, Option<Vec<bool>>, Data);

/// The state of one running program.
struct Frame<'a, 'k> {
    it: &'a Interpreter<'k>,
    mem: &'a mut [HostMem],
    pid: [u32; 3],
    grid: [u32; 3],
    vals: Vec<Option<Tile>>,
    vars: Vec<Option<Tile>>,
}

fn error(
    it: &Interpreter,
    pid: [u32; 3],
    kind: ErrorKind,
    src: &Src,
    what: &str,
    detail: &str,
) -> InterpError {
    InterpError {
        kind,
        kernel: it.kernel.name.clone(),
        program: Some(pid),
        line: Some(src.line),
        message: format!("{what} at line {} ({}): {detail}", src.line, src.text),
    }
}

fn get(vals: &[Option<Tile>], v: ValueId) -> Result<&Tile, String> {
    vals.get(v.0 as usize)
        .and_then(|t| t.as_ref())
        .ok_or_else(|| format!("value %{} is used before it is defined", v.0))
}

fn scalar_i32(vals: &[Option<Tile>], v: ValueId) -> Result<i32, String> {
    match &get(vals, v)?.data {
        Data::I32(x) if x.len() == 1 => Ok(x[0]),
        d => Err(format!(
            "value %{} should be an i32 scalar, is {} x{}",
            v.0,
            d.kind(),
            d.len()
        )),
    }
}

fn mask_of(vals: &[Option<Tile>], m: Option<ValueId>, n: usize) -> Result<Option<&[bool]>, String> {
    let Some(m) = m else { return Ok(None) };
    match &get(vals, m)?.data {
        Data::Bool(b) if b.len() == n => Ok(Some(b)),
        d => Err(format!(
            "mask %{} is {} x{}, not bool x{n}",
            m.0,
            d.kind(),
            d.len()
        )),
    }
}

// Element readers and writers over little-endian bytes; `i` was bounds-checked.
#[inline]
fn rd_f32(b: &[u8], i: usize) -> f32 {
    f32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]])
}
#[inline]
fn rd_i32(b: &[u8], i: usize) -> i32 {
    i32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]])
}
#[inline]
fn rd_bf16(b: &[u8], i: usize) -> f32 {
    bf16::from_bits(u16::from_le_bytes([b[2 * i], b[2 * i + 1]])).to_f32()
}
#[inline]
fn rd_f16(b: &[u8], i: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[2 * i], b[2 * i + 1]])).to_f32()
}

/// Reads the active lanes; on an out-of-bounds lane returns its offset.
fn load_lanes<T: Copy>(
    offs: &[i64],
    mask: Option<&[bool]>,
    other: Option<&[T]>,
    zero: T,
    len: usize,
    read: impl Fn(usize) -> T,
) -> Result<Vec<T>, i64> {
    let mut out = Vec::with_capacity(offs.len());
    for (i, &o) in offs.iter().enumerate() {
        if mask.is_none_or(|m| m[i]) {
            if o < 0 || o as usize >= len {
                return Err(o);
            }
            out.push(read(o as usize));
        } else {
            out.push(other.map_or(zero, |v| v[i]));
        }
    }
    Ok(out)
}

/// The first active lane outside `[0, len)`.
fn first_oob(offs: &[i64], mask: Option<&[bool]>, len: usize) -> Option<i64> {
    offs.iter()
        .enumerate()
        .find(|&(i, &o)| mask.is_none_or(|m| m[i]) && (o < 0 || o as usize >= len))
        .map(|(_, &o)| o)
}

impl Frame<'_, '_> {
    fn malformed(&self, src: &Src, detail: String) -> InterpError {
        error(
            self.it,
            self.pid,
            ErrorKind::Malformed,
            src,
            "malformed IR",
            &detail,
        )
    }

    fn oob(&self, src: &Src, what: &str, p: &PtrArg, off: i64) -> InterpError {
        let detail = format!("element {off} of a {}-element buffer `{}`", p.len, p.name);
        error(
            self.it,
            self.pid,
            ErrorKind::OutOfBounds,
            src,
            &format!("{what} out of bounds"),
            &detail,
        )
    }

    fn ptr_arg(&self, arg: usize, src: &Src) -> Result<&PtrArg, InterpError> {
        self.it
            .ptrs
            .get(arg)
            .and_then(|p| p.as_ref())
            .ok_or_else(|| self.malformed(src, format!("argument {arg} is not a pointer")))
    }

    fn block(&mut self, body: &[Stmt]) -> Result<(), InterpError> {
        for s in body {
            self.stmt(s)?;
        }
        Ok(())
    }

    fn stmt(&mut self, s: &Stmt) -> Result<(), InterpError> {
        match s {
            Stmt::Let { id, op, src } => {
                let t = self.eval(*id, op, src)?;
                self.vals[id.0 as usize] = Some(t);
            }
            Stmt::DeclVar {
                var,
                init: value,
                src,
            }
            | Stmt::Assign { var, value, src } => {
                let t = get(&self.vals, *value)
                    .map_err(|m| self.malformed(src, m))?
                    .clone();
                let want = self
                    .it
                    .kernel
                    .vars
                    .get(var.0 as usize)
                    .and_then(|v| lit_dims(&v.ty));
                if want.as_deref() != Some(&t.dims[..]) {
                    return Err(self.malformed(
                        src,
                        format!("variable {} gets a value of shape {:?}", var.0, t.dims),
                    ));
                }
                self.vars[var.0 as usize] = Some(t);
            }
            Stmt::Store {
                ptr,
                value,
                mask,
                src,
            } => self.store(*ptr, *value, *mask, src)?,
            Stmt::Prefetch { ptr, mask, src } => self.prefetch(*ptr, *mask, src)?,
            Stmt::Atomic {
                op,
                ptr,
                value,
                mask,
                old,
                src,
            } => {
                let was = self.atomic(*op, *ptr, *value, *mask, src)?;
                if let Some(o) = old {
                    // One program at a time: its scalar atomic is trivially ordered.
                    let t = match was {
                        Some(Data::F32(v)) => Tile {
                            dtype: DType::F32,
                            dims: vec![],
                            data: Data::F32(v),
                        },
                        Some(Data::I32(v)) => Tile::scalar_i32(v[0]),
                        _ => {
                            return Err(
                                self.malformed(src, "a scalar atomic without a value".into())
                            )
                        }
                    };
                    if o.0 as usize >= self.vals.len() {
                        return Err(
                            self.malformed(src, format!("atomic result %{} has no type", o.0))
                        );
                    }
                    self.vals[o.0 as usize] = Some(t);
                }
            }
            Stmt::For {
                iv,
                start,
                end,
                step,
                body,
                src,
            } => {
                let bounds = (|| {
                    Ok::<_, String>((
                        scalar_i32(&self.vals, *start)?,
                        scalar_i32(&self.vals, *end)?,
                        scalar_i32(&self.vals, *step)?,
                    ))
                })();
                let (start, end, step) = bounds.map_err(|m| self.malformed(src, m))?;
                if step <= 0 {
                    let detail = format!("step {step} must be positive (range {start}..{end})");
                    return Err(error(
                        self.it,
                        self.pid,
                        ErrorKind::BadLoop,
                        src,
                        "loop",
                        &detail,
                    ));
                }
                if iv.0 as usize >= self.vals.len() {
                    return Err(self.malformed(src, format!("loop variable %{} has no type", iv.0)));
                }
                let (mut i, end, step) = (start as i64, end as i64, step as i64);
                while i < end {
                    self.vals[iv.0 as usize] = Some(Tile::scalar_i32(i as i32));
                    self.block(body)?;
                    i += step;
                }
            }
            Stmt::If {
                cond,
                then,
                els,
                src,
            } => {
                let c = match get(&self.vals, *cond).map(|t| &t.data) {
                    Ok(Data::Bool(b)) if b.len() == 1 => b[0],
                    _ => {
                        return Err(self.malformed(
                            src,
                            format!("`if` condition %{} is not a bool scalar", cond.0),
                        ))
                    }
                };
                self.block(if c { then } else { els })?;
            }
        }
        Ok(())
    }

    fn eval(&self, id: ValueId, op: &Op, src: &Src) -> Result<Tile, InterpError> {
        let bad = |m: String| self.malformed(src, m);
        let (elem, dims) = self
            .it
            .tys
            .get(id.0 as usize)
            .ok_or_else(|| bad(format!("value %{} has no type", id.0)))?;
        let dtype = match elem {
            Elem::Num(d) | Elem::Ptr(d) => *d,
        };
        let val = |v: ValueId| get(&self.vals, v).map_err(|m| self.malformed(src, m));
        let data = match op {
            Op::ProgramId(a) | Op::NumPrograms(a) => {
                let a = *a as usize;
                if a >= 3 {
                    return Err(bad(format!("axis {a}")));
                }
                let v = if matches!(op, Op::ProgramId(_)) {
                    self.pid[a]
                } else {
                    self.grid[a]
                };
                Data::I32(vec![v as i32])
            }
            Op::Param(i) => {
                let ai = self
                    .it
                    .param_arg
                    .get(*i)
                    .copied()
                    .flatten()
                    .ok_or_else(|| bad(format!("parameter {i} is not a run-time parameter")))?;
                match self.it.args[ai] {
                    InterpArg::Ptr { .. } => Data::Ptr {
                        arg: ai,
                        offs: vec![0],
                    },
                    InterpArg::I32(v) => Data::I32(vec![v]),
                    InterpArg::F32(v) => Data::F32(vec![v]),
                }
            }
            Op::Const(_) => return Err(bad("an unspecialised constexpr".into())),
            Op::Lit(l) => match (elem, l) {
                (Elem::Num(DType::Bool), Lit::Bool(b)) => Data::Bool(vec![*b]),
                (Elem::Num(DType::Bool), Lit::Int(v)) => Data::Bool(vec![*v != 0]),
                (Elem::Num(DType::I32), Lit::Int(v)) => Data::I32(vec![*v as i32]),
                (Elem::Num(DType::I32), Lit::Float(v)) => Data::I32(vec![*v as i32]),
                (Elem::Num(d), Lit::Int(v)) if d.is_float() => {
                    Data::F32(vec![round_f64(*d, *v as f64)])
                }
                (Elem::Num(d), Lit::Float(v)) if d.is_float() => Data::F32(vec![round_f64(*d, *v)]),
                _ => return Err(bad(format!("literal {l:?} of type {elem}"))),
            },
            Op::Arange { start, end } => match (start.as_lit(), end.as_lit()) {
                (Some(s), Some(e)) if e - s == dims.iter().product::<usize>() as i64 => {
                    Data::I32((s..e).map(|x| x as i32).collect())
                }
                _ => {
                    return Err(bad(format!(
                        "arange({start}, {end}) for a value of shape {dims:?}"
                    )))
                }
            },
            Op::Unary(u, x) => ops::unary(*u, &val(*x)?.data, dtype).map_err(bad)?,
            Op::Binary(b, x, y) => {
                ops::binary(*b, &val(*x)?.data, &val(*y)?.data, dtype).map_err(bad)?
            }
            Op::Where(c, a, b) => {
                ops::select(&val(*c)?.data, &val(*a)?.data, &val(*b)?.data).map_err(bad)?
            }
            Op::Cast(x) => ops::cast(&val(*x)?.data, dtype).map_err(bad)?,
            Op::ExpandDims(x, _) => val(*x)?.data.clone(),
            Op::Broadcast(x) => {
                let x = val(*x)?;
                broadcast(x, dims)
                    .ok_or_else(|| bad(format!("cannot broadcast {:?} to {:?}", x.dims, dims)))?
                    .data
            }
            Op::Load { ptr, mask, other } => self.load(val(*ptr)?, *mask, *other, dtype, src)?,
            Op::Reduce { op, x, axis } => {
                let x = val(*x)?;
                ops::reduce(*op, &x.data, &x.dims, *axis as usize, x.dtype).map_err(bad)?
            }
            Op::Dot { a, b, acc } => {
                let (a, b) = (val(*a)?, val(*b)?);
                let acc = match acc {
                    Some(c) => Some(&val(*c)?.data),
                    None => None,
                };
                let (m, k, n) = match (&a.dims[..], &b.dims[..]) {
                    ([m, k], [k2, n]) if k == k2 => (*m, *k, *n),
                    _ => return Err(bad(format!("dot of {:?} and {:?}", a.dims, b.dims))),
                };
                dot::dot(&a.data, &b.data, acc, (m, k, n)).map_err(bad)?
            }
            Op::Trans(x) => {
                let x = val(*x)?;
                match x.dims[..] {
                    [m, n] => dot::trans(&x.data, (m, n)).map_err(bad)?,
                    _ => return Err(bad(format!("trans of {:?}", x.dims))),
                }
            }
            Op::ReadVar(v) => self
                .vars
                .get(v.0 as usize)
                .and_then(|t| t.as_ref())
                .ok_or_else(|| bad(format!("variable {} is read before it is declared", v.0)))?
                .data
                .clone(),
        };
        let n: usize = dims.iter().product();
        let kind_ok = match (elem, &data) {
            (Elem::Ptr(_), Data::Ptr { .. })
            | (Elem::Num(DType::Bool), Data::Bool(_))
            | (Elem::Num(DType::I32), Data::I32(_)) => true,
            (Elem::Num(d), Data::F32(_)) => d.is_float(),
            _ => false,
        };
        if data.len() != n || !kind_ok {
            return Err(bad(format!(
                "computed {} x{} for a value of type {}",
                data.kind(),
                data.len(),
                self.it.kernel.values[id.0 as usize]
            )));
        }
        Ok(Tile {
            dtype,
            dims: dims.clone(),
            data,
        })
    }

    fn load(
        &self,
        ptr: &Tile,
        mask: Option<ValueId>,
        other: Option<ValueId>,
        dtype: DType,
        src: &Src,
    ) -> Result<Data, InterpError> {
        let bad = |m: String| self.malformed(src, m);
        let Data::Ptr { arg, offs } = &ptr.data else {
            return Err(bad("load through a non-pointer".into()));
        };
        let p = self.ptr_arg(*arg, src)?;
        if p.dtype != dtype {
            return Err(bad(format!("load of {dtype} through Ptr<{}>", p.dtype)));
        }
        let n = offs.len();
        let mask = mask_of(&self.vals, mask, n).map_err(bad)?;
        let other = match other {
            None => None,
            Some(o) => Some(&get(&self.vals, o).map_err(bad)?.data),
        };
        let (bytes, base, len) = (&self.mem[p.buf].bytes[..], p.offset, p.len);
        let wrong_other = || bad("load's `other` does not match the loaded tile".into());
        let res = match dtype {
            DType::F32 | DType::BF16 | DType::F16 => {
                let other = match other {
                    None => None,
                    Some(Data::F32(v)) if v.len() == n => Some(&v[..]),
                    Some(_) => return Err(wrong_other()),
                };
                match dtype {
                    DType::F32 => {
                        load_lanes(offs, mask, other, 0.0, len, |i| rd_f32(bytes, base + i))
                    }
                    DType::BF16 => {
                        load_lanes(offs, mask, other, 0.0, len, |i| rd_bf16(bytes, base + i))
                    }
                    _ => load_lanes(offs, mask, other, 0.0, len, |i| rd_f16(bytes, base + i)),
                }
                .map(Data::F32)
            }
            DType::I32 => {
                let other = match other {
                    None => None,
                    Some(Data::I32(v)) if v.len() == n => Some(&v[..]),
                    Some(_) => return Err(wrong_other()),
                };
                load_lanes(offs, mask, other, 0, len, |i| rd_i32(bytes, base + i)).map(Data::I32)
            }
            DType::Bool => {
                let other = match other {
                    None => None,
                    Some(Data::Bool(v)) if v.len() == n => Some(&v[..]),
                    Some(_) => return Err(wrong_other()),
                };
                load_lanes(offs, mask, other, false, len, |i| bytes[base + i] != 0).map(Data::Bool)
            }
        };
        res.map_err(|off| self.oob(src, "load", p, off))
    }

    /// A prefetch moves nothing; its masked-on pointers must stay in their buffer, as a
    /// load's.
    fn prefetch(&self, ptr: ValueId, mask: Option<ValueId>, src: &Src) -> Result<(), InterpError> {
        let bad = |m: String| self.malformed(src, m);
        let Data::Ptr { arg, offs } = &get(&self.vals, ptr).map_err(bad)?.data else {
            return Err(bad("prefetch through a non-pointer".into()));
        };
        let p = self.ptr_arg(*arg, src)?;
        let m = mask_of(&self.vals, mask, offs.len()).map_err(bad)?;
        match first_oob(offs, m, p.len) {
            Some(off) => Err(self.oob(src, "prefetch", p, off)),
            None => Ok(()),
        }
    }

    /// The checked operands of a store or atomic: pointer facts, offsets, mask, value.
    fn write_operands(
        &self,
        ptr: ValueId,
        value: ValueId,
        mask: Option<ValueId>,
        what: &str,
        src: &Src,
    ) -> Result<WriteOperands, InterpError> {
        let bad = |m: String| self.malformed(src, m);
        let Data::Ptr { arg, offs } = &get(&self.vals, ptr).map_err(bad)?.data else {
            return Err(bad(format!("{what} through a non-pointer")));
        };
        let p = self.ptr_arg(*arg, src)?;
        let n = offs.len();
        let m = mask_of(&self.vals, mask, n).map_err(bad)?;
        let v = &get(&self.vals, value).map_err(bad)?.data;
        let kind_ok = match v {
            Data::F32(_) => p.dtype.is_float(),
            Data::I32(_) => p.dtype == DType::I32,
            Data::Bool(_) => p.dtype == DType::Bool,
            Data::Ptr { .. } => false,
        };
        if v.len() != n || !kind_ok {
            return Err(bad(format!(
                "{what} of {} x{} through {n} Ptr<{}>",
                v.kind(),
                v.len(),
                p.dtype
            )));
        }
        if let Some(off) = first_oob(offs, m, p.len) {
            return Err(self.oob(src, what, p, off));
        }
        // Owned copies keep `self.mem` free for writing; stores are not the hot path.
        Ok((p.clone(), offs.clone(), m.map(|m| m.to_vec()), v.clone()))
    }

    fn store(
        &mut self,
        ptr: ValueId,
        value: ValueId,
        mask: Option<ValueId>,
        src: &Src,
    ) -> Result<(), InterpError> {
        let (p, offs, mask, v) = self.write_operands(ptr, value, mask, "store", src)?;
        let m = &mut self.mem[p.buf];
        let active = |i: usize| mask.as_ref().is_none_or(|m| m[i]);
        let b = &mut m.bytes;
        match (&v, p.dtype) {
            (Data::F32(v), DType::F32) => {
                for (i, &o) in offs.iter().enumerate().filter(|&(i, _)| active(i)) {
                    let a = 4 * (p.offset + o as usize);
                    b[a..a + 4].copy_from_slice(&v[i].to_le_bytes());
                }
            }
            (Data::F32(v), DType::BF16) => {
                for (i, &o) in offs.iter().enumerate().filter(|&(i, _)| active(i)) {
                    let a = 2 * (p.offset + o as usize);
                    b[a..a + 2].copy_from_slice(&bf16::from_f32(v[i]).to_bits().to_le_bytes());
                }
            }
            (Data::F32(v), _) => {
                for (i, &o) in offs.iter().enumerate().filter(|&(i, _)| active(i)) {
                    let a = 2 * (p.offset + o as usize);
                    b[a..a + 2].copy_from_slice(&f16::from_f32(v[i]).to_bits().to_le_bytes());
                }
            }
            (Data::I32(v), _) => {
                for (i, &o) in offs.iter().enumerate().filter(|&(i, _)| active(i)) {
                    let a = 4 * (p.offset + o as usize);
                    b[a..a + 4].copy_from_slice(&v[i].to_le_bytes());
                }
            }
            (Data::Bool(v), _) => {
                for (i, &o) in offs.iter().enumerate().filter(|&(i, _)| active(i)) {
                    b[p.offset + o as usize] = v[i] as u8;
                }
            }
            (Data::Ptr { .. }, _) => unreachable!("write_operands rejects pointer values"),
        }
        Ok(())
    }

    fn atomic(
        &mut self,
        op: AtomicOp,
        ptr: ValueId,
        value: ValueId,
        mask: Option<ValueId>,
        src: &Src,
    ) -> Result<Option<Data>, InterpError> {
        let what = match op {
            AtomicOp::Add => "atomic_add",
            AtomicOp::Max => "atomic_max",
            AtomicOp::Min => "atomic_min",
        };
        let (p, offs, mask, v) = self.write_operands(ptr, value, mask, what, src)?;
        if !matches!(v, Data::F32(_) | Data::I32(_)) {
            return Err(self.malformed(src, format!("{what} of {} values", v.kind())));
        }
        let m = &mut self.mem[p.buf];
        let active = |i: usize| mask.as_ref().is_none_or(|m| m[i]);
        // The old value of the first element (a scalar atomic's result; 0 when masked off).
        let mut was = None;
        match &v {
            Data::F32(v) => {
                was = Some(Data::F32(vec![0.0]));
                for (i, &o) in offs.iter().enumerate().filter(|&(i, _)| active(i)) {
                    let a = p.offset + o as usize;
                    let old = m.read_f32(a);
                    if i == 0 {
                        was = Some(Data::F32(vec![old]));
                    }
                    let new = match op {
                        AtomicOp::Add => round1(p.dtype, old + v[i]),
                        AtomicOp::Max => old.max(v[i]),
                        AtomicOp::Min => old.min(v[i]),
                    };
                    m.write_f32(a, new);
                }
            }
            Data::I32(v) => {
                was = Some(Data::I32(vec![0]));
                for (i, &o) in offs.iter().enumerate().filter(|&(i, _)| active(i)) {
                    let a = p.offset + o as usize;
                    let old = m.read_i32(a);
                    if i == 0 {
                        was = Some(Data::I32(vec![old]));
                    }
                    let new = match op {
                        AtomicOp::Add => old.wrapping_add(v[i]),
                        AtomicOp::Max => old.max(v[i]),
                        AtomicOp::Min => old.min(v[i]),
                    };
                    m.write_i32(a, new);
                }
            }
            _ => {}
        }
        Ok(was)
    }
}
