//! Kernels covering the whole language: each is checked through the IR it produces.
#![allow(clippy::too_many_arguments)]
use dsl_ir::{walk, AtomicOp, BinOp, ConstVal, DType, Kernel, Op, ReduceOp, Stmt, UnaryOp};
use dsl_runtime::prelude::*;

fn ir(json: &str) -> Kernel {
    Kernel::from_json(json).expect("the macro embeds valid IR")
}

/// Every `let` op of the kernel with its value type and source, in program order.
fn lets(k: &Kernel) -> Vec<(&Op, String, &dsl_ir::Src)> {
    let mut out = vec![];
    walk(&k.body, &mut |s| {
        if let Stmt::Let { id, op, src } = s {
            out.push((op, k.ty(*id).to_string(), src));
        }
    });
    out
}

/// The type of the value a `let` binding names.
fn named(k: &Kernel, name: &str) -> String {
    let l = lets(k);
    let found: Vec<_> = l.iter().filter(|(_, _, s)| s.name == name).collect();
    assert_eq!(
        found.len(),
        1,
        "exactly one value is named `{name}`:\n{}",
        k.to_text()
    );
    found[0].1.clone()
}

fn count(k: &Kernel, pred: impl Fn(&Stmt) -> bool) -> usize {
    let mut n = 0;
    walk(&k.body, &mut |s| n += pred(s) as usize);
    n
}

const RMSNORM_LINE: u32 = line!();
#[kernel]
pub fn rmsnorm(
    x: Ptr<bf16>,
    w: Ptr<bf16>,
    y: Ptr<bf16>,
    n_cols: i32,
    eps: f32,
    #[constexpr] BLOCK: usize,
) {
    let row = program_id(0);
    let cols = arange(0, BLOCK);
    let mask = cols < n_cols;
    let x = load(x + row * n_cols + cols, mask, 0.0).to(f32);
    let inv = rsqrt(sum(x * x, 0) / n_cols as f32 + eps);
    let w = load(w + cols, mask, 0.0).to(f32);
    store(y + row * n_cols + cols, (x * inv * w).to(bf16), mask);
}

#[test]
fn rmsnorm_one_pass() {
    let k = ir(rmsnorm::ir_json());
    assert_eq!(k.name, "rmsnorm");
    assert!(k.file.ends_with("kernels.rs"), "{}", k.file);
    assert_eq!(named(&k, "row"), "i32");
    assert_eq!(named(&k, "cols"), "i32[BLOCK]");
    assert_eq!(named(&k, "mask"), "bool[BLOCK]");
    assert_eq!(named(&k, "x"), "f32[BLOCK]");
    assert_eq!(named(&k, "inv"), "f32");
    assert_eq!(named(&k, "w"), "f32[BLOCK]");
    // Source info: line and the expression as written.
    let l = lets(&k);
    let (op, _, src) = l.iter().find(|(_, _, s)| s.name == "inv").unwrap();
    assert!(matches!(op, Op::Unary(UnaryOp::Rsqrt, _)));
    assert_eq!(src.text, "rsqrt(sum(x * x, 0) / n_cols as f32 + eps)");
    let row_line = l.iter().find(|(_, _, s)| s.name == "row").unwrap().2.line;
    assert!(
        row_line > RMSNORM_LINE && row_line < RMSNORM_LINE + 12,
        "{row_line}"
    );
    assert_eq!(src.line, row_line + 4);
    let store_src = k.body.iter().find_map(|s| match s {
        Stmt::Store { src, .. } => Some(src),
        _ => None,
    });
    assert_eq!(
        store_src.unwrap().text,
        "store(y + row * n_cols + cols, (x * inv * w).to(bf16), mask)"
    );
    // Effects: reads x and w, writes y.
    let e = k.effects();
    assert_eq!(e.reads.iter().copied().collect::<Vec<_>>(), vec![0, 1]);
    assert_eq!(e.writes.iter().copied().collect::<Vec<_>>(), vec![2]);
    let s = k.specialize(&[("BLOCK", ConstVal::Int(1024))]).unwrap();
    assert!(s.to_text().contains("f32[1024]"));
}

