//! The server's two bounds, each checked when it is made so that nothing that holds one checks
//! it again: [`MaxBatch`] (activation slots: the most requests in flight, the BatchTable's
//! capacity) and [`MaxPending`] (the InfQ's: the most requests waiting to be admitted; an
//! arrival beyond it is rejected and counted). Errors name the setting ("max batch", "max
//! pending"); a command line maps that to its own flag.

use crate::error::{Error, Result};
use crate::graph::loader::MAX_BATCH;

/// The server's maximum batch, in [1, [`MAX_BATCH`]].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MaxBatch(u32);

impl MaxBatch {
    /// `n` activation slots, if `n` is in [1, [`MAX_BATCH`]].
    pub fn new(n: u32) -> Result<MaxBatch> {
        if (1..=MAX_BATCH).contains(&n) {
            Ok(MaxBatch(n))
        } else {
            Err(Error::invalid(
                "max batch",
                format!("must be an integer in [1, {MAX_BATCH}], got {n}"),
            ))
        }
    }
    /// The number of slots.
    pub fn get(self) -> u32 {
        self.0
    }
}

/// The most requests a run keeps pending, in [1, [`MaxPending::MAX`]].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MaxPending(usize);

impl MaxPending {
    /// The largest bound a run takes.
    pub const MAX: usize = 10_000_000;
    /// The bound when none is given: 100,000 pending requests.
    pub const DEFAULT: MaxPending = MaxPending(100_000);

    /// A bound of `n` pending requests, if `n` is in [1, [`MaxPending::MAX`]].
    pub fn new(n: usize) -> Result<MaxPending> {
        if (1..=Self::MAX).contains(&n) {
            Ok(MaxPending(n))
        } else {
            Err(Error::invalid(
                "max pending",
                format!("must be an integer in [1, {}], got {n}", Self::MAX),
            ))
        }
    }
    /// The bound.
    pub fn get(self) -> usize {
        self.0
    }
}

impl Default for MaxPending {
    fn default() -> Self {
        Self::DEFAULT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bound_holds_only_what_its_range_takes() {
        assert_eq!(MaxBatch::new(1).unwrap().get(), 1);
        assert_eq!(MaxBatch::new(MAX_BATCH).unwrap().get(), MAX_BATCH);
        for bad in [0, MAX_BATCH + 1, u32::MAX] {
            let e = MaxBatch::new(bad).unwrap_err().to_string();
            assert_eq!(
                e,
                format!("invalid max batch: must be an integer in [1, 4096], got {bad}")
            );
        }
        assert_eq!(MaxPending::new(1).unwrap().get(), 1);
        assert_eq!(MaxPending::new(MaxPending::MAX).unwrap().get(), 10_000_000);
        assert!(MaxPending::new(0).is_err());
        assert!(MaxPending::new(MaxPending::MAX + 1).is_err());
        assert_eq!(MaxPending::default().get(), 100_000);
    }
}
