//! CUDA graphs of ordinary launches: the baseline a megakernel must beat (no launch
//! overhead per kernel, but still a full drain between kernels).
//!
//! A graph is captured from a stream, and the legacy default stream cannot be captured:
//! [`capturable`] gives a device handle whose launches go to a stream of their own.
use crate::device::{CudaDev, Device, Kind};
use crate::error::{Error, Result};
use cudarc::driver::{sys, CudaGraph};
use std::sync::Arc;

/// The same GPU, launching on a new stream (capturable). Buffers made through it live
/// on that stream.
pub fn capturable(dev: &Device) -> Result<Device> {
    let c = dev
        .cuda_dev()
        .ok_or_else(|| Error::Unavailable("CUDA graphs need a GPU".into()))?;
    let stream = c.ctx.new_stream()?;
    // cudarc makes a stream wait on events recorded by earlier uses of a buffer; a capture
    // may not wait on an event recorded outside it. One stream needs no such tracking: off
    // for buffers made from now on (make the captured launches' buffers through this).
    // SAFETY: only changes how later buffers synchronise across streams; this device
    // launches on a single stream.
    unsafe { c.ctx.disable_event_tracking() };
    Ok(Device(Arc::new(Kind::Cuda(CudaDev {
        ctx: c.ctx.clone(),
        stream,
        arch: c.arch,
        name: c.name.clone(),
        sms: c.sms,
        smem_optin: c.smem_optin,
    }))))
}

/// A captured sequence of launches, replayable.
pub struct Graph(CudaGraph);

impl Graph {
    pub fn launch(&self) -> Result<()> {
        Ok(self.0.launch()?)
    }
}

/// Records every launch `f` makes on `dev` (a [`capturable`] device) into a graph instead
/// of running it. Launch each kernel once before capturing: compiling and loading a
/// module while capturing is not allowed.
pub fn capture(dev: &Device, f: impl FnOnce() -> Result<()>) -> Result<Graph> {
    let c = dev
        .cuda_dev()
        .ok_or_else(|| Error::Unavailable("CUDA graphs need a GPU".into()))?;
    c.stream
        .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)?;
    let r = f();
    let g = c.stream.end_capture(sys::CUgraphInstantiate_flags(0))?;
    r?;
    g.map(Graph)
        .ok_or_else(|| Error::Driver("the capture recorded nothing".into()))
}

/// The GPU's SM count (None for the interpreter): a persistent grid's natural size.
pub fn sm_count(dev: &Device) -> Option<u32> {
    dev.cuda_dev().map(|c| c.sms)
}