/// The lesson's RMSNorm for rows wider than the tile: two passes, a carried accumulator.
#[kernel]
fn rmsnorm_looped(
    x: Ptr<bf16>,
    w: Ptr<bf16>,
    y: Ptr<bf16>,
    n_cols: i32,
    eps: f32,
    #[constexpr] BLOCK: usize,
) {
    let row = program_id(0);
    let base = row * n_cols;
    let mut acc = 0.0;
    for off in (0..n_cols).step_by(BLOCK) {
        let cols = off + arange(0, BLOCK);
        let mask = cols < n_cols;
        let xb = load(x + base + cols, mask, 0.0).to(f32);
        acc += sum(xb * xb, 0);
    }
    let inv = rsqrt(acc / n_cols as f32 + eps);
    for off in (0..n_cols).step_by(BLOCK) {
        let cols = off + arange(0, BLOCK);
        let mask = cols < n_cols;
        let xb = load(x + base + cols, mask, 0.0).to(f32);
        let wb = load(w + cols, mask, 0.0).to(f32);
        store(y + base + cols, (xb * inv * wb).to(bf16), mask);
    }
}

#[test]
fn rmsnorm_two_pass_loops() {
    let k = ir(rmsnorm_looped::ir_json());
    assert_eq!(k.vars.len(), 1);
    assert_eq!(k.vars[0].name, "acc");
    assert_eq!(k.vars[0].ty.to_string(), "f32");
    let fors: Vec<_> = k
        .body
        .iter()
        .filter(|s| matches!(s, Stmt::For { .. }))
        .collect();
    assert_eq!(fors.len(), 2);
    let Stmt::For { body, src, .. } = fors[0] else {
        unreachable!()
    };
    assert_eq!(src.text, "for off in (0..n_cols).step_by(BLOCK)");
    // Inside the loop: acc is read (ReadVar) and assigned.
    assert!(body.iter().any(|s| matches!(
        s,
        Stmt::Let {
            op: Op::ReadVar(_),
            ..
        }
    )));
    assert!(body.iter().any(|s| matches!(s, Stmt::Assign { .. })));
    // After the loop, `acc` is read again (the carried value), not the initial literal.
    let after: Vec<_> = k
        .body
        .iter()
        .skip_while(|s| !matches!(s, Stmt::For { .. }))
        .skip(1)
        .collect();
    assert!(
        matches!(
            after[0],
            Stmt::Let {
                op: Op::ReadVar(_),
                ..
            }
        ),
        "{:?}",
        after[0]
    );
    assert_eq!(named(&k, "inv"), "f32");
    assert!(k.specialize(&[("BLOCK", ConstVal::Int(256))]).is_ok());
}

/// A GEMV over 2-D tiles: rows over BM, reduction over BK chunks of K.
#[kernel]
fn gemv(
    w: Ptr<bf16>,
    x: Ptr<bf16>,
    y: Ptr<f32>,
    N: i32,
    K: i32,
    #[constexpr] BM: usize,
    #[constexpr] BK: usize,
) {
    let pid = program_id(0);
    let rows = pid * BM + arange(0, BM);
    let mut acc = zeros([BM], f32);
    for k in (0..K).step_by(BK) {
        let cols = k + arange(0, BK);
        let mask2d = (rows < N).expand_dims(1) & (cols < K).expand_dims(0);
        let wt = load(
            w + rows.expand_dims(1) * K + cols.expand_dims(0),
            mask2d,
            0.0,
        )
        .to(f32);
        let xv = load(x + cols, cols < K, 0.0).to(f32);
        acc += sum(wt * xv.expand_dims(0), 1);
    }
    store(y + rows, acc, rows < N);
}

#[test]
fn gemv_2d_tiles() {
    let k = ir(gemv::ir_json());
    assert_eq!(named(&k, "rows"), "i32[BM]");
    assert_eq!(named(&k, "mask2d"), "bool[BM, BK]");
    assert_eq!(named(&k, "wt"), "f32[BM, BK]");
    assert_eq!(named(&k, "xv"), "f32[BK]");
    assert_eq!(k.vars[0].ty.to_string(), "f32[BM]");
    assert_eq!(
        count(&k, |s| matches!(
            s,
            Stmt::Let {
                op: Op::Load { .. },
                ..
            }
        )),
        2
    );
    let s = k
        .specialize(&[("BM", ConstVal::Int(4)), ("BK", ConstVal::Int(64))])
        .unwrap();
    assert!(s.to_text().contains("bf16[4, 64]"), "{}", s.to_text());
}

