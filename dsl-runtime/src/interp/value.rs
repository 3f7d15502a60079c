//! Run-time values: scalars and dense row-major tiles, one `Vec` per value.
use dsl_ir::DType;
use half::{bf16, f16};

/// The elements of a value. Floats of every dtype are held as `f32` values that are exactly
/// representable in their dtype (bf16 and f16 values were rounded when they were produced).
#[derive(Clone, Debug, PartialEq)]
pub enum Data {
    Bool(Vec<bool>),
    I32(Vec<i32>),
    F32(Vec<f32>),
    /// Pointers: `offs[i]` elements from the start of launch argument `arg`'s visible range.
    Ptr {
        arg: usize,
        offs: Vec<i64>,
    },
}

impl Data {
    pub fn len(&self) -> usize {
        match self {
            Data::Bool(v) => v.len(),
            Data::I32(v) => v.len(),
            Data::F32(v) => v.len(),
            Data::Ptr { offs, .. } => offs.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn kind(&self) -> &'static str {
        match self {
            Data::Bool(_) => "bool",
            Data::I32(_) => "i32",
            Data::F32(_) => "float",
            Data::Ptr { .. } => "pointer",
        }
    }
}

/// A value: its element dtype (the pointee for pointers), its shape and its elements.
/// A scalar has `dims == []` and one element.
#[derive(Clone, Debug, PartialEq)]
pub struct Tile {
    pub dtype: DType,
    pub dims: Vec<usize>,
    pub data: Data,
}

impl Tile {
    pub fn numel(&self) -> usize {
        self.data.len()
    }
    pub fn scalar_i32(v: i32) -> Tile {
        Tile {
            dtype: DType::I32,
            dims: vec![],
            data: Data::I32(vec![v]),
        }
    }
}

/// Rounds an f32 to the nearest value of `d` (ties to even); identity for f32.
#[inline]
pub fn round1(d: DType, x: f32) -> f32 {
    match d {
        DType::BF16 => bf16::from_f32(x).to_f32(),
        DType::F16 => f16::from_f32(x).to_f32(),
        _ => x,
    }
}

/// Rounds every element to `d` in place.
pub fn round_vec(d: DType, v: &mut [f32]) {
    match d {
        DType::BF16 => v.iter_mut().for_each(|x| *x = bf16::from_f32(*x).to_f32()),
        DType::F16 => v.iter_mut().for_each(|x| *x = f16::from_f32(*x).to_f32()),
        _ => {}
    }
}

/// Rounds an f64 straight to `d`, to nearest even, as one rounding: for bf16/f16 the f64
/// is first rounded to f32 *to odd*, which cannot create a false tie (f32 has more than
/// two bits beyond bf16's and f16's precision), then to `d` to nearest even. (`half`'s
/// `from_f64` goes through a plain f32 rounding and so can double-round.)
pub fn round_f64(d: DType, x: f64) -> f32 {
    match d {
        DType::BF16 | DType::F16 => round1(d, f64_to_f32_odd(x)),
        _ => x as f32,
    }
}

/// f64 → f32 rounding to odd: truncate toward zero, and set the last bit if inexact.
fn f64_to_f32_odd(x: f64) -> f32 {
    let t = x as f32;
    if x.is_nan() || t as f64 == x {
        return t;
    }
    let mut bits = t.to_bits();
    if (t as f64).abs() > x.abs() {
        bits -= 1; // one ulp toward zero (also turns ±inf into ±f32::MAX)
    }
    f32::from_bits(bits | 1)
}

/// For each element of the output shape, the index of the source element it repeats
/// (numpy broadcasting: the source is right-aligned and its size-1 dims stretch).
/// `None` if `src` does not broadcast to `out`.
pub fn broadcast_index(src: &[usize], out: &[usize]) -> Option<Vec<usize>> {
    if src.len() > out.len() {
        return None;
    }
    let pad = out.len() - src.len();
    let mut sdims = vec![1usize; pad];
    sdims.extend_from_slice(src);
    for (s, o) in sdims.iter().zip(out) {
        if *s != *o && *s != 1 {
            return None;
        }
    }
    let n: usize = out.iter().product();
    // Source strides, zero on stretched dims.
    let mut strides = vec![0usize; out.len()];
    let mut acc = 1;
    for i in (0..out.len()).rev() {
        strides[i] = if sdims[i] == 1 { 0 } else { acc };
        acc *= sdims[i];
    }
    let mut idx = Vec::with_capacity(n);
    match out.len() {
        0 => idx.push(0),
        1 => idx.extend((0..out[0]).map(|i| i * strides[0])),
        2 => {
            for r in 0..out[0] {
                for c in 0..out[1] {
                    idx.push(r * strides[0] + c * strides[1]);
                }
            }
        }
        _ => {
            // General rank (tiles have rank ≤ 2, but stay total).
            for flat in 0..n {
                let (mut rem, mut s) = (flat, 0);
                for i in (0..out.len()).rev() {
                    s += (rem % out[i]) * strides[i];
                    rem /= out[i];
                }
                idx.push(s);
            }
        }
    }
    Some(idx)
}

fn gather<T: Copy>(src: &[T], idx: &[usize]) -> Vec<T> {
    idx.iter().map(|&i| src[i]).collect()
}

/// Broadcasts `t` to `out` dims; `None` if the shapes do not broadcast.
pub fn broadcast(t: &Tile, out: &[usize]) -> Option<Tile> {
    if t.dims == out {
        return Some(t.clone());
    }
    let n: usize = out.iter().product();
    let data = if t.numel() == 1 {
        // Scalars and all-ones shapes: a fill.
        if !out.is_empty() && broadcast_index(&t.dims, out).is_none() {
            return None;
        }
        match &t.data {
            Data::Bool(v) => Data::Bool(vec![v[0]; n]),
            Data::I32(v) => Data::I32(vec![v[0]; n]),
            Data::F32(v) => Data::F32(vec![v[0]; n]),
            Data::Ptr { arg, offs } => Data::Ptr {
                arg: *arg,
                offs: vec![offs[0]; n],
            },
        }
    } else {
        let idx = broadcast_index(&t.dims, out)?;
        match &t.data {
            Data::Bool(v) => Data::Bool(gather(v, &idx)),
            Data::I32(v) => Data::I32(gather(v, &idx)),
            Data::F32(v) => Data::F32(gather(v, &idx)),
            Data::Ptr { arg, offs } => Data::Ptr {
                arg: *arg,
                offs: gather(offs, &idx),
            },
        }
    };
    Some(Tile {
        dtype: t.dtype,
        dims: out.to_vec(),
        data,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_stretches_size_one_dims() {
        assert_eq!(
            broadcast_index(&[3, 1], &[3, 2]).unwrap(),
            vec![0, 0, 1, 1, 2, 2]
        );
        assert_eq!(
            broadcast_index(&[1, 2], &[3, 2]).unwrap(),
            vec![0, 1, 0, 1, 0, 1]
        );
        assert_eq!(
            broadcast_index(&[2], &[3, 2]).unwrap(),
            vec![0, 1, 0, 1, 0, 1]
        );
        assert!(broadcast_index(&[3], &[3, 2]).is_none());
        let t = Tile {
            dtype: DType::I32,
            dims: vec![],
            data: Data::I32(vec![7]),
        };
        assert_eq!(broadcast(&t, &[2, 2]).unwrap().data, Data::I32(vec![7; 4]));
    }

    #[test]
    fn rounding_is_to_nearest_even() {
        // 1 + 2^-8 is halfway between two bf16 values: ties go to the even one (1.0).
        assert_eq!(round1(DType::BF16, 1.0 + 1.0 / 256.0), 1.0);
        assert_eq!(round1(DType::BF16, 1.0 + 3.0 / 256.0), 1.0 + 4.0 / 256.0);
        assert_eq!(round1(DType::F32, 0.1), 0.1);
        assert_eq!(round1(DType::F16, 70000.0), f32::INFINITY);
    }

    #[test]
    fn f64_rounds_once() {
        // 2^24 + 2^16 + 1: f32 rounds it onto the bf16 midpoint 2^24 + 2^16 (then ties go
        // down to 2^24), but it lies above the midpoint, so bf16 rounds it up.
        assert_eq!(round_f64(DType::BF16, 16_842_753.0), 16_908_288.0);
        assert_eq!(round_f64(DType::BF16, 16_842_752.0), 16_777_216.0);
        assert_eq!(round_f64(DType::BF16, 0.1), bf16::from_f32(0.1).to_f32());
        assert_eq!(round_f64(DType::F16, 2049.0), 2048.0);
        assert_eq!(round_f64(DType::F16, 2051.0), 2052.0);
        assert_eq!(round_f64(DType::BF16, -1e300), f32::NEG_INFINITY);
        assert_eq!(round_f64(DType::F16, 1e-300), 0.0);
        assert!(round_f64(DType::BF16, f64::NAN).is_nan());
        assert_eq!(round_f64(DType::F16, f64::INFINITY), f32::INFINITY);
    }
}
