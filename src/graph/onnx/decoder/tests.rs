//! Unit tests of the decoder import ([`super`]): every spelling [`super::test_export`] builds
//! imports as GPT-2's prefill and decode loop with the export's weights and serves GPT-2's
//! logits step by step (against the forward pass written out in Rust), and the past inputs,
//! the sizes and the GELUs by hand. The refusals are in `refusal_tests.rs` (the embeddings,
//! linear layers, norms, GELU, the logits) and `attention_tests.rs` (attention and the mask).

use super::refusal_tests::{refused, translate};
use super::test_export::{
    export, past_names, reference_logits, transposed, Gelu, Linear, Mask, Params, Spelling,
    SplitSizes, D, LAYERS, POS, VOCAB,
};
use crate::graph::onnx::proto::pb::{GraphProto, ModelProto};
use crate::graph::onnx::test_graph::{run, Built};
use crate::graph::weights::Weights;
use prost::Message;
use std::path::PathBuf;

/// The spellings the import accepts, each choice of each kind at least once.
fn spellings() -> Vec<Spelling> {
    let f = Spelling::FIXTURE;
    vec![
        f,
        Spelling {
            linear: Linear::Conv1DTransposed,
            scale_by_mul: true,
            mask: Mask::Additive,
            gelu: Gelu::Erf,
            split: SplitSizes::Attribute,
            tied: false,
            view: Some(-1),
            hf_names: false,
            reshaped_ids: true,
            inferred_heads: true,
            copies: true,
        },
        Spelling {
            linear: Linear::MatMul,
            gelu: Gelu::Onnx,
            split: SplitSizes::Absent,
            view: Some(1),
            copies: true,
            ..f
        },
        Spelling {
            linear: Linear::MatMulBiasFirst,
            gelu: Gelu::OnnxTanh,
            mask: Mask::Additive,
            tied: false,
            ..f
        },
    ]
}

#[test]
fn every_spelling_imports_as_gpt2_and_serves_its_logits_and_tokens_step_by_step() {
    for s in spellings() {
        let p = Params::new(s.tied);
        let m = Built::of(export(s, &p)).import();
        let mut steps = 0;
        for r in run(&m) {
            // the captured outputs: per step the logits and the token chosen, which the next
            // step reads
            let mut tokens: Vec<usize> = r.input.iter().map(|&t| t as usize % VOCAB).collect();
            assert!(
                !tokens.is_empty() && r.output.len() % (VOCAB + 1) == 0,
                "{s:?}"
            );
            for step in r.output.chunks(VOCAB + 1) {
                let want = reference_logits(&p, s.gelu.exact(), &tokens);
                let top = want.iter().fold(0.0f64, |a, v| a.max(v.abs()));
                for (j, (g, w)) in step[..VOCAB].iter().zip(&want).enumerate() {
                    assert!(
                        (f64::from(*g) - w).abs() <= 1e-4 * top,
                        "{s:?}: after {} tokens, logit {j}: {g}, expected {w}",
                        tokens.len()
                    );
                }
                let best = (0..VOCAB).fold(0, |b, j| if want[j] > want[b] { j } else { b });
                assert_eq!(step[VOCAB] as usize, best, "{s:?}: the token chosen");
                tokens.push(best);
                steps += 1;
            }
        }
        assert!(steps > 3, "{s:?}: {steps} steps served");
    }
}

