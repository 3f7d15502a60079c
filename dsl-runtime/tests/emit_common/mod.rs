//! Kernels built by hand with `dsl_ir::Builder` (the way the macro builds them), shared by
//! the emitter's tests.
#![allow(dead_code)]
use dsl_ir::*;

// ---- a small builder front end, so kernels read almost like the DSL ----------------------

pub struct K {
    pub b: Builder,
    line: u32,
    text: String,
}

impl K {
    pub fn new(name: &str) -> K {
        K {
            b: Builder::new(name, "tests/emit_nvrtc.rs"),
            line: 0,
            text: String::new(),
        }
    }
    /// Subsequent ops come from source line `line` reading `text`.
    pub fn at(&mut self, line: u32, text: &str) -> &mut K {
        self.line = line;
        self.text = text.into();
        self
    }
    pub fn src(&self, name: &str) -> Src {
        Src {
            line: self.line,
            text: self.text.clone(),
            name: name.into(),
            ..Src::default()
        }
    }
    pub fn ptr(&mut self, name: &str, d: DType) -> ValueId {
        let i = self.b.param(name, ParamKind::Ptr(d)).unwrap();
        self.b.param_value(i, self.src("")).unwrap()
    }
    pub fn scalar(&mut self, name: &str, d: DType) -> ValueId {
        let i = self.b.param(name, ParamKind::Scalar(d)).unwrap();
        self.b.param_value(i, self.src("")).unwrap()
    }
    pub fn constexpr(&mut self, name: &str) -> ConstExpr {
        self.b
            .param(name, ParamKind::Constexpr(ConstKind::Int))
            .unwrap();
        self.b.constexpr_int(name).unwrap()
    }
    /// `offs = pid * BLOCK + arange(0, BLOCK)` and `mask = offs < n`: a 1-D program's tile.
    pub fn block_offsets(&mut self, block: ConstExpr, n: ValueId) -> (ValueId, ValueId) {
        let pid = self.pid(0, "pid");
        let bl = self.b.const_expr(block.clone(), self.src("")).unwrap();
        let base = self.mul(pid, bl);
        let ar = self.arange(block, "");
        let offs = self.bin(BinOp::Add, base, ar, "offs");
        let mask = self.bin(BinOp::Lt, offs, n, "mask");
        (offs, mask)
    }
    pub fn pid(&mut self, axis: i64, name: &str) -> ValueId {
        self.b.program_id(axis, self.src(name)).unwrap()
    }
    pub fn arange(&mut self, n: ConstExpr, name: &str) -> ValueId {
        self.b.arange(ConstExpr::Lit(0), n, self.src(name)).unwrap()
    }
    pub fn int(&mut self, v: i64) -> ValueId {
        self.b.lit_int(v, self.src("")).unwrap()
    }
    pub fn float(&mut self, v: f64) -> ValueId {
        self.b.lit_float(v, self.src("")).unwrap()
    }
    pub fn bin(&mut self, op: BinOp, a: ValueId, c: ValueId, name: &str) -> ValueId {
        self.b.binary(op, a, c, self.src(name)).unwrap()
    }
    pub fn add(&mut self, a: ValueId, c: ValueId) -> ValueId {
        self.bin(BinOp::Add, a, c, "")
    }
    pub fn mul(&mut self, a: ValueId, c: ValueId) -> ValueId {
        self.bin(BinOp::Mul, a, c, "")
    }
    pub fn un(&mut self, op: UnaryOp, x: ValueId, name: &str) -> ValueId {
        self.b.unary(op, x, self.src(name)).unwrap()
    }
    pub fn cast(&mut self, x: ValueId, d: DType, name: &str) -> ValueId {
        self.b.cast(x, d, self.src(name)).unwrap()
    }
    pub fn load(
        &mut self,
        p: ValueId,
        mask: Option<ValueId>,
        other: Option<f64>,
        name: &str,
    ) -> ValueId {
        let o = other.map(|v| self.float(v));
        self.b.load(p, mask, o, self.src(name)).unwrap()
    }
    pub fn store(&mut self, p: ValueId, v: ValueId, mask: Option<ValueId>) {
        self.b.store(p, v, mask, self.src("")).unwrap()
    }
    pub fn reduce(&mut self, op: ReduceOp, x: ValueId, axis: i64, name: &str) -> ValueId {
        self.b.reduce(op, x, axis, self.src(name)).unwrap()
    }
    pub fn expand(&mut self, x: ValueId, axis: i64) -> ValueId {
        self.b.expand_dims(x, axis, self.src("")).unwrap()
    }
    pub fn select(&mut self, c: ValueId, a: ValueId, x: ValueId, name: &str) -> ValueId {
        self.b.select(c, a, x, self.src(name)).unwrap()
    }
    pub fn finish(self, binds: &[(&str, i64)]) -> Kernel {
        let k = self.b.finish().unwrap();
        let b: Vec<(&str, ConstVal)> = binds.iter().map(|(n, v)| (*n, ConstVal::Int(*v))).collect();
        k.specialize(&b).unwrap()
    }
}