/// Every primitive and operator at least once.
#[kernel]
fn everything(
    a: Ptr<f32>,
    b: Ptr<f16>,
    idx: Ptr<i32>,
    out: Ptr<f32>,
    n: i32,
    scale: f32,
    #[constexpr] BLOCK: u32,
    #[constexpr] ROWS: i32,
    #[constexpr] FLAG: bool,
) {
    let pid = program_id(0);
    let np = num_programs(1);
    let offs = pid * BLOCK + arange(0, BLOCK);
    let mask = (offs < n) & !(offs >= n * np);
    let va = load(a + offs, mask, 0.0);
    let vb = load(b + offs, mask).to(f32);
    let vi = load(idx + offs);
    let z = zeros([ROWS, BLOCK], f32);
    let f = full([BLOCK], 1.5, f16);
    let g = full([BLOCK / 2 * 2 + BLOCK % 4 - 1], 0, i32);
    let m = maximum(va, vb) + minimum(va, -vb) * scale;
    let w = where_(va > vb, va, vb);
    let u = exp(m) + exp2(m) + log(m) + log2(m) + sqrt(m) + rsqrt(m) + sigmoid(m) + silu(m);
    let u = u + abs(m) + sin(m) + cos(m) + tanh(m) - w / 2.0;
    let ints = (vi % 3 + vi * 2 - vi / 4) << 1 >> 1;
    let bits = (ints & 255) | (ints ^ 7);
    let eqs = (vi == 1) != (vi <= 2);
    let cmp = where_(eqs | (vi > 3) | (vi < -1), bits, -ints);
    let grid = broadcast_to(expand_dims(u, 0), [ROWS, BLOCK]) + z;
    let r0 = sum(grid, 0) + max(grid, 0) + min(grid, 0);
    let am = argmax(r0, 0) + argmin(r0, 0);
    let chunks = cdiv(n, BLOCK);
    let half = f.to(f32) + u;
    let total = sum(half, 0) + (am + chunks + cmp.sum(0)) as f32;
    if FLAG {
        store(out + pid, total);
    }
    let neg = -2147483648;
    store(idx + pid, neg + vi.max(0));
}

#[test]
fn every_primitive() {
    let k = ir(everything::ir_json());
    assert_eq!(named(&k, "np"), "i32");
    assert_eq!(named(&k, "mask"), "bool[BLOCK]");
    assert_eq!(named(&k, "va"), "f32[BLOCK]");
    assert_eq!(named(&k, "vi"), "i32[BLOCK]");
    assert_eq!(named(&k, "z"), "f32[ROWS, BLOCK]");
    assert_eq!(named(&k, "f"), "f16[BLOCK]");
    assert_eq!(
        named(&k, "g"),
        "i32[((((BLOCK / 2) * 2) + (BLOCK % 4)) - 1)]"
    );
    assert_eq!(named(&k, "m"), "f32[BLOCK]");
    assert_eq!(named(&k, "w"), "f32[BLOCK]");
    assert_eq!(named(&k, "ints"), "i32[BLOCK]");
    assert_eq!(named(&k, "bits"), "i32[BLOCK]");
    assert_eq!(named(&k, "eqs"), "bool[BLOCK]");
    assert_eq!(named(&k, "cmp"), "i32[BLOCK]");
    assert_eq!(named(&k, "grid"), "f32[ROWS, BLOCK]");
    assert_eq!(named(&k, "r0"), "f32[BLOCK]");
    assert_eq!(named(&k, "am"), "i32");
    assert_eq!(named(&k, "chunks"), "i32");
    assert_eq!(named(&k, "total"), "f32");
    assert_eq!(named(&k, "neg"), "i32");
    let ops: Vec<_> = lets(&k).into_iter().map(|(op, _, _)| op.clone()).collect();
    for u in [
        "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sigmoid", "silu", "abs", "sin", "cos",
        "tanh", "neg", "not",
    ] {
        assert!(
            ops.iter()
                .any(|o| matches!(o, Op::Unary(x, _) if x.name() == u)),
            "missing unary {u}"
        );
    }
    for r in [
        ReduceOp::Sum,
        ReduceOp::Max,
        ReduceOp::Min,
        ReduceOp::Argmax,
        ReduceOp::Argmin,
    ] {
        assert!(
            ops.iter()
                .any(|o| matches!(o, Op::Reduce { op, .. } if *op == r)),
            "missing {r:?}"
        );
    }
    use BinOp::*;
    for b in [
        Add, Sub, Mul, Div, Rem, Min, Max, Lt, Le, Gt, Ge, Eq, Ne, And, Or, Xor, Shl, Shr,
    ] {
        assert!(
            ops.iter()
                .any(|o| matches!(o, Op::Binary(x, ..) if *x == b)),
            "missing {b:?}"
        );
    }
    assert!(ops.iter().any(|o| matches!(o, Op::Where(..))));
    assert!(ops.iter().any(|o| matches!(o, Op::ExpandDims(..))));
    assert!(ops.iter().any(|o| matches!(o, Op::NumPrograms(1))));
    assert!(ops
        .iter()
        .any(|o| matches!(o, Op::Lit(dsl_ir::Lit::Int(-2147483648)))));
    assert!(ops
        .iter()
        .any(|o| matches!(o, Op::Lit(dsl_ir::Lit::Int(-1)))));
    assert_eq!(count(&k, |s| matches!(s, Stmt::If { .. })), 1);
    let s = k
        .specialize(&[
            ("BLOCK", ConstVal::Int(128)),
            ("ROWS", ConstVal::Int(2)),
            ("FLAG", ConstVal::Bool(true)),
        ])
        .unwrap();
    assert!(s.to_text().contains("f16[128]"));
}

