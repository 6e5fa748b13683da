//! Serving allocates nothing in steady state: a counting global allocator (this test binary's
//! own, so no other test is affected) counts allocations on the serving thread from the moment
//! the warm-up requests have arrived until the run ends, with the CPU device executing every
//! node for real. The `gemm` crate allocates packing buffers inside some of its calls; those
//! are counted apart (and reported), everything else must be zero.
//!
//! The engine's virtual clock advances by each node's measured time, so the schedule (how
//! requests batch, when the policies preempt) follows the machine's speed of the moment. A
//! test that ran one schedule passed on an idle machine and missed an allocation a slower or
//! faster one reaches (the Oracle's scratch grew the first time the table held more entries
//! than ever before). So every run repeats under four paces: as measured, three times faster,
//! three times slower, and each node's time scaled by a seeded factor in [e^-1.5, e^1.5]; the
//! kernels run for real in each. The first counted allocation's backtrace is in the failure.

use lazybatch::device::cpu::CpuDevice;
use lazybatch::device::{Device, Member, Timing};
use lazybatch::engine::{self, ArrivalSource, Predrawn};
use lazybatch::graph::loader::Scale;
use lazybatch::graph::{zoo, Model, NodeStep};
use lazybatch::policy;
use lazybatch::profile::Profile;
use lazybatch::runtime::Predictor;
use lazybatch::time::{Clock, Nanos, VirtualClock};
use lazybatch::traffic::{self, Arrival};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

struct Counting;
static ALLOCS: AtomicU64 = AtomicU64::new(0);
static GEMM_ALLOCS: AtomicU64 = AtomicU64::new(0);
/// The backtrace of the first allocation counted in `ALLOCS` since the last reset.
static FIRST: Mutex<Option<String>> = Mutex::new(None);
thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
}

fn count() {
    if ARMED.with(|a| a.get()) {
        if lazybatch::device::cpu::kernels::in_library() {
            GEMM_ALLOCS.fetch_add(1, Ordering::Relaxed);
        } else if ALLOCS.fetch_add(1, Ordering::Relaxed) == 0 {
            // disarmed while the backtrace (which allocates) is taken
            ARMED.with(|a| a.set(false));
            let trace = std::backtrace::Backtrace::force_capture().to_string();
            *FIRST.lock().unwrap_or_else(|p| p.into_inner()) = Some(trace);
            ARMED.with(|a| a.set(true));
        }
    }
}

// SAFETY: forwards to the system allocator; counting has no effect on the memory returned.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count();
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        count();
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        count();
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// How the engine's clock advances for a node the CPU device executed.
#[derive(Clone, Copy, Debug)]
enum Pace {
    /// By the measured time times this factor.
    Scaled(f64),
    /// By the measured time times a factor in [e^-1.5, e^1.5] drawn for each node (xorshift,
    /// from this seed).
    Jitter(u64),
}

/// The CPU device, executing every node for real, with the time it reports paced.
struct Paced {
    cpu: CpuDevice,
    pace: Pace,
}

impl Device for Paced {
    fn name(&self) -> &'static str {
        "cpu"
    }
    fn is_virtual(&self) -> bool {
        false
    }
    fn prepare(&mut self, model: &Model, max_batch: u32) -> lazybatch::Result<()> {
        self.cpu.prepare(model, max_batch)
    }
    fn execute(
        &mut self,
        model: &Model,
        at: NodeStep,
        members: &[Member],
    ) -> lazybatch::Result<Timing> {
        let mut t = self.cpu.execute(model, at, members)?;
        let factor = match &mut self.pace {
            Pace::Scaled(f) => *f,
            Pace::Jitter(x) => {
                *x ^= *x << 13;
                *x ^= *x >> 7;
                *x ^= *x << 17;
                let u = (*x >> 11) as f64 / (1u64 << 53) as f64;
                (3.0 * u - 1.5).exp()
            }
        };
        t.time = Nanos((t.time.0 as f64 * factor).round() as u64);
        Ok(t)
    }
    fn complete(&mut self, member: &Member) {
        self.cpu.complete(member)
    }
}

/// Pre-drawn arrivals that arm the counter once `warmup` requests have been delivered.
struct Arming<'a> {
    inner: Predrawn<'a>,
    delivered: usize,
    warmup: usize,
}