// ---- kernels -----------------------------------------------------------------------------

pub fn vector_add(d: DType) -> K {
    let mut k = K::new("vector_add");
    let x = k.ptr("x", d);
    let y = k.ptr("y", d);
    let out = k.ptr("out", d);
    let n = k.scalar("n", DType::I32);
    let block = k.constexpr("BLOCK");
    k.at(3, "let pid = program_id(0);");
    let pid = k.pid(0, "pid");
    k.at(4, "let offs = pid * BLOCK + arange(0, BLOCK);");
    let bl = k.b.const_expr(block.clone(), k.src("")).unwrap();
    let base = k.mul(pid, bl);
    let ar = k.arange(block, "");
    let offs = k.bin(BinOp::Add, base, ar, "offs");
    k.at(5, "let mask = offs.lt(n);");
    let mask = k.bin(BinOp::Lt, offs, n, "mask");
    k.at(6, "let a = load(x + offs, mask, 0.0);");
    let xp = k.add(x, offs);
    let a = k.load(xp, Some(mask), Some(0.0), "a");
    k.at(7, "let b = load(y + offs, mask, 0.0);");
    let yp = k.add(y, offs);
    let bv = k.load(yp, Some(mask), Some(0.0), "b");
    k.at(8, "store(out + offs, a + b, mask);");
    let s = k.add(a, bv);
    let op = k.add(out, offs);
    k.store(op, s, Some(mask));
    k
}

/// One-pass RMSNorm (the DESIGN.md example).
pub fn rmsnorm() -> K {
    let mut k = K::new("rmsnorm");
    let x = k.ptr("x", DType::BF16);
    let w = k.ptr("w", DType::BF16);
    let y = k.ptr("y", DType::BF16);
    let n = k.scalar("n_cols", DType::I32);
    let eps = k.scalar("eps", DType::F32);
    let block = k.constexpr("BLOCK");
    k.at(3, "let row = program_id(0);");
    let row = k.pid(0, "row");
    k.at(4, "let cols = arange(0, BLOCK);");
    let cols = k.arange(block, "cols");
    k.at(5, "let mask = cols.lt(n_cols);");
    let mask = k.bin(BinOp::Lt, cols, n, "mask");
    k.at(
        6,
        "let x = load(x + row * n_cols + cols, mask, 0.0).to(f32);",
    );
    let off = k.mul(row, n);
    let p = k.add(x, off);
    let p = k.add(p, cols);
    let xv = k.load(p, Some(mask), Some(0.0), "");
    let xf = k.cast(xv, DType::F32, "x");
    k.at(7, "let inv = rsqrt(sum(x * x, 0) / n_cols as f32 + eps);");
    let sq = k.mul(xf, xf);
    let ss = k.reduce(ReduceOp::Sum, sq, 0, "");
    let nf = k.cast(n, DType::F32, "");
    let mean = k.bin(BinOp::Div, ss, nf, "");
    let m = k.add(mean, eps);
    let inv = k.un(UnaryOp::Rsqrt, m, "inv");
    k.at(8, "let w = load(w + cols, mask, 0.0).to(f32);");
    let wp = k.add(w, cols);
    let wv = k.load(wp, Some(mask), Some(0.0), "");
    let wf = k.cast(wv, DType::F32, "w");
    k.at(
        9,
        "store(y + row * n_cols + cols, (x * inv * w).to(bf16), mask);",
    );
    let o = k.mul(xf, inv);
    let o = k.mul(o, wf);
    let ob = k.cast(o, DType::BF16, "");
    let yp = k.add(y, off);
    let yp = k.add(yp, cols);
    k.store(yp, ob, Some(mask));
    k
}