/// Greedy decode's fused argmax: one int per row.
#[kernel]
fn row_argmax(logits: Ptr<f32>, out: Ptr<i32>, V: i32, #[constexpr] BLOCK: usize) {
    let row = program_id(0);
    let cols = arange(0, BLOCK);
    let v = load(logits + row * V + cols, cols < V, -1e30);
    let best = argmax(v, 0);
    store(out + row, best);
}

#[test]
fn argmax_is_i32() {
    let k = ir(row_argmax::ir_json());
    assert_eq!(named(&k, "best"), "i32");
    assert!(k.specialize(&[("BLOCK", ConstVal::Int(64))]).is_ok());
}

#[kernel]
fn atomics(
    sum_out: Ptr<f32>,
    max_out: Ptr<i32>,
    min_out: Ptr<i32>,
    x: Ptr<f32>,
    n: i32,
    #[constexpr] BLOCK: usize,
) {
    let offs = program_id(0) * BLOCK + arange(0, BLOCK);
    let mask = offs < n;
    let v = load(x + offs, mask, 0.0);
    atomic_add(sum_out, sum(v, 0));
    atomic_add(sum_out + offs, v, mask);
    atomic_max(max_out, argmax(v, 0));
    atomic_min(min_out + offs, offs, mask);
    atomic_max(max_out + offs, 7, mask);
}

#[test]
fn atomics_are_statements() {
    let k = ir(atomics::ir_json());
    let mut ops = vec![];
    walk(&k.body, &mut |s| {
        if let Stmt::Atomic { op, mask, .. } = s {
            ops.push((*op, mask.is_some()));
        }
    });
    use AtomicOp::*;
    assert_eq!(
        ops,
        vec![
            (Add, false),
            (Add, true),
            (Max, false),
            (Min, true),
            (Max, true)
        ]
    );
    let e = k.effects();
    assert_eq!(e.writes.iter().copied().collect::<Vec<_>>(), vec![0, 1, 2]);
    assert!(k.specialize(&[("BLOCK", ConstVal::Int(32))]).is_ok());
}

/// `if` / `else if` / `else` on uniform scalars, with carried `let mut` values.
#[kernel]
fn branches(out: Ptr<f32>, n: i32, t: f32, #[constexpr] MODE: i32, #[constexpr] FAST: bool) {
    let pid = program_id(0);
    let mut v = 0.0;
    let mut count = 0;
    if FAST {
        v = t * 2.0;
    } else if (pid < n) & (MODE == 1) {
        v = t;
        count += 1;
    } else if !(pid >= n) {
        let inner = t + 1.0;
        v = inner;
    } else {
        v -= 1.0;
    }
    {
        let scoped = v * 3.0;
        v = scoped;
    }
    store(out + pid, v + count as f32);
}

