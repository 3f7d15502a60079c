//! How a tile's elements are spread over the threads of a program (CTA).
//!
//! One rule covers 1-D and 2-D tiles ("rows over warps, columns over lanes"): a tile
//! `[M, N]` (a 1-D tile `[N]` is `[1, N]`) is cut into column chunks of `vec` contiguous
//! elements; `tpr` threads share a row, so `rpp = threads / tpr` rows are covered per
//! pass. Thread `t` is at row `r = t / tpr`, column group `c = t % tpr`, and owns
//!
//! ```text
//!   rows    i = r + a * rpp               for a in 0..passes
//!   columns j = (c + b * tpr) * vec + v   for b in 0..chunks, v in 0..vec
//!   slot    s = (a * chunks + b) * vec + v   (index into the thread's register array)
//! ```
//!
//! Elements with `i >= M` or `j >= N` are padding: they exist in registers (so every
//! thread runs the same unrolled code) but never load, store or enter a reduction.
//!
//! Replicas: a tile of one row (`[N]` or `[1, N]`) narrower than the program (`rpp > 1`)
//! would leave row groups `1..rpp` with nothing but padding. Instead every row group holds
//! a copy of row 0: thread `t` holds the columns of thread `t % tpr`. Replicas load and
//! compute like the owner (same addresses: free in L1), so the tile can be viewed in a
//! wider layout with the same column ownership as a register copy (a row broadcast over
//! `[M, N]`), but they never store, stage or enter a reduction, so nothing counts twice.
//! Consecutive threads own consecutive `vec`-element chunks of a row, so a warp's load
//! of one chunk each is coalesced, and a 16-byte chunk is one vector load.

/// The `mma.sync` m16n8 accumulator layout (the C/D fragment), used for the `[M, N]`
/// shape of a `dot` on tensor cores and every other tile of that shape: warps form a
/// `wm x wn` grid (warp w at (w / wn, w % wn)); each warp owns `mt` m16 tiles by `nt` n8
/// tiles; lane l (g = l / 4, q = l % 4) holds, per (mi, ni), four slots
/// `(mi * nt + ni) * 4 + r`: row `g + 8 * (r / 2)`, column `2 * q + r % 2` of that 16x8 tile.
/// A warp's m16 tiles are adjacent (rows `wrow * 16mt + 16mi`), or, `interleaved` (the `wgmma`
/// accumulator, warpgroups over M), a whole warp grid apart (rows `mi * 16wm + 16 wrow`): each
/// m64 `wgmma` of a warpgroup writes rows 16w..16w+15 of its 64 to the group's warp w.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frag {
    pub wm: usize,
    pub wn: usize,
    pub mt: usize,
    pub nt: usize,
    pub interleaved: bool,
}

impl Frag {
    /// Rows from one warp row's first m16 tile to the next warp row's.
    pub fn warp_row_step(&self) -> usize {
        if self.interleaved {
            16
        } else {
            16 * self.mt
        }
    }
    /// Rows from a warp's m16 tile `mi` to its tile `mi + 1`.
    pub fn mi_step(&self) -> usize {
        if self.interleaved {
            16 * self.wm
        } else {
            16
        }
    }
}

/// The distribution of one tile shape over the threads of a program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// `Some` for the tensor-core accumulator layout (then `tpr`, `rpp`, `passes` and
    /// `chunks` do not describe it: reductions go through shared memory, or, along its rows
    /// with `EmitOptions::frag_rows`, stay in the quads that hold them).
    pub frag: Option<Frag>,
    /// `Some` for the rows of a tensor-core tile (`EmitOptions::frag_rows`): an `[M]` or
    /// `[M, 1]` tile held where the `[M, N]` fragment holds its rows ([`Layout::rows_of`]).
    pub rows_of: Option<Frag>,
    /// The tile's shape: `[N]` or `[M, N]`.
    pub dims: Vec<usize>,
    /// Threads per program.
    pub threads: usize,
    /// Contiguous elements per chunk.
    pub vec: usize,
    /// Threads per row (a power of two dividing `threads`).
    pub tpr: usize,
    /// Rows per pass: `threads / tpr`.
    pub rpp: usize,
    /// Passes over the rows: `ceil(M / rpp)`.
    pub passes: usize,
    /// Column chunks per thread: `ceil(N / (tpr * vec))`.
    pub chunks: usize,
}

