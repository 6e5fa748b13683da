//! The `onnx` checker's structural rules, enforced before a node is translated: a file the
//! checker (`onnx.checker.check_model`) rejects is refused here too, with the rule it breaks,
//! instead of importing as something its writer did not mean.
//!
//! - the IR version is declared and one this importer reads ([`IR_VERSIONS`]);
//! - the default operator set is declared once, at a version in [`OPSETS`], and every domain a
//!   node names is declared;
//! - every value is defined once (single static assignment): initializers, graph inputs and node
//!   outputs have unique names (a graph input may repeat an initializer's name, as IR 3 files
//!   list their weights among the inputs).

use super::proto::pb::{GraphProto, ModelProto};
use std::collections::{HashMap, HashSet};
use std::ops::RangeInclusive;

/// The IR versions read: 3 is the first with `opset_import` (the operator sets a file relies
/// on); 14 is the newest in the vendored `proto/onnx.proto` (its `IR_VERSION`).
pub(super) const IR_VERSIONS: RangeInclusive<i64> = 3..=14;

/// The default domain's operator-set versions read: 7 is the first where `Add`, `Sub` and `Mul`
/// broadcast as numpy does (earlier ones take `broadcast`/`axis` attributes the importer does not
/// read); 28 is the newest `onnx` 1.23.2 knows (`onnx.defs.onnx_opset_version()`, the package
/// CI builds the fixtures with).
pub(super) const OPSETS: RangeInclusive<i64> = 7..=28;

/// True for the names of ONNX's own operator set.
fn is_default(domain: &str) -> bool {
    domain.is_empty() || domain == "ai.onnx"
}

/// Checks `model`'s declarations and `g`'s single assignment, or says which rule fails.
pub(super) fn structure(model: &ModelProto, g: &GraphProto) -> Result<(), String> {
    match model.ir_version {
        None => return Err("the file declares no ir_version".into()),
        Some(v) if !IR_VERSIONS.contains(&v) => {
            return Err(format!(
                "ir_version {v} is outside the versions read, {}..={}",
                IR_VERSIONS.start(),
                IR_VERSIONS.end()
            ))
        }
        Some(_) => {}
    }
    let mut declared: HashMap<&str, i64> = HashMap::new();
    for o in &model.opset_import {
        let domain = if is_default(o.domain()) {
            ""
        } else {
            o.domain()
        };
        if declared.insert(domain, o.version()).is_some() {
            return Err(format!(
                "opset_import declares the domain '{}' twice",
                o.domain()
            ));
        }
    }
    match declared.get("") {
        None => {
            return Err(
                "opset_import declares no version of the default domain (ONNX's own operators)"
                    .into(),
            )
        }
        Some(v) if !OPSETS.contains(v) => {
            return Err(format!(
                "opset {v} of the default domain is outside the versions read, {}..={}",
                OPSETS.start(),
                OPSETS.end()
            ))
        }
        Some(_) => {}
    }
    for n in &g.node {
        let domain = if is_default(n.domain()) {
            ""
        } else {
            n.domain()
        };
        if !declared.contains_key(domain) {
            return Err(format!(
                "node '{}' ({}) is of the domain '{domain}', which opset_import does not declare",
                n.name(),
                n.op_type()
            ));
        }
    }
    single_assignment(g)
}

