//! Sequence lengths, one built-in distribution per `[seq2seq] lengths` name: the WMT newstest
//! En→De histograms embedded from `data/wmt/` — the profiled output-length distribution
//! (2014–2018 pooled, German side) that sets `dec_timesteps`, and the joint (source, target)
//! distribution of 2019 that actual request lengths are drawn from — and the Azure LLM inference
//! trace 2023 (conversation) from `data/llm/`, whose first half hour profiles and whose rest
//! gives the (prompt, output) tokens of requests. A model with a `max_context` draws only the
//! pairs that fit it; one without clamps each length to its maximum.

use crate::error::{Error, Result};
use crate::graph::{Lengths, Model, SeqConfig};
use rand::Rng;

const PROFILE_CSV: &str = include_str!("../../data/wmt/newstest2014-2018-ende-lengths.csv");
const TEST_JOINT_CSV: &str = include_str!("../../data/wmt/newstest2019-ende-joint.csv");
const AZURE_PROFILE_CSV: &str = include_str!("../../data/llm/azure-conv-2023-profile.csv");
const AZURE_JOINT_CSV: &str = include_str!("../../data/llm/azure-conv-2023-joint.csv");

/// A built-in distribution's profile (`dec_timesteps`) and request data: (file text, its name
/// in errors) each.
struct Data {
    profile: (&'static str, &'static str),
    joint: (&'static str, &'static str),
}

/// The data of distribution `name` (one of [`crate::graph::LENGTH_DISTRIBUTIONS`]).
fn data(name: &str) -> Result<Data> {
    match name {
        "wmt-ende" => Ok(Data {
            profile: (PROFILE_CSV, "data/wmt/newstest2014-2018-ende-lengths.csv"),
            joint: (TEST_JOINT_CSV, "data/wmt/newstest2019-ende-joint.csv"),
        }),
        "azure-conv-2023" => Ok(Data {
            profile: (AZURE_PROFILE_CSV, "data/llm/azure-conv-2023-profile.csv"),
            joint: (AZURE_JOINT_CSV, "data/llm/azure-conv-2023-joint.csv"),
        }),
        other => Err(Error::invalid(
            "seq2seq.lengths",
            format!(
                "unknown length distribution '{other}' (known: {})",
                crate::graph::LENGTH_DISTRIBUTIONS.join(", ")
            ),
        )),
    }
}

/// The decoder steps of a request that outputs `out` words or tokens: `ceil(out × scale)`,
/// one fewer before scaling where the model's prefill emits the first token.
fn out_steps(seq: &SeqConfig, out: u32) -> u32 {
    let decoded = if seq.prefill_token {
        out.saturating_sub(1)
    } else {
        out
    };
    to_steps(decoded, seq.dec_scale, seq.max_dec)
}

/// Whether a (source, output) pair fits a model with a `max_context` without clamping: its
/// steps within the maxima, its source steps and output tokens within the context. A model
/// without one takes every pair (clamped).
fn fits(seq: &SeqConfig, (src, out): (u32, u32)) -> bool {
    let Some(ctx) = seq.max_context else {
        return true;
    };
    let enc = (f64::from(src) * seq.enc_scale).ceil();
    let dec = (f64::from(if seq.prefill_token {
        out.saturating_sub(1)
    } else {
        out
    }) * seq.dec_scale)
        .ceil();
    enc >= 1.0
        && dec >= 1.0
        && enc <= f64::from(seq.max_enc)
        && dec <= f64::from(seq.max_dec)
        && enc + dec + f64::from(u32::from(seq.prefill_token)) <= f64::from(ctx)
}

/// A discrete distribution of (source words, target words) pairs.
#[derive(Clone, Debug)]
pub(crate) struct JointLengths {
    pairs: Vec<(u32, u32)>,
    /// Cumulative counts, for sampling.
    cum: Vec<u64>,
}

fn parse_rows(csv: &str, name: &str, cols: usize) -> Result<Vec<Vec<u64>>> {
    let mut rows = Vec::new();
    for (i, line) in csv.lines().enumerate().skip(1) {
        if line.trim().is_empty() {
            continue;
        }
        let v: Option<Vec<u64>> = line.split(',').map(|s| s.trim().parse().ok()).collect();
        match v {
            Some(v) if v.len() == cols => rows.push(v),
            _ => {
                return Err(Error::ConfigFile {
                    file: name.into(),
                    line: i + 1,
                    msg: format!("expected {cols} integer columns"),
                })
            }
        }
    }
    Ok(rows)
}

