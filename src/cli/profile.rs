//! `lazybatch profile`: the per-node latency table of a model on a device.

use super::{emit, lengths_for, DeviceArgs, ModelArgs};
use anyhow::Result;
use clap::Args;
use lazybatch::device::open::{open, Opened};
use lazybatch::graph::loader::MAX_BATCH;
use lazybatch::graph::op::Op;
use lazybatch::graph::{Lengths, Model, NodeId};
use lazybatch::profile::Profile;
use lazybatch::time::Nanos;
use serde_json::json;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub(super) struct ProfileArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    dev: DeviceArgs,
    /// Largest batch size to profile, in [1, 4096].
    #[arg(long, default_value_t = 64, allow_negative_numbers = true)]
    max_batch: i64,
    /// Encoder steps (seq2seq models; default: the model's reference length).
    #[arg(long, allow_negative_numbers = true)]
    enc_steps: Option<i64>,
    /// Decoder steps (seq2seq models; default: the model's reference length).
    #[arg(long, allow_negative_numbers = true)]
    dec_steps: Option<i64>,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
    /// Save the table to FILE (JSON) for `run`/`compare --profile FILE`.
    #[arg(long, value_name = "FILE")]
    save: Option<PathBuf>,
}

/// The per-node latency table, Algorithm 1 and the batching curve on one device.
pub(super) fn run(a: ProfileArgs, progress: lazybatch::progress::Mode) -> Result<()> {
    let mut o = String::new();
    let model = a.model.load()?;
    let max_batch = super::in_range("--max-batch", a.max_batch, 1, i64::from(MAX_BATCH))? as u32;
    let len = lengths_for(&model, a.enc_steps, a.dec_steps)?;
    let reps = super::in_range("--reps", a.dev.reps, 1, 1000)? as u32;
    // on the NPU model, also the latency of one request served alone: at these lengths, and
    // averaged over WMT 2019's length pairs (Table II's "single-batch latency")
    let mut alone = None;
    // the NPU model's configuration, for the header ("npu (paper)")
    let mut config = None;
    let prof = match open(&a.dev.choice()?)? {
        Opened::Npu(mut dev, name) => {
            config = Some(name);
            let p = Profile::measure(&mut dev, &model, max_batch, len)?;
            if model.parts.len() == 1 {
                let at = lazybatch::device::measure::alone_latency(&mut dev, &model, len)?;
                let (mean, words) =
                    lazybatch::device::measure::wmt19_mean_alone_latency(&mut dev, &model)?;
                alone = Some((at, mean, words));
            }
            p
        }
        // a table's own table, at these lengths (every size: it answers in O(1))
        Opened::Table(mut dev) => Profile::measure(&mut dev, &model, max_batch, len)?,
        Opened::Real(mut dev) => {
            let how = lazybatch::device::measure::Sampling {
                reps,
                order: a.dev.order()?,
                progress,
                variation: a.dev.variation()?,
            };
            Profile::measure_sampled(dev.as_mut(), &model, max_batch, &[len], how)?
        }
    };
    if let Some(p) = &a.save {
        prof.save(p)?;
        eprintln!("saved the latency table to {}", p.display());
    }
    let shown = Shown {
        model: &model,
        prof: &prof,
        max_batch,
        len,
        reps,
        order: a.dev.order()?,
        alone,
        config,
    };
    if a.json {
        out!(o, "{}", serde_json::to_string_pretty(&json_of(&shown))?);
    } else {
        text(&mut o, &shown);
    }
    emit(&o)
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(n - 1).collect::<String>())
    }
}

/// What `profile` shows.
struct Shown<'a> {
    model: &'a Model,
    prof: &'a Profile,
    max_batch: u32,
    len: Lengths,
    reps: u32,
    /// How a real device's nodes were timed.
    order: lazybatch::device::measure::Order,
    /// On the NPU model: served alone at these lengths, over WMT 2019's lengths, mean words.
    alone: Option<Alone>,
    /// On the NPU model: its configuration's name.
    config: Option<String>,
}

/// A request served alone: at the profiled lengths, averaged over WMT 2019's lengths, and those
/// lengths' mean in words (seq2seq models).
type Alone = (Nanos, Nanos, Option<(f64, f64)>);

/// The input nodes' share of a whole-graph pass at batch `b` (their table times, each as many
/// times as a request runs it): the part of our time that a peer such as PyTorch, whose input
/// is on the card before its clock starts, does not count.
fn input_share(model: &Model, prof: &Profile, b: u32, len: Lengths) -> Nanos {
    let ns: u64 = prof
        .nodes
        .iter()
        .filter(|n| matches!(model.nodes[n.id as usize].op, Op::Input { .. }))
        .map(|n| n.latency_ns[b as usize - 1] * u64::from(model.repeats(NodeId(n.id), len)))
        .sum();
    Nanos(ns)
}

