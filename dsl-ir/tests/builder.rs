use dsl_ir::*;

fn src(t: &str) -> Src {
    Src {
        line: 1,
        text: t.into(),
        ..Src::default()
    }
}

/// The lesson's RMSNorm, one pass, built by hand the way the macro builds it.
fn rmsnorm() -> Kernel {
    let mut b = Builder::new("rmsnorm", "test.rs");
    let x = b.param("x", ParamKind::Ptr(DType::BF16)).unwrap();
    let w = b.param("w", ParamKind::Ptr(DType::BF16)).unwrap();
    let y = b.param("y", ParamKind::Ptr(DType::BF16)).unwrap();
    let n = b.param("n_cols", ParamKind::Scalar(DType::I32)).unwrap();
    let eps = b.param("eps", ParamKind::Scalar(DType::F32)).unwrap();
    b.param("BLOCK", ParamKind::Constexpr(ConstKind::Int))
        .unwrap();
    let s = src;
    let row = b.program_id(0, s("row")).unwrap();
    let cols = b
        .arange(
            ConstExpr::Lit(0),
            b.constexpr_int("BLOCK").unwrap(),
            s("cols"),
        )
        .unwrap();
    let nv = b.param_value(n, s("n_cols")).unwrap();
    let mask = b.binary(BinOp::Lt, cols, nv, s("mask")).unwrap();
    let xp = b.param_value(x, s("x")).unwrap();
    let off = b.binary(BinOp::Mul, row, nv, s("row*n")).unwrap();
    let p = b.binary(BinOp::Add, xp, off, s("x+row*n")).unwrap();
    let p = b.binary(BinOp::Add, p, cols, s("..+cols")).unwrap();
    let zero = b.lit_float(0.0, s("0.0")).unwrap();
    let xv = b.load(p, Some(mask), Some(zero), s("load")).unwrap();
    let xf = b.cast(xv, DType::F32, s("to f32")).unwrap();
    let sq = b.binary(BinOp::Mul, xf, xf, s("x*x")).unwrap();
    let ss = b.reduce(ReduceOp::Sum, sq, 0, s("sum")).unwrap();
    let nf = b.cast(nv, DType::F32, s("n as f32")).unwrap();
    let mean = b.binary(BinOp::Div, ss, nf, s("/")).unwrap();
    let e = b.param_value(eps, s("eps")).unwrap();
    let m = b.binary(BinOp::Add, mean, e, s("+eps")).unwrap();
    let inv = b.unary(UnaryOp::Rsqrt, m, s("rsqrt")).unwrap();
    let wp = b.param_value(w, s("w")).unwrap();
    let wp = b.binary(BinOp::Add, wp, cols, s("w+cols")).unwrap();
    let wv = b.load(wp, Some(mask), None, s("load w")).unwrap();
    let wf = b.cast(wv, DType::F32, s("w f32")).unwrap();
    let o = b.binary(BinOp::Mul, xf, inv, s("x*inv")).unwrap();
    let o = b.binary(BinOp::Mul, o, wf, s("*w")).unwrap();
    let ob = b.cast(o, DType::BF16, s("to bf16")).unwrap();
    // The f32 tile cannot be stored through Ptr<bf16> without the cast.
    let yp = b.param_value(y, s("y")).unwrap();
    let yp = b.binary(BinOp::Add, yp, off, s("y+off")).unwrap();
    let yp = b.binary(BinOp::Add, yp, cols, s("+cols")).unwrap();
    let err = b.store(yp, o, Some(mask), s("store f32")).unwrap_err();
    assert!(err.to_string().contains("`.to(bf16)`"), "{err}");
    // The error is about the value stored, so the macro points at it.
    assert_eq!(err.operand(), Operand::Value);
    b.store(yp, ob, Some(mask), s("store")).unwrap();
    b.finish().unwrap()
}

