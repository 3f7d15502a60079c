//! A launch's arguments, a kernel's or a megakernel's: what one is ([`Arg`], and the typed
//! [`ptr`] of the named forms), and what every launch does with them: check them against
//! the signature, read the lowering facts they allow, pack them for the driver, and load
//! the compiled function. `kernel_def.rs` and `mega/launch.rs` both go through it.
use crate::device::{AsPtr, CudaDev, PtrArg};
use crate::element::Element;
use crate::error::Result;
use crate::nvrtc;
use cudarc::driver::{CudaFunction, LaunchArgs, PushKernelArg};
use dsl_ir::{DType, ParamKind};

/// One launch argument, in the order of the kernel's run-time parameters.
#[derive(Clone, Copy)]
pub enum Arg<'a> {
    Ptr(PtrArg<'a>),
    I32(i32),
    F32(f32),
}

/// A pointer argument whose element type is checked at compile time: a field of a
/// megakernel's named arguments (`name::Args`), made with [`ptr`].
#[derive(Clone, Copy)]
pub struct TypedPtr<'a, T: Element>(PtrArg<'a>, std::marker::PhantomData<T>);

/// `ptr(&buffer)` or `ptr(&buffer.slice(a..b))`: a [`TypedPtr`] for a named argument.
pub fn ptr<T: Element>(p: &impl AsPtr<T>) -> TypedPtr<'_, T> {
    TypedPtr(p.as_ptr_arg(), std::marker::PhantomData)
}

impl<'a, T: Element> TypedPtr<'a, T> {
    /// As a launch argument.
    pub fn arg(&self) -> Arg<'a> {
        Arg::Ptr(self.0)
    }
}

/// A run-time parameter as a launch sees it: its index among all the parameters
/// (constexprs included), its name and kind.
pub(crate) struct Sig<'a> {
    pub index: usize,
    pub name: &'a str,
    pub kind: ParamKind,
}

/// Argument count, each argument's type, and no empty buffer. The message names the
/// argument (1-based) and its parameter.
pub(crate) fn check(params: &[Sig<'_>], args: &[Arg<'_>]) -> std::result::Result<(), String> {
    if params.len() != args.len() {
        return Err(format!(
            "expects {} arguments, got {}",
            params.len(),
            args.len()
        ));
    }
    for (n, (p, a)) in params.iter().zip(args).enumerate() {
        let ok = match (p.kind, a) {
            (ParamKind::Ptr(d), Arg::Ptr(pa)) => pa.dtype == d,
            (ParamKind::Scalar(DType::F32), Arg::F32(_)) => true,
            (ParamKind::Scalar(d), Arg::I32(_)) => d != DType::F32,
            _ => false,
        };
        if !ok {
            let want = match p.kind {
                ParamKind::Ptr(d) => format!("Ptr<{d}>"),
                ParamKind::Scalar(d) => d.to_string(),
                ParamKind::Constexpr(_) => "constexpr".into(),
            };
            let got = match a {
                Arg::Ptr(pa) => format!("Ptr<{}>", pa.dtype),
                Arg::I32(_) => "i32".into(),
                Arg::F32(_) => "f32".into(),
            };
            return Err(format!(
                "argument {} (`{}`) expects {want}, got {got}",
                n + 1,
                p.name
            ));
        }
        if let Arg::Ptr(pa) = a {
            if pa.len == 0 {
                return Err(format!(
                    "argument {} (`{}`) is an empty buffer",
                    n + 1,
                    p.name
                ));
            }
        }
    }
    Ok(())
}

/// Lowering facts (Triton's specialisation), indexed like all `n_params` parameters: a
/// 16-byte aligned pointer, an i32 divisible by 16 (both allow vector accesses). They
/// change the generated source, so they are part of every compiled function's key.
pub(crate) fn facts(params: &[Sig<'_>], args: &[Arg<'_>], n_params: usize) -> Vec<bool> {
    let mut f = vec![false; n_params];
    for (p, a) in params.iter().zip(args) {
        f[p.index] = match a {
            Arg::Ptr(pa) => pa.device_addr().is_some_and(|x| x % 16 == 0),
            Arg::I32(v) => v % 16 == 0,
            Arg::F32(_) => false,
        };
    }
    f
}

/// The arguments as CUDA kernel parameters, passed by address with their C sizes: 8 bytes
/// for a pointer, 4 for an int or a float.
pub(crate) struct Packed {
    words: Vec<u64>,
    small: Vec<u32>,
    is_ptr: Vec<bool>,
}

