//! Every kernel or argument mistake is an `InterpError` that names what went wrong.
mod common;
use common::*;
use dsl_ir::{AtomicOp, DType, Kernel};
use dsl_runtime::interp::{self, ErrorKind, HostMem, InterpArg, InterpError};

fn rms_mem(x_len: usize, n: usize) -> Vec<HostMem> {
    vec![
        HostMem::from_f32s(DType::BF16, &vec![1.0; x_len]),
        HostMem::from_f32s(DType::BF16, &vec![1.0; n]),
        HostMem::zeros(DType::BF16, x_len),
    ]
}

#[test]
fn out_of_bounds_load_names_kernel_line_element_and_program() {
    let (k, line) = rmsnorm(2048);
    // 4 rows of 1025 columns need 4100 elements; the buffer has 4099.
    let mut mem = rms_mem(4099, 1025);
    let args = [
        ptr(0, &mem),
        ptr(1, &mem),
        ptr(2, &mem),
        InterpArg::I32(1025),
        InterpArg::F32(1e-6),
    ];
    let err = run(&k, [4, 1, 1], &args, &mut mem).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "kernel rmsnorm: load out of bounds at line {line} (load(x + row * n_cols + cols, mask, 0.0)): \
             element 4099 of a 4099-element buffer `x`, program (3, 0, 0)"
        )
    );
    assert_eq!(err.kind, ErrorKind::OutOfBounds);
    assert_eq!(err.program, Some([3, 0, 0]));
    assert_eq!(err.line, Some(line));
    // Rows 0..3 ran before the failing program and wrote their output; row 3 wrote nothing.
    let y = mem[2].to_f32s();
    assert!(
        y[..3 * 1025].iter().all(|&v| v == 1.0),
        "rows 0..3 normalise ones to ones"
    );
    assert!(y[3 * 1025..].iter().all(|&v| v == 0.0));
    let s: String = err.into();
    assert!(s.starts_with("kernel rmsnorm"));
}

#[test]
fn the_visible_range_not_the_buffer_bounds_the_access() {
    // The buffer is large enough, but the pointer argument sees only 4099 elements.
    let (k, _) = rmsnorm(2048);
    let mut mem = rms_mem(8000, 1025);
    let args = [
        InterpArg::Ptr {
            buf: 0,
            offset: 100,
            len: 4099,
        },
        ptr(1, &mem),
        ptr(2, &mem),
        InterpArg::I32(1025),
        InterpArg::F32(1e-6),
    ];
    let err = run(&k, [4, 1, 1], &args, &mut mem).unwrap_err();
    assert!(
        err.to_string()
            .contains("element 4099 of a 4099-element buffer `x`"),
        "{err}"
    );
    // With one row fewer, everything is in bounds.
    run(&k, [3, 1, 1], &args, &mut mem).unwrap();
}

/// `out + cols + shift`, 8 lanes, optionally masked to `cols < limit`; a store, a load or
/// an atomic_add.
fn poke(what: &str, shift: i64, limit: Option<i64>) -> (Kernel, u32) {
    let mut k = K::new("poke");
    let out = k.ptr("out", DType::I32);
    let cols = k.arange_n(8);
    let sh = k.int(shift);
    let offs = k.add(cols, sh);
    let p = k.add(out, offs);
    let mask = limit.map(|l| {
        let l = k.int(l);
        k.lt(cols, l)
    });
    let line = k.next_line();
    match what {
        "store" => k.store(p, cols, mask),
        "atomic" => {
            k.atomic(AtomicOp::Add, p, cols, mask);
        }
        _ => {
            let v = k.load(p, mask, None);
            let q = k.add(out, cols);
            k.store(q, v, None);
        }
    }
    (k.finish(&[]), line)
}

fn run_poke(
    what: &str,
    shift: i64,
    limit: Option<i64>,
    len: usize,
) -> (Result<(), InterpError>, Vec<i32>, u32) {
    let (k, line) = poke(what, shift, limit);
    let mut mem = vec![HostMem::from_i32s(&vec![5; len])];
    let args = [ptr(0, &mem)];
    let r = run(&k, [1, 1, 1], &args, &mut mem);
    (r, mem[0].to_i32s(), line)
}

#[test]
fn out_of_bounds_store_writes_nothing() {
    let (r, out, line) = run_poke("store", 0, None, 7);
    let err = r.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("kernel poke: store out of bounds at line {line} (store): element 7 of a 7-element buffer `out`, program (0, 0, 0)")
    );
    assert_eq!(
        out,
        vec![5; 7],
        "no lane may be written when one is out of bounds"
    );
    // Masking the last lane off makes it legal.
    let (r, out, _) = run_poke("store", 0, Some(7), 7);
    r.unwrap();
    assert_eq!(out, vec![0, 1, 2, 3, 4, 5, 6]);
}

