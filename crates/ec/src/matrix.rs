//! Small dense matrices over GF(2^8): the encoding matrix and the decode matrices derived
//! from it. Sizes are at most 256 x 256, so plain row-major `Vec<u8>` is enough; none of
//! this is on the per-byte path.

use crate::gf;

/// A row-major `rows x cols` matrix over GF(2^8).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Matrix {
    rows: usize,
    cols: usize,
    data: Vec<u8>,
}

impl Matrix {
    pub(crate) fn zero(rows: usize, cols: usize) -> Self {
        Self {
            rows,
            cols,
            data: vec![0; rows * cols],
        }
    }

    pub(crate) fn identity(n: usize) -> Self {
        let mut m = Self::zero(n, n);
        for i in 0..n {
            m.set(i, i, 1);
        }
        m
    }

    /// The reference's Vandermonde matrix: entry (r, c) is r^c.
    pub(crate) fn vandermonde(rows: usize, cols: usize) -> Self {
        let mut m = Self::zero(rows, cols);
        for r in 0..rows {
            for c in 0..cols {
                m.set(r, c, gf::pow(r as u8, c));
            }
        }
        m
    }

    pub(crate) fn get(&self, r: usize, c: usize) -> u8 {
        self.data[r * self.cols + c]
    }

    pub(crate) fn set(&mut self, r: usize, c: usize, v: u8) {
        self.data[r * self.cols + c] = v;
    }

    pub(crate) fn row(&self, r: usize) -> &[u8] {
        &self.data[r * self.cols..(r + 1) * self.cols]
    }

    pub(crate) fn mul(&self, rhs: &Matrix) -> Matrix {
        debug_assert_eq!(self.cols, rhs.rows);
        let mut out = Matrix::zero(self.rows, rhs.cols);
        for r in 0..self.rows {
            for c in 0..rhs.cols {
                let mut acc = 0;
                for i in 0..self.cols {
                    acc ^= gf::mul(self.get(r, i), rhs.get(i, c));
                }
                out.set(r, c, acc);
            }
        }
        out
    }

    /// Rows `rows` of this matrix, in the order given.
    pub(crate) fn select_rows(&self, rows: impl IntoIterator<Item = usize>) -> Matrix {
        let mut data = Vec::new();
        let mut n = 0;
        for r in rows {
            data.extend_from_slice(self.row(r));
            n += 1;
        }
        Matrix {
            rows: n,
            cols: self.cols,
            data,
        }
    }

    /// Gauss-Jordan inversion. `None` when the matrix is singular, which never happens
    /// for square selections of a Vandermonde-derived matrix (distinct evaluation points).
    pub(crate) fn invert(&self) -> Option<Matrix> {
        debug_assert_eq!(self.rows, self.cols);
        let n = self.rows;
        let mut a = self.clone();
        let mut inv = Matrix::identity(n);
        for col in 0..n {
            let pivot = (col..n).find(|&r| a.get(r, col) != 0)?;
            if pivot != col {
                a.swap_rows(pivot, col);
                inv.swap_rows(pivot, col);
            }
            let scale = gf::inv(a.get(col, col));
            a.scale_row(col, scale);
            inv.scale_row(col, scale);
            for r in 0..n {
                let f = a.get(r, col);
                if r != col && f != 0 {
                    a.add_scaled_row(r, col, f);
                    inv.add_scaled_row(r, col, f);
                }
            }
        }
        Some(inv)
    }

    fn swap_rows(&mut self, a: usize, b: usize) {
        for c in 0..self.cols {
            self.data.swap(a * self.cols + c, b * self.cols + c);
        }
    }

    fn scale_row(&mut self, r: usize, f: u8) {
        for v in &mut self.data[r * self.cols..(r + 1) * self.cols] {
            *v = gf::mul(*v, f);
        }
    }

    /// row[dst] += f * row[src]
    fn add_scaled_row(&mut self, dst: usize, src: usize, f: u8) {
        for c in 0..self.cols {
            let v = gf::mul(self.get(src, c), f);
            self.data[dst * self.cols + c] ^= v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inverse_times_matrix_is_identity() {
        for n in 1..=12 {
            let v = Matrix::vandermonde(n + 3, n);
            let sel = v.select_rows([1, 2].into_iter().chain(4..).take(n));
            let inv = sel.invert().expect("vandermonde selections are invertible");
            assert_eq!(sel.mul(&inv), Matrix::identity(n));
            assert_eq!(inv.mul(&sel), Matrix::identity(n));
        }
    }

    #[test]
    fn singular_matrix_is_reported() {
        let mut m = Matrix::identity(3);
        m.set(2, 2, 0);
        assert!(m.invert().is_none());
    }
}
