//! The decoder-only language model (`gpt2`): its key/value cache computes what recomputing the
//! whole sequence computes, on the CPU device, and its requests draw the Azure trace's lengths.

use lazybatch::device::capture::CaptureMode;
use lazybatch::device::cpu::CpuDevice;
use lazybatch::device::exchange::Exchange;
use lazybatch::device::{Device, Member};
use lazybatch::graph::loader::Scale;
use lazybatch::graph::{zoo, Lengths, Model};
use std::sync::Arc;

/// GPT-2 at a sixteenth of its width (d = 48, 12 heads of 4, a vocabulary of 3,141): every
/// layer and op of the full model.
fn tiny_gpt2() -> Model {
    let s = Scale {
        width: 1.0 / 16.0,
        resolution: 1.0,
    };
    zoo::load_scaled("gpt2", s).unwrap()
}

/// Serves one request alone (its prompt from `x` under `key`) at `len` through every unit of
/// the model, and returns its captured outputs: the prefill's logits and first token, then each
/// decode step's logits and token.
fn alone(dev: &mut CpuDevice, m: &Model, key: u64, len: Lengths) -> Vec<f32> {
    dev.set_capture(CaptureMode::Outputs);
    for u in m.unrolled(len) {
        let member = Member {
            slot: 1,
            len,
            input: key,
            step: u.step,
        };
        dev.execute(m, u, &[member]).unwrap();
    }
    let out = dev.take_captured().outputs.remove(&key).unwrap();
    dev.set_capture(CaptureMode::Off);
    out
}

/// Relative difference of two logit rows: the largest difference over the largest magnitude.
fn rel_diff(a: &[f32], b: &[f32]) -> f32 {
    let scale = a.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let diff = a
        .iter()
        .zip(b)
        .fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
    diff / scale
}

/// A prompt's first decode steps, each over the prompt's keys and values and its cache, give the
/// logits a prefill of the prompt extended by the tokens chosen so far gives: the cache holds
/// what recomputing the sequence would (positions after the prompt, masked attention, shared
/// parameters). Different summation orders (row GEMMs against a one-row step): 1e-4 relative.
#[test]
fn a_decode_step_predicts_what_a_prefill_of_the_longer_prompt_predicts() {
    let m = tiny_gpt2();
    let vocab = 3141;
    let mut dev = CpuDevice::new(11);
    dev.prepare(&m, 2).unwrap();
    let x = Arc::new(Exchange::new());
    dev.set_exchange(Some(x.clone()));
    let prompt: Vec<f32> = (0..23).map(|i| ((i * 977 + 5) % vocab) as f32).collect();
    let steps = 6;
    x.put_input(1, prompt.clone());
    let long = alone(
        &mut dev,
        &m,
        1,
        Lengths {
            enc: prompt.len() as u32,
            dec: steps,
        },
    );
    // [first logits, first token], then [logits, token] per decode step
    let row = vocab as usize + 1;
    assert_eq!(long.len(), row * (steps as usize + 1));
    let token = |k: usize| long[k * row + vocab as usize];
    let logits = |k: usize| &long[k * row..k * row + vocab as usize];
    for s in [1, 2, steps as usize] {
        // the prompt and the first s tokens, prefilled: its first token is what the s-th
        // decode step chose, from the same logits
        let mut longer = prompt.clone();
        longer.extend((0..s).map(token));
        let key = 100 + s as u64;
        x.put_input(key, longer.clone());
        let short = alone(
            &mut dev,
            &m,
            key,
            Lengths {
                enc: longer.len() as u32,
                dec: 1,
            },
        );
        let d = rel_diff(&short[..vocab as usize], logits(s));
        assert!(d < 1e-4, "step {s}: relative difference {d:e}");
        assert_eq!(short[vocab as usize], token(s), "step {s}");
    }
    assert_eq!(x.misfits(), 0);
}

