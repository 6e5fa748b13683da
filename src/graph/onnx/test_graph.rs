//! ONNX graphs built in code, for the importer's unit tests: one input with a batch axis named
//! `N`, initializers, nodes and one output, encoded as a file would hold them and imported
//! through the same path as a file on disk ([`super::import_bytes`]), then served alone on the
//! CPU device so that a test can compare what it computes with a reference written out by hand.
//! The committed fixtures (`tests/it/onnx.rs`) check the same operators against onnxruntime;
//! these reach every attribute and every refusal without Python.

use super::proto::pb::tensor_proto::DataType;
use super::proto::pb::tensor_shape_proto::{dimension::Value as DimValue, Dimension};
use super::proto::pb::type_proto::{Tensor, Value as TypeValue};
use super::proto::pb::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto,
    TensorShapeProto, TypeProto, ValueInfoProto,
};
use crate::graph::Model;
use crate::run::verify::RequestIo;
use prost::Message;

/// A graph under construction (IR 8, opset 17: what `torch.onnx.export` writes).
pub(crate) struct Built {
    g: GraphProto,
}

/// A graph whose one input `name` holds `per_request` values of type `elem` a request (a
/// batch axis `N` before them; a size of 0 is an axis without a size).
pub(crate) fn graph(name: &str, elem: DataType, per_request: &[usize]) -> Built {
    Built {
        g: GraphProto {
            input: vec![value_info(name, elem, per_request)],
            ..Default::default()
        },
    }
}

/// A tensor value `name` of `per_request` values of type `elem` after a batch axis `N`.
fn value_info(name: &str, elem: DataType, per_request: &[usize]) -> ValueInfoProto {
    let dim = |v: DimValue| Dimension {
        value: Some(v),
        ..Default::default()
    };
    let dims = std::iter::once(dim(DimValue::DimParam("N".into())))
        .chain(per_request.iter().map(|&d| match d {
            0 => Dimension::default(),
            d => dim(DimValue::DimValue(d as i64)),
        }))
        .collect();
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(TypeValue::TensorType(Tensor {
                elem_type: Some(elem as i32),
                shape: Some(TensorShapeProto { dim: dims }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A float graph input of `per_request` values a request.
pub(crate) fn floats(per_request: &[usize]) -> Built {
    graph("x", DataType::Float, per_request)
}

/// An integer attribute.
pub(crate) fn int(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        i: Some(v),
        ..Default::default()
    }
}

/// A float attribute.
pub(crate) fn float(name: &str, v: f32) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        f: Some(v),
        ..Default::default()
    }
}

/// An integer-list attribute.
pub(crate) fn ints(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        ints: v.to_vec(),
        ..Default::default()
    }
}

/// A string attribute.
pub(crate) fn string(name: &str, v: &str) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        s: Some(v.as_bytes().to_vec()),
        ..Default::default()
    }
}

/// erf by its Maclaurin series in f64 (exact to far below f32 for |x| < 5).
pub(crate) fn erf_series(x: f64) -> f64 {
    let (mut term, mut sum) = (x, x);
    for n in 1..200 {
        term *= -x * x / n as f64;
        sum += term / (2 * n + 1) as f64;
    }
    sum * 2.0 / std::f64::consts::PI.sqrt()
}

/// A float tensor of `dims` holding `f`.
pub(crate) fn tensor_f(dims: &[usize], f: &[f32]) -> TensorProto {
    TensorProto {
        dims: dims.iter().map(|&d| d as i64).collect(),
        data_type: Some(DataType::Float as i32),
        float_data: f.to_vec(),
        ..Default::default()
    }
}

impl Built {
    /// A graph built elsewhere (a decoder export: [`super::decoder`]'s tests).
    pub(crate) fn of(g: GraphProto) -> Self {
        Built { g }
    }

    /// The graph built (nodes and initializers to splice into another: [`super::decoder`]'s
    /// tests).
    pub(crate) fn into_graph(self) -> GraphProto {
        self.g
    }

    /// A float initializer.
    pub(crate) fn init(mut self, name: &str, dims: &[usize], f: &[f32]) -> Self {
        let t = TensorProto {
            name: Some(name.into()),
            ..tensor_f(dims, f)
        };
        self.g.initializer.push(t);
        self
    }

    /// An int64 initializer.
    pub(crate) fn init_i(mut self, name: &str, dims: &[usize], i: &[i64]) -> Self {
        self.g.initializer.push(TensorProto {
            name: Some(name.into()),
            dims: dims.iter().map(|&d| d as i64).collect(),
            data_type: Some(DataType::Int64 as i32),
            int64_data: i.to_vec(),
            ..Default::default()
        });
        self
    }

