//! GPT-2-style decoder exports built in code, for the decoder importer's unit tests: the graph
//! `scripts/onnx-fixtures.py` writes as `gpt2_style.onnx` (`torch.onnx.export` of Hugging
//! Face's GPT2LMHeadModel with `use_cache`), in each spelling the importer accepts — Conv1D or
//! MatMul layers, the causal mask a `Where` of a lower-triangular buffer's slices or added as
//! computed from positions, the scores divided or multiplied, GELU spelled out with tanh or
//! erf or as ONNX's `Gelu`, tied or untied logits, copies and views an exporter may add — all
//! with the same weights ([`Params`]), and GPT-2's forward pass written out in Rust
//! ([`reference_logits`]) to compare what the import serves with. The committed fixture is
//! checked against onnxruntime (`tests/it/onnx.rs`); these reach every spelling and every
//! refusal without Python.

use crate::graph::onnx::proto::pb::tensor_proto::DataType;
use crate::graph::onnx::proto::pb::tensor_shape_proto::{dimension::Value as DimValue, Dimension};
use crate::graph::onnx::proto::pb::type_proto::{Tensor, Value as TypeValue};
use crate::graph::onnx::proto::pb::{
    AttributeProto, GraphProto, NodeProto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
};
use crate::graph::onnx::test_graph::{erf_series, int, ints, string};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Layers.
pub(crate) const LAYERS: usize = 2;
/// The hidden width.
pub(crate) const D: usize = 8;
/// Attention heads.
pub(crate) const HEADS: usize = 2;
/// One head's width.
pub(crate) const DH: usize = D / HEADS;
/// The vocabulary.
pub(crate) const VOCAB: usize = 13;
/// Positions (the context window).
pub(crate) const POS: usize = 128;
/// The MLP's hidden width.
pub(crate) const FFN: usize = 4 * D;

/// How a linear layer is exported.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Linear {
    /// Hugging Face's Conv1D: `Reshape` to `[-1, k]`, `Gemm` by `[k, n]`, `Reshape` back.
    Conv1D,
    /// The same with the weights stored `[n, k]` and `transB = 1`.
    Conv1DTransposed,
    /// `MatMul` by `[k, n]`, then `Add` of the bias.
    MatMul,
    /// The same with the bias the `Add`'s first input.
    MatMulBiasFirst,
}

/// How the scores are masked.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Mask {
    /// `Where` of slices of a lower-triangular boolean buffer (GPT-2's `bias`).
    Tril,
    /// Plus a mask of 0 and the most negative float, computed from the positions.
    Additive,
}

/// How the MLP's activation is spelled.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Gelu {
    /// `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))` (`gelu_new`).
    Tanh,
    /// `x·(1 + erf(x/√2))·0.5`.
    Erf,
    /// ONNX's `Gelu`.
    Onnx,
    /// ONNX's `Gelu` with `approximate = "tanh"`.
    OnnxTanh,
}

impl Gelu {
    /// True for the exact GELU (`gelu_erf`).
    pub(crate) fn exact(self) -> bool {
        match self {
            Gelu::Tanh | Gelu::OnnxTanh => false,
            Gelu::Erf | Gelu::Onnx => true,
        }
    }
}

/// How Q|K|V's split sizes are given.
#[derive(Clone, Copy, Debug)]
pub(crate) enum SplitSizes {
    /// A second input (opset 13 on).
    Input,
    /// The `split` attribute (before opset 13).
    Attribute,
    /// Not at all: equal parts.
    Absent,
}

/// One spelling of the same model.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Spelling {
    pub(crate) linear: Linear,
    /// `Mul` by 1/√head instead of `Div` by √head.
    pub(crate) scale_by_mul: bool,
    pub(crate) mask: Mask,
    pub(crate) gelu: Gelu,
    /// (`axis = -1` with the attribute, else 2)
    pub(crate) split: SplitSizes,
    /// The logits' weights the token table transposed (else a table of their own).
    pub(crate) tied: bool,
    /// The final norm's output viewed as `[b, seq, width]` with this `b` (-1 or 1).
    pub(crate) view: Option<i64>,
    /// The past inputs named `past_key_values.{i}.key` and concatenated along axis -2 (else
    /// `past_k{i}`, `past_v{i}` along axis 2).
    pub(crate) hf_names: bool,
    /// The ids reshaped before the table's gather; the positions' embedding cast and copied.
    pub(crate) reshaped_ids: bool,
    /// -1 for the heads and the width in the attention's reshapes.
    pub(crate) inferred_heads: bool,
    /// An exporter's copies: `Identity` of the past key and after the softmax (over axis 3),
    /// `Cast` and `Identity` of the logits, the logits' weights an `Identity` of their
    /// initializer, √head a `Constant`, the token table listed among the inputs.
    pub(crate) copies: bool,
}

