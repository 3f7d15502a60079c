//! Where kernels run: a CUDA GPU, or the tile interpreter on the host. Buffers live on
//! the device they were made for and are plain bytes there.
use crate::element::{from_bytes, to_bytes, Element};
use crate::error::{Error, Result};
use crate::interp::HostMem;
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr};
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};
use std::sync::{Arc, Mutex};

/// The environment variable that forces the interpreter, like Triton's TRITON_INTERPRET=1.
pub const INTERPRET_ENV: &str = "TESSERA_INTERPRET";

/// A device handle; cheap to clone.
#[derive(Clone)]
pub struct Device(pub(crate) Arc<Kind>);

pub(crate) enum Kind {
    /// Kernels run through the interpreter; `why` says why no GPU is used, if one was asked for.
    Interpreter {
        why: Option<String>,
    },
    Cuda(CudaDev),
}

pub(crate) struct CudaDev {
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    /// NVRTC's name for the device's architecture, e.g. `sm_90`.
    pub arch: &'static str,
    pub name: String,
    pub sms: u32,
    /// Shared memory one block may have when it asks for it (the opt-in maximum).
    pub smem_optin: usize,
}

impl Device {
    /// The GPU if one is usable and `TESSERA_INTERPRET` is not set, else the interpreter.
    pub fn auto() -> Device {
        if std::env::var(INTERPRET_ENV).is_ok_and(|v| !v.is_empty() && v != "0") {
            return Device(Arc::new(Kind::Interpreter {
                why: Some(format!("{INTERPRET_ENV} is set")),
            }));
        }
        match Device::cuda(0) {
            Ok(d) => d,
            Err(e) => Device(Arc::new(Kind::Interpreter {
                why: Some(e.to_string()),
            })),
        }
    }

    pub fn interpreter() -> Device {
        Device(Arc::new(Kind::Interpreter { why: None }))
    }

    /// GPU `ordinal`. Errors (never panics) when the driver, libnvrtc or the GPU is missing.
    pub fn cuda(ordinal: usize) -> Result<Device> {
        probe_libraries()?;
        let n = CudaContext::device_count()
            .map_err(|e| Error::Unavailable(format!("no CUDA device: {e}")))?;
        if ordinal as i32 >= n {
            return Err(Error::Unavailable(format!(
                "no CUDA device {ordinal}: {n} found"
            )));
        }
        let ctx = CudaContext::new(ordinal)
            .map_err(|e| Error::Unavailable(format!("cannot open CUDA device {ordinal}: {e}")))?;
        let (major, minor) = ctx.compute_capability()?;
        let sms = ctx.attribute(
            cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
        )? as u32;
        let smem_optin = ctx.attribute(
            cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
        )? as usize;
        let name = ctx.name()?;
        let stream = ctx.default_stream();
        Ok(Device(Arc::new(Kind::Cuda(CudaDev {
            ctx,
            stream,
            arch: arch_name(major, minor),
            name,
            sms,
            smem_optin,
        }))))
    }

    pub fn is_cuda(&self) -> bool {
        matches!(*self.0, Kind::Cuda(_))
    }

    pub(crate) fn cuda_dev(&self) -> Option<&CudaDev> {
        match &*self.0 {
            Kind::Cuda(c) => Some(c),
            Kind::Interpreter { .. } => None,
        }
    }

    /// One line for humans: `NVIDIA H100 80GB HBM3 (sm_90, 132 SMs)` or `interpreter (CPU): why`.
    pub fn describe(&self) -> String {
        match &*self.0 {
            Kind::Cuda(c) => format!("{} ({}, {} SMs)", c.name, c.arch, c.sms),
            Kind::Interpreter { why: None } => "interpreter (CPU)".into(),
            Kind::Interpreter { why: Some(w) } => format!("interpreter (CPU; no GPU: {w})"),
        }
    }

    /// The short name used in cache keys and reports: the GPU's name or `interpreter`.
    pub fn name(&self) -> String {
        match &*self.0 {
            Kind::Cuda(c) => c.name.clone(),
            Kind::Interpreter { .. } => "interpreter".into(),
        }
    }

    /// GPU memory `(free, total)` in bytes (`cuMemGetInfo`); None for the interpreter.
    pub fn mem_info(&self) -> Option<Result<(usize, usize)>> {
        self.cuda_dev()
            .map(|c| c.ctx.mem_get_info().map_err(Error::from))
    }

    /// The GPU's streaming multiprocessors; None for the interpreter.
    pub fn sm_count(&self) -> Option<u32> {
        self.cuda_dev().map(|c| c.sms)
    }