/// Every value name defined once.
fn single_assignment(g: &GraphProto) -> Result<(), String> {
    let mut weights = HashSet::new();
    for t in &g.initializer {
        if !weights.insert(t.name()) {
            return Err(format!("two initializers are named '{}'", t.name()));
        }
    }
    let mut defined = HashSet::new();
    for i in &g.input {
        if !defined.insert(i.name()) {
            return Err(format!("two graph inputs are named '{}'", i.name()));
        }
    }
    defined.extend(weights.iter().copied());
    for n in &g.node {
        for o in n.output.iter().filter(|o| !o.is_empty()) {
            if !defined.insert(o.as_str()) {
                return Err(format!(
                    "node '{}' ({}) defines '{o}', which is already defined (a graph is in single \
                     static assignment form)",
                    n.name(),
                    n.op_type()
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::proto::pb::{NodeProto, OperatorSetIdProto, TensorProto, ValueInfoProto};
    use super::*;

    fn opset(domain: &str, version: i64) -> OperatorSetIdProto {
        OperatorSetIdProto {
            domain: Some(domain.into()),
            version: Some(version),
        }
    }

    fn node(name: &str, domain: &str, inputs: &[&str], output: &str) -> NodeProto {
        NodeProto {
            name: Some(name.into()),
            op_type: Some("Relu".into()),
            domain: Some(domain.into()),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: vec![output.into()],
            ..Default::default()
        }
    }

    /// A model with `x → a → b`, the weight `w`, IR 8 and opset 17 (what `torch.onnx.export`
    /// writes).
    fn good() -> (ModelProto, GraphProto) {
        let m = ModelProto {
            ir_version: Some(8),
            opset_import: vec![opset("", 17)],
            ..Default::default()
        };
        let g = GraphProto {
            input: vec![ValueInfoProto {
                name: Some("x".into()),
                ..Default::default()
            }],
            initializer: vec![TensorProto {
                name: Some("w".into()),
                ..Default::default()
            }],
            node: vec![node("n1", "", &["x"], "a"), node("n2", "", &["a"], "b")],
            ..Default::default()
        };
        (m, g)
    }

    fn refused(m: &ModelProto, g: &GraphProto) -> String {
        structure(m, g).expect_err("refused")
    }

    #[test]
    fn a_file_the_checker_accepts_passes_at_each_end_of_the_ranges() {
        let (mut m, mut g) = good();
        structure(&m, &g).unwrap();
        for (ir, ops) in [(3, 7), (14, 28)] {
            m.ir_version = Some(ir);
            m.opset_import = vec![opset("ai.onnx", ops), opset("com.example", 1)];
            g.node[1].domain = Some("com.example".into());
            structure(&m, &g).unwrap();
        }
        // an IR 3 file lists its weights among the inputs too
        g.input.push(ValueInfoProto {
            name: Some("w".into()),
            ..Default::default()
        });
        structure(&m, &g).unwrap();
    }

    #[test]
    fn versions_outside_the_ranges_or_undeclared_are_refused_naming_them() {
        let (mut m, g) = good();
        for (ir, says) in [
            (None, "no ir_version"),
            (Some(2), "ir_version 2"),
            (Some(15), "ir_version 15"),
        ] {
            m.ir_version = ir;
            let e = refused(&m, &g);
            assert!(
                e.contains(says) && (ir.is_none() || e.contains("3..=14")),
                "{e}"
            );
        }
        m.ir_version = Some(8);
        for v in [6, 29] {
            m.opset_import = vec![opset("", v)];
            let e = refused(&m, &g);
            assert!(
                e.contains(&format!("opset {v}")) && e.contains("7..=28"),
                "{e}"
            );
        }
        m.opset_import = vec![opset("com.example", 1)];
        assert!(refused(&m, &g).contains("no version of the default domain"));
        m.opset_import = vec![opset("", 17), opset("ai.onnx", 18)];
        assert!(refused(&m, &g).contains("'ai.onnx' twice"));
        m.opset_import = vec![opset("", 17)];
        let mut g2 = g.clone();
        g2.node[0].domain = Some("com.microsoft".into());
        let e = refused(&m, &g2);
        assert!(
            e.contains("node 'n1'") && e.contains("'com.microsoft'"),
            "{e}"
        );
    }

    #[test]
    fn a_value_defined_twice_is_refused_naming_it() {
        let (m, g) = good();
        let mut twice = g.clone();
        twice.initializer.push(twice.initializer[0].clone());
        assert!(refused(&m, &twice).contains("two initializers are named 'w'"));
        let mut twice = g.clone();
        twice.input.push(twice.input[0].clone());
        assert!(refused(&m, &twice).contains("two graph inputs are named 'x'"));
        for out in ["a", "x", "w"] {
            let mut twice = g.clone();
            twice.node[1].output = vec![out.into()];
            let e = refused(&m, &twice);
            assert!(
                e.contains("node 'n2'") && e.contains(&format!("'{out}'")),
                "{e}"
            );
        }
    }
}