impl Spelling {
    /// What `gpt2_style.onnx` has.
    pub(crate) const FIXTURE: Spelling = Spelling {
        linear: Linear::Conv1D,
        scale_by_mul: false,
        mask: Mask::Tril,
        gelu: Gelu::Tanh,
        split: SplitSizes::Input,
        tied: true,
        view: None,
        hf_names: true,
        reshaped_ids: false,
        inferred_heads: false,
        copies: false,
    };
}

/// A linear layer's weights `[k][n]` and bias.
#[derive(Clone)]
pub(crate) struct Lin {
    pub(crate) w: Vec<f32>,
    pub(crate) b: Vec<f32>,
}

/// A layer norm's scale and shift.
#[derive(Clone)]
pub(crate) struct Ln {
    pub(crate) g: Vec<f32>,
    pub(crate) b: Vec<f32>,
}

/// One layer's parameters.
#[derive(Clone)]
pub(crate) struct LayerParams {
    pub(crate) ln1: Ln,
    pub(crate) qkv: Lin,
    pub(crate) proj: Lin,
    pub(crate) ln2: Ln,
    pub(crate) fc: Lin,
    pub(crate) fc_proj: Lin,
}

/// The model's parameters.
#[derive(Clone)]
pub(crate) struct Params {
    pub(crate) wte: Vec<f32>,
    pub(crate) wpe: Vec<f32>,
    pub(crate) layers: Vec<LayerParams>,
    pub(crate) ln_f: Ln,
    /// The logits' weights `[D][VOCAB]`.
    pub(crate) lm: Vec<f32>,
}

/// Values in `[lo, hi)` from a seeded generator (the same on every run).
struct Draw(StdRng);

impl Draw {
    fn next(&mut self, lo: f32, hi: f32, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.0.random_range(lo..hi)).collect()
    }
}

/// `[rows][cols]` transposed.
pub(crate) fn transposed(w: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    (0..rows * cols)
        .map(|e| w[(e % rows) * cols + e / rows])
        .collect()
}

impl Params {
    /// Fixed parameters; the logits tied to the token table or a table of their own.
    pub(crate) fn new(tied: bool) -> Params {
        let mut r = Draw(StdRng::seed_from_u64(7));
        let mut lin = |k: usize, n: usize| {
            let s = 1.5 / (k as f32).sqrt();
            Lin {
                w: r.next(-s, s, k * n),
                b: r.next(-0.1, 0.1, n),
            }
        };
        let mut layer_lins: Vec<[Lin; 4]> = (0..LAYERS)
            .map(|_| [lin(D, 3 * D), lin(D, D), lin(D, FFN), lin(FFN, D)])
            .collect();
        let ln = |r: &mut Draw| Ln {
            g: r.next(0.8, 1.2, D),
            b: r.next(-0.1, 0.1, D),
        };
        let layers = layer_lins
            .drain(..)
            .map(|[qkv, proj, fc, fc_proj]| LayerParams {
                ln1: ln(&mut r),
                qkv,
                proj,
                ln2: ln(&mut r),
                fc,
                fc_proj,
            })
            .collect();
        let wte = r.next(-0.8, 0.8, VOCAB * D);
        let lm = if tied {
            transposed(&wte, VOCAB, D)
        } else {
            r.next(-0.8, 0.8, D * VOCAB)
        };
        Params {
            wpe: r.next(-0.2, 0.2, POS * D),
            wte,
            layers,
            ln_f: ln(&mut r),
            lm,
        }
    }
}

