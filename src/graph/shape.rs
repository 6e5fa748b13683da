//! Tensor shapes as the graph sees them: per request, a row count ([`Rows`]) times a feature
//! shape. Row counts that depend on the encoder length stay symbolic until a request's length is
//! known.

use std::fmt;

/// How many rows a tensor has for one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rows {
    /// A single row (an image, one step's vector).
    One,
    /// One row per encoder position, at time resolution `div` (ceil(enc_len / div) rows).
    Src {
        /// Time reduction of the producing loop.
        div: u32,
    },
    /// A fixed number of rows (BERT's 128 tokens).
    Fixed(u32),
}

impl Rows {
    /// True for multi-row tensors.
    pub(crate) fn is_sequence(self) -> bool {
        !matches!(self, Rows::One)
    }
    /// The row count for a request whose encoder length is `enc_len`.
    pub fn count(self, enc_len: u32) -> u64 {
        match self {
            Rows::One => 1,
            Rows::Src { div } => u64::from(enc_len.div_ceil(div.max(1))),
            Rows::Fixed(n) => u64::from(n),
        }
    }
}

impl fmt::Display for Rows {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rows::One => write!(f, "1"),
            Rows::Src { div: 1 } => write!(f, "S"),
            Rows::Src { div } => write!(f, "S/{div}"),
            Rows::Fixed(n) => write!(f, "{n}"),
        }
    }
}

/// A per-request tensor shape: `rows` × `feat`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorShape {
    /// Row count.
    pub rows: Rows,
    /// Feature shape of one row.
    pub feat: Vec<usize>,
}

impl TensorShape {
    /// A shape.
    pub fn new(rows: Rows, feat: Vec<usize>) -> Self {
        Self { rows, feat }
    }
}

impl fmt::Display for TensorShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} x {:?}", self.rows, self.feat)
    }
}
