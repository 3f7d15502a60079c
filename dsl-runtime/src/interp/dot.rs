//! `dot` and `trans`: the tile matrix product and the transpose.
//!
//! `dot(a, b, acc)` for `a: [M, K]`, `b: [K, N]` (bf16, f16 or f32, one dtype) and
//! `acc: f32[M, N]` is, for every (i, j), the f32 sequence
//!
//! ```text
//!   c = acc[i, j]                      (0.0 without acc)
//!   for k in 0..K (ascending):  c = fma(a[i, k], b[k, j], c)   (one f32 rounding per step)
//! ```
//!
//! For bf16 and f16 operands the product is exact in f32, so each step is `c + a * b`
//! rounded once; the FMA fallback of the CUDA backend computes exactly this sequence (bit
//! for bit, also in the g++ emulation). Tensor cores (`mma.sync`) add the products of a
//! k-step in another order and with other internal rounding: GPU results on that path
//! match this specification within a stated tolerance (docs/LANGUAGE.md), not bit for bit.
use super::value::Data;

/// `acc + a·b` as row-major f32 `[m, n]`; `a` is `[m, k]`, `b` is `[k, n]`.
pub fn dot(
    a: &Data,
    b: &Data,
    acc: Option<&Data>,
    (m, k, n): (usize, usize, usize),
) -> Result<Data, String> {
    let (Data::F32(a), Data::F32(b)) = (a, b) else {
        return Err("dot of non-float tiles".into());
    };
    if a.len() != m * k || b.len() != k * n {
        return Err(format!(
            "dot of {} and {} elements for [{m}, {k}] · [{k}, {n}]",
            a.len(),
            b.len()
        ));
    }
    let mut c = match acc {
        None => vec![0.0f32; m * n],
        Some(Data::F32(c)) if c.len() == m * n => c.clone(),
        Some(_) => return Err(format!("dot accumulator is not f32[{m}, {n}]")),
    };
    for i in 0..m {
        let row = &a[i * k..(i + 1) * k];
        for j in 0..n {
            let mut s = c[i * n + j];
            for (kk, &x) in row.iter().enumerate() {
                s = x.mul_add(b[kk * n + j], s);
            }
            c[i * n + j] = s;
        }
    }
    Ok(Data::F32(c))
}

/// The transpose of a row-major `[m, n]` tile.
pub fn trans(x: &Data, (m, n): (usize, usize)) -> Result<Data, String> {
    fn t<T: Copy>(v: &[T], m: usize, n: usize) -> Vec<T> {
        (0..n * m).map(|o| v[(o % m) * n + o / m]).collect()
    }
    if x.len() != m * n {
        return Err(format!("trans of {} elements as [{m}, {n}]", x.len()));
    }
    Ok(match x {
        Data::Bool(v) => Data::Bool(t(v, m, n)),
        Data::I32(v) => Data::I32(t(v, m, n)),
        Data::F32(v) => Data::F32(t(v, m, n)),
        Data::Ptr { arg, offs } => Data::Ptr {
            arg: *arg,
            offs: t(offs, m, n),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_accumulates_from_acc_in_ascending_k() {
        // [2, 3] · [3, 2] + acc, by hand.
        let a = Data::F32(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let b = Data::F32(vec![1.0, 0.5, -1.0, 2.0, 0.25, 1.0]);
        let acc = Data::F32(vec![10.0, 0.0, 0.0, -1.0]);
        let c = dot(&a, &b, Some(&acc), (2, 3, 2)).unwrap();
        let want = [
            10.0 + 1.0 - 2.0 + 0.75,
            0.5 + 4.0 + 3.0,
            4.0 - 5.0 + 1.5,
            -1.0 + 2.0 + 10.0 + 6.0,
        ];
        assert_eq!(c, Data::F32(want.to_vec()));
        // The order is observable in f32: 1e8 + 1 - 1e8 is 0 in ascending order.
        let a = Data::F32(vec![1e8, 1.0, -1e8]);
        let b = Data::F32(vec![1.0, 1.0, 1.0]);
        assert_eq!(dot(&a, &b, None, (1, 3, 1)).unwrap(), Data::F32(vec![0.0]));
    }

    #[test]
    fn trans_swaps_dimensions() {
        let x = Data::I32((0..6).collect());
        assert_eq!(
            trans(&x, (2, 3)).unwrap(),
            Data::I32(vec![0, 3, 1, 4, 2, 5])
        );
    }
}