    /// A node of operator `op`, named `name`.
    pub(crate) fn node(
        mut self,
        name: &str,
        op: &str,
        inputs: &[&str],
        output: &str,
        attrs: Vec<AttributeProto>,
    ) -> Self {
        self.g.node.push(NodeProto {
            name: Some(name.into()),
            op_type: Some(op.into()),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: vec![output.into()],
            attribute: attrs,
            ..Default::default()
        });
        self
    }

    /// A further graph input.
    pub(crate) fn input(mut self, name: &str, elem: DataType, per_request: &[usize]) -> Self {
        self.g.input.push(value_info(name, elem, per_request));
        self
    }

    /// The first input's axis `axis` (0: the batch axis) named `name` instead of sized.
    pub(crate) fn named(mut self, axis: usize, name: &str) -> Self {
        if let Some(TypeValue::TensorType(t)) = self.g.input[0]
            .r#type
            .as_mut()
            .and_then(|t| t.value.as_mut())
        {
            if let Some(d) = t.shape.as_mut().and_then(|s| s.dim.get_mut(axis)) {
                d.value = Some(DimValue::DimParam(name.into()));
            }
        }
        self
    }

    /// The first input without a type.
    pub(crate) fn untyped(mut self) -> Self {
        self.g.input[0].r#type = None;
        self
    }

    /// The last node in operator-set domain `domain`.
    pub(crate) fn in_domain(mut self, domain: &str) -> Self {
        if let Some(n) = self.g.node.last_mut() {
            n.domain = Some(domain.into());
        }
        self
    }

    /// A further output of the last node.
    pub(crate) fn also_output(mut self, name: &str) -> Self {
        if let Some(n) = self.g.node.last_mut() {
            n.output.push(name.into());
        }
        self
    }

    /// The graph's output.
    pub(crate) fn output(mut self, name: &str) -> Self {
        self.g.output.push(ValueInfoProto {
            name: Some(name.into()),
            ..Default::default()
        });
        self
    }

    /// The file's bytes.
    pub(crate) fn encoded(&self) -> Vec<u8> {
        ModelProto {
            ir_version: Some(8),
            // a vendor's domain declared too, so that a node may name it
            opset_import: vec![
                OperatorSetIdProto {
                    domain: Some(String::new()),
                    version: Some(17),
                },
                OperatorSetIdProto {
                    domain: Some("com.microsoft".into()),
                    version: Some(1),
                },
            ],
            producer_name: Some("test_graph".into()),
            graph: Some(self.g.clone()),
            ..Default::default()
        }
        .encode_to_vec()
    }

    /// Imported as the file `built.onnx`, with `--dim` sizes `dims`.
    pub(crate) fn import_with(&self, dims: &[(&str, usize)]) -> crate::error::Result<Model> {
        let dims: Vec<(String, usize)> = dims.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        super::import_bytes(std::path::Path::new("built.onnx"), self.encoded(), &dims)
    }

    /// Imported, or the test fails saying why.
    pub(crate) fn import(&self) -> Model {
        self.import_with(&[])
            .unwrap_or_else(|e| panic!("the built graph does not import: {e}"))
    }

    /// Why the import refuses it (the test fails when it imports).
    pub(crate) fn refused(&self) -> String {
        match self.import_with(&[]) {
            Ok(m) => panic!("imported, but expected a refusal: {:?}", m.nodes.len()),
            Err(e) => e.to_string(),
        }
    }
}

/// A 3 × 2 weight matrix of distinct values, for linear layers.
pub(crate) const W: [f32; 6] = [1.0, -2.0, 0.5, 3.0, 0.25, -1.0];

/// One row `x[k]` times the matrix `w[k][cols]`.
pub(crate) fn times(x: &[f32], w: &[f32], cols: usize) -> Vec<f32> {
    (0..cols)
        .map(|j| x.iter().enumerate().map(|(i, v)| v * w[i * cols + j]).sum())
        .collect()
}

/// `m` served alone on the CPU device for three requests: each one's input and output.
pub(crate) fn run(m: &Model) -> Vec<RequestIo> {
    let mut dev = crate::device::cpu::CpuDevice::new(1);
    let io = crate::run::verify::inputs_and_outputs(m, &mut dev, 3, 4, 11)
        .unwrap_or_else(|e| panic!("the imported graph does not run: {e}"));
    assert_eq!(io.len(), 3, "every request captured");
    io
}

/// Each of `m`'s requests' output against `want(its input)`, within 1e-5 of the larger.
pub(crate) fn computes(m: &Model, want: impl Fn(&[f32]) -> Vec<f32>) {
    for r in run(m) {
        let expected = want(&r.input);
        assert_eq!(r.output.len(), expected.len(), "output length");
        for (i, (g, w)) in r.output.iter().zip(&expected).enumerate() {
            assert!(
                (g - w).abs() <= 1e-5 * w.abs().max(1.0),
                "output {i}: {g}, expected {w}\n got {:?}\nwant {expected:?}",
                r.output
            );
        }
    }
}
