//! Serving allocates nothing in steady state: a counting global allocator (this test binary's
//! own, so no other test is affected) counts allocations on the serving thread from the moment
//! the warm-up requests have arrived until the run ends, with the CPU device executing every
//! node for real. The `gemm` crate allocates packing buffers inside some of its calls; those
//! are counted apart (and reported), everything else must be zero.

use lazybatch::device::cpu::CpuDevice;
use lazybatch::device::Device;
use lazybatch::engine::{self, ArrivalSource, Predrawn};
use lazybatch::graph::loader::Scale;
use lazybatch::graph::zoo;
use lazybatch::policy;
use lazybatch::profile::Profile;
use lazybatch::runtime::Predictor;
use lazybatch::time::{Clock, Nanos, VirtualClock};
use lazybatch::traffic::{self, Arrival};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

struct Counting;
static ALLOCS: AtomicU64 = AtomicU64::new(0);
static GEMM_ALLOCS: AtomicU64 = AtomicU64::new(0);
thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
}

fn count() {
    if ARMED.with(|a| a.get()) {
        if lazybatch::device::cpu::kernels::in_library() {
            GEMM_ALLOCS.fetch_add(1, Ordering::Relaxed);
        } else {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
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

fn steady_state_allocations(
    model: &str,
    scale: Scale,
    policy_spec: &str,
    rate: f64,
) -> (u64, u64, u64) {
    let m = zoo::load_scaled(model, scale).unwrap();
    let mut dev = CpuDevice::new(1);
    dev.prepare(&m, 8).unwrap();
    let prof = Profile::uniform(&m, 8, Nanos::from_us(50.0));
    let pred = Predictor::new(&m, &prof, 30);
    let arrivals = traffic::generate(&m, (Default::default(), rate), 60, 5)
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
    let out = engine::run_source(
        &engine::Setup::new(
            &m,
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
    assert!(
        out.counters.preemptions > 0 || !policy_spec.starts_with("lazy"),
        "{model}: no preemption, the test proves little"
    );
    (
        ALLOCS.load(Ordering::Relaxed),
        GEMM_ALLOCS.load(Ordering::Relaxed),
        out.counters.executions,
    )
}

#[test]
fn serving_allocates_nothing_in_steady_state() {
    let small = Scale {
        width: 0.125,
        resolution: 0.25,
    };
    for (model, rate) in [
        ("resnet50", 4000.0),
        ("gnmt", 2000.0),
        ("transformer", 3000.0),
        ("las", 500.0),
    ] {
        for p in ["lazy", "oracle", "graph:1:4", "serial"] {
            let (n, g, execs) = steady_state_allocations(model, small, p, rate);
            eprintln!("{model} under {p}: {n} allocations by lazybatch, {g} inside gemm, over {execs} node executions (whole run)");
            assert_eq!(n, 0, "{model} under {p}: {n} allocations while serving");
        }
    }
}