impl Layout {
    /// The layout of a tile of shape `dims` (rank 1 or 2) for `threads` threads (a power of
    /// two) and a preferred chunk of `vec` elements (a power of two).
    pub fn new(dims: &[usize], threads: usize, vec: usize) -> Layout {
        assert!(
            matches!(dims.len(), 1 | 2),
            "layouts are for tiles of rank 1 or 2"
        );
        assert!(threads.is_power_of_two() && vec.is_power_of_two());
        let (m, n) = if dims.len() == 1 {
            (1, dims[0])
        } else {
            (dims[0], dims[1])
        };
        // A short row does not need a full vector: one chunk never exceeds the row.
        let vec = vec.min(n.next_power_of_two());
        let tpr = threads.min(n.div_ceil(vec).next_power_of_two());
        let rpp = threads / tpr;
        Layout {
            frag: None,
            rows_of: None,
            dims: dims.to_vec(),
            threads,
            vec,
            tpr,
            rpp,
            passes: m.div_ceil(rpp),
            chunks: n.div_ceil(tpr * vec),
        }
    }

    /// The `mma.sync` accumulator layout of `[m, n]` for `wm x wn` warps (see [`Frag`]);
    /// `m` must be a multiple of `16 * wm` and `n` of `8 * wn`.
    pub fn mma(m: usize, n: usize, wm: usize, wn: usize) -> Layout {
        assert!(
            m.is_multiple_of(16 * wm) && n.is_multiple_of(8 * wn),
            "mma layout of [{m}, {n}]"
        );
        Layout::of_frag(Frag {
            wm,
            wn,
            mt: m / (16 * wm),
            nt: n / (8 * wn),
            interleaved: false,
        })
    }

    /// The accumulator layout of a [`Frag`]: `[16 * wm * mt, 8 * wn * nt]`.
    pub fn of_frag(frag: Frag) -> Layout {
        let (m, n) = (16 * frag.wm * frag.mt, 8 * frag.wn * frag.nt);
        let (wm, wn) = (frag.wm, frag.wn);
        Layout {
            frag: Some(frag),
            rows_of: None,
            dims: vec![m, n],
            threads: 32 * wm * wn,
            vec: 2,
            tpr: 4 * wn,
            rpp: 8 * wm,
            passes: 2 * frag.mt,
            chunks: frag.nt,
        }
    }

    /// The rows of fragment `frag` as an `[M]` (`rank` 1) or `[M, 1]` (`rank` 2) tile, `M`
    /// the fragment's rows: each thread holds the rows its accumulator slots sit in, slot
    /// `2 * mi + h` row `wrow * step + mi * mi_step + lane / 4 + 8h` (see [`Frag`]), so a
    /// row value broadcast over the fragment is a register read, and a reduction of the
    /// fragment along its rows ends in the threads that hold them. The four lanes of a quad
    /// and the warps of a warp row hold the same rows: lane % 4 == 0 of warp column 0 owns
    /// them, the others are replicas.
    pub fn rows_of(frag: Frag, rank: usize) -> Layout {
        let m = 16 * frag.wm * frag.mt;
        Layout {
            frag: None,
            rows_of: Some(frag),
            dims: if rank == 1 { vec![m] } else { vec![m, 1] },
            threads: 32 * frag.wm * frag.wn,
            vec: 1,
            tpr: 1,
            rpp: 1,
            passes: 2 * frag.mt,
            chunks: 1,
        }
    }

    /// A layout of rows over warps and columns over lanes (`Layout::new`), whose `tpr`,
    /// `rpp`, `passes`, `chunks` and `vec` describe it.
    pub fn blocked(&self) -> bool {
        self.frag.is_none() && self.rows_of.is_none()
    }

    /// Whether some threads hold copies of elements they do not own (they load and compute,
    /// never store or reduce).
    pub fn has_replicas(&self) -> bool {
        self.replicated() || self.rows_of.is_some()
    }