/// An input's axis: named (variable) or fixed.
enum Axis {
    Named(&'static str),
    Fixed(usize),
}

fn input(name: &str, elem: DataType, axes: &[Axis]) -> ValueInfoProto {
    let dim = |a: &Axis| Dimension {
        value: Some(match a {
            Axis::Named(n) => DimValue::DimParam((*n).into()),
            Axis::Fixed(d) => DimValue::DimValue(*d as i64),
        }),
        ..Default::default()
    };
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(TypeValue::TensorType(Tensor {
                elem_type: Some(elem as i32),
                shape: Some(TensorShapeProto {
                    dim: axes.iter().map(dim).collect(),
                }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A graph under construction, each tensor and node named `{op}_{n}`.
#[derive(Default)]
pub(crate) struct B {
    pub(crate) g: GraphProto,
    n: usize,
    /// The batch and the sequence as one-element vectors (for computed shapes).
    batch1: String,
    seq1: String,
}

impl B {
    fn fresh(&mut self, base: &str) -> String {
        self.n += 1;
        format!("{base}_{}", self.n)
    }

    fn tensor(&mut self, base: &str, t: TensorProto) -> String {
        let name = self.fresh(base);
        self.g.initializer.push(TensorProto {
            name: Some(name.clone()),
            ..t
        });
        name
    }

    /// A float initializer.
    pub(crate) fn f(&mut self, base: &str, dims: &[usize], v: &[f32]) -> String {
        let t = TensorProto {
            dims: dims.iter().map(|&d| d as i64).collect(),
            data_type: Some(DataType::Float as i32),
            float_data: v.to_vec(),
            ..Default::default()
        };
        self.tensor(base, t)
    }

    /// An int64 initializer.
    pub(crate) fn i(&mut self, base: &str, dims: &[usize], v: &[i64]) -> String {
        let t = TensorProto {
            dims: dims.iter().map(|&d| d as i64).collect(),
            data_type: Some(DataType::Int64 as i32),
            int64_data: v.to_vec(),
            ..Default::default()
        };
        self.tensor(base, t)
    }

    /// A boolean initializer (raw bytes, as exporters write it).
    pub(crate) fn bools(&mut self, base: &str, dims: &[usize], v: &[bool]) -> String {
        let t = TensorProto {
            dims: dims.iter().map(|&d| d as i64).collect(),
            data_type: Some(DataType::Bool as i32),
            raw_data: Some(v.iter().map(|&b| u8::from(b)).collect()),
            ..Default::default()
        };
        self.tensor(base, t)
    }

    /// A node of `op` with its outputs named.
    pub(crate) fn op_to(
        &mut self,
        op: &str,
        inputs: &[&str],
        outputs: &[&str],
        attrs: Vec<AttributeProto>,
    ) {
        let name = self.fresh(op);
        self.g.node.push(NodeProto {
            name: Some(name),
            op_type: Some(op.into()),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: outputs.iter().map(|s| s.to_string()).collect(),
            attribute: attrs,
            ..Default::default()
        });
    }

    /// A node of `op` with one output, named for it.
    pub(crate) fn op(&mut self, op: &str, inputs: &[&str], attrs: Vec<AttributeProto>) -> String {
        let out = self.fresh(&op.to_lowercase());
        self.op_to(op, inputs, &[&out], attrs);
        out
    }

    /// A `Concat` of the batch, the sequence and the constant `tail`: a computed shape.
    fn shape_ending(&mut self, tail: &[i64]) -> String {
        let t = self.i("tail", &[tail.len()], tail);
        let (b, s) = (self.batch1.clone(), self.seq1.clone());
        self.op("Concat", &[&b, &s, &t], vec![int("axis", 0)])
    }

    fn layer_norm(&mut self, x: &str, p: &Ln) -> String {
        let g = self.f("ln_g", &[D], &p.g);
        let b = self.f("ln_b", &[D], &p.b);
        let attrs = vec![
            int("axis", -1),
            super::super::test_graph::float("epsilon", 1e-5),
        ];
        self.op("LayerNormalization", &[x, &g, &b], attrs)
    }

    fn linear(&mut self, x: &str, p: &Lin, k: usize, how: Linear) -> String {
        let n = p.b.len();
        let bias = self.f("bias", &[n], &p.b);
        match how {
            Linear::Conv1D | Linear::Conv1DTransposed => {
                let flat = self.i("flat", &[2], &[-1, k as i64]);
                let x2 = self.op("Reshape", &[x, &flat], vec![]);
                let (w, t) = match how {
                    Linear::Conv1DTransposed => (self.f("w", &[n, k], &transposed(&p.w, k, n)), 1),
                    _ => (self.f("w", &[k, n], &p.w), 0),
                };
                let attrs = vec![
                    super::super::test_graph::float("alpha", 1.0),
                    super::super::test_graph::float("beta", 1.0),
                    int("transB", t),
                ];
                let y = self.op("Gemm", &[&x2, &w, &bias], attrs);
                let back = self.shape_ending(&[n as i64]);
                self.op("Reshape", &[&y, &back], vec![])
            }
            Linear::MatMul | Linear::MatMulBiasFirst => {
                let w = self.f("w", &[k, n], &p.w);
                let y = self.op("MatMul", &[x, &w], vec![]);
                match how {
                    Linear::MatMulBiasFirst => self.op("Add", &[&bias, &y], vec![]),
                    _ => self.op("Add", &[&y, &bias], vec![]),
                }
            }
        }
    }

    fn gelu(&mut self, h: &str, how: Gelu) -> String {
        let c = |b: &mut B, v: f32| b.f("c", &[], &[v]);
        match how {
            Gelu::Tanh => {
                let three = c(self, 3.0);
                let cube = self.op("Pow", &[h, &three], vec![]);
                let k = c(self, 0.044715);
                let kc = self.op("Mul", &[&k, &cube], vec![]);
                let inner = self.op("Add", &[h, &kc], vec![]);
                let s = c(self, (2.0 / std::f32::consts::PI).sqrt());
                let si = self.op("Mul", &[&s, &inner], vec![]);
                let t = self.op("Tanh", &[&si], vec![]);
                let half = c(self, 0.5);
                let hh = self.op("Mul", &[&half, h], vec![]);
                let one = c(self, 1.0);
                let opt = self.op("Add", &[&one, &t], vec![]);
                self.op("Mul", &[&hh, &opt], vec![])
            }
            Gelu::Erf => {
                let r2 = c(self, std::f32::consts::SQRT_2);
                let d = self.op("Div", &[h, &r2], vec![]);
                let e = self.op("Erf", &[&d], vec![]);
                let one = c(self, 1.0);
                let ope = self.op("Add", &[&e, &one], vec![]);
                let m = self.op("Mul", &[h, &ope], vec![]);
                let half = c(self, 0.5);
                self.op("Mul", &[&m, &half], vec![])
            }
            Gelu::Onnx => self.op("Gelu", &[h], vec![]),
            Gelu::OnnxTanh => self.op("Gelu", &[h], vec![string("approximate", "tanh")]),
        }
    }
}

/// The past inputs' names, layer by layer (key, value).
pub(crate) fn past_names(hf: bool) -> Vec<(String, String)> {
    (0..LAYERS)
        .map(|i| match hf {
            true => (
                format!("past_key_values.{i}.key"),
                format!("past_key_values.{i}.value"),
            ),
            false => (format!("past_k{i}"), format!("past_v{i}")),
        })
        .collect()
}

/// The model with parameters `p`, exported as `s` spells it.
pub(crate) fn export(s: Spelling, p: &Params) -> GraphProto {
    let mut b = B::default();
    let past = past_names(s.hf_names);
    b.g.input.push(input(
        "input_ids",
        DataType::Int64,
        &[Axis::Named("batch"), Axis::Named("seq")],
    ));
    for (k, v) in &past {
        for t in [k, v] {
            let axes = [
                Axis::Named("batch"),
                Axis::Fixed(HEADS),
                Axis::Named("past_seq"),
                Axis::Fixed(DH),
            ];
            b.g.input.push(input(t, DataType::Float, &axes));
        }
    }
    // the sizes: batch, sequence, the past's length, and the positions past..past + seq
    let shape = b.op("Shape", &["input_ids"], vec![]);
    let (zero, one, two) = (
        b.i("zero", &[], &[0]),
        b.i("one", &[], &[1]),
        b.i("two", &[], &[2]),
    );
    let axes0 = b.i("axes", &[1], &[0]);
    let batch = b.op("Gather", &[&shape, &zero], vec![int("axis", 0)]);
    let seq = b.op("Gather", &[&shape, &one], vec![int("axis", 0)]);
    b.batch1 = b.op("Unsqueeze", &[&batch, &axes0], vec![]);
    b.seq1 = b.op("Unsqueeze", &[&seq, &axes0], vec![]);
    let past_shape = b.op("Shape", &[&past[0].0], vec![]);
    let past_len = b.op("Gather", &[&past_shape, &two], vec![int("axis", 0)]);
    let end = b.op("Add", &[&seq, &past_len], vec![]);
    let step = b.i("step", &[], &[1]);
    let pos = b.op("Range", &[&past_len, &end, &step], vec![]);
    let pos = b.op("Unsqueeze", &[&pos, &axes0], vec![]);
    // the embeddings
    let wte = b.f("wte", &[VOCAB, D], &p.wte);
    let ids = match s.reshaped_ids {
        true => {
            let m1 = b.i("minus1", &[1], &[-1]);
            let s1 = b.seq1.clone();
            let to = b.op("Concat", &[&m1, &s1], vec![int("axis", 0)]);
            b.op("Reshape", &["input_ids", &to], vec![])
        }
        false => "input_ids".to_string(),
    };
    let tok = b.op("Gather", &[&wte, &ids], vec![]);
    let wpe = b.f("wpe", &[POS, D], &p.wpe);
    let mut pe = b.op("Gather", &[&wpe, &pos], vec![]);
    let mut x = match s.reshaped_ids {
        true => {
            pe = b.op("Cast", &[&pe], vec![int("to", 1)]);
            pe = b.op("Identity", &[&pe], vec![]);
            b.op("Add", &[&pe, &tok], vec![])
        }
        false => b.op("Add", &[&tok, &pe], vec![]),
    };
    // the causal mask: a lower-triangular buffer, or 0 where a key's position is at most the
    // query's and the most negative float elsewhere
    let tril: Vec<bool> = (0..POS * POS).map(|e| e % POS <= e / POS).collect();
    let buffer = b.bools("attn_bias", &[1, 1, POS, POS], &tril);
    let additive = match s.mask {
        Mask::Tril => None,
        Mask::Additive => {
            let rows = b.op("Range", &[&past_len, &end, &step], vec![]);
            let cols = b.op("Range", &[&zero, &end, &step], vec![]);
            let axes1 = b.i("axes", &[1], &[1]);
            let r2 = b.op("Unsqueeze", &[&rows, &axes1], vec![]);
            let c2 = b.op("Unsqueeze", &[&cols, &axes0], vec![]);
            let seen = b.op("LessOrEqual", &[&c2, &r2], vec![]);
            let (z, low) = (b.f("zero_f", &[], &[0.0]), b.f("min", &[], &[f32::MIN]));
            let m = b.op("Where", &[&seen, &z, &low], vec![]);
            let axes01 = b.i("axes", &[2], &[0, 1]);
            Some(b.op("Unsqueeze", &[&m, &axes01], vec![]))
        }
    };
    let (h_tail, w_tail) = match s.inferred_heads {
        true => ([-1, DH as i64], -1),
        false => ([HEADS as i64, DH as i64], D as i64),
    };
    let heads_shape = b.shape_ending(&h_tail);
    let merged_shape = b.shape_ending(&[w_tail]);
    let mut presents = Vec::new();
    for (i, l) in p.layers.iter().enumerate() {
        let h = b.layer_norm(&x, &l.ln1);
        let qkv = b.linear(&h, &l.qkv, D, s.linear);
        let parts = [b.fresh("q"), b.fresh("k"), b.fresh("v")];
        // (the last axis counted from the end where the sizes are an attribute)
        let (mut ins, mut attrs) = (vec![qkv.clone()], vec![]);
        match s.split {
            SplitSizes::Input => ins.push(b.i("split", &[3], &[D as i64; 3])),
            SplitSizes::Attribute => {
                attrs.push(ints("split", &[D as i64; 3]));
                attrs.push(int("axis", -1));
            }
            SplitSizes::Absent => {}
        }
        if attrs.is_empty() {
            attrs.push(int("axis", 2));
        }
        let ins: Vec<&str> = ins.iter().map(String::as_str).collect();
        let outs: Vec<&str> = parts.iter().map(String::as_str).collect();
        b.op_to("Split", &ins, &outs, attrs);
        let mut heads = Vec::new();
        for t in &parts {
            let r = b.op("Reshape", &[t, &heads_shape], vec![]);
            heads.push(b.op("Transpose", &[&r], vec![ints("perm", &[0, 2, 1, 3])]));
        }
        let (q, k_new, v_new) = (&heads[0], &heads[1], &heads[2]);
        let (k, v) = (format!("present.{i}.key"), format!("present.{i}.value"));
        // (the sequence axis counted from the end in Hugging Face's names; the past key
        // copied first among an exporter's copies)
        let seq_axis = if s.hf_names { -2 } else { 2 };
        let past_k = match s.copies {
            true => b.op("Identity", &[&past[i].0], vec![]),
            false => past[i].0.clone(),
        };
        b.op_to(
            "Concat",
            &[&past_k, k_new],
            &[&k],
            vec![int("axis", seq_axis)],
        );
        b.op_to(
            "Concat",
            &[&past[i].1, v_new],
            &[&v],
            vec![int("axis", seq_axis)],
        );
        presents.extend([k.clone(), v.clone()]);
        let kt = b.op("Transpose", &[&k], vec![ints("perm", &[0, 1, 3, 2])]);
        let scores = b.op("MatMul", &[q, &kt], vec![]);
        let root = (DH as f32).sqrt();
        let scaled = match (s.scale_by_mul, s.copies) {
            (true, _) => {
                let c = b.f("inv_sqrt_dh", &[], &[1.0 / root]);
                b.op("Mul", &[&scores, &c], vec![])
            }
            (false, true) => {
                let t = TensorProto {
                    dims: vec![],
                    data_type: Some(DataType::Float as i32),
                    float_data: vec![root],
                    ..Default::default()
                };
                let value = AttributeProto {
                    name: Some("value".into()),
                    t: Some(t),
                    ..Default::default()
                };
                let c = b.op("Constant", &[], vec![value]);
                b.op("Div", &[&scores, &c], vec![])
            }
            (false, false) => {
                let c = b.f("sqrt_dh", &[], &[root]);
                b.op("Div", &[&scores, &c], vec![])
            }
        };
        let masked = match &additive {
            Some(m) => b.op("Add", &[&scaled, m], vec![]),
            None => {
                let qs = b.op("Shape", &[q], vec![]);
                let q_len = b.op("Gather", &[&qs, &two], vec![int("axis", 0)]);
                let ks = b.op("Shape", &[&k], vec![]);
                let k_len = b.op("Gather", &[&ks, &two], vec![int("axis", 0)]);
                let d = b.op("Sub", &[&k_len, &q_len], vec![]);
                let start = b.op("Unsqueeze", &[&d, &axes0], vec![]);
                let k_len1 = b.op("Unsqueeze", &[&k_len, &axes0], vec![]);
                let (a2, a3) = (b.i("axes", &[1], &[2]), b.i("axes", &[1], &[3]));
                let m = b.op("Slice", &[&buffer, &start, &k_len1, &a2], vec![]);
                let z = b.i("zero1", &[1], &[0]);
                let m = b.op("Slice", &[&m, &z, &k_len1, &a3], vec![]);
                let low = b.f("mask_value", &[], &[f32::MIN]);
                b.op("Where", &[&m, &scaled, &low], vec![])
            }
        };
        let last = if s.copies { 3 } else { -1 };
        let mut probs = b.op("Softmax", &[&masked], vec![int("axis", last)]);
        if s.copies {
            probs = b.op("Identity", &[&probs], vec![]);
        }
        let ctx = b.op("MatMul", &[&probs, &v], vec![]);
        let back = b.op("Transpose", &[&ctx], vec![ints("perm", &[0, 2, 1, 3])]);
        let merged = b.op("Reshape", &[&back, &merged_shape], vec![]);
        let a = b.linear(&merged, &l.proj, D, s.linear);
        let r1 = b.op("Add", &[&a, &x], vec![]);
        let h2 = b.layer_norm(&r1, &l.ln2);
        let f = b.linear(&h2, &l.fc, D, s.linear);
        let g = b.gelu(&f, s.gelu);
        let f2 = b.linear(&g, &l.fc_proj, FFN, s.linear);
        x = b.op("Add", &[&r1, &f2], vec![]);
    }
    x = b.layer_norm(&x, &p.ln_f);
    if let Some(batch) = s.view {
        let (lead, width) = (b.i("lead", &[1], &[batch]), b.i("width", &[1], &[D as i64]));
        let s1 = b.seq1.clone();
        let to = b.op("Concat", &[&lead, &s1, &width], vec![int("axis", 0)]);
        x = b.op("Reshape", &[&x, &to], vec![]);
    }
    let mut lm = b.f("lm_head", &[D, VOCAB], &p.lm);
    if s.copies {
        lm = b.op("Identity", &[&lm], vec![]);
        let l = b.op("MatMul", &[&x, &lm], vec![]);
        let c = b.op("Cast", &[&l], vec![int("to", 1)]);
        b.op_to("Identity", &[&c], &["logits"], vec![]);
    } else {
        b.op_to("MatMul", &[&x, &lm], &["logits"], vec![]);
    }
    if s.copies {
        // (older exporters list the initializers among the inputs)
        b.g.input.push(input(
            &wte,
            DataType::Float,
            &[Axis::Fixed(VOCAB), Axis::Fixed(D)],
        ));
    }
    for o in std::iter::once("logits".to_string()).chain(presents) {
        b.g.output.push(ValueInfoProto {
            name: Some(o),
            ..Default::default()
        });
    }
    b.g
}

/// GPT-2's logits for the last of `tokens` (ids into the vocabulary), computed in f64 from
/// `p` with the tanh GELU or the exact one.
pub(crate) fn reference_logits(p: &Params, exact_gelu: bool, tokens: &[usize]) -> Vec<f64> {
    let f = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<f64>>();
    let norm = |x: &[f64], l: &Ln| -> Vec<f64> {
        let mean = x.iter().sum::<f64>() / x.len() as f64;
        let var = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / x.len() as f64;
        let r = 1.0 / (var + 1e-5).sqrt();
        (0..x.len())
            .map(|j| (x[j] - mean) * r * f64::from(l.g[j]) + f64::from(l.b[j]))
            .collect()
    };
    let lin = |x: &[f64], l: &Lin| -> Vec<f64> {
        let n = l.b.len();
        (0..n)
            .map(|j| {
                let dot: f64 = (0..x.len()).map(|i| x[i] * f64::from(l.w[i * n + j])).sum();
                dot + f64::from(l.b[j])
            })
            .collect()
    };
    let gelu = |v: f64| match exact_gelu {
        true => 0.5 * v * (1.0 + erf_series(v / std::f64::consts::SQRT_2)),
        false => {
            let k = (2.0 / std::f64::consts::PI).sqrt();
            0.5 * v * (1.0 + (k * (v + 0.044715 * v * v * v)).tanh())
        }
    };
    let (wte, wpe) = (f(&p.wte), f(&p.wpe));
    let n = tokens.len();
    let mut x: Vec<Vec<f64>> = (0..n)
        .map(|t| {
            (0..D)
                .map(|j| wte[tokens[t] * D + j] + wpe[t * D + j])
                .collect()
        })
        .collect();
    for l in &p.layers {
        let qkv: Vec<Vec<f64>> = x.iter().map(|r| lin(&norm(r, &l.ln1), &l.qkv)).collect();
        let mut att = vec![vec![0.0; D]; n];
        for h in 0..HEADS {
            let part = |r: &[f64], which: usize| r[which * D + h * DH..][..DH].to_vec();
            for i in 0..n {
                let q = part(&qkv[i], 0);
                let scores: Vec<f64> = (0..=i)
                    .map(|j| {
                        let k = part(&qkv[j], 1);
                        q.iter().zip(&k).map(|(a, b)| a * b).sum::<f64>() / (DH as f64).sqrt()
                    })
                    .collect();
                let top = scores.iter().cloned().fold(f64::MIN, f64::max);
                let e: Vec<f64> = scores.iter().map(|s| (s - top).exp()).collect();
                let sum: f64 = e.iter().sum();
                for (j, w) in e.iter().enumerate() {
                    let v = part(&qkv[j], 2);
                    for c in 0..DH {
                        att[i][h * DH + c] += w / sum * v[c];
                    }
                }
            }
        }
        for i in 0..n {
            let a = lin(&att[i], &l.proj);
            let r1: Vec<f64> = x[i].iter().zip(&a).map(|(p, q)| p + q).collect();
            let hidden: Vec<f64> = lin(&norm(&r1, &l.ln2), &l.fc)
                .into_iter()
                .map(gelu)
                .collect();
            let out = lin(&hidden, &l.fc_proj);
            x[i] = r1.iter().zip(&out).map(|(p, q)| p + q).collect();
        }
    }
    let last = norm(&x[n - 1], &p.ln_f);
    let lm = Lin {
        w: p.lm.clone(),
        b: vec![0.0; VOCAB],
    };
    lin(&last, &lm)
}