fn json_of(sh: &Shown) -> serde_json::Value {
    let (model, prof, max_batch, len, alone) = (sh.model, sh.prof, sh.max_batch, sh.len, sh.alone);
    let algorithm1 = lazybatch::runtime::Predictor::new(model, prof, len.dec);
    let single = algorithm1.single_input(len);
    let curve = algorithm1.batch_curve(len);
    let nodes: Vec<_> = prof
        .nodes
        .iter()
        .map(|n| {
            let mut o = json!({
                "id": n.id, "name": n.name, "op": n.op, "class": n.class,
                "latency_us": n.latency_ns.iter().map(|&x| x as f64 / 1e3).collect::<Vec<_>>(),
            });
            if !n.compute_cycles.is_empty() {
                o["compute_cycles"] = json!(n.compute_cycles);
                o["memory_cycles"] = json!(n.memory_cycles);
            }
            o
        })
        .collect();
    json!({
        "model": model.name,
        "device": prof.device,
        "max_batch": max_batch,
        "enc_steps": model.seq.as_ref().map(|_| len.enc),
        "dec_steps": model.seq.as_ref().map(|_| len.dec),
        "single_input_latency_us": single.as_us(),
        "alone_latency_us": alone.map(|a| a.0.as_us()),
        "wmt19_mean_alone_latency_us": alone.and_then(|a| a.2.map(|_| a.1.as_us())),
        "wmt19_mean_words": alone.and_then(|a| a.2.map(|w| [w.0, w.1])),
        "batch_curve": curve.iter().map(|(b, t, tp)| json!({"batch": b, "latency_us": t.as_us(), "input_us": input_share(model, prof, *b, len).as_us(), "throughput_rps": tp})).collect::<Vec<_>>(),
        "nodes": nodes,
    })
}

fn text(o: &mut String, sh: &Shown) {
    let (model, prof, max_batch, len, reps, alone) =
        (sh.model, sh.prof, sh.max_batch, sh.len, sh.reps, sh.alone);
    let a_order = sh.order;
    let algorithm1 = lazybatch::runtime::Predictor::new(model, prof, len.dec);
    let single = algorithm1.single_input(len);
    let curve = algorithm1.batch_curve(len);
    out!(
        o,
        "{} on {}: {} nodes{}",
        model.name,
        match &sh.config {
            Some(c) => format!("{} ({c})", prof.device),
            None => prof.device.clone(),
        },
        model.nodes.len(),
        if model.is_seq2seq() {
            format!(", {} encoder / {} decoder steps", len.enc, len.dec)
        } else {
            String::new()
        }
    );
    if prof.device != "npu" {
        let order = match a_order {
            lazybatch::device::measure::Order::InModelOrder => "whole passes in model order",
            lazybatch::device::measure::Order::Isolated => "each node's runs one after another",
        };
        let sizes: Vec<String> = lazybatch::device::measure::sampled_sizes(max_batch)
            .iter()
            .map(u32::to_string)
            .collect();
        out!(
            o,
            "measured: median of {reps} runs at batch {} ({order}); sizes in between interpolated",
            sizes.join(", ")
        );
    }
    out!(
        o,
        "single-input latency (Algorithm 1): {:.3} ms",
        single.as_ms()
    );
    if let Some((at, mean, words)) = alone {
        match words {
            Some((en, de)) => out!(
                o,
                "served alone: {:.3} ms at these lengths; {:.3} ms on average over WMT 2019 newstest lengths (mean {en:.2} / {de:.2} words)",
                at.as_ms(),
                mean.as_ms()
            ),
            None => out!(o, "served alone: {:.3} ms", at.as_ms()),
        }
    }
    out!(o,);
    let show: Vec<u32> = [1u32, 2, 4, 8, 16, 32, 64]
        .into_iter()
        .filter(|&b| b <= max_batch)
        .collect();
    out!(
        o,
        "batching curve (whole graph, every member at the same lengths):"
    );
    out!(
        o,
        "{:>6} {:>14} {:>16} {:>12} {:>12}",
        "batch",
        "latency (ms)",
        "throughput (/s)",
        "per input (ms)",
        "inputs (ms)"
    );
    for &(b, t, tp) in &curve {
        if show.contains(&b) || b == max_batch {
            out!(
                o,
                "{:>6} {:>14.3} {:>16.1} {:>12.4} {:>12.3}",
                b,
                t.as_ms(),
                tp,
                t.as_ms() / f64::from(b),
                input_share(model, prof, b, len).as_ms()
            );
        }
    }
    out!(
        o,
        "(inputs: the input nodes' share of the latency, making or copying the requests' values; \
         a peer that times its forward pass alone leaves it out)"
    );
    out!(
        o,
        "\nper-node latency (us) at batch {show:?}; x = runs per request:"
    );
    outp!(o, "{:>4} {:<28} {:<10} {:>5}", "id", "node", "op", "x");
    for b in &show {
        outp!(o, " {:>9}", format!("b={b}"));
    }
    out!(o,);
    for n in &prof.nodes {
        let rep = model.repeats(NodeId(n.id), len);
        outp!(
            o,
            "{:>4} {:<28} {:<10} {:>5}",
            n.id,
            truncate(&n.name, 28),
            n.op,
            rep
        );
        for &b in &show {
            outp!(o, " {:>9.2}", n.latency_ns[b as usize - 1] as f64 / 1e3);
        }
        out!(o,);
    }
}