/// Two-pass RMSNorm over a long row in BLOCK chunks (the seed's streaming version).
pub fn rmsnorm_two_pass() -> K {
    let mut k = K::new("rmsnorm_two_pass");
    let x = k.ptr("x", DType::BF16);
    let w = k.ptr("w", DType::BF16);
    let y = k.ptr("y", DType::BF16);
    let d = k.scalar("d", DType::I32);
    let eps = k.scalar("eps", DType::F32);
    let block = k.constexpr("BLOCK");
    k.at(2, "let row = program_id(0);");
    let row = k.pid(0, "row");
    k.at(3, "let cols = arange(0, BLOCK);");
    let cols = k.arange(block.clone(), "cols");
    k.at(4, "let mut sumsq = 0.0;");
    let z = k.float(0.0);
    let sumsq = k.b.decl_var("sumsq", z, k.src("")).unwrap();
    k.at(5, "for off in (0..d).step_by(BLOCK) {");
    let zero = k.int(0);
    let st = k.b.const_expr(block.clone(), k.src("")).unwrap();
    let off =
        k.b.begin_for(
            zero,
            d,
            st,
            Src {
                name: "off".into(),
                ..k.src("")
            },
        )
        .unwrap();
    k.at(6, "let idx = off + cols; let mask = idx.lt(d);");
    let idx = k.bin(BinOp::Add, off, cols, "idx");
    let mask = k.bin(BinOp::Lt, idx, d, "mask");
    k.at(7, "let xb = load(x + row * d + idx, mask, 0.0).to(f32);");
    let ro = k.mul(row, d);
    let p = k.add(x, ro);
    let p = k.add(p, idx);
    let xv = k.load(p, Some(mask), Some(0.0), "");
    let xb = k.cast(xv, DType::F32, "xb");
    k.at(8, "sumsq += sum(xb * xb, 0);");
    let sq = k.mul(xb, xb);
    let s = k.reduce(ReduceOp::Sum, sq, 0, "");
    let cur = k.b.read_var(sumsq, k.src("")).unwrap();
    let nv = k.add(cur, s);
    k.b.assign(sumsq, nv, k.src("")).unwrap();
    k.b.end_for().unwrap();
    k.at(10, "let inv = rsqrt(sumsq / d as f32 + eps);");
    let ss = k.b.read_var(sumsq, k.src("")).unwrap();
    let df = k.cast(d, DType::F32, "");
    let mean = k.bin(BinOp::Div, ss, df, "");
    let m = k.add(mean, eps);
    let inv = k.un(UnaryOp::Rsqrt, m, "inv");
    k.at(11, "for off in (0..d).step_by(BLOCK) {");
    let zero = k.int(0);
    let st = k.b.const_expr(block, k.src("")).unwrap();
    let off =
        k.b.begin_for(
            zero,
            d,
            st,
            Src {
                name: "off".into(),
                ..k.src("")
            },
        )
        .unwrap();
    k.at(12, "let idx = off + cols; let mask = idx.lt(d);");
    let idx = k.bin(BinOp::Add, off, cols, "idx");
    let mask = k.bin(BinOp::Lt, idx, d, "mask");
    k.at(13, "let xb = load(x + row * d + idx, mask, 0.0).to(f32);");
    let ro = k.mul(row, d);
    let p = k.add(x, ro);
    let p = k.add(p, idx);
    let xv = k.load(p, Some(mask), Some(0.0), "");
    let xb = k.cast(xv, DType::F32, "xb");
    k.at(14, "let wb = load(w + idx, mask, 0.0).to(f32);");
    let wp = k.add(w, idx);
    let wv = k.load(wp, Some(mask), Some(0.0), "");
    let wb = k.cast(wv, DType::F32, "wb");
    k.at(
        15,
        "store(y + row * d + idx, (xb * inv * wb).to(bf16), mask);",
    );
    let o = k.mul(xb, inv);
    let o = k.mul(o, wb);
    let ob = k.cast(o, DType::BF16, "");
    let yp = k.add(y, ro);
    let yp = k.add(yp, idx);
    k.store(yp, ob, Some(mask));
    k.b.end_for().unwrap();
    k
}