#[test]
fn the_import_writes_gpt2_s_model_file_with_the_export_s_weights() {
    for s in spellings() {
        let p = Params::new(s.tied);
        let (text, weights) = translate(&export(s, &p)).unwrap();
        assert!(text.contains("name = \"gpt\""), "{text}");
        assert!(
            text.contains("description = \"a test export: decoder-only, 2 layers, width 8, 2 heads, vocabulary 13, 128 positions\""),
            "{text}"
        );
        // the activation in the prefill and the decode steps, each layer
        let (act, other) = match s.gelu.exact() {
            true => ("act = \"gelu_erf\"", "act = \"gelu\"\n"),
            false => ("act = \"gelu\"\n", "act = \"gelu_erf\""),
        };
        assert_eq!(text.matches(act).count(), 2 * LAYERS, "{s:?}");
        assert_eq!(text.matches(other).count(), 0, "{s:?}");
        assert_eq!(text.matches("eps = 1e-5").count(), 2 * (2 * LAYERS + 1));
        // the weights, each by the node that holds them: the linear layers' as [in][out]
        // whatever the export's layout
        let by: std::collections::HashMap<&str, &Weights> =
            weights.iter().map(|(n, w)| (n.as_str(), w)).collect();
        assert_eq!(by["wte"].w, p.wte);
        assert_eq!(by["wte"].extra, p.wpe);
        for (i, l) in p.layers.iter().enumerate() {
            let w = |part: &str| by[format!("p{i}.{part}").as_str()];
            for (part, lin) in [
                ("qkv", &l.qkv),
                ("proj", &l.proj),
                ("fc", &l.fc),
                ("fc_proj", &l.fc_proj),
            ] {
                assert_eq!(
                    (&w(part).w, &w(part).bias),
                    (&lin.w, &lin.b),
                    "{s:?} {part}"
                );
            }
            for (part, ln) in [("ln1", &l.ln1), ("ln2", &l.ln2)] {
                assert_eq!((&w(part).scale, &w(part).shift), (&ln.g, &ln.b), "{part}");
            }
        }
        assert_eq!(
            (&by["ln_f"].scale, &by["ln_f"].shift),
            (&p.ln_f.g, &p.ln_f.b)
        );
        // the logits tied to the token table, or their own weights
        assert_eq!(
            text.matches("tied = \"wte\"").count(),
            2 * usize::from(s.tied)
        );
        match s.tied {
            true => assert!(!by.contains_key("first_logits")),
            false => {
                assert_eq!(by["first_logits"].w, p.lm);
                assert!(text.contains("shares = \"first_logits\""), "{text}");
            }
        }
        assert_eq!(weights.len(), 2 + 6 * LAYERS + usize::from(!s.tied));
    }
}

#[test]
fn the_imported_model_holds_the_export_s_parameters_once_and_its_context_window() {
    for tied in [true, false] {
        let s = Spelling {
            tied,
            ..Spelling::FIXTURE
        };
        let m = Built::of(export(s, &Params::new(tied))).import();
        let d = D as u64;
        let layer =
            2 * 2 * d + (d * 3 * d + 3 * d) + (d * d + d) + (d * 4 * d + 4 * d) + (4 * d * d + d);
        let own_logits = if tied { 0 } else { d * VOCAB as u64 };
        let tables = (VOCAB * D + POS * D) as u64;
        assert_eq!(
            m.params(),
            tables + LAYERS as u64 * layer + 2 * d + own_logits
        );
        let c = m.seq.as_ref().unwrap();
        // GPT-2's reference lengths within the context: a half, a quarter, and two short
        assert_eq!(
            (
                c.lengths.as_str(),
                c.ref_enc,
                c.ref_dec,
                c.max_enc,
                c.max_dec
            ),
            ("azure-conv-2023", 64, 32, 126, 126)
        );
        assert_eq!((c.max_context, c.prefill_token), (Some(128), true));
    }
}
#[test]
fn past_inputs_pair_by_layer_and_kind_in_hugging_face_s_names_else_in_order() {
    let pairs = |names: &[&str]| super::past_pairs(names);
    let own = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    assert_eq!(
        pairs(&["p.1.value", "p.0.key", "p.1.key", "p.0.value"]),
        Ok(own(&[("p.0.key", "p.0.value"), ("p.1.key", "p.1.value")]))
    );
    assert_eq!(
        pairs(&["past_v0", "past_k0"]),
        Ok(own(&[("past_v0", "past_k0")]))
    );
    for bad in [
        &["p.0.key", "p.2.value"][..],
        &["p.0.key", "p.0.key"],
        &["p.1.key", "p.1.value"],
    ] {
        let e = pairs(bad).unwrap_err();
        assert!(
            e.contains("layers 0..1, a key and a value each, were expected"),
            "{bad:?}: {e}"
        );
    }
    assert_eq!(
        pairs(&[]).unwrap_err(),
        "0 past inputs: a key and a value per layer were expected"
    );
    let names = past_names(true);
    assert_eq!(names[1].1, "past_key_values.1.value");
}

#[test]
fn a_decoder_is_one_token_input_past_inputs_and_more_than_one_output() {
    let g = export(Spelling::FIXTURE, &Params::new(true));
    assert!(super::is_decoder(&g));
    // the token table listed as an input too (an initializer): still a decoder
    let copies = export(
        Spelling {
            copies: true,
            ..Spelling::FIXTURE
        },
        &Params::new(true),
    );
    assert!(super::is_decoder(&copies));
    let mut one_output = g.clone();
    one_output.output.truncate(1);
    assert!(!super::is_decoder(&one_output));
    let mut tokens_only = g.clone();
    tokens_only.input.truncate(1);
    assert!(!super::is_decoder(&tokens_only));
    let mut other = g.clone();
    other.input[2].name = Some("attention_mask".into());
    assert!(!super::is_decoder(&other));
}

