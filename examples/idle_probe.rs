use lazybatch::device::cpu::CpuDevice;
use lazybatch::device::Device;
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let s = lazybatch::graph::loader::Scale {
        width: args[2].parse().unwrap(),
        resolution: args[3].parse().unwrap(),
    };
    let model = lazybatch::graph::zoo::load_scaled(&args[1], s).unwrap();
    let mut dev = CpuDevice::new(1);
    dev.prepare(&model, 4).unwrap();
    let rows = lazybatch::device::measure::after_idle(
        &mut dev,
        &model,
        model.ref_lengths(),
        11,
        &[1, 4, 16, 64, 256, 1000],
    )
    .unwrap();
    let alone =
        lazybatch::device::measure::alone_latency(&mut dev, &model, model.ref_lengths()).unwrap();
    println!("alone {:.3} ms", alone.as_ms());
    for r in rows {
        println!(
            "gap {} ms: +{:.3} ms",
            r.gap_ns / 1_000_000,
            r.extra_ns.iter().sum::<i64>() as f64 / 1e6
        );
    }
}