#[test]
fn if_else_chains() {
    let k = ir(branches::ir_json());
    assert_eq!(
        k.vars.iter().map(|v| v.ty.to_string()).collect::<Vec<_>>(),
        vec!["f32", "i32"]
    );
    // if FAST {..} else { if .. {..} else { if .. {..} else {..} } }
    let Some(Stmt::If { els, .. }) = k.body.iter().find(|s| matches!(s, Stmt::If { .. })) else {
        panic!()
    };
    let Some(Stmt::If { els: els2, .. }) = els.iter().find(|s| matches!(s, Stmt::If { .. })) else {
        panic!()
    };
    let Some(Stmt::If { els: els3, .. }) = els2.iter().find(|s| matches!(s, Stmt::If { .. }))
    else {
        panic!()
    };
    assert!(els3.iter().any(|s| matches!(s, Stmt::Assign { .. })));
    assert_eq!(count(&k, |s| matches!(s, Stmt::If { .. })), 3);
    assert_eq!(count(&k, |s| matches!(s, Stmt::Assign { .. })), 6);
    assert!(k
        .specialize(&[("MODE", ConstVal::Int(1)), ("FAST", ConstVal::Bool(false))])
        .is_ok());
}

/// A store under a constexpr `if`: once specialised, the branch not taken is no effect.
#[kernel]
fn maybe_copy(x: Ptr<f32>, y: Ptr<f32>, copy: Ptr<f32>, #[constexpr] COPY: bool) {
    let pid = program_id(0);
    let v = load(x + pid);
    if COPY {
        store(copy + pid, v);
    } else {
        store(y + pid, v);
    }
}

#[test]
fn effects_skip_the_branch_a_constexpr_does_not_take() {
    let k = ir(maybe_copy::ir_json());
    let writes = |k: &Kernel| k.effects().writes.into_iter().collect::<Vec<_>>();
    // Unspecialised, either branch may run.
    assert_eq!(writes(&k), vec![1, 2]);
    for (on, want) in [(true, 2), (false, 1)] {
        let s = k.specialize(&[("COPY", ConstVal::Bool(on))]).unwrap();
        assert_eq!(writes(&s), vec![want], "COPY = {on}");
        assert_eq!(s.effects().reads.into_iter().collect::<Vec<_>>(), vec![0]);
    }
}

/// Method sugar (`x.f(args)` ≡ `f(x, args)`), compound assignment, shadowing, nested loops.
#[kernel]
fn sugar(x: Ptr<bf16>, y: Ptr<bf16>, n: i32, #[constexpr] B: usize, #[constexpr] R: usize) {
    let cols = arange(0, B);
    let x = load(x + cols, cols < n, 0.0).to(f32);
    let mut acc = zeros([R, B], f32);
    let mut k = 1;
    for i in 0..R as i32 {
        for j in (i..n).step_by(2) {
            acc += x.expand_dims(0) * j as f32;
            acc -= 1.0;
            acc *= 0.5;
            acc /= 3.0;
            k <<= 1;
            k |= j;
            k ^= 1;
            k &= 255;
            k %= 7;
            k >>= 1;
        }
    }
    let s = acc.sum(0).exp().maximum(x).minimum(2.0);
    let x = s * k as f32;
    store(y + cols, x.to(bf16), cols < n);
}

#[test]
fn method_sugar_and_compound_assignment() {
    let k = ir(sugar::ir_json());
    assert_eq!(named(&k, "s"), "f32[B]");
    assert_eq!(k.vars[0].ty.to_string(), "f32[R, B]");
    assert_eq!(count(&k, |s| matches!(s, Stmt::Assign { .. })), 10);
    assert_eq!(count(&k, |s| matches!(s, Stmt::For { .. })), 2);
    // Shadowed `x`: two loads' results and the final product are three different values.
    let xs: Vec<_> = lets(&k)
        .into_iter()
        .filter(|(_, _, s)| s.name == "x")
        .collect();
    assert_eq!(xs.len(), 2);
    assert!(k
        .specialize(&[("B", ConstVal::Int(16)), ("R", ConstVal::Int(2))])
        .is_ok());
}

