//! The CPU device: every model's reduced variant serves with forced preemptions and merges and
//! gives bit-identical outputs to serving alone.

use crate::{served_models, small};
use lazybatch::graph::zoo;
use lazybatch::run::verify::verify_cpu;

#[test]
fn verify_every_reduced_model() {
    for name in served_models() {
        let m = small(name);
        let t = std::time::Instant::now();
        let r = verify_cpu(&m, 6, 4, 3).unwrap();
        eprintln!("{name}: {r:?} in {:.2}s", t.elapsed().as_secs_f64());
        assert!(r.preemptions > 0, "{name}: no preemption forced");
        assert_eq!(r.mismatched_requests, 0, "{name}: {r:?}");
        // sub-batches at different timesteps of a layer ran together, and stayed exact
        if ["gnmt", "transformer_base", "las", "lstm_stack", "gpt2"].contains(&name) {
            assert!(
                r.cross_step > 0,
                "{name}: no cross-step merge forced: {r:?}"
            );
        }
    }
}

#[test]
fn traces_cover_every_node_and_name_the_first_divergence() {
    use lazybatch::device::cpu::CpuDevice;
    use lazybatch::run::verify::{compare_traces, trace_both};
    let m = small("gnmt");
    let (a, mut b) =
        trace_both(&m, &mut CpuDevice::new(2), &mut CpuDevice::new(2), 2, 2, 5).unwrap();
    let same = compare_traces(&m, &a, &b, 0.0).unwrap();
    assert_eq!(
        same.nodes.len(),
        m.nodes.len(),
        "every node ran and was traced"
    );
    assert!(same.nodes.iter().all(|n| n.2 == 0.0));
    assert_eq!(same.first_divergence, None);
    // a decoder step in the middle of the run differs: it is named, earlier ones are not
    let k = b.len() / 2;
    b[k].values[0] += 1.0;
    let d = compare_traces(&m, &a, &b, 1e-3).unwrap();
    let (name, _, step, input, rel) = d.first_divergence.expect("a divergence");
    assert_eq!(
        (name.as_str(), step, input),
        (m.nodes[b[k].node].name.as_str(), b[k].step, b[k].input)
    );
    assert!(rel > 0.1);
    // a different path (one execution fewer) is an error, not a comparison
    b.pop();
    assert!(compare_traces(&m, &a, &b, 1e-3).is_err());
    // and a different device seed (other weights) diverges at the very first node
    let (c, _) = trace_both(&m, &mut CpuDevice::new(3), &mut CpuDevice::new(2), 2, 2, 5).unwrap();
    let d = compare_traces(&m, &c, &a, 1e-3).unwrap();
    assert_eq!(
        d.first_divergence.map(|f| f.0),
        Some(m.nodes[a[0].node].name.clone())
    );
}

#[test]
fn batched_convolutions_match_one_by_one() {
    use lazybatch::device::cpu::CpuDevice;
    for m in [
        small("resnet50"),
        small("mobilenet_v1"),
        zoo::load("tests/fixtures/grouped_convs.toml").unwrap(),
    ] {
        let rel = crate::batched_vs_alone(&mut CpuDevice::new(6), &m, 4);
        // the CPU computes a row from that row alone: bit-identical
        assert_eq!(rel, 0.0, "{}", m.name);
    }
}

#[test]
fn verify_co_located_models() {
    // requests spread over both models; each one's final outputs are captured at the end of
    // its own model (verify fails on a request without outputs)
    let m = lazybatch::graph::Model::compose(vec![small("resnet50"), small("gnmt")]);
    let r = verify_cpu(&m, 8, 4, 3).unwrap();
    assert!(r.preemptions > 0, "{r:?}");
    assert_eq!(r.mismatched_requests, 0, "{r:?}");
    let resnet_only = verify_cpu(&small("resnet50"), 8, 4, 3).unwrap();
    assert!(
        r.values > resnet_only.values,
        "GNMT's outputs were compared too: {r:?}"
    );
}
