//! The statistics a run reports, against closed forms: Poisson arrival moments, the M/D/1 mean
//! wait (Pollaczek–Khinchine) for Serial on a constant-time device, and exact percentiles,
//! means and throughput where every latency is known in advance.

use lazybatch::engine;
use lazybatch::graph::{zoo, Model};
use lazybatch::metrics::{KeepRecords, Stats};
use lazybatch::policy;
use lazybatch::profile::Profile;
use lazybatch::runtime::Predictor;
use lazybatch::time::{Nanos, VirtualClock};
use lazybatch::traffic::Process;
use lazybatch::traffic::{self, Arrival};

use crate::UnitDevice;

fn eight_nodes() -> Model {
    zoo::load(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/eight_nodes.toml"
    ))
    .unwrap()
}

/// Serves `arrivals` under `policy` on the unit device (the eight-node graph serves a request
/// in exactly 8 ms).
fn serve(policy: &str, arrivals: &[Arrival]) -> Stats {
    let m = eight_nodes();
    let pred = Predictor::new(&m, &Profile::uniform(&m, 8, Nanos::from_ms(1.0)), 1);
    let mut pol = policy::parse(policy, 8).unwrap();
    let setup = engine::Setup {
        keep: KeepRecords::default(),
        ..engine::Setup::new(&m, &pred, crate::sla(1e4), crate::mb(8))
    };
    engine::run(
        &setup,
        &mut UnitDevice,
        pol.as_mut(),
        &mut VirtualClock::new(),
        arrivals,
    )
    .unwrap()
    .stats()
}

#[test]
fn poisson_gaps_have_the_exponential_moments() {
    // exponential gaps at rate λ: mean 1/λ, standard deviation 1/λ. Over 50,000 gaps one
    // standard error of the mean is 0.45% and of the deviation 0.63%: 2% and 3% are > 4σ
    let (rate, n) = (200.0, 50_000);
    let times: Vec<f64> = traffic::generate(&eight_nodes(), (Default::default(), rate), n, 11)
        .unwrap()
        .map(|a| a.time.as_ms())
        .collect();
    assert_eq!(times.len(), n);
    let gaps: Vec<f64> = times.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps.iter().all(|&g| g >= 0.0), "arrivals are sorted");
    let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
    let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64;
    assert!(
        (mean / 5.0 - 1.0).abs() < 0.02,
        "mean gap {mean} ms, want 5"
    );
    assert!(
        (var.sqrt() / 5.0 - 1.0).abs() < 0.03,
        "sd {} ms, want 5",
        var.sqrt()
    );
    // memoryless: the fraction of gaps over 1/λ is e^-1
    let over = gaps.iter().filter(|&&g| g > 5.0).count() as f64 / gaps.len() as f64;
    assert!((over - (-1.0f64).exp()).abs() < 0.01, "{over}");
}

#[test]
fn serial_on_a_constant_device_is_m_d_1() {
    // Pollaczek–Khinchine for deterministic service S at load ρ: mean wait ρS / (2(1 − ρ)),
    // so mean latency S + ρS / (2(1 − ρ)); throughput equals the arrival rate below capacity
    let s = 8.0;
    for rho in [0.5, 0.7] {
        let rate = rho / (s / 1e3);
        let want = s + rho * s / (2.0 * (1.0 - rho));
        let mut means = Vec::new();
        let mut tps = Vec::new();
        for seed in 1..=4 {
            let arrivals: Vec<Arrival> =
                traffic::generate(&eight_nodes(), (Default::default(), rate), 40_000, seed)
                    .unwrap()
                    .collect();
            let st = serve("serial", &arrivals);
            assert_eq!(st.completed, 40_000);
            means.push(st.latency_ms.mean);
            tps.push(st.throughput_rps);
        }
        let mean = means.iter().sum::<f64>() / 4.0;
        let tp = tps.iter().sum::<f64>() / 4.0;
        assert!(
            (mean / want - 1.0).abs() < 0.04,
            "ρ = {rho}: mean {mean} ms, M/D/1 {want}"
        );
        assert!(
            (tp / rate - 1.0).abs() < 0.02,
            "ρ = {rho}: {tp} req/s for {rate}"
        );
    }
}