#[test]
fn params_and_kinds() {
    let k = ir(everything::ir_json());
    use dsl_ir::{ConstKind, ParamKind::*};
    let kinds: Vec<_> = k.params.iter().map(|p| (p.name.as_str(), p.kind)).collect();
    assert_eq!(
        kinds,
        vec![
            ("a", Ptr(DType::F32)),
            ("b", Ptr(DType::F16)),
            ("idx", Ptr(DType::I32)),
            ("out", Ptr(DType::F32)),
            ("n", Scalar(DType::I32)),
            ("scale", Scalar(DType::F32)),
            ("BLOCK", Constexpr(ConstKind::Int)),
            ("ROWS", Constexpr(ConstKind::Int)),
            ("FLAG", Constexpr(ConstKind::Bool)),
        ]
    );
}

/// The launchers type-check against the runtime API (never called: no device here).
#[allow(dead_code)]
fn launchers_typecheck<
    P: dsl_runtime::AsPtr<bf16>,
    F: dsl_runtime::AsPtr<f32>,
    I: dsl_runtime::AsPtr<i32>,
>(
    dev: &dsl_runtime::Device,
    l: &dsl_runtime::Launch,
    t: &dsl_runtime::Tune,
    p: &P,
    f: &F,
    i: &I,
) -> Result<(), dsl_runtime::Error> {
    rmsnorm::launch(dev, l, p, p, p, 4096, 1e-6, 1024)?;
    rmsnorm::autotune(dev, t, p, p, p, 4096, 1e-6)?;
    row_argmax::launch(dev, l, f, i, 1000, 1024)?;
    branches::launch(dev, l, f, 3, 0.5, 1, true)?;
    let _: &dsl_runtime::KernelDef = &gemv::KERNEL;
    Ok(())
}

/// `prefetch(ptrs[, mask])`: a statement, and not a read (the kernel's effects name what it
/// loads and stores only); the interpreter checks its masked-on pointers stay in their
/// buffer, as a load's, and otherwise does nothing.
#[kernel]
pub fn prefetch_then_copy(x: Ptr<f32>, y: Ptr<f32>, n: i32, #[constexpr] BLOCK: usize) {
    let cols = program_id(0) * BLOCK + arange(0, BLOCK);
    prefetch(x + cols, cols < n);
    prefetch(y);
    store(y + cols, load(x + cols, cols < n, 0.0), cols < n);
}

#[test]
fn prefetch_is_a_hint_the_interpreter_bounds_checks() {
    use dsl_runtime::interp::{self, HostMem, InterpArg, InterpOptions};
    let k = ir(prefetch_then_copy::ir_json());
    let prefetches = count(&k, |s| matches!(s, Stmt::Prefetch { .. }));
    assert_eq!(prefetches, 2, "{}", k.to_text());
    assert!(k.to_text().contains("prefetch %"), "{}", k.to_text());
    let e = k.effects();
    assert_eq!(e.reads.iter().copied().collect::<Vec<_>>(), vec![0]);
    assert_eq!(e.writes.iter().copied().collect::<Vec<_>>(), vec![1]);
    let k = k.specialize(&[("BLOCK", ConstVal::Int(8))]).unwrap();
    let run = |n: i32| {
        let x: Vec<f32> = (0..20).map(|i| i as f32).collect();
        let mut mem = vec![
            HostMem::from_f32s(DType::F32, &x),
            HostMem::from_f32s(DType::F32, &[0.0; 20]),
        ];
        let args = [
            InterpArg::whole(0, &mem),
            InterpArg::whole(1, &mem),
            InterpArg::I32(n),
        ];
        interp::run(&k, [3, 1, 1], &args, &mut mem, &InterpOptions::default())
            .map(|_| mem[1].to_f32s())
    };
    let y = run(20).unwrap();
    assert_eq!(y, (0..20).map(|i| i as f32).collect::<Vec<_>>());
    // n past the buffer: the prefetch is the first access out of bounds.
    let err = run(24).unwrap_err().to_string();
    assert!(err.contains("prefetch out of bounds"), "{err}");
}