    pub fn rank(&self) -> usize {
        self.dims.len()
    }
    pub fn rows(&self) -> usize {
        if self.rank() == 1 {
            1
        } else {
            self.dims[0]
        }
    }
    pub fn cols(&self) -> usize {
        *self.dims.last().unwrap()
    }
    /// Register slots per thread.
    pub fn slots(&self) -> usize {
        if let Some(f) = self.frag {
            return f.mt * f.nt * 4;
        }
        if let Some(f) = self.rows_of {
            return 2 * f.mt;
        }
        self.passes * self.chunks * self.vec
    }
    /// The logical (row, column) of slot `s` of thread `t` (row is 0 for 1-D tiles).
    pub fn index(&self, t: usize, s: usize) -> (usize, usize) {
        if let Some(f) = self.frag {
            let (w, l) = (t / 32, t % 32);
            let (mi, ni, r) = (s / (f.nt * 4), s / 4 % f.nt, s % 4);
            return (
                (w / f.wn) * f.warp_row_step() + mi * f.mi_step() + l / 4 + 8 * (r / 2),
                (w % f.wn) * f.nt * 8 + ni * 8 + 2 * (l % 4) + r % 2,
            );
        }
        if let Some(f) = self.rows_of {
            let (w, l) = (t / 32, t % 32);
            let row = (w / f.wn) * f.warp_row_step() + s / 2 * f.mi_step() + l / 4 + 8 * (s % 2);
            return if self.rank() == 1 { (0, row) } else { (row, 0) };
        }
        let (r, c) = (t / self.tpr, t % self.tpr);
        let v = s % self.vec;
        let b = (s / self.vec) % self.chunks;
        let a = s / (self.vec * self.chunks);
        (r + a * self.rpp, (c + b * self.tpr) * self.vec + v)
    }
    pub fn valid(&self, t: usize, s: usize) -> bool {
        let (i, j) = self.index(t, s);
        i < self.rows() && j < self.cols()
    }
    /// A tile of one row spread over several row groups: groups `1..rpp` are replicas.
    pub fn replicated(&self) -> bool {
        self.frag.is_none() && self.rows() == 1 && self.rpp > 1
    }
    /// Whether thread `t` holds a real element in slot `s`: its owner, or a replica.
    pub fn holds(&self, t: usize, s: usize) -> bool {
        if self.replicated() {
            self.index(t, s).1 < self.cols()
        } else {
            self.valid(t, s)
        }
    }
    /// The slot in which thread `t` holds element (i, j), as its owner or a replica.
    pub fn slot_of(&self, t: usize, i: usize, j: usize) -> Option<usize> {
        if self.rows_of.is_some() {
            return (0..self.slots()).find(|&s| self.index(t, s) == (i, j));
        }
        if self.replicated() {
            let (ot, s) = self.owner(i, j);
            (i == 0 && ot == t % self.tpr).then_some(s)
        } else {
            let (ot, s) = self.owner(i, j);
            (ot == t).then_some(s)
        }
    }
    /// The (thread, slot) owning logical element (i, j).
    pub fn owner(&self, i: usize, j: usize) -> (usize, usize) {
        if let Some(f) = self.frag {
            let (wmi, mi, rr) = if f.interleaved {
                (i % (f.wm * 16) / 16, i / (f.wm * 16), i % 16)
            } else {
                (i / (f.mt * 16), i % (f.mt * 16) / 16, i % 16)
            };
            let (wni, ni, cc) = (j / (f.nt * 8), j % (f.nt * 8) / 8, j % 8);
            let t = (wmi * f.wn + wni) * 32 + (rr % 8) * 4 + cc / 2;
            return (t, (mi * f.nt + ni) * 4 + (rr / 8) * 2 + cc % 2);
        }
        if let Some(f) = self.rows_of {
            // Lane 4g of warp column 0 in the row's warp row.
            let row = if self.rank() == 1 { j } else { i };
            let (wmi, mi, rr) = if f.interleaved {
                (row % (f.wm * 16) / 16, row / (f.wm * 16), row % 16)
            } else {
                (row / (f.mt * 16), row % (f.mt * 16) / 16, row % 16)
            };
            return (wmi * f.wn * 32 + (rr % 8) * 4, 2 * mi + rr / 8);
        }
        let (r, a) = (i % self.rpp, i / self.rpp);
        let (jj, v) = (j / self.vec, j % self.vec);
        let (c, b) = (jj % self.tpr, jj / self.tpr);
        (r * self.tpr + c, (a * self.chunks + b) * self.vec + v)
    }
    /// Every valid (thread, slot, row, col), for tests and compile-time checks.
    pub fn owned(&self) -> Vec<(usize, usize, usize, usize)> {
        let mut out = vec![];
        for t in 0..self.threads {
            for s in 0..self.slots() {
                if self.valid(t, s) {
                    let (i, j) = self.index(t, s);
                    if self.rows_of.is_some() && self.owner(i, j) != (t, s) {
                        continue; // a replica's copy
                    }
                    out.push((t, s, i, j));
                }
            }
        }
        out
    }