#[test]
fn burstier_arrivals_wait_longer_as_kingman_says() {
    // Serial on a constant 8 ms device at load 0.7 under gamma gaps of CV c: Kingman's
    // approximation puts the mean wait at ρ/(1 − ρ) · (c² + 0)/2 · S, so relative to Poisson
    // (c = 1) a wait of c² times as long: CV 2 waits about 4× as long, CV 0.5 about a quarter
    let s = 8.0;
    let rate = 0.7 / (s / 1e3);
    let wait = |process: Process| {
        let mut w = 0.0;
        for seed in 1..=4 {
            let arrivals: Vec<Arrival> =
                traffic::generate(&eight_nodes(), (process, rate), 40_000, seed)
                    .unwrap()
                    .collect();
            let st = serve("serial", &arrivals);
            assert_eq!(st.completed, 40_000, "{process}");
            w += (st.latency_ms.mean - s) / 4.0;
        }
        w
    };
    let poisson = wait(Process::Poisson);
    let (bursty, regular) = (
        wait(Process::Gamma { cv: 2.0 }),
        wait(Process::Gamma { cv: 0.5 }),
    );
    eprintln!("mean wait: poisson {poisson:.2} ms, CV 2 {bursty:.2}, CV 0.5 {regular:.2}");
    assert!(
        (3.0..5.0).contains(&(bursty / poisson)),
        "CV 2: {bursty} vs {poisson}"
    );
    assert!(
        (0.15..0.4).contains(&(regular / poisson)),
        "CV 0.5: {regular} vs {poisson}"
    );
}

/// A device with no batching gain: every node (but the input) takes 1 ms per member.
struct LinearDevice;
impl lazybatch::device::Device for LinearDevice {
    fn name(&self) -> &'static str {
        "linear"
    }
    fn is_virtual(&self) -> bool {
        true
    }
    fn prepare(&mut self, _: &Model, _: u32) -> lazybatch::Result<()> {
        Ok(())
    }
    fn execute(
        &mut self,
        _: &Model,
        at: lazybatch::graph::NodeStep,
        members: &[lazybatch::device::Member],
    ) -> lazybatch::Result<lazybatch::device::Timing> {
        let ms = if at.node.0 == 0 {
            0.0
        } else {
            members.len() as f64
        };
        Ok(lazybatch::device::Timing {
            time: Nanos::from_ms(ms),
            ..lazybatch::device::Timing::default()
        })
    }
}

/// Serves `arrivals` under `policy` on [`LinearDevice`], profiled as it is (a batch costs as
/// much as its members one by one).
fn serve_linear(policy: &str, arrivals: &[Arrival]) -> engine::Outcome {
    let m = eight_nodes();
    let mut prof = Profile::uniform(&m, 8, Nanos::from_ms(1.0));
    for n in prof.nodes.iter_mut().skip(1) {
        n.latency_ns = (1..=8u64).map(|b| b * 1_000_000).collect();
    }
    prof.nodes[0].latency_ns = vec![0; 8];
    let pred = Predictor::new(&m, &prof, 1);
    let mut pol = policy::parse(policy, 8).unwrap();
    let setup = engine::Setup::new(&m, &pred, crate::sla(1e4), crate::mb(8));
    engine::run(
        &setup,
        &mut LinearDevice,
        pol.as_mut(),
        &mut VirtualClock::new(),
        arrivals,
    )
    .unwrap()
}

#[test]
fn adaptive_lazy_never_preempts_without_a_batching_gain() {
    // the eight-node graph on a device whose batches cost as much as their members one by one,
    // profiled as such: LazyB's slack gate lets it preempt (a generous SLA), the adaptive rule
    // finds no preemption that lowers the total completion time
    let arrivals: Vec<Arrival> =
        traffic::generate(&eight_nodes(), (Process::Poisson, 100.0), 3000, 5)
            .unwrap()
            .collect();
    let (lazy, adaptive) = (
        serve_linear("lazy", &arrivals),
        serve_linear("lazy:adaptive", &arrivals),
    );
    assert!(lazy.counters.preemptions > 100, "{:?}", lazy.counters);
    assert_eq!(adaptive.counters.preemptions, 0);
    assert_eq!(adaptive.stats().completed, 3000);
    // without preemptions it serves first come first served: no worse a mean than LazyB's LIFO
    assert!(adaptive.stats().latency_ms.mean <= lazy.stats().latency_ms.mean);
}

#[test]
fn adaptive_lazy_starts_the_group_that_lowers_the_total_completion_time() {
    // eight requests at t = 0. Without a batching gain (8 ms a request, 8b ms a batch of b)
    // one at a time finishes them at 8, 16, ..., 64 ms (mean 36) where one batch of eight
    // finishes all at 64 ms: the adaptive LazyB serves them as Serial does, LazyB as one batch
    let burst: Vec<Arrival> = (0..8).map(|_| Arrival::default()).collect();
    let mean = |p: &str| serve_linear(p, &burst).stats().latency_ms.mean;
    assert_eq!(mean("serial"), 36.0);
    assert_eq!(mean("lazy:adaptive"), 36.0);
    assert_eq!(mean("lazy"), 64.0);
    // when a batch costs what one input does (8 ms at every size), one batch of eight
    let free = serve("lazy:adaptive", &burst);
    assert_eq!(free.latency_ms.mean, 8.0);
    assert_eq!(free.mean_batch_size, 8.0);
}