/// The tokens of a request are spread over its prompt's positions in order: a prompt that differs
/// in one early token changes what follows (the prefill attends over every row), and the
/// last prompt row decides the first token (a prompt served as its prefix plus one more row
/// changes the first token's logits).
#[test]
fn the_prefill_reads_every_prompt_row_and_chooses_from_the_last() {
    let m = tiny_gpt2();
    let mut dev = CpuDevice::new(11);
    dev.prepare(&m, 2).unwrap();
    let x = Arc::new(Exchange::new());
    dev.set_exchange(Some(x.clone()));
    let prompt: Vec<f32> = (0..17).map(|i| ((i * 131 + 9) % 3141) as f32).collect();
    let len = |p: &[f32]| Lengths {
        enc: p.len() as u32,
        dec: 1,
    };
    let mut run = |key: u64, p: &[f32]| {
        x.put_input(key, p.to_vec());
        alone(&mut dev, &m, key, len(p))[..3141].to_vec()
    };
    let base = run(1, &prompt);
    let mut early = prompt.clone();
    early[2] = (early[2] + 1.0) % 3141.0;
    assert!(rel_diff(&base, &run(2, &early)) > 1e-3);
    let shorter = &prompt[..16];
    assert!(rel_diff(&base, &run(3, shorter)) > 1e-3);
    // and the same prompt again: the same logits, bit for bit
    assert_eq!(base, run(4, &prompt));
}

/// A decoder-only model in a dozen nodes: a masked prefill layer, the first token from its last
/// row, and a decode loop over the prompt's keys and values sharing the prefill's parameters.
const TINY: &str = r#"name = "d"
[seq2seq]
lengths = "azure-conv-2023"
ref_enc = 8
ref_dec = 4
max_enc = 60
max_dec = 60
max_context = 64

[[node]]
name = "prompt"
op = "input"
shape = [1]
seq = "src"
tokens = true

[[node]]
name = "wte"
op = "embedding"
inputs = ["prompt"]
vocab = 50
dim = 8
positional = "learned"
positions = 64

[[node]]
name = "qkv"
op = "linear"
inputs = ["wte"]
out_features = 24

[[node]]
name = "attn"
op = "attention"
inputs = ["qkv"]
mode = "causal"
heads = 2

[[node]]
name = "last"
op = "take"
inputs = ["attn"]
row = -1

[[node]]
name = "logits0"
op = "linear"
inputs = ["last"]
out_features = 50
tied = "wte"

[[node]]
name = "first"
op = "argmax"
inputs = ["logits0"]

[[node]]
name = "tok"
op = "embedding"
inputs = ["next@prev|first"]
class = "decoder"
shares = "wte"
vocab = 50
dim = 8
positional = "learned"
positions = 64
after_src = true

[[node]]
name = "dqkv"
op = "linear"
inputs = ["tok"]
class = "decoder"
shares = "qkv"
out_features = 24

[[node]]
name = "dattn"
op = "attention"
inputs = ["dqkv", "qkv"]
class = "decoder"
mode = "self"
heads = 2

[[node]]
name = "logits"
op = "linear"
inputs = ["dattn"]
class = "decoder"
out_features = 50
tied = "wte"

[[node]]
name = "next"
op = "argmax"
inputs = ["logits"]
class = "decoder"
"#;

fn parse(text: &str) -> lazybatch::Result<Model> {
    lazybatch::graph::loader::parse_model(text, std::path::Path::new("d.toml"))
}

/// `TINY` with `from` replaced by `to` (once), refused with `want` in its error, which names
/// the file and a line.
fn refused(from: &str, to: &str, want: &str) {
    assert!(TINY.contains(from), "{from}");
    let e = parse(&TINY.replacen(from, to, 1)).unwrap_err().to_string();
    assert!(
        e.starts_with("d.toml:") && e.contains(want),
        "{from} -> {to}: {e}"
    );
}