    /// A one-line description for the generated source.
    pub fn describe(&self) -> String {
        let shape: Vec<String> = self.dims.iter().map(|d| d.to_string()).collect();
        if let Some(f) = self.frag {
            let tiles = if f.interleaved {
                format!(
                    "the wgmma accumulator: warpgroups over M, warp w holds rows mi*{} + 16w.., each {} m16 x {} n8 tiles",
                    16 * f.wm,
                    f.mt,
                    f.nt
                )
            } else {
                format!(
                    "the mma.sync accumulator fragment: {}x{} warps, each {} m16 x {} n8 tiles",
                    f.wm, f.wn, f.mt, f.nt
                )
            };
            return format!(
                "[{}]: {tiles}; lane l holds, per tile (mi, ni), rows l/4 and l/4 + 8, columns 2*(l%4) and +1",
                shape.join(", "),
            );
        }
        if let Some(f) = self.rows_of {
            return format!(
                "[{}]: the rows of the mma.sync accumulator fragment ({}x{} warps, {} m16 tiles each): lane l holds rows l/4 and l/4 + 8 of each m16 tile; lane 4g of warp column 0 owns them, the other lanes of its quad{} are replicas",
                shape.join(", "),
                f.wm,
                f.wn,
                f.mt,
                if f.wn > 1 { " and the other warp columns" } else { "" }
            );
        }
        if self.replicated() {
            format!(
                "[{}]: thread t holds elements (t%{} + {}*b)*{} + v, b < {}, v < {}; only {} own them, \
                 the others are replicas (they load and compute, never store or reduce)",
                shape.join(", "),
                self.tpr,
                self.tpr,
                self.vec,
                self.chunks,
                self.vec,
                if self.tpr == 1 { "thread 0".to_string() } else { format!("threads 0..{}", self.tpr - 1) }
            )
        } else if self.rank() == 1 && self.rpp == 1 {
            format!(
                "[{}]: thread t owns elements (t + {}*b)*{} + v, b < {}, v < {}",
                shape.join(", "),
                self.tpr,
                self.vec,
                self.chunks,
                self.vec
            )
        } else {
            format!(
                "[{}]: {} threads per row, {} rows per pass; thread t owns rows t/{} + {}*a (a < {}), \
                 columns (t%{} + {}*b)*{} + v (b < {}, v < {})",
                shape.join(", "),
                self.tpr,
                self.rpp,
                self.tpr,
                self.rpp,
                self.passes,
                self.tpr,
                self.tpr,
                self.vec,
                self.chunks,
                self.vec
            )
        }
    }