impl Packed {
    /// Fails on a host (interpreter) buffer.
    pub fn new(args: &[Arg<'_>]) -> std::result::Result<Packed, String> {
        let mut words = Vec::with_capacity(args.len());
        for a in args {
            words.push(match a {
                Arg::Ptr(p) => p
                    .device_addr()
                    .ok_or("a host buffer was passed to a GPU launch")?,
                Arg::I32(v) => *v as u32 as u64,
                Arg::F32(v) => v.to_bits() as u64,
            });
        }
        Ok(Packed {
            small: words.iter().map(|&w| w as u32).collect(),
            is_ptr: args.iter().map(|a| matches!(a, Arg::Ptr(_))).collect(),
            words,
        })
    }

    /// Pushes every argument, in order, onto a launch.
    pub fn push<'a>(&'a self, b: &mut LaunchArgs<'a>) {
        for (n, &ptr) in self.is_ptr.iter().enumerate() {
            if ptr {
                b.arg(&self.words[n]);
            } else {
                b.arg(&self.small[n]);
            }
        }
    }
}

/// Compiles `code` with NVRTC for the device, loads it, and returns `entry`, allowed
/// `dynamic_smem` bytes of dynamic shared memory (above 48 KiB a function must opt in).
/// `arch`: NVRTC's architecture (the device's, or `sm_90a` for code with `wgmma`).
pub(crate) fn load_function(
    dev: &CudaDev,
    code: &str,
    entry: &str,
    arch: &'static str,
    dynamic_smem: usize,
) -> Result<CudaFunction> {
    let compiled = nvrtc::compile(code, arch, true)?;
    let module = dev
        .ctx
        .load_module(cudarc::nvrtc::Ptx::from_src(compiled.ptx))?;
    let f = module.load_function(entry)?;
    if dynamic_smem > 48 << 10 {
        f.set_attribute(
            cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            dynamic_smem as i32,
        )?;
    }
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{AsPtr, Device};

    fn sigs() -> Vec<Sig<'static>> {
        let s = |index, name, kind| Sig { index, name, kind };
        vec![
            s(0, "x", ParamKind::Ptr(DType::F32)),
            s(2, "n", ParamKind::Scalar(DType::I32)),
            s(3, "eps", ParamKind::Scalar(DType::F32)),
        ]
    }

    #[test]
    fn arguments_are_checked_against_the_signature() {
        let dev = Device::interpreter();
        let (x, h, empty) = (
            dev.upload(&[1f32; 4]).unwrap(),
            dev.upload(&[1u16; 4].map(crate::bf16::from_bits)).unwrap(),
            dev.zeros::<f32>(0).unwrap(),
        );
        let ok = [Arg::Ptr(x.as_ptr_arg()), Arg::I32(64), Arg::F32(1e-6)];
        assert_eq!(check(&sigs(), &ok), Ok(()));
        let err = |args: &[Arg<'_>]| check(&sigs(), args).unwrap_err();
        assert_eq!(err(&ok[..2]), "expects 3 arguments, got 2");
        assert_eq!(
            err(&[Arg::Ptr(h.as_ptr_arg()), Arg::I32(1), Arg::F32(0.0)]),
            "argument 1 (`x`) expects Ptr<f32>, got Ptr<bf16>"
        );
        assert_eq!(
            err(&[ok[0], Arg::F32(1.0), ok[2]]),
            "argument 2 (`n`) expects i32, got f32"
        );
        assert_eq!(
            err(&[ok[0], ok[1], Arg::I32(1)]),
            "argument 3 (`eps`) expects f32, got i32"
        );
        assert_eq!(
            err(&[Arg::Ptr(empty.as_ptr_arg()), ok[1], ok[2]]),
            "argument 1 (`x`) is an empty buffer"
        );
    }

    #[test]
    fn facts_are_indexed_like_every_parameter() {
        let dev = Device::interpreter();
        let x = dev.upload(&[1f32; 4]).unwrap();
        let f = |n: i32| {
            facts(
                &sigs(),
                &[Arg::Ptr(x.as_ptr_arg()), Arg::I32(n), Arg::F32(16.0)],
                5,
            )
        };
        // A host buffer has no device address, so no alignment fact; slot 1 is a constexpr.
        assert_eq!(f(64), [false, false, true, false, false]);
        assert_eq!(f(63), [false; 5]);
        // And a host buffer cannot be packed for the driver.
        let e = Packed::new(&[Arg::Ptr(x.as_ptr_arg())]).err().unwrap();
        assert_eq!(e, "a host buffer was passed to a GPU launch");
    }
}
