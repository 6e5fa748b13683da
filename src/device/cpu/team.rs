//! The CPU device's threads: the thread that calls the device and a team of helpers that wait
//! for work spinning, so that splitting a kernel costs about a microsecond instead of a sleeping
//! thread's wake-up. A node's work is cut into shares before it runs ([`Team::run`]), each
//! thread owning some and claiming them one at a time, then claiming what the others have not
//! started: a share is computed by one thread whichever claims it, so the split never changes a
//! bit, and a helper slow to wake (one that had parked) leaves its shares to the caller instead
//! of holding it up.
//!
//! Why not rayon's pool, which the rest of the crate uses: its idle threads sleep after a few
//! microseconds, and on this project's 2-core VM waking one takes tens of them; a thread outside
//! the pool also sleeps itself while the pool works. `cargo bench --bench cpu -- fork-join`
//! measures 20 µs of work on each side, after `gap` µs alone: rayon from outside costs 6–104 µs
//! over the ideal, from inside 2–62 µs (more than running both sides on one thread, 20 µs, once
//! the gap lets its threads sleep), the team about 1 µs at every gap. In interleaved pairs of
//! whole passes (3 of 3 each), a Transformer decoder step at batch 1 (37 GEMVs, short
//! single-threaded nodes between them) is 35% faster for it, MobileNet at batch 1 22%.
//!
//! A helper spins for [`LINGER`] after its last share, then parks until the next job; one job
//! at a time (a second caller while one runs, say another device on another thread, runs its
//! shares itself, one after the other). The team has [`kernel_threads`] threads, the caller
//! included: `--threads` or `RAYON_NUM_THREADS` when given, else one per core less one, left to
//! the engine's loop and the arrival source, which a wall-time run needs at the same time as
//! the kernels (at least one). On this project's 2-core VM, with both cores in the kernels the
//! same arrivals served twice for real differed by 51.9% on the mean and 71.9% on the p99
//! (MobileNet, `graph:10` and `lazy`, 0.7 × Serial's capacity, 300 requests); with one, by
//! 6.8% and 11.3% (docs/devices.md).

use std::cell::Cell;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock, TryLockError};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// How long a helper spins for the next job before it parks: longer than the single-threaded
/// stretches between a pass's parallel nodes (layer norms, attention of one token: tens of
/// microseconds), short enough that an idle server gives its cores back at once.
const LINGER: Duration = Duration::from_micros(500);

/// A job's shares, behind a pointer the helpers read while the caller waits for them.
type Job = *const (dyn Fn(usize) + Sync);

/// The caller's thread and the helpers, and the job they share.
pub struct Team {
    /// Helpers (threads 1..): each one's handle, to wake it when it parked.
    helpers: Vec<Helper>,
    /// How many of them started (the first ones).
    started: AtomicUsize,
    /// One job at a time.
    busy: Mutex<()>,
    /// The job: its generation (bumped for each job) and share count,
    /// `generation << 32 | shares`.
    word: Line<AtomicU64>,
    /// Each thread's claims on its own shares (thread `t` of `n` taking part owns shares
    /// `t, t + n, …`): how many of them are claimed, by it or by a thread that ran out of its
    /// own, tagged with the job's generation, `generation << 32 | claimed`.
    claims: Vec<Line<AtomicU64>>,
    /// The job's closure (alive while a claimed share is not done).
    job: UnsafeCell<Option<Job>>,
    /// Shares of the current job done.
    done: Line<AtomicUsize>,
    /// A share of the current job panicked (the caller panics in turn).
    panicked: AtomicBool,
}

// SAFETY: `job` is written only by the caller holding `busy`, before it publishes the job's
// claims, and read by helpers after they claim a share of it, while the caller waits for that
// share (`done`); the closure it points to is `Sync`.
unsafe impl Sync for Team {}
unsafe impl Send for Team {}

/// A value on cache lines of its own (two: the prefetcher fetches lines in pairs), so that
/// threads spinning on one atomic do not slow the writers of another.
#[repr(align(128))]
struct Line<T>(T);

impl<T> std::ops::Deref for Line<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

struct Helper {
    thread: OnceLock<Thread>,
    parked: AtomicBool,
}