    /// C expressions for the row and column of slot `s` (a C expression) of thread `tid`.
    /// Constant after unrolling, so they cost nothing at run time.
    pub fn row_expr(&self, s: &str) -> String {
        if let Some(f) = self.frag {
            let w = if f.wm == 1 {
                String::new()
            } else {
                format!("tid / {} * {} + ", 32 * f.wn, f.warp_row_step())
            };
            let m = if f.mt == 1 {
                String::new()
            } else {
                format!("{s} / {} * {} + ", f.nt * 4, f.mi_step())
            };
            return format!("({w}{m}tid % 32 / 4 + {s} % 4 / 2 * 8)");
        }
        if let Some(f) = self.rows_of {
            return if self.rank() == 1 {
                "0".into()
            } else {
                self.slice_row_expr(f, s)
            };
        }
        if self.replicated() {
            return "0".into(); // the one row, in every row group
        }
        let r = if self.rpp == 1 {
            None
        } else {
            Some(format!("tid / {}", self.tpr))
        };
        let per_pass = self.vec * self.chunks;
        let a = if self.passes == 1 {
            None
        } else {
            Some(format!("({s} / {per_pass}) * {}", self.rpp))
        };
        match (r, a) {
            (None, None) => "0".into(),
            (Some(r), None) => format!("({r})"),
            (None, Some(a)) => format!("({a})"),
            (Some(r), Some(a)) => format!("({r} + {a})"),
        }
    }
    pub fn col_expr(&self, s: &str) -> String {
        if let Some(f) = self.frag {
            let w = if f.wn == 1 {
                String::new()
            } else {
                format!("tid / 32 % {} * {} + ", f.wn, f.nt * 8)
            };
            let n = if f.nt == 1 {
                String::new()
            } else {
                format!("{s} / 4 % {} * 8 + ", f.nt)
            };
            return format!("({w}{n}tid % 4 * 2 + {s} % 2)");
        }
        if let Some(f) = self.rows_of {
            return if self.rank() == 1 {
                self.slice_row_expr(f, s)
            } else {
                "0".into()
            };
        }
        let c = if self.tpr == 1 {
            None
        } else if self.tpr == self.threads {
            Some("tid".to_string())
        } else {
            Some(format!("tid % {}", self.tpr))
        };
        let b = if self.chunks == 1 {
            None
        } else if self.vec == 1 {
            Some(format!("({s} % {}) * {}", self.chunks, self.tpr))
        } else {
            Some(format!(
                "({s} / {} % {}) * {}",
                self.vec, self.chunks, self.tpr
            ))
        };
        let chunk = match (c, b) {
            (None, None) => None,
            (Some(c), None) => Some(c),
            (None, Some(b)) => Some(b),
            (Some(c), Some(b)) => Some(format!("{c} + {b}")),
        };
        match (chunk, self.vec) {
            (None, 1) => "0".into(),
            (None, v) => format!("({s} % {v})"),
            (Some(c), 1) => format!("({c})"),
            (Some(c), v) => format!("(({c}) * {v} + {s} % {v})"),
        }
    }
    /// The row of slot `s` of a [`Layout::rows_of`] layout, as C.
    fn slice_row_expr(&self, f: Frag, s: &str) -> String {
        let w = if f.wm == 1 {
            String::new()
        } else {
            format!("tid / {} * {} + ", 32 * f.wn, f.warp_row_step())
        };
        let m = if f.mt == 1 {
            String::new()
        } else {
            format!("{s} / 2 * {} + ", f.mi_step())
        };
        format!("({w}{m}tid % 32 / 4 + {s} % 2 * 8)")
    }

    /// Whether the slot holds a real element (not padding; a replica's copy counts), as a
    /// C expression; `None` when every slot of every thread is real.
    pub fn valid_expr(&self, name: &str, s: &str) -> Option<String> {
        if !self.blocked() {
            return None; // every slot of every thread is real
        }
        let mut conds = vec![];
        if self.passes * self.rpp != self.rows() && !self.replicated() {
            conds.push(format!("{name}_i({s}) < {}", self.rows()));
        }
        if self.chunks * self.tpr * self.vec != self.cols() {
            conds.push(format!("{name}_j({s}) < {}", self.cols()));
        }
        if conds.is_empty() {
            None
        } else {
            Some(conds.join(" && "))
        }
    }
    /// For a replicated layout, whether this thread is the owner rather than a replica
    /// (a C expression, the same for every slot).
    pub fn owner_expr(&self) -> Option<String> {
        if let Some(f) = self.rows_of {
            return Some(if f.wn == 1 {
                "tid % 4 == 0".into()
            } else {
                format!("tid % 4 == 0 && tid / 32 % {} == 0", f.wn)
            });
        }
        self.replicated().then(|| format!("tid < {}", self.tpr))
    }
}