/// Residual add + RMSNorm: h = x + r (stored back to r), y = rmsnorm(h) * w.
pub fn add_rmsnorm() -> K {
    let mut k = K::new("add_rmsnorm");
    let x = k.ptr("x", DType::BF16);
    let r = k.ptr("res", DType::BF16);
    let w = k.ptr("w", DType::BF16);
    let y = k.ptr("y", DType::BF16);
    let n = k.scalar("n", DType::I32);
    let eps = k.scalar("eps", DType::F32);
    let block = k.constexpr("BLOCK");
    k.at(
        2,
        "let row = program_id(0); let cols = arange(0, BLOCK); let mask = cols.lt(n);",
    );
    let row = k.pid(0, "row");
    let cols = k.arange(block, "cols");
    let mask = k.bin(BinOp::Lt, cols, n, "mask");
    let off = k.mul(row, n);
    k.at(
        3,
        "let h = load(x + row*n + cols, mask, 0.0) + load(res + row*n + cols, mask, 0.0);",
    );
    let xp = k.add(x, off);
    let xp = k.add(xp, cols);
    let rp = k.add(r, off);
    let rp = k.add(rp, cols);
    let a = k.load(xp, Some(mask), Some(0.0), "");
    let bb = k.load(rp, Some(mask), Some(0.0), "");
    let h = k.bin(BinOp::Add, a, bb, "h");
    k.at(4, "store(res + row*n + cols, h, mask);");
    k.store(rp, h, Some(mask));
    k.at(
        5,
        "let hf = h.to(f32); let inv = rsqrt(sum(hf*hf, 0) / n as f32 + eps);",
    );
    let hf = k.cast(h, DType::F32, "hf");
    let sq = k.mul(hf, hf);
    let ss = k.reduce(ReduceOp::Sum, sq, 0, "");
    let nf = k.cast(n, DType::F32, "");
    let mean = k.bin(BinOp::Div, ss, nf, "");
    let m = k.add(mean, eps);
    let inv = k.un(UnaryOp::Rsqrt, m, "inv");
    k.at(
        6,
        "store(y + row*n + cols, (hf * inv * load(w + cols, mask, 0.0).to(f32)).to(bf16), mask);",
    );
    let wp = k.add(w, cols);
    let wv = k.load(wp, Some(mask), Some(0.0), "");
    let wf = k.cast(wv, DType::F32, "");
    let o = k.mul(hf, inv);
    let o = k.mul(o, wf);
    let ob = k.cast(o, DType::BF16, "");
    let yp = k.add(y, off);
    let yp = k.add(yp, cols);
    k.store(yp, ob, Some(mask));
    k
}

/// Row softmax: y = exp(x - max(x)) / sum(...).
pub fn softmax() -> K {
    let mut k = K::new("softmax");
    let x = k.ptr("x", DType::F32);
    let y = k.ptr("y", DType::F32);
    let n = k.scalar("n", DType::I32);
    let block = k.constexpr("BLOCK");
    k.at(
        2,
        "let row = program_id(0); let cols = arange(0, BLOCK); let mask = cols.lt(n);",
    );
    let row = k.pid(0, "row");
    let cols = k.arange(block, "cols");
    let mask = k.bin(BinOp::Lt, cols, n, "mask");
    let off = k.mul(row, n);
    k.at(3, "let x = load(x + row * n + cols, mask, -inf);");
    let xp = k.add(x, off);
    let xp = k.add(xp, cols);
    let xv = k.load(xp, Some(mask), Some(f64::NEG_INFINITY), "x");
    k.at(4, "let e = exp(x - max(x, 0));");
    let mx = k.reduce(ReduceOp::Max, xv, 0, "");
    let d = k.bin(BinOp::Sub, xv, mx, "");
    let e = k.un(UnaryOp::Exp, d, "e");
    k.at(
        5,
        "let e = where_(mask, e, 0.0); store(y + row*n + cols, e / sum(e, 0), mask);",
    );
    let z = k.float(0.0);
    let e = k.select(mask, e, z, "e");
    let s = k.reduce(ReduceOp::Sum, e, 0, "");
    let q = k.bin(BinOp::Div, e, s, "");
    let yp = k.add(y, off);
    let yp = k.add(yp, cols);
    k.store(yp, q, Some(mask));
    k
}

