//! Host buffers: typed element access to little-endian bytes, and constructors for tests
//! and for the model's CPU path.
use super::value::round1;
use super::HostMem;
use dsl_ir::DType;
use half::{bf16, f16};

impl HostMem {
    /// A zero-filled buffer of `n` elements.
    pub fn zeros(dtype: DType, n: usize) -> HostMem {
        HostMem {
            dtype,
            bytes: vec![0; n * dtype.size_bytes()],
        }
    }
    /// Elements given as f32, rounded to `dtype` (to nearest even; `as` for i32; `!= 0` for bool).
    pub fn from_f32s(dtype: DType, v: &[f32]) -> HostMem {
        let mut m = HostMem::zeros(dtype, v.len());
        for (i, &x) in v.iter().enumerate() {
            match dtype {
                DType::I32 => m.write_i32(i, x as i32),
                DType::Bool => m.bytes[i] = (x != 0.0) as u8,
                _ => m.write_f32(i, x),
            }
        }
        m
    }
    pub fn from_i32s(v: &[i32]) -> HostMem {
        HostMem {
            dtype: DType::I32,
            bytes: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }
    }
    /// The number of whole elements.
    pub fn len(&self) -> usize {
        self.bytes.len() / self.dtype.size_bytes()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Every element as f32 (exact for every dtype but large i32 values).
    pub fn to_f32s(&self) -> Vec<f32> {
        (0..self.len()).map(|i| self.read_f32(i)).collect()
    }
    /// Every element as i32 (floats through `as`).
    pub fn to_i32s(&self) -> Vec<i32> {
        (0..self.len()).map(|i| self.read_i32(i)).collect()
    }

    /// Element `i` as f32. Panics if `i` is out of range (callers check bounds first).
    #[inline]
    pub fn read_f32(&self, i: usize) -> f32 {
        let b = &self.bytes;
        match self.dtype {
            DType::F32 => f32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]]),
            DType::BF16 => bf16::from_bits(u16::from_le_bytes([b[2 * i], b[2 * i + 1]])).to_f32(),
            DType::F16 => f16::from_bits(u16::from_le_bytes([b[2 * i], b[2 * i + 1]])).to_f32(),
            DType::I32 => self.read_i32(i) as f32,
            DType::Bool => (b[i] != 0) as u8 as f32,
        }
    }
    #[inline]
    pub fn read_i32(&self, i: usize) -> i32 {
        let b = &self.bytes;
        match self.dtype {
            DType::I32 => i32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]]),
            DType::Bool => (b[i] != 0) as i32,
            _ => self.read_f32(i) as i32,
        }
    }
    #[inline]
    pub fn read_bool(&self, i: usize) -> bool {
        match self.dtype {
            DType::Bool => self.bytes[i] != 0,
            DType::I32 => self.read_i32(i) != 0,
            _ => self.read_f32(i) != 0.0,
        }
    }
    /// Writes element `i`, rounding `x` to the buffer's float dtype (to nearest even).
    #[inline]
    pub fn write_f32(&mut self, i: usize, x: f32) {
        match self.dtype {
            DType::F32 => self.bytes[4 * i..4 * i + 4].copy_from_slice(&x.to_le_bytes()),
            DType::BF16 => self.bytes[2 * i..2 * i + 2]
                .copy_from_slice(&bf16::from_f32(x).to_bits().to_le_bytes()),
            DType::F16 => self.bytes[2 * i..2 * i + 2]
                .copy_from_slice(&f16::from_f32(x).to_bits().to_le_bytes()),
            DType::I32 => self.write_i32(i, x as i32),
            DType::Bool => self.bytes[i] = (x != 0.0) as u8,
        }
    }
    #[inline]
    pub fn write_i32(&mut self, i: usize, x: i32) {
        match self.dtype {
            DType::I32 => self.bytes[4 * i..4 * i + 4].copy_from_slice(&x.to_le_bytes()),
            DType::Bool => self.bytes[i] = (x != 0) as u8,
            d => self.write_f32(i, round1(d, x as f32)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_each_dtype() {
        let v = [1.0f32, -2.5, 0.1, 3.0e38];
        let m = HostMem::from_f32s(DType::BF16, &v);
        assert_eq!(m.bytes.len(), 8);
        assert_eq!(m.to_f32s()[2], bf16::from_f32(0.1).to_f32());
        let m = HostMem::from_f32s(DType::F16, &v);
        assert_eq!(m.to_f32s()[3], f32::INFINITY);
        let m = HostMem::from_i32s(&[1, -2, i32::MAX]);
        assert_eq!(m.to_i32s(), vec![1, -2, i32::MAX]);
        assert_eq!(HostMem::from_f32s(DType::F32, &v).to_f32s(), v.to_vec());
    }
}
