//! Host element types and their dtypes: bf16 and f16 come from `half`.
use dsl_ir::DType;
pub use half::{bf16, f16};

/// A host type that a device buffer can hold. Buffers are bytes on the device; these
/// conversions are how the host reads and writes them (little-endian, as on every GPU).
pub trait Element: Copy + Default + Send + Sync + std::fmt::Debug + 'static {
    const DTYPE: DType;
    fn write_le(self, out: &mut Vec<u8>);
    fn read_le(bytes: &[u8]) -> Self;
}

macro_rules! element {
    ($t:ty, $d:expr, $n:expr) => {
        impl Element for $t {
            const DTYPE: DType = $d;
            fn write_le(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn read_le(bytes: &[u8]) -> Self {
                let mut b = [0u8; $n];
                b.copy_from_slice(&bytes[..$n]);
                <$t>::from_le_bytes(b)
            }
        }
    };
}
element!(f32, DType::F32, 4);
element!(i32, DType::I32, 4);
element!(bf16, DType::BF16, 2);
element!(f16, DType::F16, 2);

pub fn to_bytes<T: Element>(data: &[T]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() * T::DTYPE.size_bytes());
    for &x in data {
        x.write_le(&mut out);
    }
    out
}

pub fn from_bytes<T: Element>(bytes: &[u8]) -> Vec<T> {
    bytes
        .chunks_exact(T::DTYPE.size_bytes())
        .map(T::read_le)
        .collect()
}