#[test]
fn rmsnorm_types_and_specialises() {
    let k = rmsnorm();
    let json = k.to_json();
    let k2 = Kernel::from_json(&json).unwrap();
    assert_eq!(k, k2);
    let s = k.specialize(&[("BLOCK", ConstVal::Int(1000))]).unwrap();
    let text = s.to_text();
    assert!(text.contains("f32[1000]"), "{text}");
    assert!(k
        .specialize(&[])
        .unwrap_err()
        .contains("`BLOCK` is not bound"));
    assert!(k
        .specialize(&[("BLOCK", ConstVal::Int(0))])
        .unwrap_err()
        .contains("≤ 0"));
    let e = k.effects();
    assert_eq!(e.reads.iter().copied().collect::<Vec<_>>(), vec![0, 1]);
    assert_eq!(e.writes.iter().copied().collect::<Vec<_>>(), vec![2]);
}

#[test]
fn shapes_broadcast_or_fail() {
    let mut b = Builder::new("k", "t.rs");
    b.param("M", ParamKind::Constexpr(ConstKind::Int)).unwrap();
    b.param("N", ParamKind::Constexpr(ConstKind::Int)).unwrap();
    let m = b
        .arange(ConstExpr::Lit(0), b.constexpr_int("M").unwrap(), src("m"))
        .unwrap();
    let n = b
        .arange(ConstExpr::Lit(0), b.constexpr_int("N").unwrap(), src("n"))
        .unwrap();
    let err = b.binary(BinOp::Add, m, n, src("m+n")).unwrap_err();
    assert!(err.to_string().contains("shape mismatch"), "{err}");
    assert_eq!(err.operand(), Operand::Op);
    let mc = b.expand_dims(m, 1, src("m col")).unwrap();
    let nr = b.expand_dims(n, 0, src("n row")).unwrap();
    let grid = b.binary(BinOp::Add, mc, nr, src("grid")).unwrap();
    assert_eq!(shape_str(&b.ty(grid).shape), "[M, N]");
    // [N] against [M, N] broadcasts numpy-style.
    let g2 = b.binary(BinOp::Mul, grid, n, src("g*n")).unwrap();
    assert_eq!(shape_str(&b.ty(g2).shape), "[M, N]");
    let r = b.reduce(ReduceOp::Sum, g2, 1, src("sum")).unwrap();
    assert_eq!(b.ty(r).to_string(), "i32[M]");
    let err = b.reduce(ReduceOp::Sum, g2, 2, src("sum")).unwrap_err();
    assert!(err.to_string().contains("out of range"), "{err}");
    assert_eq!(err.operand(), Operand::Axis);
}

#[test]
fn weak_literals_adopt_the_tile_dtype() {
    let mut b = Builder::new("k", "t.rs");
    let p = b.param("x", ParamKind::Ptr(DType::BF16)).unwrap();
    let pv = b.param_value(p, src("x")).unwrap();
    let x = b.load(pv, None, None, src("load")).unwrap();
    let two = b.lit_float(2.0, src("2.0")).unwrap();
    let y = b.binary(BinOp::Mul, x, two, src("x*2")).unwrap();
    assert_eq!(b.ty(y).to_string(), "bf16");
    let i = b.lit_int(3, src("3")).unwrap();
    let half = b.lit_float(0.5, src("0.5")).unwrap();
    let f = b.binary(BinOp::Add, i, half, src("3+0.5")).unwrap();
    assert_eq!(b.ty(f).to_string(), "f32");
    let f32v = b.cast(x, DType::F32, src("f")).unwrap();
    let mixed = b.binary(BinOp::Add, x, f32v, src("bf16+f32")).unwrap();
    assert_eq!(b.ty(mixed).to_string(), "f32");
    let err = b.unary(UnaryOp::Exp, i, src("exp(3)")).unwrap_err();
    assert!(err.to_string().contains("`.to(f32)`"), "{err}");
}

#[test]
fn loops_and_vars() {
    let mut b = Builder::new("k", "t.rs");
    let z = b.lit_float(0.0, src("0.0")).unwrap();
    let acc = b.decl_var("acc", z, src("let mut acc")).unwrap();
    let (s, e, st) = (
        b.lit_int(0, src("0")).unwrap(),
        b.lit_int(10, src("10")).unwrap(),
        b.lit_int(2, src("2")).unwrap(),
    );
    let iv = b.begin_for(s, e, st, src("for")).unwrap();
    let a = b.read_var(acc, src("acc")).unwrap();
    let ivf = b.cast(iv, DType::F32, src("i as f32")).unwrap();
    let a2 = b.binary(BinOp::Add, a, ivf, src("acc+i")).unwrap();
    b.assign(acc, a2, src("acc = ..")).unwrap();
    b.end_for().unwrap();
    let bad = b.lit_bool(true, src("true")).unwrap();
    assert!(b
        .assign(acc, bad, src("acc = true"))
        .unwrap_err()
        .to_string()
        .contains("cannot assign"));
    let k = b.finish().unwrap();
    assert!(k.to_text().contains("for %"));
}