impl JointLengths {
    /// A (source, output, count) table's pairs with a count, in order.
    fn from_rows(rows: &[Vec<u64>], keep: impl Fn((u32, u32)) -> bool) -> Self {
        let mut pairs = Vec::new();
        let mut cum = Vec::new();
        let mut acc = 0;
        for r in rows {
            let pair = (r[0] as u32, r[1] as u32);
            if r[2] > 0 && keep(pair) {
                acc += r[2];
                pairs.push(pair);
                cum.push(acc);
            }
        }
        JointLengths { pairs, cum }
    }

    /// The WMT19 newstest En→De joint histogram (1,997 pairs).
    pub(crate) fn wmt19() -> Result<Self> {
        let rows = parse_rows(TEST_JOINT_CSV, "data/wmt/newstest2019-ende-joint.csv", 3)?;
        Ok(Self::from_rows(&rows, |_| true))
    }

    /// The pairs a model's requests draw from: its distribution's request data, only the
    /// pairs that fit it when it has a `max_context`.
    pub(crate) fn for_seq(seq: &SeqConfig) -> Result<Self> {
        let (text, file) = data(&seq.lengths)?.joint;
        let joint = Self::from_rows(&parse_rows(text, file, 3)?, |p| fits(seq, p));
        if joint.total() == 0 {
            return Err(Error::invalid(
                "seq2seq.max_context",
                format!(
                    "no request of '{}' fits the model (max_enc {}, max_dec {}, max_context {:?})",
                    seq.lengths, seq.max_enc, seq.max_dec, seq.max_context
                ),
            ));
        }
        Ok(joint)
    }

    /// Number of sentence pairs.
    pub fn total(&self) -> u64 {
        self.cum.last().copied().unwrap_or(0)
    }

    /// Every (source words, target words) pair with its count.
    pub fn pairs(&self) -> impl Iterator<Item = ((u32, u32), u64)> + '_ {
        let mut prev = 0;
        self.pairs.iter().zip(&self.cum).map(move |(&p, &c)| {
            let n = c - prev;
            prev = c;
            (p, n)
        })
    }

    /// Mean source and target lengths in words.
    pub(crate) fn mean_words(&self) -> (f64, f64) {
        let total = self.total().max(1) as f64;
        let (mut en, mut de) = (0.0, 0.0);
        for ((s, t), n) in self.pairs() {
            en += f64::from(s) * n as f64;
            de += f64::from(t) * n as f64;
        }
        (en / total, de / total)
    }

    /// Draws one (source words, target words) pair: the first whose cumulative count exceeds a
    /// draw below the total, the last count (a histogram is never empty: [`Self::for_seq`]).
    pub(crate) fn sample<R: Rng>(&self, rng: &mut R) -> (u32, u32) {
        let x = rng.random_range(0..self.total().max(1));
        self.pairs[self.cum.partition_point(|&c| c <= x)]
    }
}

/// The profiled output-length distribution of a model's length distribution: German words of
/// newstest 2014–2018, or the output tokens of the Azure trace's first half hour (only the
/// requests that fit the model when it has a `max_context`).
pub fn profiled_output_lengths(seq: &SeqConfig) -> Result<Vec<(u32, u64)>> {
    let (text, file) = data(&seq.lengths)?.profile;
    let rows = parse_rows(text, file, 3)?;
    if seq.lengths == "wmt-ende" {
        // words,en_count,de_count
        return Ok(rows.iter().map(|r| (r[0] as u32, r[2])).collect());
    }
    // prompt_tokens,generated_tokens,count: the outputs' histogram, by length
    let mut by_out = std::collections::BTreeMap::new();
    for r in &rows {
        let pair = (r[0] as u32, r[1] as u32);
        if fits(seq, pair) {
            *by_out.entry(pair.1).or_insert(0) += r[2];
        }
    }
    Ok(by_out.into_iter().collect())
}

/// [`profiled_output_lengths`] in the model's decoder steps: (steps, count), the
/// distribution the predictor's `dec_timesteps` is a percentile of.
pub(crate) fn profiled_output_steps(seq: &SeqConfig) -> Result<Vec<(u32, u64)>> {
    Ok(profiled_output_lengths(seq)?
        .into_iter()
        .map(|(out, n)| (out_steps(seq, out), n))
        .collect())
}

/// Nearest-rank percentile (`coverage` in (0, 100]) of a (value, count) histogram.
pub fn percentile(hist: &[(u32, u64)], coverage: f64) -> u32 {
    let total: u64 = hist.iter().map(|h| h.1).sum();
    let rank = ((coverage / 100.0) * total as f64).ceil().max(1.0) as u64;
    let mut acc = 0;
    for &(v, c) in hist {
        acc += c;
        if acc >= rank {
            return v;
        }
    }
    hist.last().map_or(0, |h| h.0)
}