    /// NVRTC's name for the GPU's architecture (`sm_90`); None for the interpreter.
    pub fn arch(&self) -> Option<&'static str> {
        self.cuda_dev().map(|c| c.arch)
    }

    pub fn upload<T: Element>(&self, data: &[T]) -> Result<Buffer<T>> {
        self.upload_concat(&[data])
    }

    /// One buffer holding `parts` one after the other, copied from each part in place
    /// (e.g. every layer's weights stacked: no host-side concatenation of gigabytes).
    pub fn upload_concat<T: Element>(&self, parts: &[&[T]]) -> Result<Buffer<T>> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let raw = match &*self.0 {
            Kind::Cuda(c) => {
                let mut dst = c
                    .stream
                    .alloc_zeros::<u8>((len * T::DTYPE.size_bytes()).max(1))?;
                let mut at = 0;
                for p in parts.iter().filter(|p| !p.is_empty()) {
                    let bytes = to_bytes(p);
                    c.stream
                        .memcpy_htod(bytes, &mut dst.slice_mut(at..at + bytes.len()))?;
                    at += bytes.len();
                }
                RawBuf::Cuda(dst)
            }
            Kind::Interpreter { .. } => RawBuf::Host(Arc::new(Mutex::new(HostMem {
                dtype: T::DTYPE,
                bytes: parts
                    .iter()
                    .map(|p| to_bytes(p))
                    .collect::<Vec<_>>()
                    .concat(),
            }))),
        };
        Ok(Buffer {
            raw,
            len,
            _t: PhantomData,
        })
    }

    pub fn zeros<T: Element>(&self, len: usize) -> Result<Buffer<T>> {
        let n = len * T::DTYPE.size_bytes();
        let raw = match &*self.0 {
            Kind::Cuda(c) => RawBuf::Cuda(c.stream.alloc_zeros::<u8>(n.max(1))?),
            Kind::Interpreter { .. } => RawBuf::Host(Arc::new(Mutex::new(HostMem {
                dtype: T::DTYPE,
                bytes: vec![0; n],
            }))),
        };
        Ok(Buffer {
            raw,
            len,
            _t: PhantomData,
        })
    }

    /// Waits for every launch so far (a no-op for the interpreter, which runs synchronously).
    pub fn synchronize(&self) -> Result<()> {
        if let Some(c) = self.cuda_dev() {
            c.stream.synchronize()?;
        }
        Ok(())
    }
}

/// Says which CUDA library is missing, and how to get it, instead of cudarc's panic.
pub fn probe_libraries() -> Result<()> {
    // SAFETY: only tries to dlopen the library by its candidate names.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(Error::Unavailable(
            "the CUDA driver library (libcuda.so) is not installed or not on the loader path: no NVIDIA GPU driver".into(),
        ));
    }
    probe_nvrtc()
}

pub fn probe_nvrtc() -> Result<()> {
    // SAFETY: as above.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(Error::Unavailable(
            "libnvrtc (CUDA 13) was not found: install the CUDA toolkit, or `pip install nvidia-cuda-nvrtc` and add its \
             nvidia/cu13/lib folder to LD_LIBRARY_PATH"
                .into(),
        ));
    }
    Ok(())
}

fn arch_name(major: i32, minor: i32) -> &'static str {
    // NVRTC's option takes a &'static str; the known names avoid leaking one per device.
    match (major, minor) {
        (8, 0) => "sm_80",
        (8, 6) => "sm_86",
        (8, 9) => "sm_89",
        (9, 0) => "sm_90",
        (10, 0) => "sm_100",
        (12, 0) => "sm_120",
        _ => Box::leak(format!("sm_{major}{minor}").into_boxed_str()),
    }
}

pub(crate) enum RawBuf {
    Cuda(CudaSlice<u8>),
    Host(Arc<Mutex<HostMem>>),
}

/// A device buffer of `len` elements of `T`.
pub struct Buffer<T: Element> {
    pub(crate) raw: RawBuf,
    len: usize,
    _t: PhantomData<T>,
}

impl<T: Element> Buffer<T> {
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies the buffer to the host (waits for the launches that write it).
    pub fn to_vec(&self) -> Result<Vec<T>> {
        match &self.raw {
            RawBuf::Cuda(s) => {
                let bytes = s.stream().clone_dtoh(s)?;
                Ok(from_bytes(&bytes[..self.len * T::DTYPE.size_bytes()]))
            }
            RawBuf::Host(h) => Ok(from_bytes(&lock(h).bytes)),
        }
    }