#[test]
fn non_finite_literals_survive_json() {
    let mut b = Builder::new("k", "t.rs");
    for v in [f64::INFINITY, f64::NEG_INFINITY, -3.5e38, 0.1] {
        b.lit_float(v, src("lit")).unwrap();
    }
    let nan = b.lit_float(f64::NAN, src("nan")).unwrap();
    let k = b.finish().unwrap();
    let back = Kernel::from_json(&k.to_json()).unwrap();
    assert_eq!(back.body[..4], k.body[..4]);
    match &back.body[nan.0 as usize] {
        Stmt::Let {
            op: Op::Lit(Lit::Float(v)),
            ..
        } => assert!(v.is_nan()),
        other => panic!("{other:?}"),
    }
}

/// Each error names the operand at fault, so the macro can point at its token.
#[test]
fn errors_name_the_operand_at_fault() {
    let mut b = Builder::new("k", "t.rs");
    let p = b.param("x", ParamKind::Ptr(DType::F32)).unwrap();
    let q = b.param("y", ParamKind::Ptr(DType::BF16)).unwrap();
    let x = b.param_value(p, src("x")).unwrap();
    let y = b.param_value(q, src("y")).unwrap();
    let n = b
        .arange(ConstExpr::Lit(0), ConstExpr::Lit(8), src("n"))
        .unwrap();
    let m = b
        .arange(ConstExpr::Lit(0), ConstExpr::Lit(4), src("m"))
        .unwrap();
    let xs = b.binary(BinOp::Add, x, n, src("x+n")).unwrap();
    let ys = b.binary(BinOp::Add, y, n, src("y+n")).unwrap();
    let v = b.load(xs, None, None, src("load")).unwrap();
    let zero = b.lit_int(0, src("0")).unwrap();
    let small = b.binary(BinOp::Lt, m, zero, src("m<0")).unwrap();
    let operand = |e: BuildError| e.operand();
    // load: the pointers, the mask, `other`.
    assert_eq!(
        operand(b.load(v, None, None, src("")).unwrap_err()),
        Operand::Ptr
    );
    assert_eq!(
        operand(b.load(xs, Some(small), None, src("")).unwrap_err()),
        Operand::Mask
    );
    assert_eq!(
        operand(b.load(xs, None, Some(m), src("")).unwrap_err()),
        Operand::Other
    );
    // store: the value that needs a cast, the mask; an atomic on bf16: the pointers.
    assert_eq!(
        operand(b.store(ys, v, None, src("")).unwrap_err()),
        Operand::Value
    );
    assert_eq!(
        operand(b.store(xs, v, Some(small), src("")).unwrap_err()),
        Operand::Mask
    );
    let e = b.atomic(AtomicOp::Add, ys, v, None, src("")).unwrap_err();
    assert_eq!(operand(e), Operand::Ptr);
    // where_: the condition, then whichever side is a pointer.
    assert_eq!(
        operand(b.select(v, v, v, src("")).unwrap_err()),
        Operand::Cond
    );
    let c = b.binary(BinOp::Lt, n, zero, src("c")).unwrap();
    assert_eq!(
        operand(b.select(c, v, xs, src("")).unwrap_err()),
        Operand::B
    );
    assert_eq!(
        operand(b.select(c, xs, v, src("")).unwrap_err()),
        Operand::A
    );
    // dot: a 1-D first operand; the accumulator.
    assert_eq!(operand(b.dot(v, v, None, src("")).unwrap_err()), Operand::A);
    // A loop whose end is a tile.
    let e = b.begin_for(zero, n, zero, src("")).unwrap_err();
    assert_eq!(operand(e), Operand::End);
}