#[test]
fn negative_offsets_and_atomics_are_checked() {
    let (r, _, line) = run_poke("load", -1, None, 8);
    let e = r.unwrap_err().to_string();
    assert!(
        e.contains(&format!("load out of bounds at line {line}"))
            && e.contains("element -1 of a 8-element buffer"),
        "{e}"
    );
    let (r, out, _) = run_poke("atomic", 3, None, 8);
    let e = r.unwrap_err().to_string();
    assert!(
        e.contains("atomic_add out of bounds")
            && e.contains("element 8 of a 8-element buffer `out`"),
        "{e}"
    );
    assert_eq!(out, vec![5; 8]);
    let (r, out, _) = run_poke("atomic", 3, Some(5), 8);
    r.unwrap();
    assert_eq!(out, vec![5, 5, 5, 5, 6, 7, 8, 9]);
    // Masked-off lanes neither fault nor read: they get 0.
    let (r, out, _) = run_poke("load", -4, Some(0), 8);
    r.unwrap();
    assert_eq!(out, vec![0; 8]);
}

#[test]
fn argument_mistakes() {
    let (k, _) = rmsnorm(1024);
    let mem = rms_mem(4096, 1024);
    let good = [
        ptr(0, &mem),
        ptr(1, &mem),
        ptr(2, &mem),
        InterpArg::I32(1024),
        InterpArg::F32(1e-6),
    ];
    let check = |args: &[InterpArg], mem: &[HostMem], want: &str| {
        let mut mem = mem.to_vec();
        let err = run(&k, [4, 1, 1], args, &mut mem).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Args, "{err}");
        let s = err.to_string();
        assert!(
            s.starts_with("kernel rmsnorm: ") && s.contains(want),
            "{s}\n  should contain: {want}"
        );
    };
    check(
        &good[..4],
        &mem,
        "takes 5 run-time arguments (x, w, y, n_cols, eps), got 4",
    );
    let mut a = good;
    a[0] = InterpArg::I32(0);
    check(&a, &mem, "argument 0 (`x`) must be a Ptr<bf16>");
    let mut a = good;
    a[4] = InterpArg::I32(0);
    check(&a, &mem, "argument 4 (`eps`) must be an f32 scalar");
    let mut m2 = mem.clone();
    m2[0] = HostMem::zeros(DType::F32, 4096);
    check(
        &good,
        &m2,
        "pointer `x` is Ptr<bf16> but buffer 0 holds f32",
    );
    let mut a = good;
    a[2] = InterpArg::Ptr {
        buf: 2,
        offset: 1,
        len: 4096,
    };
    check(
        &a,
        &mem,
        "pointer `y` reaches elements 1..1+4096 of buffer 2, which has 4096 elements",
    );
    let mut a = good;
    a[1] = InterpArg::Ptr {
        buf: 9,
        offset: 0,
        len: 1,
    };
    check(&a, &mem, "pointer `w` names buffer 9");
    check(
        &good,
        &mem[..2],
        "pointer `y` names buffer 2, but there are 2",
    );
    // The good arguments do run.
    let mut m = mem.clone();
    run(&k, [4, 1, 1], &good, &mut m).unwrap();
    // Grids and program ids.
    let mut m = mem.clone();
    assert!(run(&k, [4, 0, 1], &good, &mut m)
        .unwrap_err()
        .to_string()
        .contains("empty grid"));
    let e = interp::run_program(&k, [4, 0, 0], [4, 1, 1], &good, &mut m).unwrap_err();
    assert!(e.to_string().contains("outside the grid"), "{e}");
}

#[test]
fn loop_step_must_be_positive() {
    let mut k = K::new("stepper");
    let out = k.ptr("out", DType::I32);
    let step = k.scalar("step", DType::I32);
    let zero = k.int(0);
    let ten = k.int(10);
    let acc = k.var("acc", zero);
    let line = k.next_line();
    let i = k.for_(zero, ten, step, "for i in (0..10).step_by(step)");
    let a = k.read(acc);
    let a = k.add(a, i);
    k.assign(acc, a);
    k.end_for();
    let a = k.read(acc);
    k.store(out, a, None);
    let k = k.finish(&[]);
    for (s, want) in [(1, 45), (3, 18), (10, 0), (11, 0)] {
        let mut mem = vec![HostMem::zeros(DType::I32, 1)];
        run(&k, [1, 1, 1], &[ptr(0, &mem), InterpArg::I32(s)], &mut mem).unwrap();
        assert_eq!(mem[0].to_i32s()[0], want, "step {s}");
    }
    for s in [0, -2] {
        let mut mem = vec![HostMem::zeros(DType::I32, 1)];
        let err = run(&k, [1, 1, 1], &[ptr(0, &mem), InterpArg::I32(s)], &mut mem).unwrap_err();
        assert_eq!(err.kind, ErrorKind::BadLoop);
        assert_eq!(
            err.to_string(),
            format!("kernel stepper: loop at line {line} (for i in (0..10).step_by(step)): step {s} must be positive (range 0..10), program (0, 0, 0)")
        );
    }
}