/// Words to model steps: `ceil(words × scale)`, at least 1, at most `max`.
pub(crate) fn to_steps(words: u32, scale: f64, max: u32) -> u32 {
    ((f64::from(words) * scale).ceil() as u32).clamp(1, max.max(1))
}

/// The predictor's `dec_timesteps` for a model: the `coverage`-th percentile of the profiled
/// output lengths, in model steps.
pub fn dec_timesteps(seq: &SeqConfig, coverage: f64) -> Result<u32> {
    if !(coverage > 0.0 && coverage <= 100.0) {
        return Err(Error::invalid(
            "coverage",
            format!("must be in (0, 100], got {coverage}"),
        ));
    }
    let out = percentile(&profiled_output_lengths(seq)?, coverage);
    Ok(out_steps(seq, out))
}

/// Each (co-located) model's `dec_timesteps` (1 for static models) and the lengths it is
/// profiled at: its reference encoder length, and `dec_timesteps` decoder steps.
pub(crate) fn profiling_lengths(model: &Model, coverage: f64) -> Result<(Vec<u32>, Vec<Lengths>)> {
    let mut dts = Vec::with_capacity(model.parts.len());
    let mut lens = Vec::with_capacity(model.parts.len());
    for (p, part) in model.parts.iter().enumerate() {
        let mut len = model.ref_lengths_of(p);
        let d = match &part.seq {
            Some(s) => {
                let d = dec_timesteps(s, coverage)?;
                len.dec = d;
                d
            }
            None => 1,
        };
        dts.push(d);
        lens.push(len);
    }
    Ok((dts, lens))
}

/// Draws a request's actual lengths (model steps) from a joint histogram
/// ([`JointLengths::for_seq`]).
pub(crate) fn draw<R: Rng>(joint: &JointLengths, seq: &SeqConfig, rng: &mut R) -> Lengths {
    lengths_of(seq, joint.sample(rng))
}

