//! The runtime's errors: each says what went wrong and, where it can, what to do.
use thiserror::Error;

#[derive(Debug, Error)]
pub enum Error {
    /// No usable GPU or CUDA library; the message says which and how to get it.
    #[error("{0}")]
    Unavailable(String),
    /// A launch whose arguments do not fit the kernel's signature.
    #[error("kernel `{kernel}`: {msg}")]
    Launch { kernel: String, msg: String },
    /// The kernel's IR could not be specialised or lowered for these constexprs.
    #[error("{0}")]
    Lower(String),
    /// NVRTC rejected the generated CUDA C; the message quotes the generated lines.
    #[error("{0}")]
    Compile(String),
    /// The interpreter found an error (out-of-bounds access, bad arguments).
    #[error("{0}")]
    Interp(String),
    #[error("CUDA driver error: {0}")]
    Driver(String),
    #[error("{0}")]
    Io(String),
}

impl From<cudarc::driver::DriverError> for Error {
    fn from(e: cudarc::driver::DriverError) -> Self {
        Error::Driver(e.to_string())
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