#[test]
fn known_latencies_give_exact_percentiles_mean_and_throughput() {
    // 100 requests at t = 0 under Serial on an 8 ms device: request i finishes at 8(i + 1)
    // ms, so the latencies are 8, 16, ..., 800 ms: mean 404, p50 the 50th (400), p90 the
    // 90th (720), p99 the 99th (792), max 800; 100 completions over 0.8 s is 125 req/s. The
    // histogram keeps 3 significant digits (values within 0.1%).
    let burst: Vec<Arrival> = (0..100).map(|_| Arrival::default()).collect();
    let st = serve("serial", &burst);
    let l = &st.latency_ms;
    assert_eq!(
        l.mean, 404.0,
        "the mean is exact (a sum, not the histogram)"
    );
    assert_eq!(l.max, 800.0, "the maximum is exact");
    for (got, want) in [
        (l.p50, 400.0),
        (l.p90, 720.0),
        (l.p95, 760.0),
        (l.p99, 792.0),
    ] {
        assert!((got / want - 1.0).abs() < 1e-3, "{got} vs {want}");
    }
    assert!(
        (st.throughput_rps - 125.0).abs() < 1e-9,
        "{}",
        st.throughput_rps
    );
    assert_eq!(st.sla_violation_rate, 0.0);
    // spaced 10 ms apart no one waits: every latency is the service time
    let spaced: Vec<Arrival> = (0..50)
        .map(|i| Arrival {
            time: Nanos::from_ms(10.0 * f64::from(i)),
            ..Arrival::default()
        })
        .collect();
    let st = serve("serial", &spaced);
    let l = &st.latency_ms;
    assert_eq!((l.mean, l.max), (8.0, 8.0));
    assert!([l.p50, l.p99].iter().all(|&p| (p / 8.0 - 1.0).abs() < 1e-3));
}

/// Every request's departure as the engine's observer hears of it.
#[derive(Debug, Default)]
struct Departures(std::sync::Mutex<Vec<(u32, engine::Left)>>);

impl engine::Observer for Departures {
    fn left(&self, q: &lazybatch::runtime::Request, how: engine::Left) {
        self.0.lock().unwrap().push((q.id.0, how));
    }
}

#[test]
fn the_observer_hears_of_every_request_once_completed_or_rejected_with_its_reason() {
    // 100 requests at t = 0 into a queue of 20, with shedding and a 30 ms SLA on the 8 ms
    // device: the full queue turns the rest away as they arrive, shedding drops queued ones
    // that can no longer finish in time; the observer's account matches the run's, request
    // by request
    let m = eight_nodes();
    let pred = Predictor::new(&m, &Profile::uniform(&m, 8, Nanos::from_ms(1.0)), 1);
    let heard = Departures::default();
    let setup = engine::Setup {
        max_pending: lazybatch::runtime::MaxPending::new(20).unwrap(),
        shed: true,
        observer: Some(&heard),
        ..engine::Setup::new(&m, &pred, crate::sla(30.0), crate::mb(8))
    };
    let burst: Vec<Arrival> = (0..100).map(|_| Arrival::default()).collect();
    let mut pol = policy::parse("serial", 8).unwrap();
    let out = engine::run(
        &setup,
        &mut UnitDevice,
        pol.as_mut(),
        &mut VirtualClock::new(),
        &burst,
    )
    .unwrap();
    let st = out.stats();
    let heard = heard.0.lock().unwrap();
    let mut ids: Vec<u32> = heard.iter().map(|h| h.0).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!((heard.len(), ids.len()), (100, 100), "each request once");
    let count = |f: &dyn Fn(&engine::Left) -> bool| heard.iter().filter(|h| f(&h.1)).count() as u64;
    use lazybatch::runtime::Rejection;
    assert_eq!(
        count(&|l| matches!(l, engine::Left::Completed(_))),
        st.completed
    );
    assert_eq!(
        count(&|l| *l == engine::Left::Rejected(Rejection::QueueFull)),
        st.rejected_queue_full
    );
    assert_eq!(
        count(&|l| *l == engine::Left::Rejected(Rejection::Shed)),
        st.rejected_shed
    );
    assert!(st.rejected_queue_full > 0 && st.rejected_shed > 0, "{st:?}");
}