#[test]
fn transposing_swaps_rows_and_columns() {
    let w = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
    assert_eq!(super::transpose(&w, 2, 3), [1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    assert_eq!(super::transpose(&w, 2, 3), transposed(&w, 2, 3));
    assert_eq!(super::transpose(&w, 3, 2), [1.0, 3.0, 5.0, 2.0, 4.0, 6.0]);
}

fn fixture() -> ModelProto {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/onnx/gpt2_style.onnx"
    );
    ModelProto::decode(&std::fs::read(path).unwrap()[..]).unwrap()
}

#[test]
fn the_committed_fixture_is_refused_where_it_is_changed() {
    // `gpt2_style.onnx` as scripts/onnx-fixtures.py writes it, its mask made all true
    let mut m = fixture();
    let t = m
        .graph
        .as_mut()
        .unwrap()
        .initializer
        .iter_mut()
        .find(|t| t.name().starts_with("attn_bias"))
        .unwrap();
    let n = t.raw_data.as_ref().unwrap().len();
    t.raw_data = Some(vec![1; n]);
    let dir = std::env::temp_dir().join(format!("lazybatch-decoder-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path: PathBuf = dir.join("all_seen.onnx");
    std::fs::write(&path, m.encode_to_vec()).unwrap();
    let e = crate::graph::onnx::import(&path, &[])
        .unwrap_err()
        .to_string();
    std::fs::remove_file(&path).ok();
    assert!(e.contains("is not lower-triangular (causal)"), "{e}");
}

/// The export in spelling `s`, changed by `change`, imports exactly as it does unchanged: the
/// same model file and weights.
fn imports_as_unchanged(s: Spelling, change: impl FnOnce(&mut GraphProto)) {
    let plain = export(s, &Params::new(s.tied));
    let mut g = plain.clone();
    change(&mut g);
    match translate(&g) {
        Ok(got) => assert_eq!(got, translate(&plain).unwrap()),
        Err(e) => panic!("refused, where the unchanged export imports: {e}"),
    }
}

/// The final view's shape read off the inputs — the batch from the token ids' first axis, the
/// width as the past's heads × head (its fixed axes) — evaluates as the constants do: the
/// batch is 1 and a fixed axis its size, whatever the past's length.
#[test]
fn a_view_shaped_from_the_inputs_axes_reads_the_batch_as_one_and_fixed_axes_as_sized() {
    let s = Spelling {
        view: Some(1),
        ..Spelling::FIXTURE
    };
    imports_as_unchanged(s, |g| {
        let past_key = g.input[1].name().to_string();
        // the batch off the token ids, the width as the past's heads × head, computed ahead of
        // the graph's own nodes
        let computed = (0..5)
            .fold(Built::of(GraphProto::default()), |b, k| {
                b.init_i(&format!("at_{k}"), &[1], &[k])
            })
            .node("ids_shape", "Shape", &["input_ids"], "ids_shape", vec![])
            .node("past_shape", "Shape", &[&past_key], "past_shape", vec![])
            .node(
                "batch",
                "Slice",
                &["ids_shape", "at_0", "at_1"],
                "batch",
                vec![],
            )
            .node(
                "heads",
                "Slice",
                &["past_shape", "at_1", "at_2"],
                "heads",
                vec![],
            )
            .node(
                "head",
                "Slice",
                &["past_shape", "at_3", "at_4"],
                "head",
                vec![],
            )
            .node("width", "Mul", &["heads", "head"], "width", vec![])
            .into_graph();
        g.node.splice(0..0, computed.node);
        g.initializer.extend(computed.initializer);
        let view = g
            .node
            .iter_mut()
            .find(|n| n.op_type() == "Concat" && n.input[0].starts_with("lead"))
            .expect("the view's shape");
        view.input[0] = "batch".into();
        view.input[2] = "width".into();
    });
}

/// A layer norm whose axis and epsilon are left out takes ONNX's defaults (the last axis,
/// 1e-5): the export imports as the one that spells them.
#[test]
fn a_layer_norm_without_its_attributes_takes_onnx_s_defaults() {
    imports_as_unchanged(Spelling::FIXTURE, |g| {
        let mut norms = 0;
        for n in g
            .node
            .iter_mut()
            .filter(|n| n.op_type() == "LayerNormalization")
        {
            n.attribute.clear();
            norms += 1;
        }
        assert_eq!(norms, 2 * LAYERS + 1);
    });
}

/// The tanh GELU spelled with `Sub` and `Sqrt` — `x - (-0.044715)·x·√(x⁴)` inside — is the
/// same activation: the export imports as the fixture's spelling does.
#[test]
fn a_gelu_spelled_with_sub_and_sqrt_is_the_same_gelu() {
    imports_as_unchanged(Spelling::FIXTURE, |g| {
        // the first float scalar initializer holding `v`, set to `to`
        let revalue = |g: &mut GraphProto, v: f32, to: f32| -> String {
            let t = g
                .initializer
                .iter_mut()
                .find(|t| t.float_data == [v])
                .unwrap();
            t.float_data = vec![to];
            t.name().to_string()
        };
        let reader = |g: &GraphProto, x: &str| -> usize {
            g.node
                .iter()
                .position(|n| n.input.iter().any(|i| i == x))
                .unwrap()
        };
        // x³ as x·√(x⁴)
        let four = revalue(g, 3.0, 4.0);
        let pow = reader(g, &four);
        assert_eq!(g.node[pow].op_type(), "Pow");
        let (h, cube) = (g.node[pow].input[0].clone(), g.node[pow].output[0].clone());
        g.node[pow].output[0] = "x4".into();
        let root = Built::of(GraphProto::default())
            .node("x2", "Sqrt", &["x4"], "x2", vec![])
            .node("x3", "Mul", &[&h, "x2"], &cube, vec![])
            .into_graph();
        g.node.splice(pow + 1..pow + 1, root.node);
        // x + k·x³ as x - (-k)·x³
        let k = revalue(g, 0.044715, -0.044715);
        let kc = g.node[reader(g, &k)].output[0].clone();
        let inner = reader(g, &kc);
        assert_eq!(g.node[inner].op_type(), "Add");
        g.node[inner].op_type = Some("Sub".into());
        g.node[inner].input = vec![h, kc];
    });
}

/// An activation matches a GELU within 1e-5, relative where the GELU exceeds 1: the tanh
/// GELU with its 0.5 off by a relative 5e-6 is still it (2.5e-5 off at x = 5), by 3e-5 not.
#[test]
fn a_gelu_matches_within_a_relative_1e_5_above_one() {
    let half_off = |by: f32| {
        move |g: &mut GraphProto| {
            let mut halves = 0;
            for t in g.initializer.iter_mut().filter(|t| t.float_data == [0.5]) {
                t.float_data = vec![0.5 * (1.0 + by)];
                halves += 1;
            }
            assert_eq!(halves, LAYERS);
        }
    };
    imports_as_unchanged(Spelling::FIXTURE, half_off(5e-6));
    refused(half_off(3e-5), "') is neither GELU");
}

#[test]
fn a_decoder_export_takes_no_dim() {
    let e = Built::of(export(Spelling::FIXTURE, &Params::new(true)))
        .import_with(&[("seq", 8)])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("--dim seq: a decoder export's sequence axes stay variable"),
        "{e}"
    );
}

#[test]
fn the_gelus_and_erf_are_within_their_bounds() {
    use crate::graph::onnx::test_graph::erf_series;
    for i in 0..=80 {
        let x = -4.0 + i as f32 * 0.1;
        let e = erf_series(f64::from(x));
        assert!(
            (f64::from(super::blocks::erf(x)) - e).abs() < 5e-7,
            "erf({x})"
        );
        let exact = 0.5 * f64::from(x) * (1.0 + erf_series(f64::from(x) / 2f64.sqrt()));
        assert!(
            (f64::from(super::blocks::gelu_exact(x)) - exact).abs() < 1e-6,
            "{x}"
        );
        let k = (2.0 / std::f64::consts::PI).sqrt();
        let v = f64::from(x);
        let tanh = 0.5 * v * (1.0 + (k * (v + 0.044715 * v * v * v)).tanh());
        assert!(
            (f64::from(super::blocks::gelu_tanh(x)) - tanh).abs() < 1e-6,
            "{x}"
        );
    }
    // the two differ: telling them apart is what the import does
    assert!((super::blocks::gelu_exact(1.5) - super::blocks::gelu_tanh(1.5)).abs() > 1e-5);
}

#[test]
fn an_activation_is_probed_at_201_points_over_minus_five_to_five() {
    let p = super::blocks::probes();
    assert_eq!(p.len(), 201);
    assert_eq!(p[0], -5.0);
    assert!(
        (p[100]).abs() < 1e-6 && (p[200] - 5.0).abs() < 1e-5,
        "{p:?}"
    );
    assert!(p.windows(2).all(|w| (w[1] - w[0] - 0.05).abs() < 1e-5));
}
