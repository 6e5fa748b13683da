//! Whether a device's plan fits, asked before it is allocated: an allocation the system
//! refuses aborts the process, and one it grants beyond what is free is killed later by the
//! kernel; a plan that does not fit is refused instead, with the bytes it needs, the bytes
//! there are, and which limit says so. On the host ([`host_room`]) the room is the least of
//! the machine's available memory (`MemAvailable` in `/proc/meminfo`), what the process's own
//! address-space limit still allows (`RLIMIT_AS`, `ulimit -v`, `prlimit --as`: its soft limit
//! less the process's current size), and what its container's memory cgroup still allows
//! (`memory.max` less `memory.current` under cgroup v2, `memory.limit_in_bytes` less
//! `memory.usage_in_bytes` under v1, the tightest of the process's cgroup and its parents):
//! the project's own Kubernetes manifests set limits of 1 and 4 GiB, under which the host's
//! free memory says nothing. On the GPU it is the card's free memory (`cuMemGetInfo`). Where
//! none is known the plan is allocated unchecked.

use crate::device::layout::Layout;
use crate::error::{Error, Result};
use crate::graph::{Carried, Model};

/// Where a plan's memory comes from, and the limit that bounds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pool {
    /// The machine's memory (`MemAvailable`).
    Host,
    /// The process's address-space limit (`RLIMIT_AS`).
    AddressSpace,
    /// The container's memory cgroup limit.
    Cgroup,
    /// The GPU's (its free bytes).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    Gpu,
}

impl Pool {
    fn words(self) -> &'static str {
        match self {
            Pool::Host => "this machine has available",
            Pool::AddressSpace => "the process's address-space limit still allows (RLIMIT_AS: `ulimit -v`, `prlimit --as`)",
            Pool::Cgroup => "its container's memory limit still allows (the memory cgroup's limit less its usage)",
            Pool::Gpu => "free on the GPU",
        }
    }
}

/// Bytes of host memory the process may still allocate, and the limit that says so: the
/// least of the machine's, the address-space limit's and the memory cgroup's room; None when
/// none is known.
pub(crate) fn host_room() -> Option<(u64, Pool)> {
    let read = |p: &str| std::fs::read_to_string(p).ok();
    let machine = read("/proc/meminfo").and_then(|t| parse_available(&t));
    let address = match (read("/proc/self/limits"), read("/proc/self/status")) {
        (Some(l), Some(s)) => address_room(&l, &s),
        _ => None,
    };
    let cgroup = read("/proc/self/cgroup").and_then(|t| cgroup_room(&t, &read));
    [
        (machine, Pool::Host),
        (address, Pool::AddressSpace),
        (cgroup, Pool::Cgroup),
    ]
    .into_iter()
    .filter_map(|(b, p)| b.map(|b| (b, p)))
    .min_by_key(|&(b, _)| b)
}

/// Refuses `need` bytes of host memory for `what` when more than [`host_room`] allows.
pub(crate) fn check_host(what: &str, need: u64) -> Result<()> {
    match host_room() {
        Some((have, pool)) => check(pool, what, need, Some(have)),
        None => Ok(()),
    }
}