    /// Overwrites the buffer with `data` (same length).
    pub fn copy_from(&mut self, data: &[T]) -> Result<()> {
        if data.len() != self.len {
            return Err(Error::Launch {
                kernel: "copy".into(),
                msg: format!(
                    "copy of {} elements into a buffer of {}",
                    data.len(),
                    self.len
                ),
            });
        }
        let bytes = to_bytes(data);
        match &mut self.raw {
            RawBuf::Cuda(s) => {
                let stream = s.stream().clone();
                stream.memcpy_htod(bytes, &mut s.slice_mut(0..bytes.len()))?;
            }
            RawBuf::Host(h) => lock(h).bytes = bytes.to_vec(),
        }
        Ok(())
    }

    /// A view of elements `range`, to pass as a pointer argument (e.g. one layer's weights).
    pub fn slice(&self, range: impl RangeBounds<usize>) -> BufferView<'_, T> {
        let start = match range.start_bound() {
            Bound::Included(&s) => s,
            Bound::Excluded(&s) => s + 1,
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(&e) => e + 1,
            Bound::Excluded(&e) => e,
            Bound::Unbounded => self.len,
        };
        let end = end.min(self.len);
        BufferView {
            buf: self,
            offset: start.min(end),
            len: end.saturating_sub(start),
        }
    }
}

/// The host buffers of an interpreter launch. Each distinct buffer is taken out of its lock
/// once (arguments may alias: an in-place kernel passes one buffer twice), and put back when
/// this is dropped, also on an error path.
#[derive(Default)]
pub(crate) struct HostBuffers<'a> {
    owners: Vec<&'a Arc<Mutex<HostMem>>>,
    pub mem: Vec<HostMem>,
}

impl<'a> HostBuffers<'a> {
    /// The index in `mem` of `p`'s buffer; `None` for a GPU buffer.
    pub fn index(&mut self, p: &PtrArg<'a>) -> Option<usize> {
        let RawBuf::Host(h) = p.raw else { return None };
        if let Some(i) = self.owners.iter().position(|o| Arc::ptr_eq(o, h)) {
            return Some(i);
        }
        let empty = HostMem {
            dtype: dsl_ir::DType::Bool,
            bytes: vec![],
        };
        self.mem.push(std::mem::replace(&mut *lock(h), empty));
        self.owners.push(h);
        Some(self.owners.len() - 1)
    }
}

impl Drop for HostBuffers<'_> {
    fn drop(&mut self) {
        for (o, m) in self.owners.iter().zip(self.mem.drain(..)) {
            *lock(o) = m;
        }
    }
}

/// A lock on the runtime's shared state (host buffers, compile and load caches). What they
/// hold is swapped or inserted whole, so a lock poisoned by a panicking thread still guards
/// usable values: it is taken as it is, not turned into a second panic.
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A window of a buffer.
pub struct BufferView<'a, T: Element> {
    buf: &'a Buffer<T>,
    offset: usize,
    len: usize,
}

/// A pointer argument: a buffer, an element offset into it, and how many elements it reaches.
#[derive(Clone, Copy)]
pub struct PtrArg<'a> {
    pub(crate) raw: &'a RawBuf,
    pub(crate) dtype: dsl_ir::DType,
    pub(crate) offset: usize,
    pub(crate) len: usize,
}

impl PtrArg<'_> {
    /// The device address (CUDA buffers only).
    pub(crate) fn device_addr(&self) -> Option<u64> {
        match self.raw {
            RawBuf::Cuda(s) => {
                let (p, _sync) = s.device_ptr(s.stream());
                Some(p + (self.offset * self.dtype.size_bytes()) as u64)
            }
            RawBuf::Host(_) => None,
        }
    }
}

/// What a typed pointer parameter accepts: a buffer or a view of one.
pub trait AsPtr<T: Element> {
    fn as_ptr_arg(&self) -> PtrArg<'_>;
}

impl<T: Element> AsPtr<T> for Buffer<T> {
    fn as_ptr_arg(&self) -> PtrArg<'_> {
        PtrArg {
            raw: &self.raw,
            dtype: T::DTYPE,
            offset: 0,
            len: self.len,
        }
    }
}

impl<T: Element> AsPtr<T> for BufferView<'_, T> {
    fn as_ptr_arg(&self) -> PtrArg<'_> {
        PtrArg {
            raw: &self.buf.raw,
            dtype: T::DTYPE,
            offset: self.offset,
            len: self.len,
        }
    }
}