/// GEMV y[M] = W[M, K] . x[K]: tile [BM, BK], K loop, f32 accumulator, sum over axis 1.
pub fn gemv(wd: DType) -> K {
    let mut k = K::new("gemv");
    let w = k.ptr("w", wd);
    let x = k.ptr("x", DType::BF16);
    let y = k.ptr("y", DType::BF16);
    let m = k.scalar("m", DType::I32);
    let kk = k.scalar("k", DType::I32);
    let bm = k.constexpr("BM");
    let bk = k.constexpr("BK");
    k.at(2, "let rows = program_id(0) * BM + arange(0, BM);");
    let pid = k.pid(0, "pid");
    let bmv = k.b.const_expr(bm.clone(), k.src("")).unwrap();
    let base = k.mul(pid, bmv);
    let ar = k.arange(bm.clone(), "");
    let rows = k.bin(BinOp::Add, base, ar, "rows");
    k.at(3, "let cols = arange(0, BK);");
    let cols = k.arange(bk.clone(), "cols");
    k.at(4, "let mut acc = zeros([BM, BK], f32);");
    let z = k.float(0.0);
    let zt =
        k.b.full(vec![bm.clone(), bk.clone()], z, DType::F32, k.src(""))
            .unwrap();
    let acc = k.b.decl_var("acc", zt, k.src("")).unwrap();
    k.at(5, "for k0 in (0..k).step_by(BK) {");
    let zero = k.int(0);
    let st = k.b.const_expr(bk, k.src("")).unwrap();
    let k0 =
        k.b.begin_for(
            zero,
            kk,
            st,
            Src {
                name: "k0".into(),
                ..k.src("")
            },
        )
        .unwrap();
    k.at(6, "let kc = k0 + cols; let kmask = kc.lt(k);");
    let kc = k.bin(BinOp::Add, k0, cols, "kc");
    let kmask = k.bin(BinOp::Lt, kc, kk, "kmask");
    k.at(7, "let xk = load(x + kc, kmask, 0.0).to(f32);");
    let xp = k.add(x, kc);
    let xv = k.load(xp, Some(kmask), Some(0.0), "");
    let xk = k.cast(xv, DType::F32, "xk");
    k.at(8, "let wt = load(w + rows[:, None] * k + kc[None, :], rows[:, None].lt(m) & kmask[None, :], 0.0).to(f32);");
    let r2 = k.expand(rows, 1);
    let rk = k.mul(r2, kk);
    let kc2 = k.expand(kc, 0);
    let offs = k.add(rk, kc2);
    let wp = k.add(w, offs);
    let rm = k.bin(BinOp::Lt, r2, m, "");
    let km2 = k.expand(kmask, 0);
    let wm = k.bin(BinOp::And, rm, km2, "wmask");
    let wv = k.load(wp, Some(wm), Some(0.0), "");
    let wt = k.cast(wv, DType::F32, "wt");
    k.at(9, "acc += wt * xk[None, :];");
    let x2 = k.expand(xk, 0);
    let prod = k.mul(wt, x2);
    let cur = k.b.read_var(acc, k.src("")).unwrap();
    let nv = k.add(cur, prod);
    k.b.assign(acc, nv, k.src("")).unwrap();
    k.b.end_for().unwrap();
    k.at(11, "store(y + rows, sum(acc, 1).to(bf16), rows.lt(m));");
    let a = k.b.read_var(acc, k.src("")).unwrap();
    let s = k.reduce(ReduceOp::Sum, a, 1, "");
    let sb = k.cast(s, DType::BF16, "");
    let yp = k.add(y, rows);
    let ymask = k.bin(BinOp::Lt, rows, m, "");
    k.store(yp, sb, Some(ymask));
    k
}