thread_local! {
    /// This thread's place in the team: 0 for a caller, `h` for helper `h`.
    static INDEX: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The calling thread's place in the team: `h` on helper `h`, 0 on any other thread (the
/// caller of [`Team::run`]); below [`Team::threads`]. Per-thread scratch is indexed by it.
pub fn index() -> usize {
    INDEX.with(|i| i.get())
}

thread_local! {
    static IN_SHARE: Cell<bool> = const { Cell::new(false) };
}

/// True while this thread runs a share of a parallel job (a GEMM's columns, a kernel's rows, a
/// sub-batch's images, attention's heads): the work is then already split, and stays on it.
pub(crate) fn in_share() -> bool {
    IN_SHARE.with(|g| g.get())
}

/// Runs `f` as a share of a parallel job ([`in_share`]).
pub(crate) fn as_share<R>(f: impl FnOnce() -> R) -> R {
    /// Puts the flag back, also when `f` panics.
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            IN_SHARE.with(|g| g.set(self.0));
        }
    }
    let _restore = Restore(IN_SHARE.with(|g| g.replace(true)));
    f()
}

/// The thread count set by `--threads`, if given.
static CONFIGURED: OnceLock<usize> = OnceLock::new();

/// Sets the kernels' thread count (`--threads`), before the team's first use; false when the
/// team runs another count already.
pub fn set_kernel_threads(n: usize) -> bool {
    CONFIGURED.set(n).is_ok() || CONFIGURED.get() == Some(&n)
}

/// The CPU device's kernel threads, the caller included: `--threads` when given, else
/// `RAYON_NUM_THREADS` when set to a count, else one per core less one (module doc), at least
/// one.
pub fn kernel_threads() -> usize {
    if let Some(&n) = CONFIGURED.get() {
        return n.max(1);
    }
    // read once: the cores' count reads the cgroups' files
    static DEFAULT: OnceLock<usize> = OnceLock::new();
    *DEFAULT.get_or_init(|| {
        let env = std::env::var("RAYON_NUM_THREADS").ok();
        kernel_threads_for(
            env.as_deref().and_then(|v| v.trim().parse().ok()),
            std::thread::available_parallelism().map_or(1, |n| n.get()),
        )
    })
}

/// [`kernel_threads`] from `RAYON_NUM_THREADS` (if a positive count) and the cores.
fn kernel_threads_for(env: Option<usize>, cores: usize) -> usize {
    match env {
        Some(n) if n > 0 => n,
        _ => cores.saturating_sub(1).max(1),
    }
}

/// The process's team, started at its first use.
pub fn team() -> &'static Team {
    static TEAM: OnceLock<&'static Team> = OnceLock::new();
    TEAM.get_or_init(|| Team::start(kernel_threads()))
}