impl ArrivalSource for Arming<'_> {
    fn poll(&mut self, now: Nanos) -> Option<Arrival> {
        let a = self.inner.poll(now)?;
        self.delivered += 1;
        if self.delivered == self.warmup {
            ARMED.with(|x| x.set(true));
        }
        Some(a)
    }
    fn idle(&mut self, clock: &mut dyn Clock, until: Option<Nanos>) -> bool {
        self.inner.idle(clock, until)
    }
    fn expected(&self) -> usize {
        self.inner.expected()
    }
}

/// What one run counted: allocations by lazybatch (and the first one's backtrace), inside
/// `gemm`, node executions and preemptions.
struct Counted {
    allocs: u64,
    first: Option<String>,
    gemm: u64,
    executions: u64,
    preemptions: u64,
}

fn steady_state_allocations(m: &Model, policy_spec: &str, rate: f64, pace: Pace) -> Counted {
    let mut dev = Paced {
        cpu: CpuDevice::new(1),
        pace,
    };
    dev.prepare(m, 8).unwrap();
    let prof = Profile::uniform(m, 8, Nanos::from_us(50.0));
    let pred = Predictor::new(m, &prof, 30);
    let arrivals = traffic::generate(m, (Default::default(), rate), 60, 5)
        .unwrap()
        .collect::<Vec<_>>();
    let mut pol = policy::parse(policy_spec, 8).unwrap();
    let mut src = Arming {
        inner: Predrawn::new(&arrivals),
        delivered: 0,
        warmup: 20,
    };
    ALLOCS.store(0, Ordering::Relaxed);
    GEMM_ALLOCS.store(0, Ordering::Relaxed);
    *FIRST.lock().unwrap() = None;
    let out = engine::run_source(
        &engine::Setup::new(
            m,
            &pred,
            lazybatch::time::Sla::from_ms(10.0 * 1e3).unwrap(),
            lazybatch::runtime::MaxBatch::new(8).unwrap(),
        ),
        &mut dev,
        pol.as_mut(),
        &mut VirtualClock::new(),
        &mut src,
    )
    .unwrap();
    ARMED.with(|x| x.set(false));
    assert_eq!(out.stats().completed, 60);
    Counted {
        allocs: ALLOCS.load(Ordering::Relaxed),
        first: FIRST.lock().unwrap().take(),
        gemm: GEMM_ALLOCS.load(Ordering::Relaxed),
        executions: out.counters.executions,
        preemptions: out.counters.preemptions,
    }
}

#[test]
fn serving_allocates_nothing_in_steady_state() {
    let small = Scale {
        width: 0.125,
        resolution: 0.25,
    };
    let paces = [
        Pace::Scaled(1.0),
        Pace::Scaled(1.0 / 3.0),
        Pace::Scaled(3.0),
        Pace::Jitter(0x9e37_79b9_7f4a_7c15),
    ];
    // every policy kind, each with a max batch below the server's where it takes one; not
    // `auto`, whose every choice builds its candidates afresh and serves a window of requests
    // on a table device (src/policy/auto.rs says so): it allocates when it chooses
    let policies = [
        "lazy",
        "oracle",
        "lazy:adaptive",
        "graph:1:4",
        "serial",
        "continuous:4",
        "cellular:1:4",
        "chunked:1:4",
        "dva:50:1:4",
    ];
    for (model, rate) in [
        ("resnet50", 4000.0),
        ("gnmt", 2000.0),
        ("transformer", 3000.0),
        ("las", 500.0),
    ] {
        let m = zoo::load_scaled(model, small).unwrap();
        for p in policies {
            let mut preemptions = 0;
            for pace in paces {
                let c = steady_state_allocations(&m, p, rate, pace);
                eprintln!(
                    "{model} under {p}, {pace:?}: {} allocations by lazybatch, {} inside gemm, \
                     over {} node executions (whole run)",
                    c.allocs, c.gemm, c.executions
                );
                assert_eq!(
                    c.allocs,
                    0,
                    "{model} under {p}, {pace:?}: {} allocations while serving; the first:\n{}",
                    c.allocs,
                    c.first.unwrap_or_default()
                );
                preemptions += c.preemptions;
            }
            assert!(
                preemptions > 0 || !["lazy", "oracle", "lazy:adaptive"].contains(&p),
                "{model} under {p}: no preemption at any pace, the test proves little"
            );
        }
    }
}