/// Fused argmax over a row (greedy sampling): one i32 per program.
pub fn argmax(op: ReduceOp) -> K {
    let mut k = K::new("argmax");
    let x = k.ptr("logits", DType::BF16);
    let out = k.ptr("out", DType::I32);
    let n = k.scalar("n", DType::I32);
    let block = k.constexpr("BLOCK");
    k.at(
        2,
        "let cols = arange(0, BLOCK); let v = load(logits + pid*n + cols, cols.lt(n), -inf);",
    );
    let pid = k.pid(0, "pid");
    let cols = k.arange(block, "cols");
    let mask = k.bin(BinOp::Lt, cols, n, "mask");
    let off = k.mul(pid, n);
    let p = k.add(x, off);
    let p = k.add(p, cols);
    let v = k.load(p, Some(mask), Some(f64::NEG_INFINITY), "v");
    k.at(3, "store(out + pid, argmax(v, 0));");
    let mut am = k.reduce(op, v, 0, "best");
    if matches!(op, ReduceOp::Max | ReduceOp::Min) {
        am = k.cast(am, DType::I32, "");
    }
    let op = k.add(out, pid);
    k.store(op, am, None);
    k
}

/// Atomics: a histogram (i32 add), a global max (f32) and a sum (f32), masked.
pub fn atomics() -> K {
    let mut k = K::new("atomics");
    let x = k.ptr("x", DType::F32);
    let hist = k.ptr("hist", DType::I32);
    let gmax = k.ptr("gmax", DType::F32);
    let gsum = k.ptr("gsum", DType::F32);
    let imin = k.ptr("imin", DType::I32);
    let n = k.scalar("n", DType::I32);
    let block = k.constexpr("BLOCK");
    k.at(
        2,
        "let offs = pid * BLOCK + arange(0, BLOCK); let mask = offs.lt(n);",
    );
    let (offs, mask) = k.block_offsets(block, n);
    k.at(3, "let v = load(x + offs, mask, 0.0);");
    let xp = k.add(x, offs);
    let v = k.load(xp, Some(mask), Some(0.0), "v");
    k.at(4, "atomic_add(hist + (v.to(i32) & 15), 1, mask);");
    let vi = k.cast(v, DType::I32, "");
    let fifteen = k.int(15);
    let bucket = k.bin(BinOp::And, vi, fifteen, "bucket");
    let hp = k.add(hist, bucket);
    let one = k.int(1);
    let ones =
        k.b.broadcast_to(one, &k.b.ty(bucket).shape.clone(), k.src(""))
            .unwrap();
    k.b.atomic(AtomicOp::Add, hp, ones, Some(mask), k.src(""))
        .unwrap();
    k.at(5, "atomic_max(gmax, max(v, 0)); atomic_add(gsum, sum(v, 0)); atomic_min(imin + pid, v.to(i32), mask)");
    let mx = k.reduce(ReduceOp::Max, v, 0, "");
    k.b.atomic(AtomicOp::Max, gmax, mx, None, k.src(""))
        .unwrap();
    let s = k.reduce(ReduceOp::Sum, v, 0, "");
    k.b.atomic(AtomicOp::Add, gsum, s, None, k.src("")).unwrap();
    let ip = k.add(imin, offs);
    k.b.atomic(AtomicOp::Min, ip, vi, Some(mask), k.src(""))
        .unwrap();
    k
}

/// `atomic_add(res + offs, load(x + offs, mask), mask)` over f32: contiguous adds, the form
/// `EmitOptions::vector_atomics` vectorises.
pub fn atomic_accumulate() -> K {
    let mut k = K::new("atomic_accumulate");
    let x = k.ptr("x", DType::F32);
    let res = k.ptr("res", DType::F32);
    let n = k.scalar("n", DType::I32);
    let block = k.constexpr("BLOCK");
    k.at(
        2,
        "let offs = pid * BLOCK + arange(0, BLOCK); let mask = offs < n;",
    );
    let (offs, mask) = k.block_offsets(block, n);
    k.at(
        3,
        "atomic_add(res + offs, load(x + offs, mask, 0.0), mask);",
    );
    let xp = k.add(x, offs);
    let v = k.load(xp, Some(mask), Some(0.0), "v");
    let rp = k.add(res, offs);
    k.b.atomic(AtomicOp::Add, rp, v, Some(mask), k.src(""))
        .unwrap();
    k
}