impl Team {
    /// A team of `threads` threads: the caller and `threads - 1` helpers (started now; they live
    /// as long as the process). A helper whose thread fails to start leaves the team smaller.
    fn start(threads: usize) -> &'static Team {
        let threads = threads.clamp(1, 1 << 15);
        let team: &'static Team = Box::leak(Box::new(Team {
            helpers: (1..threads)
                .map(|_| Helper {
                    thread: OnceLock::new(),
                    parked: AtomicBool::new(false),
                })
                .collect(),
            started: AtomicUsize::new(0),
            busy: Mutex::new(()),
            word: Line(AtomicU64::new(0)),
            claims: (0..threads).map(|_| Line(AtomicU64::new(0))).collect(),
            job: UnsafeCell::new(None),
            done: Line(AtomicUsize::new(0)),
            panicked: AtomicBool::new(false),
        }));
        for i in 0..team.helpers.len() {
            let spawned = std::thread::Builder::new()
                .name(format!("lazybatch-cpu-{}", i + 1))
                .spawn(move || team.serve(i + 1));
            if spawned.is_err() {
                break;
            }
            team.started.fetch_add(1, Ordering::SeqCst);
        }
        team
    }

    /// Threads in the team, the caller included.
    pub fn threads(&self) -> usize {
        self.started.load(Ordering::SeqCst) + 1
    }

    /// Runs `f(i)` for every share `i` in `0..shares` and returns when all are done. Of the `n`
    /// threads taking part (at most [`Team::threads`]; 0 the caller, `h` helper `h`), thread `t`
    /// owns shares `t, t + n, …` and claims them in order, then claims what the others have not
    /// yet claimed of theirs: the same thread usually computes the same rows node after node
    /// (they stay in its cache), and a helper slow to wake (one that had parked) leaves its
    /// shares to the others instead of holding the caller up. Each share runs as
    /// [`as_share`] (work inside it is not split again). When another job holds the
    /// team, the caller runs every share itself, in order. A share's panic is passed on to the
    /// caller once every share has finished.
    pub fn run(&self, shares: usize, f: &(dyn Fn(usize) + Sync)) {
        let n = shares.min(self.threads());
        let guard = match n > 1 && shares <= u32::MAX as usize {
            true => match self.busy.try_lock() {
                Ok(g) => Some(g),
                // a share panicked under an earlier job: the team itself is sound
                Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
                Err(TryLockError::WouldBlock) => None,
            },
            false => None,
        };
        let Some(_guard) = guard else {
            return as_share(|| (0..shares).for_each(f));
        };
        // SAFETY: a helper reads the pointer only after claiming a share, and this call waits
        // for every share (below), so the borrow outlives every use; lifetimes are erased to
        // store it.
        let job: Job = unsafe {
            std::mem::transmute::<&(dyn Fn(usize) + Sync), &'static (dyn Fn(usize) + Sync)>(f)
        };
        // SAFETY: only the holder of `busy` writes `job`, and no helper reads it now: every
        // share of the last job is done, and a share of the next is claimed only once its
        // claims are published.
        unsafe { *self.job.get() = Some(job) };
        self.done.store(0, Ordering::SeqCst);
        let generation = (self.word.load(Ordering::SeqCst) >> 32) + 1;
        for c in &self.claims[..n] {
            c.store(generation << 32, Ordering::SeqCst);
        }
        self.word
            .store(generation << 32 | shares as u64, Ordering::SeqCst);
        for h in &self.helpers[..n - 1] {
            if h.parked.load(Ordering::SeqCst) {
                if let Some(t) = h.thread.get() {
                    t.unpark();
                }
            }
        }
        // the helpers hold the closure until their shares are done: a share that panics (on
        // any thread, `run_share`) is counted done and flagged, and the panic passed on once
        // every share has finished
        self.claim_shares(0, generation, shares);
        while self.done.load(Ordering::Acquire) != shares {
            std::hint::spin_loop();
        }
        if self.panicked.swap(false, Ordering::SeqCst) {
            panic!("a share of a CPU kernel panicked");
        }
    }

    /// Thread `t`'s part of job `generation` (of `shares` shares): its own shares, then the
    /// others' still unclaimed, until none is left (a claim tagged with an earlier generation
    /// fails: that job is over).
    fn claim_shares(&self, t: usize, generation: u64, shares: usize) {
        let n = shares.min(self.threads());
        if t >= n {
            return;
        }
        for owner in (t..n).chain(0..t) {
            let owned = (shares - owner).div_ceil(n) as u64;
            let claims = &self.claims[owner];
            let mut c = claims.load(Ordering::Acquire);
            while c >> 32 == generation && c & 0xffff_ffff < owned {
                if let Err(now) =
                    claims.compare_exchange_weak(c, c + 1, Ordering::AcqRel, Ordering::Acquire)
                {
                    c = now;
                    continue;
                }
                self.run_share(owner + (c & 0xffff_ffff) as usize * n);
                c = claims.load(Ordering::Acquire);
            }
        }
    }

    /// Runs share `i` of the current job, claimed by this thread, and counts it done.
    fn run_share(&self, i: usize) {
        // SAFETY: share `i` is claimed and not done, so the job's caller is waiting for it and
        // the closure is alive.
        if let Some(f) = unsafe { (*self.job.get()).map(|j| &*j) } {
            let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| as_share(|| f(i))));
            if ran.is_err() {
                self.panicked.store(true, Ordering::SeqCst);
            }
        }
        self.done.fetch_add(1, Ordering::AcqRel);
    }

    /// Helper `h`'s life: wait for a job (spinning, then parked), claim its shares with the
    /// others.
    fn serve(&self, h: usize) -> ! {
        // its handle, before it can ever park
        let _ = self.helpers[h - 1].thread.set(std::thread::current());
        INDEX.with(|i| i.set(h));
        // generation 0 is the team's start: a job published before this thread ran is past it
        let mut seen = 0;
        loop {
            let word = self.wait_past(h, seen);
            seen = word >> 32;
            self.claim_shares(h, seen, (word & 0xffff_ffff) as usize);
        }
    }

    /// The first job word of a generation after `seen`: spinning for [`LINGER`], then parked
    /// (and spinning again after each wake-up).
    fn wait_past(&self, h: usize, seen: u64) -> u64 {
        let me = &self.helpers[h - 1];
        loop {
            let since = Instant::now();
            let mut turns = 0u32;
            loop {
                let word = self.word.load(Ordering::Acquire);
                if word >> 32 != seen {
                    return word;
                }
                turns = turns.wrapping_add(1);
                if turns.is_multiple_of(256) && since.elapsed() > LINGER {
                    break;
                }
                std::hint::spin_loop();
            }
            me.parked.store(true, Ordering::SeqCst);
            // a job published after the spin's last look but before `parked` was seen: the
            // caller either sees `parked` and unparks, or this load sees its word
            if self.word.load(Ordering::SeqCst) >> 32 == seen {
                std::thread::park();
            }
            me.parked.store(false, Ordering::SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernels_leave_a_core_to_the_engine_unless_told_otherwise() {
        assert_eq!(kernel_threads_for(None, 2), 1);
        assert_eq!(kernel_threads_for(None, 16), 15);
        assert_eq!(kernel_threads_for(None, 1), 1);
        assert_eq!(kernel_threads_for(Some(2), 2), 2);
        assert_eq!(kernel_threads_for(Some(0), 8), 7, "0 is not a count");
    }
    use std::sync::atomic::AtomicU32;

    /// A team of its own (the process's is shared with every other test's device).
    fn of(threads: usize) -> &'static Team {
        Team::start(threads)
    }

    /// Each share runs once, as a share, on a thread of the team.
    #[test]
    fn every_share_runs_once_on_a_thread_of_the_team() {
        let team = of(3);
        assert_eq!(team.threads(), 3);
        for shares in [0, 1, 2, 3, 4, 7, 64] {
            let runs: Vec<AtomicU32> = (0..shares).map(|_| AtomicU32::new(0)).collect();
            let on: Vec<AtomicUsize> = (0..shares).map(|_| AtomicUsize::new(99)).collect();
            team.run(shares, &|i| {
                assert!(crate::device::cpu::team::in_share());
                runs[i].fetch_add(1, Ordering::SeqCst);
                on[i].store(index(), Ordering::SeqCst);
            });
            for i in 0..shares {
                assert_eq!(runs[i].load(Ordering::SeqCst), 1, "share {i} of {shares}");
                assert!(on[i].load(Ordering::SeqCst) < 3, "share {i} of {shares}");
            }
        }
        assert!(
            !crate::device::cpu::team::in_share(),
            "the caller is itself again"
        );
    }

    /// Helpers that parked after [`LINGER`] wake for the next job.
    #[test]
    fn parked_helpers_wake_for_the_next_job() {
        let team = of(2);
        for _ in 0..3 {
            let done = AtomicU32::new(0);
            team.run(2, &|_| {
                done.fetch_add(1, Ordering::SeqCst);
            });
            assert_eq!(done.load(Ordering::SeqCst), 2);
            let t = Instant::now();
            while !team.helpers[0].parked.load(Ordering::SeqCst) {
                assert!(
                    t.elapsed() < Duration::from_secs(10),
                    "the helper never parked"
                );
                std::thread::sleep(LINGER);
            }
        }
    }

    /// Two callers at once: one has the team, the other runs its shares itself; every share of
    /// both runs once.
    #[test]
    fn two_callers_at_once_each_get_every_share_run() {
        let team = of(2);
        let total = AtomicU32::new(0);
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    for _ in 0..2000 {
                        team.run(3, &|_| {
                            total.fetch_add(1, Ordering::Relaxed);
                        });
                    }
                });
            }
        });
        assert_eq!(total.load(Ordering::SeqCst), 2 * 2000 * 3);
    }

    /// A share that panics, on a helper or on the caller, reaches the caller after every
    /// share has finished, and the team serves the next job.
    #[test]
    fn a_panicking_share_reaches_the_caller_and_the_team_goes_on() {
        let team = of(2);
        for bad in [0, 1] {
            let finished = AtomicU32::new(0);
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                team.run(2, &|i| {
                    if i == bad {
                        panic!("share {i} fails");
                    }
                    std::thread::sleep(Duration::from_millis(5));
                    finished.fetch_add(1, Ordering::SeqCst);
                })
            }));
            assert!(outcome.is_err(), "share {bad}'s panic was lost");
            assert_eq!(
                finished.load(Ordering::SeqCst),
                1,
                "the other share finished first"
            );
            let done = AtomicU32::new(0);
            team.run(2, &|_| {
                done.fetch_add(1, Ordering::SeqCst);
            });
            assert_eq!(done.load(Ordering::SeqCst), 2);
        }
    }
}