/// `MemAvailable` of a `/proc/meminfo` text, in bytes.
fn parse_available(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// What the soft address-space limit (`/proc/self/limits`' "Max address space") leaves above
/// the process's current size (`VmSize` of `/proc/self/status`); None when unlimited.
fn address_room(limits: &str, status: &str) -> Option<u64> {
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max address space"))?;
    let soft: u64 = line.split_whitespace().nth(3)?.parse().ok()?;
    let size = status
        .lines()
        .find(|l| l.starts_with("VmSize:"))?
        .split_whitespace()
        .nth(1)?
        .parse::<u64>()
        .ok()?
        .checked_mul(1024)?;
    Some(soft.saturating_sub(size))
}

/// A cgroup limit this large is none (cgroup v1 writes "no limit" as 2^63 less a page).
const NO_LIMIT: u64 = 1 << 60;

/// What the memory cgroups of `/proc/self/cgroup`'s text (the process's, and each parent up to
/// the root) leave: the least of each one's limit less its usage, read through `read` (a
/// path's text). v2 (`0::/path`: `memory.max`, `memory.current`) and v1 (the `memory`
/// controller's line: `memory.limit_in_bytes`, `memory.usage_in_bytes`). None when no limit
/// is set or none can be read.
fn cgroup_room(cgroups: &str, read: &dyn Fn(&str) -> Option<String>) -> Option<u64> {
    let number = |p: String| -> Option<u64> {
        match read(&p)?.trim() {
            "max" => None,
            t => t.parse().ok().filter(|&n| n < NO_LIMIT),
        }
    };
    let mut best: Option<u64> = None;
    for line in cgroups.lines() {
        let mut f = line.splitn(3, ':');
        let (Some(id), Some(ctl), Some(path)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let (root, limit, usage) = if id == "0" && ctl.is_empty() {
            ("/sys/fs/cgroup", "memory.max", "memory.current")
        } else if ctl.split(',').any(|c| c == "memory") {
            (
                "/sys/fs/cgroup/memory",
                "memory.limit_in_bytes",
                "memory.usage_in_bytes",
            )
        } else {
            continue;
        };
        // the process's cgroup and every parent up to the root: the tightest binds
        let mut dirs = vec![String::new()];
        for part in path.split('/').filter(|p| !p.is_empty()) {
            dirs.push(format!("{}/{part}", dirs[dirs.len() - 1]));
        }
        for dir in dirs {
            let at = format!("{root}{dir}");
            if let Some(max) = number(format!("{at}/{limit}")) {
                let used = number(format!("{at}/{usage}")).unwrap_or(0);
                let room = max.saturating_sub(used);
                best = Some(best.map_or(room, |b| b.min(room)));
            }
        }
    }
    best
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
            assert!(host_room().is_some_and(|(b, _)| b > 0));
        }
    }

    #[test]
    fn the_address_space_limit_leaves_its_soft_limit_less_the_process_size() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units\nMax address space         4294967296           unlimited            bytes\n";
        let status = "Name:\tlazybatch\nVmSize:\t  1048576 kB\n";
        assert_eq!(address_room(limits, status), Some((4 << 30) - (1 << 30)));
        let unlimited =
            "Max address space         unlimited            unlimited            bytes\n";
        assert_eq!(address_room(unlimited, status), None);
        assert_eq!(address_room(limits, "Name: x\n"), None);
        let e = check(Pool::AddressSpace, "the CPU plan", 11, Some(10))
            .unwrap_err()
            .to_string();
        assert!(e.contains("RLIMIT_AS"), "{e}");
    }

    #[test]
    fn a_memory_cgroup_leaves_the_tightest_limit_less_usage_of_the_process_and_its_parents() {
        let files = |pairs: &'static [(&'static str, &'static str)]| {
            move |p: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == p)
                    .map(|(_, v)| v.to_string())
            }
        };
        // v2: the pod's limit (1 GiB, 300 MiB used) binds under the slice's 4 GiB
        let v2 = files(&[
            ("/sys/fs/cgroup/kubepods/pod1/memory.max", "1073741824\n"),
            ("/sys/fs/cgroup/kubepods/pod1/memory.current", "314572800\n"),
            ("/sys/fs/cgroup/kubepods/memory.max", "4294967296\n"),
            ("/sys/fs/cgroup/kubepods/memory.current", "314572800\n"),
            ("/sys/fs/cgroup/memory.max", "max\n"),
        ]);
        assert_eq!(
            cgroup_room("0::/kubepods/pod1\n", &v2),
            Some((1 << 30) - 314_572_800)
        );
        // v1: the memory controller's line; "no limit" is 2^63 less a page
        let v1 = files(&[
            (
                "/sys/fs/cgroup/memory/job/memory.limit_in_bytes",
                "2147483648\n",
            ),
            (
                "/sys/fs/cgroup/memory/job/memory.usage_in_bytes",
                "1073741824\n",
            ),
            (
                "/sys/fs/cgroup/memory/memory.limit_in_bytes",
                "9223372036854771712\n",
            ),
        ]);
        assert_eq!(
            cgroup_room("4:memory:/job\n3:cpuset:/\n", &v1),
            Some(1 << 30)
        );
        // no limit anywhere, or nothing readable: none
        let none = files(&[("/sys/fs/cgroup/memory.max", "max\n")]);
        assert_eq!(cgroup_room("0::/\n", &none), None);
        assert_eq!(cgroup_room("0::/a/b\n", &files(&[])), None);
        let e = check(Pool::Cgroup, "the CPU plan", 11, Some(10))
            .unwrap_err()
            .to_string();
        assert!(e.contains("container's memory limit"), "{e}");
    }
}