/// Casts between every dtype pair, where_, integer ops, transcendental functions.
pub fn casts_and_ops() -> K {
    let mut k = K::new("casts");
    let xb = k.ptr("xb", DType::BF16);
    let xh = k.ptr("xh", DType::F16);
    let xi = k.ptr("xi", DType::I32);
    let ob = k.ptr("ob", DType::BF16);
    let oh = k.ptr("oh", DType::F16);
    let oi = k.ptr("oi", DType::I32);
    let of = k.ptr("of", DType::F32);
    let block = k.constexpr("BLOCK");
    k.at(2, "let c = arange(0, BLOCK);");
    let c = k.arange(block, "c");
    k.at(
        3,
        "let b = load(xb + c); let h = load(xh + c); let i = load(xi + c);",
    );
    let bp = k.add(xb, c);
    let b = k.load(bp, None, None, "b");
    let hp = k.add(xh, c);
    let h = k.load(hp, None, None, "h");
    let ip = k.add(xi, c);
    let i = k.load(ip, None, None, "i");
    k.at(
        4,
        "let s = silu(b) * sigmoid(b) + exp(b) - tanh(b); (bf16 math)",
    );
    let s1 = k.un(UnaryOp::Silu, b, "");
    let s2 = k.un(UnaryOp::Sigmoid, b, "");
    let s3 = k.un(UnaryOp::Exp, b, "");
    let s4 = k.un(UnaryOp::Tanh, b, "");
    let t = k.mul(s1, s2);
    let t = k.add(t, s3);
    let s = k.bin(BinOp::Sub, t, s4, "s");
    k.at(5, "store(ob + c, where_(i.gt(0), s, h.to(bf16)));");
    let zero = k.int(0);
    let gt = k.bin(BinOp::Gt, i, zero, "");
    let hb = k.cast(h, DType::BF16, "");
    let sel = k.select(gt, s, hb, "");
    let op = k.add(ob, c);
    k.store(op, sel, None);
    k.at(
        6,
        "store(oh + c, (b.to(f16) * 2.0 + i.to(f16)).abs().sqrt());",
    );
    let bh = k.cast(b, DType::F16, "");
    let two = k.float(2.0);
    let t = k.mul(bh, two);
    let ih = k.cast(i, DType::F16, "");
    let t = k.add(t, ih);
    let t = k.un(UnaryOp::Abs, t, "");
    let t = k.un(UnaryOp::Sqrt, t, "");
    let op = k.add(oh, c);
    k.store(op, t, None);
    k.at(
        7,
        "store(oi + c, (b.to(i32) << 2) % 7 - (h.to(i32) / 3) ^ !i.min(c));",
    );
    let bi = k.cast(b, DType::I32, "");
    let two = k.int(2);
    let sh = k.bin(BinOp::Shl, bi, two, "");
    let seven = k.int(7);
    let r = k.bin(BinOp::Rem, sh, seven, "");
    let hi = k.cast(h, DType::I32, "");
    let three = k.int(3);
    let dv = k.bin(BinOp::Div, hi, three, "");
    let r = k.bin(BinOp::Sub, r, dv, "");
    let mn = k.bin(BinOp::Min, i, c, "");
    let nt = k.un(UnaryOp::Not, mn, "");
    let r = k.bin(BinOp::Xor, r, nt, "");
    let op = k.add(oi, c);
    k.store(op, r, None);
    k.at(
        8,
        "store(of + c, i.to(f32) + log2(b.to(f32).max(1.0)) + (c.lt(3) | i.eq(2)).to(f32));",
    );
    let if32 = k.cast(i, DType::F32, "");
    let bf = k.cast(b, DType::F32, "");
    let onef = k.float(1.0);
    let mx = k.bin(BinOp::Max, bf, onef, "");
    let lg = k.un(UnaryOp::Log2, mx, "");
    let t = k.add(if32, lg);
    let three = k.int(3);
    let l3 = k.bin(BinOp::Lt, c, three, "");
    let two = k.int(2);
    let e2 = k.bin(BinOp::Eq, i, two, "");
    let o = k.bin(BinOp::Or, l3, e2, "");
    let of32 = k.cast(o, DType::F32, "");
    let t = k.add(t, of32);
    let op = k.add(of, c);
    k.store(op, t, None);
    k
}

