//! Test helpers: a terse kernel builder over `dsl_ir::Builder`, a seeded RNG, and launch
//! shorthands for the interpreter.
#![allow(dead_code)]
use dsl_ir::Kernel;
use dsl_ir::*;
use dsl_runtime::interp::{self, HostMem, InterpArg, InterpError, InterpOptions};

/// Builds a kernel one line at a time: every op gets the next source line and its text.
pub struct K {
    pub b: Builder,
    line: u32,
}

pub type V = ValueId;

impl K {
    pub fn new(name: &str) -> K {
        K {
            b: Builder::new(name, "tests/interp.rs"),
            line: 0,
        }
    }
    pub fn src(&mut self, text: &str) -> Src {
        self.line += 1;
        Src {
            line: self.line,
            text: text.into(),
            ..Src::default()
        }
    }
    /// The line the next op gets.
    pub fn next_line(&self) -> u32 {
        self.line + 1
    }
    pub fn ptr(&mut self, name: &str, d: DType) -> V {
        let i = self.b.param(name, ParamKind::Ptr(d)).unwrap();
        let s = self.src(name);
        self.b.param_value(i, s).unwrap()
    }
    pub fn scalar(&mut self, name: &str, d: DType) -> V {
        let i = self.b.param(name, ParamKind::Scalar(d)).unwrap();
        let s = self.src(name);
        self.b.param_value(i, s).unwrap()
    }
    /// Declares an int constexpr; returns its value (weak i32 scalar) and its dim expression.
    pub fn constexpr(&mut self, name: &str) -> (V, ConstExpr) {
        let i = self
            .b
            .param(name, ParamKind::Constexpr(ConstKind::Int))
            .unwrap();
        let s = self.src(name);
        (
            self.b.param_value(i, s).unwrap(),
            ConstExpr::Param(name.into()),
        )
    }
    pub fn pid(&mut self, axis: i64) -> V {
        let s = self.src("program_id");
        self.b.program_id(axis, s).unwrap()
    }
    pub fn nprog(&mut self, axis: i64) -> V {
        let s = self.src("num_programs");
        self.b.num_programs(axis, s).unwrap()
    }
    pub fn arange(&mut self, n: ConstExpr) -> V {
        let s = self.src("arange");
        self.b.arange(ConstExpr::Lit(0), n, s).unwrap()
    }
    pub fn arange_n(&mut self, n: i64) -> V {
        self.arange(ConstExpr::Lit(n))
    }
    pub fn int(&mut self, v: i64) -> V {
        let s = self.src(&v.to_string());
        self.b.lit_int(v, s).unwrap()
    }
    pub fn float(&mut self, v: f64) -> V {
        let s = self.src(&format!("{v:?}"));
        self.b.lit_float(v, s).unwrap()
    }
    pub fn bool(&mut self, v: bool) -> V {
        let s = self.src(&v.to_string());
        self.b.lit_bool(v, s).unwrap()
    }
    pub fn bin(&mut self, op: BinOp, a: V, c: V) -> V {
        let s = self.src(op.symbol());
        self.b.binary(op, a, c, s).unwrap()
    }
    pub fn add(&mut self, a: V, c: V) -> V {
        self.bin(BinOp::Add, a, c)
    }
    pub fn sub(&mut self, a: V, c: V) -> V {
        self.bin(BinOp::Sub, a, c)
    }
    pub fn mul(&mut self, a: V, c: V) -> V {
        self.bin(BinOp::Mul, a, c)
    }
    pub fn div(&mut self, a: V, c: V) -> V {
        self.bin(BinOp::Div, a, c)
    }
    pub fn lt(&mut self, a: V, c: V) -> V {
        self.bin(BinOp::Lt, a, c)
    }
    pub fn and(&mut self, a: V, c: V) -> V {
        self.bin(BinOp::And, a, c)
    }
    pub fn un(&mut self, op: UnaryOp, x: V) -> V {
        let s = self.src(op.name());
        self.b.unary(op, x, s).unwrap()
    }
    pub fn cast(&mut self, x: V, d: DType) -> V {
        let s = self.src(&format!("to({d})"));
        self.b.cast(x, d, s).unwrap()
    }
    pub fn where_(&mut self, c: V, a: V, e: V) -> V {
        let s = self.src("where_");
        self.b.select(c, a, e, s).unwrap()
    }
    pub fn expand(&mut self, x: V, axis: i64) -> V {
        let s = self.src("expand_dims");
        self.b.expand_dims(x, axis, s).unwrap()
    }
    pub fn full(&mut self, shape: Vec<ConstExpr>, v: f64, d: DType) -> V {
        let f = self.float(v);
        let s = self.src("full");
        self.b.full(shape, f, d, s).unwrap()
    }
    pub fn reduce(&mut self, op: ReduceOp, x: V, axis: i64) -> V {
        let s = self.src(op.name());
        self.b.reduce(op, x, axis, s).unwrap()
    }
    /// `load(p, mask, other)`; the source text is `text`.
    pub fn load_t(&mut self, p: V, mask: Option<V>, other: Option<V>, text: &str) -> V {
        let s = self.src(text);
        self.b.load(p, mask, other, s).unwrap()
    }
    pub fn load(&mut self, p: V, mask: Option<V>, other: Option<V>) -> V {
        self.load_t(p, mask, other, "load")
    }
    pub fn store(&mut self, p: V, v: V, mask: Option<V>) {
        let s = self.src("store");
        self.b.store(p, v, mask, s).unwrap()
    }
    /// The old value, for a scalar pointer.
    pub fn atomic(&mut self, op: AtomicOp, p: V, v: V, mask: Option<V>) -> Option<V> {
        let s = self.src("atomic");
        self.b.atomic(op, p, v, mask, s).unwrap()
    }
    pub fn var(&mut self, name: &str, init: V) -> VarId {
        let s = self.src(&format!("let mut {name}"));
        self.b.decl_var(name, init, s).unwrap()
    }
    pub fn read(&mut self, v: VarId) -> V {
        let s = self.src("read");
        self.b.read_var(v, s).unwrap()
    }
    pub fn assign(&mut self, var: VarId, v: V) {
        let s = self.src("assign");
        self.b.assign(var, v, s).unwrap()
    }
    pub fn for_(&mut self, start: V, end: V, step: V, text: &str) -> V {
        let s = self.src(text);
        self.b.begin_for(start, end, step, s).unwrap()
    }
    pub fn end_for(&mut self) {
        self.b.end_for().unwrap()
    }
    pub fn finish(self, binds: &[(&str, i64)]) -> Kernel {
        let k = self.b.finish().unwrap();
        let binds: Vec<(&str, ConstVal)> =
            binds.iter().map(|(n, v)| (*n, ConstVal::Int(*v))).collect();
        k.specialize(&binds).unwrap()
    }
}