/// The model steps of a (source words or tokens, output words or tokens) pair.
pub(crate) fn lengths_of(seq: &SeqConfig, (src, out): (u32, u32)) -> Lengths {
    Lengths {
        enc: to_steps(src, seq.enc_scale, seq.max_enc),
        dec: out_steps(seq, out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    #[test]
    fn draws_follow_the_joint_histogram() {
        // 400,000 draws: each pair's frequency is its count over the total (within 5 standard
        // errors of a binomial proportion), so the means are the histogram's
        let joint = JointLengths::wmt19().unwrap();
        let total = joint.total() as f64;
        assert_eq!(joint.total(), 1997);
        let n = 400_000;
        let mut rng = StdRng::seed_from_u64(3);
        let mut seen = std::collections::HashMap::new();
        for _ in 0..n {
            *seen.entry(joint.sample(&mut rng)).or_insert(0u64) += 1;
        }
        for (pair, count) in joint.pairs() {
            let p = count as f64 / total;
            let got = seen.remove(&pair).unwrap_or(0) as f64 / n as f64;
            let se = (p * (1.0 - p) / n as f64).sqrt();
            assert!((got - p).abs() < 5.0 * se + 1e-9, "{pair:?}: {got} vs {p}");
        }
        assert!(
            seen.is_empty(),
            "drew pairs outside the histogram: {seen:?}"
        );
        let (en, de) = joint.mean_words();
        assert!(
            (en - 21.05).abs() < 0.01 && (de - 21.08).abs() < 0.01,
            "{en} {de}"
        );
    }

    #[test]
    fn a_pair_fits_a_context_in_model_steps_up_to_each_exact_bound() {
        // two steps a source token, one step per two output tokens: enc = ceil(src × 2) ≤ 40,
        // dec = ceil(out × 0.5) ≤ 10, both at least 1, enc + dec (+ 1 for a prefill's token)
        // ≤ 50
        let seq = |max_context, prefill_token| SeqConfig {
            lengths: "azure-conv-2023".into(),
            enc_scale: 2.0,
            dec_scale: 0.5,
            ref_enc: 1,
            ref_dec: 1,
            max_enc: 40,
            max_dec: 10,
            max_context,
            prefill_token,
        };
        let s = seq(Some(50), false);
        assert!(fits(&s, (20, 20)), "40 + 10 = 50");
        assert!(fits(&s, (20, 1)) && fits(&s, (1, 8)) && fits(&s, (1, 10)));
        assert!(!fits(&s, (21, 1)), "enc 42 > 40");
        assert!(!fits(&s, (1, 21)), "dec 11 > 10");
        assert!(!fits(&s, (0, 4)) && !fits(&s, (4, 0)), "no step");
        let s = seq(Some(45), false);
        assert!(
            fits(&s, (20, 10)) && !fits(&s, (20, 11)),
            "40 + 5 = 45, 40 + 6 > 45"
        );
        // a prefill emits the first token: one output token fewer decoded, one more in context
        let s = seq(Some(50), true);
        assert!(fits(&s, (20, 19)), "40 + 9 + 1 = 50");
        assert!(!fits(&s, (20, 20)), "40 + 10 + 1 > 50");
        assert!(!fits(&s, (5, 1)), "an output of one token decodes nothing");
        assert_eq!(out_steps(&s, 21), 10);
        // without a context every pair is taken (and clamped)
        assert!(fits(&seq(None, false), (1000, 1000)));
    }

    #[test]
    fn a_data_row_of_the_wrong_width_or_not_integers_is_refused_with_its_line() {
        let csv = "a,b,c\n1,2,3\n\n4,5,6\n";
        assert_eq!(parse_rows(csv, "d.csv", 3).unwrap(), [[1, 2, 3], [4, 5, 6]]);
        for (bad, line) in [
            ("a,b,c\n1,2\n", 2),
            ("a,b,c\n1,2,3\n\n1,2,3,4\n", 4),
            ("h\n1,x,3\n", 2),
        ] {
            let e = parse_rows(bad, "d.csv", 3).unwrap_err().to_string();
            assert_eq!(
                e,
                format!("d.csv:{line}: expected 3 integer columns"),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_joint_histogram_keeps_the_pairs_with_a_count_that_its_model_takes() {
        let rows = [vec![1, 2, 3], vec![4, 5, 0], vec![6, 7, 1], vec![8, 9, 2]];
        let j = JointLengths::from_rows(&rows, |p| p.0 != 8);
        assert_eq!(j.pairs().collect::<Vec<_>>(), [((1, 2), 3), ((6, 7), 1)]);
        assert_eq!(j.total(), 4);
        assert_eq!(j.mean_words(), (2.25, 3.25));
    }

    #[test]
    fn gpt2_draws_exactly_the_azure_pairs_that_fit_its_context() {
        // the rows with prompt + output ≤ 1,024 tokens, read from the data here (4,203 requests;
        // `tests/it/llm.rs` reads the file itself and counts the same)
        let seq = crate::graph::zoo::load("gpt2").unwrap().seq.unwrap();
        let want: Vec<((u32, u32), u64)> = AZURE_JOINT_CSV
            .lines()
            .skip(1)
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                let v: Vec<u64> = l.split(',').map(|x| x.trim().parse().unwrap()).collect();
                ((v[0] as u32, v[1] as u32), v[2])
            })
            .filter(|&((p, g), c)| p + g <= 1024 && c > 0)
            .collect();
        let joint = JointLengths::for_seq(&seq).unwrap();
        assert_eq!(joint.pairs().collect::<Vec<_>>(), want);
        assert_eq!(joint.total(), 4203);
    }

    #[test]
    fn a_coverage_is_taken_in_0_to_100_percent_and_refused_outside() {
        let seq = crate::graph::zoo::load("gnmt").unwrap().seq.unwrap();
        let hist = profiled_output_lengths(&seq).unwrap();
        assert_eq!(
            dec_timesteps(&seq, 100.0).unwrap(),
            hist.iter().rev().find(|h| h.1 > 0).unwrap().0.min(80)
        );
        assert_eq!(
            dec_timesteps(&seq, 1e-9).unwrap(),
            hist.iter().find(|h| h.1 > 0).unwrap().0.max(1)
        );
        for bad in [0.0, -1.0, 100.5, f64::NAN] {
            let e = dec_timesteps(&seq, bad).unwrap_err().to_string();
            assert!(
                e.contains("coverage") && e.contains("must be in (0, 100]"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn words_become_steps_rounded_up_within_bounds() {
        assert_eq!(to_steps(10, 1.0, 80), 10);
        assert_eq!(to_steps(10, 1.25, 80), 13);
        assert_eq!(to_steps(0, 1.0, 80), 1);
        assert_eq!(to_steps(100, 1.0, 80), 80);
        // the 90th percentile by nearest rank
        let h = [(1, 5), (2, 3), (3, 2)];
        assert_eq!(
            [
                percentile(&h, 50.0),
                percentile(&h, 80.0),
                percentile(&h, 81.0)
            ],
            [1, 2, 3]
        );
    }
}