/// 2-D softmax over rows of a [BM, BN] tile (reduction result broadcast back), plus a
/// column max (reduction over axis 0).
pub fn softmax_2d() -> K {
    let mut k = K::new("softmax_2d");
    let x = k.ptr("x", DType::F32);
    let y = k.ptr("y", DType::F32);
    let cmax = k.ptr("cmax", DType::F32);
    let carg = k.ptr("carg", DType::I32);
    let n = k.scalar("n", DType::I32);
    let bm = k.constexpr("BM");
    let bn = k.constexpr("BN");
    k.at(2, "let rows = arange(0, BM); let cols = arange(0, BN);");
    let rows = k.arange(bm, "rows");
    let cols = k.arange(bn, "cols");
    k.at(
        3,
        "let offs = rows[:, None] * n + cols[None, :]; let mask = cols[None, :].lt(n);",
    );
    let r2 = k.expand(rows, 1);
    let c2 = k.expand(cols, 0);
    let rn = k.mul(r2, n);
    let offs = k.bin(BinOp::Add, rn, c2, "offs");
    let cm = k.bin(BinOp::Lt, c2, n, "");
    let shape = k.b.ty(offs).shape.clone();
    let mask = k.b.broadcast_to(cm, &shape, k.src("mask")).unwrap();
    k.at(4, "let t = load(x + offs, mask, -inf);");
    let xp = k.add(x, offs);
    let t = k.load(xp, Some(mask), Some(f64::NEG_INFINITY), "t");
    k.at(5, "let e = exp(t - max(t, 1)[:, None]);");
    let mx = k.reduce(ReduceOp::Max, t, 1, "");
    let mx2 = k.expand(mx, 1);
    let d = k.bin(BinOp::Sub, t, mx2, "");
    let e = k.un(UnaryOp::Exp, d, "e");
    k.at(6, "store(y + offs, e / sum(e, 1)[:, None], mask);");
    let s = k.reduce(ReduceOp::Sum, e, 1, "");
    let s2 = k.expand(s, 1);
    let q = k.bin(BinOp::Div, e, s2, "");
    let yp = k.add(y, offs);
    k.store(yp, q, Some(mask));
    k.at(
        7,
        "store(cmax + cols, max(t, 0), cols.lt(n)); store(carg + cols, argmax(t, 0), cols.lt(n));",
    );
    let c0 = k.reduce(ReduceOp::Max, t, 0, "col_max");
    let cp = k.add(cmax, cols);
    let cmask = k.bin(BinOp::Lt, cols, n, "");
    k.store(cp, c0, Some(cmask));
    let a0 = k.reduce(ReduceOp::Argmax, t, 0, "col_arg");
    let ap = k.add(carg, cols);
    k.store(ap, a0, Some(cmask));
    k
}

/// A 1-D tile broadcast along rows of a 2-D tile, with an `if` on a scalar and a scalar
/// load/store.
pub fn broadcast_if() -> K {
    let mut k = K::new("broadcast_if");
    let x = k.ptr("x", DType::F32);
    let y = k.ptr("y", DType::F32);
    let flag = k.ptr("flag", DType::I32);
    let bm = k.constexpr("BM");
    let bn = k.constexpr("BN");
    k.at(2, "let f = load(flag + pid);");
    let pid = k.pid(0, "pid");
    let fp = k.add(flag, pid);
    let f = k.load(fp, None, None, "f");
    k.at(3, "let v = load(x + arange(0, BN)) * 2.0;");
    let cols = k.arange(bn, "cols");
    let xp = k.add(x, cols);
    let v = k.load(xp, None, None, "");
    let two = k.float(2.0);
    let v = k.mul(v, two);
    k.at(4, "if f > 0 {");
    let zero = k.int(0);
    let c = k.bin(BinOp::Gt, f, zero, "");
    k.b.begin_if(c, k.src("")).unwrap();
    k.at(
        5,
        "store(y + rows[:, None] * BN + cols[None, :], v[None, :] + rows[:, None].to(f32));",
    );
    let rows = k.arange(bm, "rows");
    let r2 = k.expand(rows, 1);
    let bnv =
        k.b.const_expr(ConstExpr::Param("BN".into()), k.src(""))
            .unwrap();
    let rn = k.mul(r2, bnv);
    let c2 = k.expand(cols, 0);
    let offs = k.add(rn, c2);
    let yp = k.add(y, offs);
    let v2 = k.expand(v, 0);
    let rf = k.cast(r2, DType::F32, "");
    let val = k.add(v2, rf);
    k.store(yp, val, None);
    k.b.begin_else().unwrap();
    k.at(7, "store(flag + pid, f + 1);");
    let one = k.int(1);
    let f1 = k.add(f, one);
    k.store(fp, f1, None);
    k.b.end_if().unwrap();
    k
}