#[test]
fn unspecialised_kernels_are_refused() {
    let mut k = K::new("generic");
    let out = k.ptr("out", DType::I32);
    let (_, blk) = k.constexpr("BLOCK");
    let cols = k.arange(blk);
    let p = k.add(out, cols);
    k.store(p, cols, None);
    let raw = k.b.finish().unwrap();
    let mut mem = vec![HostMem::zeros(DType::I32, 4)];
    let err = run(&raw, [1, 1, 1], &[ptr(0, &mem)], &mut mem).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Malformed);
    assert!(err.to_string().contains("not specialised"), "{err}");
    let k = raw
        .specialize(&[("BLOCK", dsl_ir::ConstVal::Int(4))])
        .unwrap();
    run(&k, [1, 1, 1], &[ptr(0, &mem)], &mut mem).unwrap();
    assert_eq!(mem[0].to_i32s(), vec![0, 1, 2, 3]);
}

/// A pointer held in a `let mut` variable and advanced in a loop.
#[test]
fn pointers_flow_through_variables() {
    let mut k = K::new("walk");
    let x = k.ptr("x", DType::F32);
    let y = k.ptr("y", DType::F32);
    let cols = k.arange_n(4);
    let p0 = k.add(x, cols);
    let pv = k.var("p", p0);
    let zero = k.int(0);
    let three = k.int(3);
    let one = k.int(1);
    let acc0 = k.full(vec![dsl_ir::ConstExpr::Lit(4)], 0.0, DType::F32);
    let acc = k.var("acc", acc0);
    k.for_(zero, three, one, "for _ in 0..3");
    let p = k.read(pv);
    let v = k.load(p, None, None);
    let a = k.read(acc);
    let a = k.add(a, v);
    k.assign(acc, a);
    let four = k.int(4);
    let p2 = k.add(p, four);
    k.assign(pv, p2);
    k.end_for();
    let a = k.read(acc);
    let q = k.add(y, cols);
    k.store(q, a, None);
    let k = k.finish(&[]);
    let xs: Vec<f32> = (0..12).map(|i| i as f32).collect();
    let mut mem = vec![
        HostMem::from_f32s(DType::F32, &xs),
        HostMem::zeros(DType::F32, 4),
    ];
    let args = [ptr(0, &mem), ptr(1, &mem)];
    run(&k, [1, 1, 1], &args, &mut mem).unwrap();
    assert_eq!(mem[1].to_f32s(), vec![12.0, 15.0, 18.0, 21.0]);
    // One more iteration would read past the end.
    let mut mem2 = vec![
        HostMem::from_f32s(DType::F32, &xs[..11]),
        HostMem::zeros(DType::F32, 4),
    ];
    let args = [ptr(0, &mem2), ptr(1, &mem2)];
    let e = run(&k, [1, 1, 1], &args, &mut mem2)
        .unwrap_err()
        .to_string();
    assert!(e.contains("element 11 of a 11-element buffer `x`"), "{e}");
}

/// IR the builder never produces (a hand-edited or corrupted kernel) is an error, not a panic.
#[test]
fn malformed_ir_is_an_error_not_a_panic() {
    let base = {
        let mut k = K::new("bad");
        let out = k.ptr("out", DType::I32);
        let cols = k.arange_n(4);
        let two = k.int(2);
        let v = k.mul(cols, two);
        let p = k.add(out, cols);
        k.store(p, v, None);
        k.finish(&[])
    };
    let run_it = |k: &Kernel| {
        let mut mem = vec![HostMem::zeros(DType::I32, 4)];
        run(k, [1, 1, 1], &[ptr(0, &mem)], &mut mem)
    };
    run_it(&base).unwrap();
    let mut tampered = vec![];
    // A value used before it is defined.
    let mut k = base.clone();
    if let dsl_ir::Stmt::Let {
        op: dsl_ir::Op::Binary(_, a, _),
        ..
    } = &mut k.body[4]
    {
        *a = dsl_ir::ValueId(99);
    }
    tampered.push(k);
    // A value typed with the wrong shape.
    let mut k = base.clone();
    k.values[1].shape = vec![dsl_ir::ConstExpr::Lit(5)];
    tampered.push(k);
    // A value typed with the wrong element type.
    let mut k = base.clone();
    k.values[1].elem = dsl_ir::Elem::Num(DType::F32);
    tampered.push(k);
    // An oversized tile.
    let mut k = base.clone();
    k.values[1].shape = vec![dsl_ir::ConstExpr::Lit(1 << 40)];
    tampered.push(k);
    for (i, k) in tampered.iter().enumerate() {
        let err = run_it(k).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Malformed, "case {i}: {err}");
        assert!(err.to_string().starts_with("kernel bad: "), "{err}");
    }
}
