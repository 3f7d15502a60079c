//! A copy to the host that does not wait: [`Readback`] is page-locked host memory a
//! buffer is copied into in stream order, read later. A launch queued after the copy runs
//! while the host waits for it, which is how a decode loop keeps the GPU busy while it
//! reads each step's token (one step ahead).
use crate::device::{Buffer, Device, Kind, RawBuf};
use crate::element::{from_bytes, Element};
use crate::error::{Error, Result};
use cudarc::driver::{sys, CudaEvent, PinnedHostSlice};
use std::marker::PhantomData;

/// Host memory for `len` elements of `T`, filled by [`Buffer::copy_to_readback`].
pub struct Readback<T: Element> {
    raw: Slot,
    len: usize,
    _t: PhantomData<T>,
}

enum Slot {
    /// Page-locked, so the copy is asynchronous; the event, recorded behind the copy, says
    /// when it landed. (cudarc records the slice's own event only when a context has
    /// several streams: with one it would not wait at all.)
    Pinned(PinnedHostSlice<u8>, CudaEvent),
    /// The interpreter runs every launch at once: the copy is done when queued.
    Host(Vec<u8>),
}

impl Device {
    /// Host memory for `len` elements that a buffer can be copied into without waiting.
    pub fn readback<T: Element>(&self, len: usize) -> Result<Readback<T>> {
        let bytes = (len * T::DTYPE.size_bytes()).max(1);
        let raw = match &*self.0 {
            // SAFETY: the slice is only read after its copy's event (`PinnedHostSlice::as_slice`).
            Kind::Cuda(c) => Slot::Pinned(
                unsafe { c.ctx.alloc_pinned::<u8>(bytes)? },
                c.ctx
                    .new_event(Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING))?,
            ),
            Kind::Interpreter { .. } => Slot::Host(vec![0; bytes]),
        };
        Ok(Readback {
            raw,
            len,
            _t: PhantomData,
        })
    }
}

impl<T: Element> Buffer<T> {
    /// Queues a copy of the whole buffer into `dst` after the launches queued so far, and
    /// returns at once; [`Readback::get`] waits for it.
    pub fn copy_to_readback(&self, dst: &mut Readback<T>) -> Result<()> {
        if dst.len != self.len() {
            return Err(Error::Launch {
                kernel: "copy".into(),
                msg: format!(
                    "readback of {} elements from a buffer of {}",
                    dst.len,
                    self.len()
                ),
            });
        }
        let n = self.len() * T::DTYPE.size_bytes();
        match (&self.raw, &mut dst.raw) {
            (RawBuf::Cuda(s), Slot::Pinned(p, landed)) => {
                let stream = s.stream();
                stream.memcpy_dtoh(&s.slice(0..n), p)?;
                landed.record(stream)?;
            }
            (RawBuf::Host(h), Slot::Host(v)) => {
                v[..n].copy_from_slice(&crate::device::lock(h).bytes[..n]);
            }
            _ => {
                return Err(Error::Launch {
                    kernel: "copy".into(),
                    msg: "the buffer and the readback belong to different devices".into(),
                })
            }
        }
        Ok(())
    }
}

impl<T: Element> Readback<T> {
    /// The elements the last queued copy brought, once it has landed (waits for it).
    pub fn get(&self) -> Result<Vec<T>> {
        let n = self.len * T::DTYPE.size_bytes();
        Ok(match &self.raw {
            Slot::Pinned(p, landed) => {
                landed.synchronize()?;
                from_bytes(&p.as_slice()?[..n])
            }
            Slot::Host(v) => from_bytes(&v[..n]),
        })
    }
}