#[test]
fn a_decoder_only_models_file_reads_as_a_prefill_and_a_decode_loop() {
    use lazybatch::graph::{Keys, Rows};
    let m = parse(TINY).unwrap();
    let node = |name: &str| m.find(name).unwrap();
    assert_eq!(node("attn").keys, Keys::Causal);
    assert_eq!(node("dattn").keys, Keys::PrefixCache(Rows::Src { div: 1 }));
    // the decode layers use the prefill's parameters: they count once
    assert_eq!(node("dqkv").shares, Some(node("qkv").id));
    assert_eq!(
        (node("dqkv").cost.params, node("qkv").cost.params),
        (0, 8 * 24)
    );
    assert_eq!(m.params(), 50 * 8 + 64 * 8 + 8 * 24);
    let s = m.seq.as_ref().unwrap();
    assert!(s.prefill_token && s.max_context == Some(64));
    // a request of 5 decode steps outputs 6 tokens
    assert_eq!(m.tokens_of(0, Lengths { enc: 9, dec: 5 }), 6);
}

#[test]
fn a_decoder_only_models_file_is_refused_where_it_is_wrong() {
    refused(
        "shares = \"qkv\"",
        "shares = \"dattn\"",
        "is not an earlier node",
    );
    refused(
        "shares = \"qkv\"",
        "shares = \"logits0\"",
        "shares only the parameters of a linear with the same sizes and options (untied)",
    );
    refused(
        "mode = \"self\"",
        "mode = \"self\"\nshares = \"attn\"",
        "op attention has no parameters to share",
    );
    refused(
        "shares = \"qkv\"\nout_features = 24",
        "shares = \"qkv\"\nout_features = 16",
        "a linear shares only the parameters of a linear with the same sizes",
    );
    refused(
        "inputs = [\"tok\"]\nclass = \"decoder\"\nshares = \"qkv\"",
        "inputs = [\"tok\", \"tok\"]\nclass = \"decoder\"\nshares = \"qkv\"",
        "'qkv' maps 8 values to [24], this node 16 to [24]: parameters of other sizes",
    );
    refused(
        "next@prev|first",
        "next@prev|nothing",
        "unknown node 'nothing'",
    );
    refused("next@prev|first", "next|first", "only an @prev input");
    refused(
        "next@prev|first",
        "next@prev|tok",
        "must be an earlier static node",
    );
    refused(
        "next@prev|first",
        "next@prev|last",
        "must be one row of [1]",
    );
    refused(
        "mode = \"self\"",
        "mode = \"causal\"",
        "causal attention masks a whole sequence",
    );
    refused(
        "positions = 64\n\n[[node]]\nname = \"qkv\"",
        "positions = 64\nafter_src = true\n\n[[node]]\nname = \"qkv\"",
        "after_src places a decoder step's position",
    );
    // (a context of 65 tokens, the first from the prefill, reaches position 63 at most)
    parse(&TINY.replace("max_context = 64", "max_context = 65")).unwrap();
    refused(
        "max_context = 64",
        "max_context = 66",
        "may reach position 64",
    );
    refused("max_context = 64", "max_context = 1", "seq2seq.max_context");
    refused("row = -1", "row = -2", "row 1 from the end may not exist");
    refused(
        "lengths = \"azure-conv-2023\"",
        "lengths = \"sharegpt\"",
        "(known: wmt-ende, azure-conv-2023)",
    );
}

/// The Azure trace's (prompt, output, count) rows of `file` that fit GPT-2's context, read here
/// independently of the library.
fn azure_fitting(file: &str) -> Vec<(u32, u32, u64)> {
    let path = format!("{}/data/llm/{file}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| {
            let v: Vec<u64> = l.split(',').map(|x| x.parse().unwrap()).collect();
            (v[0] as u32, v[1] as u32, v[2])
        })
        .filter(|&(p, g, _)| p + g <= 1024)
        .collect()
}