/// When a value of layout `src` is viewed in layout `dst` (a broadcast or expand_dims)
/// and every thread already holds (as owner or replica) the source elements its
/// destination slots need, including a replica's slots of `dst`, the
/// view is a register copy: returns, per destination slot, the source slot (the same
/// for every thread; `None` for a slot that is padding in every thread). `map` takes a
/// destination (row, col) to the source (row, col). Too large to check: `None`.
pub fn register_view(
    dst: &Layout,
    src: &Layout,
    map: &dyn Fn(usize, usize) -> (usize, usize),
) -> Option<Vec<Option<usize>>> {
    if dst.threads != src.threads || dst.threads * dst.slots() > 1 << 16 {
        return None;
    }
    let mut out: Vec<Option<usize>> = vec![None; dst.slots()];
    for t in 0..dst.threads {
        for (s, slot) in out.iter_mut().enumerate() {
            if !dst.holds(t, s) {
                continue;
            }
            let (i, j) = dst.index(t, s);
            let (si, sj) = map(if dst.replicated() { 0 } else { i }, j);
            let ss = src.slot_of(t, si, sj)?;
            if slot.is_some_and(|x| x != ss) {
                return None;
            }
            *slot = Some(ss);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_cover(l: &Layout) {
        let (m, n) = (l.rows(), l.cols());
        let mut seen = vec![0u32; m * n];
        for (t, s, i, j) in l.owned() {
            assert!(i < m && j < n);
            seen[i * n + j] += 1;
            assert_eq!(l.owner(i, j), (t, s), "owner() inverts index() for {l:?}");
        }
        assert!(
            seen.iter().all(|&c| c == 1),
            "each element exactly once: {l:?}"
        );
    }

    #[test]
    fn layouts_cover_each_element_once() {
        for &t in &[32, 64, 128, 256] {
            for &v in &[1, 2, 4, 8] {
                for &n in &[1, 2, 7, 31, 32, 100, 1000, 1024, 4099] {
                    check_cover(&Layout::new(&[n], t, v));
                    for &m in &[1, 3, 16, 33] {
                        check_cover(&Layout::new(&[m, n], t, v));
                        check_cover(&Layout::new(&[n, m], t, v));
                    }
                }
            }
        }
    }

    #[test]
    fn rows_over_warps_columns_over_lanes() {
        // GEMV tile: bf16 [16, 256], 4 warps: one warp per row, 8 elements per lane.
        let l = Layout::new(&[16, 256], 128, 8);
        assert_eq!((l.tpr, l.rpp, l.passes, l.chunks, l.vec), (32, 4, 4, 1, 8));
        assert_eq!(l.index(33, 0), (1, 8));
        assert_eq!(l.index(33, 9), (5, 9));
        // Padding: BLOCK=1000 over 128 threads x 8: threads 125.. own nothing.
        let l = Layout::new(&[1000], 128, 8);
        assert_eq!(l.slots(), 8);
        assert!(l.valid(124, 7) && !l.valid(125, 0));
        assert_eq!(l.owned().len(), 1000);
    }

    #[test]
    fn c_index_expressions_match_index() {
        // Evaluate the generated C by hand for a few layouts: the formulas must agree.
        for l in [
            Layout::new(&[4099], 128, 8),
            Layout::new(&[16, 256], 128, 8),
            Layout::new(&[33, 7], 64, 4),
        ] {
            for t in [0usize, 5, 63] {
                for s in 0..l.slots() {
                    let (i, j) = l.index(t, s);
                    let ci = eval_c(&l.row_expr("s"), t, s);
                    let cj = eval_c(&l.col_expr("s"), t, s);
                    assert_eq!((ci, cj), (i as i64, j as i64), "{l:?} t={t} s={s}");
                }
            }
        }
    }

    /// A tiny evaluator for the expressions above (integers, + * / %, parentheses).
    fn eval_c(e: &str, tid: usize, s: usize) -> i64 {
        let toks: Vec<String> = e
            .replace('(', " ( ")
            .replace(')', " ) ")
            .replace('+', " + ")
            .replace('*', " * ")
            .replace('/', " / ")
            .replace('%', " % ")
            .split_whitespace()
            .map(String::from)
            .collect();
        fn expr(t: &[String], p: &mut usize, tid: usize, s: usize) -> i64 {
            let mut v = term(t, p, tid, s);
            while *p < t.len() && t[*p] == "+" {
                *p += 1;
                v += term(t, p, tid, s);
            }
            v
        }
        fn term(t: &[String], p: &mut usize, tid: usize, s: usize) -> i64 {
            let mut v = atom(t, p, tid, s);
            while *p < t.len() && matches!(t[*p].as_str(), "*" | "/" | "%") {
                let op = t[*p].clone();
                *p += 1;
                let r = atom(t, p, tid, s);
                v = match op.as_str() {
                    "*" => v * r,
                    "/" => v / r,
                    _ => v % r,
                };
            }
            v
        }
        fn atom(t: &[String], p: &mut usize, tid: usize, s: usize) -> i64 {
            let tok = t[*p].clone();
            *p += 1;
            match tok.as_str() {
                "(" => {
                    let v = expr(t, p, tid, s);
                    *p += 1;
                    v
                }
                "tid" => tid as i64,
                "s" => s as i64,
                n => n.parse().unwrap(),
            }
        }
        let mut p = 0;
        expr(&toks, &mut p, tid, s)
    }

    #[test]
    fn expand_dims_of_a_row_is_a_register_copy() {
        let src = Layout::new(&[1000], 128, 8);
        let dst = Layout::new(&[1, 1000], 128, 8);
        let m = register_view(&dst, &src, &|_, j| (0, j)).expect("same owners");
        assert!(m.iter().enumerate().all(|(s, x)| *x == Some(s)));
        // A row broadcast over 16 rows: [256] leaves 3 of 4 row groups as replicas, which
        // hold the same columns as the rows of [16, 256] they sit in.
        let dst = Layout::new(&[16, 256], 128, 8);
        let src = Layout::new(&[256], 128, 8);
        assert!(src.replicated() && !dst.replicated());
        let m = register_view(&dst, &src, &|_, j| (0, j)).expect("replicas hold the row");
        assert!(m.iter().enumerate().all(|(s, x)| *x == Some(s % 8)));
        // Through [1, 256] (expand_dims, then a broadcast): register copies both steps.
        let mid = Layout::new(&[1, 256], 128, 8);
        assert!(register_view(&mid, &src, &|_, j| (0, j)).is_some());
        assert!(register_view(&dst, &mid, &|_, j| (0, j)).is_some());
        // A column broadcast needs other threads' elements.
        let col = Layout::new(&[16], 128, 8);
        assert!(register_view(&dst, &col, &|i, _| (0, i)).is_none());
    }

    #[test]
    fn mma_layout_is_the_m16n8_fragment() {
        for (m, n, wm, wn) in [
            (16, 8, 1, 1),
            (64, 64, 2, 2),
            (128, 128, 4, 2),
            (32, 64, 1, 4),
        ] {
            let l = Layout::mma(m, n, wm, wn);
            check_cover(&l);
            for t in [0usize, 5, l.threads / 2 + 3, l.threads - 1] {
                for s in 0..l.slots() {
                    let (i, j) = l.index(t, s);
                    let ci = eval_c(&l.row_expr("s"), t, s);
                    let cj = eval_c(&l.col_expr("s"), t, s);
                    assert_eq!((ci, cj), (i as i64, j as i64), "{l:?} t={t} s={s}");
                }
            }
        }
        // Lane 5 (g = 1, q = 1) of warp 0: c0, c1 at row 1, columns 2, 3; c2, c3 at row 9.
        let l = Layout::mma(16, 8, 1, 1);
        let got: Vec<_> = (0..4).map(|s| l.index(5, s)).collect();
        assert_eq!(got, [(1, 2), (1, 3), (9, 2), (9, 3)]);
    }

    /// The `wgmma` m64nNk16 f32 accumulator (PTX ISA 9.7.15.5.1, "Register fragments and
    /// shared memory matrix layouts", matrix D): in a warpgroup, warp w (of 4) and lane l hold
    /// d[4i + r] at row 16w + l/4 + 8(r/2), column 8i + 2(l%4) + r%2; warpgroup g of an
    /// instruction over rows 64g.. and, for the `mi`-th instruction, 16 * warps * mi further.
    #[test]
    fn wgmma_layout_is_the_m64n_accumulator() {
        for (m, n, warps) in [(64, 256, 4), (128, 128, 4), (128, 256, 8), (256, 128, 8)] {
            let f = Frag {
                wm: warps,
                wn: 1,
                mt: m / (16 * warps),
                nt: n / 8,
                interleaved: true,
            };
            let l = Layout::of_frag(f);
            assert_eq!(l.dims, [m, n]);
            check_cover(&l);
            for t in [0usize, 37, 100, l.threads / 2 + 3, l.threads - 1] {
                let (g, w, lane) = (t / 128, t / 32 % 4, t % 32);
                for s in 0..l.slots() {
                    let (mi, i, r) = (s / (4 * f.nt), s / 4 % f.nt, s % 4);
                    let want = (
                        mi * 16 * warps + 64 * g + 16 * w + lane / 4 + 8 * (r / 2),
                        8 * i + 2 * (lane % 4) + r % 2,
                    );
                    assert_eq!(l.index(t, s), want, "{l:?} t={t} s={s}");
                    let ci = eval_c(&l.row_expr("s"), t, s);
                    let cj = eval_c(&l.col_expr("s"), t, s);
                    assert_eq!((ci, cj), (want.0 as i64, want.1 as i64));
                }
            }
        }
    }

    #[test]
    fn rows_of_a_fragment_sit_where_the_fragment_holds_them() {
        for (m, n, wm, wn) in [
            (128, 64, 8, 1),
            (128, 64, 4, 2),
            (64, 128, 2, 2),
            (16, 8, 1, 1),
        ] {
            let frag = Layout::mma(m, n, wm, wn);
            let f = frag.frag.unwrap();
            let rows = Layout::rows_of(f, 1);
            let col = Layout::rows_of(f, 2);
            assert_eq!((rows.dims.clone(), col.dims.clone()), (vec![m], vec![m, 1]));
            check_cover(&rows);
            check_cover(&col);
            for t in [0usize, 5, frag.threads / 2 + 3, frag.threads - 1] {
                for s in 0..rows.slots() {
                    let (_, j) = rows.index(t, s);
                    assert_eq!(
                        eval_c(&rows.col_expr("s"), t, s),
                        j as i64,
                        "{rows:?} t={t} s={s}"
                    );
                    assert_eq!(eval_c(&col.row_expr("s"), t, s), j as i64);
                    assert_eq!(col.index(t, s), (j, 0));
                }
            }
            // expand_dims, then the broadcast over the fragment: register copies, the
            // fragment's slot (mi, ni, r) reading row slot 2 mi + r / 2.
            let e = register_view(&col, &rows, &|i, _| (0, i)).expect("same rows");
            assert!(e.iter().enumerate().all(|(s, x)| *x == Some(s)));
            let b = register_view(&frag, &col, &|i, _| (i, 0)).expect("rows in registers");
            for (s, x) in b.iter().enumerate() {
                assert_eq!(*x, Some(s / (4 * f.nt) * 2 + s % 4 / 2));
            }
            // Owners: lane 4g of warp column 0; every other thread a replica.
            let owners = (0..frag.threads)
                .filter(|&t| t % 4 == 0 && t / 32 % wn == 0)
                .count();
            assert_eq!(owners * rows.slots(), m);
            assert!(rows.has_replicas() && !rows.blocked() && !rows.replicated());
        }
    }

    #[test]
    fn replicas_hold_row_zero_but_do_not_own_it() {
        let l = Layout::new(&[512], 128, 8);
        assert_eq!((l.tpr, l.rpp), (64, 2));
        assert!(l.replicated() && l.owner_expr().as_deref() == Some("tid < 64"));
        assert!(l.holds(70, 3) && !l.valid(70, 3));
        assert_eq!(l.slot_of(70, 0, 6 * 8 + 3), Some(3));
        assert_eq!(l.owned().len(), 512); // each element owned once
        assert_eq!(l.valid_expr("L0", "s"), None); // no padding columns
                                                   // Padding columns stay padding in replicas too.
        let l = Layout::new(&[100], 128, 8);
        assert!(l.replicated() && !l.holds(13 + 16, 0) && l.holds(12 + 16, 0));
        // More than one row: never replicated.
        assert!(!Layout::new(&[2, 256], 128, 8).replicated());
    }
}
