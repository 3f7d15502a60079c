//! Host element types and their dtypes: bf16 and f16 come from `half`.
use dsl_ir::DType;
pub use half::{bf16, f16};

/// A host type that a device buffer can hold. Buffers are bytes on the device, in the
/// host's own layout: little-endian, as on every GPU and every host CUDA runs on, so a
/// slice goes to the device as it is (one copy, no per-element conversion).
pub trait Element: bytemuck::Pod + Default + Send + Sync + std::fmt::Debug + 'static {
    const DTYPE: DType;
}

const _: () = assert!(
    cfg!(target_endian = "little"),
    "device buffers hold little-endian bytes"
);

impl Element for f32 {
    const DTYPE: DType = DType::F32;
}
impl Element for i32 {
    const DTYPE: DType = DType::I32;
}
impl Element for bf16 {
    const DTYPE: DType = DType::BF16;
}
impl Element for f16 {
    const DTYPE: DType = DType::F16;
}

/// The bytes of `data`, borrowed.
pub fn to_bytes<T: Element>(data: &[T]) -> &[u8] {
    bytemuck::cast_slice(data)
}

/// Elements from bytes (any alignment).
pub fn from_bytes<T: Element>(bytes: &[u8]) -> Vec<T> {
    bytemuck::pod_collect_to_vec(bytes)
}