/// GPT-2's requests draw the trace's second half hour, only pairs that fit its context: every
/// draw fits, runs one decode step fewer than its output tokens, and the draws' mean output is
/// the data's (within 5 standard errors).
#[test]
fn gpt2_requests_draw_the_azure_traces_pairs_that_fit_its_context() {
    let m = zoo::load("gpt2").unwrap();
    let data = azure_fitting("azure-conv-2023-joint.csv");
    let total: u64 = data.iter().map(|r| r.2).sum();
    let mean = |f: fn(&(u32, u32, u64)) -> f64| {
        data.iter().map(|r| f(r) * r.2 as f64).sum::<f64>() / total as f64
    };
    let (out_mean, out_sq) = (mean(|r| f64::from(r.1)), mean(|r| f64::from(r.1).powi(2)));
    assert_eq!(total, 4203);
    let n = 40_000;
    let draws: Vec<Lengths> = lazybatch::traffic::generate(&m, (Default::default(), 10.0), n, 7)
        .unwrap()
        .map(|a| a.len)
        .collect();
    let pairs: std::collections::HashSet<(u32, u32)> = data.iter().map(|r| (r.0, r.1)).collect();
    for l in &draws {
        assert!(
            pairs.contains(&(l.enc, l.dec + 1)),
            "{l:?} is not a pair of the data"
        );
        assert!(l.enc + l.dec < 1024, "{l:?}");
    }
    let got = draws.iter().map(|l| f64::from(l.dec + 1)).sum::<f64>() / n as f64;
    let se = ((out_sq - out_mean * out_mean) / n as f64).sqrt();
    assert!((got - out_mean).abs() < 5.0 * se, "{got} vs {out_mean}");
}

/// The predictor's decoder length for GPT-2 is the coverage percentile of the profiling half
/// hour's outputs (those that fit), less the prefill's token.
#[test]
fn gpt2s_predicted_decoder_length_is_the_profiles_output_percentile_less_one() {
    let seq = zoo::load("gpt2").unwrap().seq.unwrap();
    let mut outs: Vec<u32> = azure_fitting("azure-conv-2023-profile.csv")
        .iter()
        .flat_map(|&(_, g, c)| std::iter::repeat_n(g, c as usize))
        .collect();
    outs.sort_unstable();
    assert_eq!(outs.len(), 3931);
    for coverage in [50.0, 90.0, 99.0] {
        // nearest rank
        let rank = ((coverage / 100.0) * outs.len() as f64).ceil() as usize;
        let want = outs[rank - 1] - 1;
        let got = lazybatch::traffic::lengths::dec_timesteps(&seq, coverage).unwrap();
        assert_eq!(got, want, "coverage {coverage}");
    }
}

/// A GPT-2 trace gives each request its prompt and output tokens; an output of one token (no
/// decode step), or a request past the context, is refused with its line and the range.
#[test]
fn a_gpt2_trace_gives_prompt_and_output_tokens_within_the_context() {
    let m = zoo::load("gpt2").unwrap();
    let p = std::path::Path::new("t.trace");
    let t = lazybatch::traffic::parse_trace("0 100 12\n1.5 7 2\n", p, &m, 1).unwrap();
    let lens: Vec<Lengths> = t.arrivals.map(|a| a.len).collect();
    assert_eq!(
        lens,
        [Lengths { enc: 100, dec: 11 }, Lengths { enc: 7, dec: 1 }]
    );
    let err = |text: &str| {
        let e = lazybatch::traffic::parse_trace(text, p, &m, 1);
        e.err().unwrap().to_string()
    };
    let e = err("0 100 12\n1 10 1\n");
    assert!(
        e.starts_with("t.trace:2:") && e.contains("OUT: must be an integer in [2, 1023]"),
        "{e}"
    );
    let e = err("0 1000 25\n");
    assert!(
        e.contains("ENC + OUT: 1000 + 25 exceeds the model's context of 1024 tokens"),
        "{e}"
    );
    // the shipped trace reads whole
    let shipped = format!(
        "{}/data/llm/azure-conv-2023-first1000.trace",
        env!("CARGO_MANIFEST_DIR")
    );
    let t = lazybatch::traffic::load_trace(std::path::Path::new(&shipped), &m, 1).unwrap();
    assert_eq!(t.expected, 1000);
    assert!((t.rate - 999.0 / 248.3).abs() < 0.01, "{}", t.rate);
}
