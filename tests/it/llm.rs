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
