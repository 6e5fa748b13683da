//! Weights packed once, at prepare time, into the row GEMM's panel layout ([`super::rowgemm`]):
//! columns in panels of [`NR`], each panel every row of `k` in order, `NR` values a row
//! (`[n / NR][k][NR]`, the last panel zero-padded). A GEMM then reads its weights as one
//! sequential stream, the layout its micro-kernel wants, instead of packing a block of them
//! for every call: for few rows (a decoder step, an LSTM at small batch) that packing was a
//! copy of every weight on the critical path. Values and each element's FMA order are those of
//! the plain `k × n` matrix, so results are the same bits.

use super::aligned::Aligned;

/// Columns per panel (the micro-kernel's width).
pub const NR: usize = 32;

/// A `k × n` matrix in panels.
#[derive(Clone, Debug, Default)]
pub struct Panels {
    /// Rows (the reduction length).
    pub(crate) k: usize,
    /// Columns.
    pub(crate) n: usize,
    /// `[n.div_ceil(NR)][k][NR]`, on a cache line ([`Aligned`]: each row of a panel is then
    /// two whole lines).
    pub(crate) data: Aligned,
}

impl Panels {
    /// Packs a row-major `k × n` matrix.
    pub fn pack(b: &[f32], k: usize, n: usize) -> Panels {
        let panels = n.div_ceil(NR);
        let mut data = Aligned::zeroed(panels * k * NR);
        for p in 0..k {
            let row = &b[p * n..(p + 1) * n];
            for (jp, src) in row.chunks(NR).enumerate() {
                data[(jp * k + p) * NR..][..src.len()].copy_from_slice(src);
            }
        }
        Panels { k, n, data }
    }

    /// Packs the transpose of a row-major `n × k` matrix (an embedding table whose rows are
    /// the columns of a tied output layer).
    pub fn pack_transposed(w: &[f32], n: usize, k: usize) -> Panels {
        let mut data = Aligned::zeroed(n.div_ceil(NR) * k * NR);
        for (j, row) in w[..n * k].chunks_exact(k).enumerate() {
            for (p, &v) in row.iter().enumerate() {
                data[((j / NR) * k + p) * NR + j % NR] = v;
            }
        }
        Panels { k, n, data }
    }

    /// Column `j` (all `k` rows) into `out` (an embedding lookup in a transposed table).
    pub(crate) fn column(&self, j: usize, out: &mut [f32]) {
        for (p, o) in out[..self.k].iter_mut().enumerate() {
            *o = self.at(p, j);
        }
    }

    /// The panel holding column `j` (a multiple of [`NR`]), from row `p`: `NR` values a row.
    #[inline]
    pub(crate) fn from(&self, p: usize, j: usize) -> &[f32] {
        &self.data[((j / NR) * self.k + p) * NR..]
    }

    /// Element `(p, j)`.
    #[inline]
    pub(crate) fn at(&self, p: usize, j: usize) -> f32 {
        self.data[((j / NR) * self.k + p) * NR + j % NR]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_element_lands_in_its_panel() {
        let (k, n) = (3, 70);
        let b: Vec<f32> = (0..k * n).map(|i| i as f32).collect();
        let pk = Panels::pack(&b, k, n);
        assert_eq!(pk.data.len(), 3 * k * NR);
        for p in 0..k {
            for j in 0..n {
                assert_eq!(pk.at(p, j), b[p * n + j], "({p}, {j})");
            }
        }
        // the third panel: columns 64..70, then zeros
        assert_eq!(
            pk.from(1, 64)[..7],
            [134.0, 135.0, 136.0, 137.0, 138.0, 139.0, 0.0]
        );
        // an n × k table packed transposed holds the same panels as its k × n transpose
        let mut t = vec![0.0; k * n];
        for p in 0..k {
            for j in 0..n {
                t[j * k + p] = b[p * n + j];
            }
        }
        assert_eq!(Panels::pack_transposed(&t, n, k).data, pk.data);
        let mut col = [0.0; 3];
        pk.column(65, &mut col);
        assert_eq!(col, [65.0, 135.0, 205.0]);
    }
}
