//! Whether a device's plan fits the machine, asked before it is allocated: an allocation the
//! system refuses aborts the process, and one it grants beyond what is free is killed later by
//! the kernel; a plan that does not fit is refused instead, with the bytes it needs and the
//! bytes there are. The memory counted is the host's (`MemAvailable` in `/proc/meminfo`) for the
//! CPU device, the GPU's free memory (`cuMemGetInfo`) for the CUDA device; where that is not
//! known the plan is allocated unchecked.

use crate::device::layout::Layout;
use crate::error::{Error, Result};
use crate::graph::{Carried, Model};

/// Where a plan's memory comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pool {
    /// The machine's memory (`MemAvailable`).
    Host,
    /// The GPU's (its free bytes).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    Gpu,
}

impl Pool {
    fn words(self) -> &'static str {
        match self {
            Pool::Host => "this machine has available",
            Pool::Gpu => "free on the GPU",
        }
    }
}

/// Bytes of host memory available for new allocations, if the system says.
pub(crate) fn available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_available(&text)
}

/// `MemAvailable` of a `/proc/meminfo` text, in bytes.
fn parse_available(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// Refuses `need` bytes of `pool` for `what` when more than `have` (None: unknown, allowed).
pub(crate) fn check(pool: Pool, what: &str, need: u64, have: Option<u64>) -> Result<()> {
    match have {
        Some(have) if need > have => Err(Error::OutOfMemory {
            what: what.to_string(),
            need,
            have,
            pool: pool.words(),
        }),
        Some(_) | None => Ok(()),
    }
}

/// Elements of every node's state carried across steps (an LSTM's cell state, a decoder's K|V
/// cache for `max_dec` steps) at `layout`'s maximum batch, saturating.
pub(crate) fn carried_elements(model: &Model, layout: &Layout, max_dec: usize) -> u64 {
    let mb = layout.max_batch as u64;
    model
        .nodes
        .iter()
        .map(|n| match n.carried() {
            Carried::Hidden(hidden) => mb.saturating_mul(hidden as u64),
            Carried::KeysValues => {
                let feat = layout.nodes[n.id.idx()].feat as u64;
                mb.saturating_mul((max_dec as u64).saturating_mul(2).saturating_mul(feat))
            }
            Carried::Nothing => 0,
        })
        .fold(0, u64::saturating_add)
}

/// Bytes of `n` `f32` values, saturating (a count from a model file may be absurd).
pub(crate) fn f32_bytes(n: u64) -> u64 {
    n.saturating_mul(4)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn available_memory_is_read_from_meminfo_and_a_plan_over_it_is_refused_with_both_numbers() {
        let text = "MemTotal:       24684092 kB\nMemFree:        23016932 kB\nMemAvailable:   24237524 kB\n";
        assert_eq!(parse_available(text), Some(24_237_524 * 1024));
        assert_eq!(parse_available("MemTotal: 1 kB\n"), None);
        assert!(check(Pool::Host, "x", 10, Some(10)).is_ok());
        assert!(check(Pool::Gpu, "x", u64::MAX, None).is_ok());
        let e = check(Pool::Gpu, "x", 11, Some(10)).unwrap_err().to_string();
        assert!(e.contains("the 10 bytes (10 B) free on the GPU"), "{e}");
        let e = check(
            Pool::Host,
            "the CPU plan of 'm' at max batch 8",
            11,
            Some(10),
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            "the CPU plan of 'm' at max batch 8 needs 11 bytes (11 B), more than the 10 bytes (10 B) this machine has available: lower the max batch, or use a machine with more memory"
        );
        assert_eq!(f32_bytes(u64::MAX), u64::MAX);
        // this machine says, on Linux
        if cfg!(target_os = "linux") {
            assert!(available().is_some_and(|b| b > 0));
        }
    }
}
