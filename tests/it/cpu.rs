//! The CPU device: every model's reduced variant serves with forced preemptions and merges and
//! gives bit-identical outputs to serving alone.

use crate::small;
use lazybatch::graph::zoo;
use lazybatch::verify::verify_cpu;

#[test]
fn verify_every_reduced_model() {
    for name in zoo::builtin_names() {
        let m = small(name);
        let t = std::time::Instant::now();
        let r = verify_cpu(&m, 6, 4, 3).unwrap();
        eprintln!("{name}: {r:?} in {:.2}s", t.elapsed().as_secs_f64());
        assert!(r.preemptions > 0, "{name}: no preemption forced");
        assert_eq!(r.mismatched_requests, 0, "{name}: {r:?}");
    }
}