/// The lesson's one-pass RMSNorm (bf16 in and out, f32 math). Returns the kernel and the
/// source line of the `x` load.
pub fn rmsnorm(block: i64) -> (Kernel, u32) {
    let mut k = K::new("rmsnorm");
    let x = k.ptr("x", DType::BF16);
    let w = k.ptr("w", DType::BF16);
    let y = k.ptr("y", DType::BF16);
    let n = k.scalar("n_cols", DType::I32);
    let eps = k.scalar("eps", DType::F32);
    let (_, blk) = k.constexpr("BLOCK");
    let row = k.pid(0);
    let cols = k.arange(blk);
    let mask = k.lt(cols, n);
    let off = k.mul(row, n);
    let xp = k.add(x, off);
    let xp = k.add(xp, cols);
    let zero = k.float(0.0);
    let line = k.next_line();
    let xv = k.load_t(
        xp,
        Some(mask),
        Some(zero),
        "load(x + row * n_cols + cols, mask, 0.0)",
    );
    let xf = k.cast(xv, DType::F32);
    let sq = k.mul(xf, xf);
    let ss = k.reduce(ReduceOp::Sum, sq, 0);
    let nf = k.cast(n, DType::F32);
    let mean = k.div(ss, nf);
    let m = k.add(mean, eps);
    let inv = k.un(UnaryOp::Rsqrt, m);
    let wp = k.add(w, cols);
    let wv = k.load(wp, Some(mask), None);
    let wf = k.cast(wv, DType::F32);
    let o = k.mul(xf, inv);
    let o = k.mul(o, wf);
    let ob = k.cast(o, DType::BF16);
    let yp = k.add(y, off);
    let yp = k.add(yp, cols);
    k.store(yp, ob, Some(mask));
    (k.finish(&[("BLOCK", block)]), line)
}

/// A seeded splitmix64 RNG. The seed comes from TESSERA_SEED or the clock and is printed
/// (the harness shows it when a test fails).
pub struct Rng(u64);

impl Rng {
    pub fn new(test: &str) -> Rng {
        let seed = std::env::var("TESSERA_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
            });
        eprintln!("{test}: seed {seed} (rerun with TESSERA_SEED={seed})");
        Rng(seed)
    }
    pub fn u64(&mut self) -> u64 {
        interp::splitmix64(&mut self.0)
    }
    /// Uniform in [lo, hi).
    pub fn f32(&mut self, lo: f32, hi: f32) -> f32 {
        let u = (self.u64() >> 40) as f32 / (1u64 << 24) as f32;
        lo + (hi - lo) * u
    }
    pub fn i32(&mut self, lo: i32, hi: i32) -> i32 {
        lo + (self.u64() % (hi as i64 - lo as i64) as u64) as i32
    }
    pub fn vec_f32(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| self.f32(lo, hi)).collect()
    }
}

pub fn bf(x: f32) -> f32 {
    half::bf16::from_f32(x).to_f32()
}

pub fn round_to(d: DType, x: f32) -> f32 {
    match d {
        DType::BF16 => bf(x),
        DType::F16 => half::f16::from_f32(x).to_f32(),
        _ => x,
    }
}

pub fn ptr(buf: usize, mem: &[HostMem]) -> InterpArg {
    InterpArg::whole(buf, mem)
}

pub fn run(
    k: &Kernel,
    grid: [u32; 3],
    args: &[InterpArg],
    mem: &mut [HostMem],
) -> Result<(), InterpError> {
    interp::run(k, grid, args, mem, &InterpOptions::default())
}

pub fn cdiv(a: usize, b: usize) -> u32 {
    a.div_ceil(b) as u32
}

/// Asserts two float slices are bitwise equal (NaN equal to NaN), naming the first difference.
pub fn assert_bits_eq(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
            "{what}: element {i}: got {g}, want {w}"
        );
    }
}
