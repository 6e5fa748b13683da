//! The built-in model zoo: the files in `models/`, embedded in the binary so that `--model
//! resnet50` works from any directory. A path to a `.toml` file is accepted wherever a name is.

use super::loader::{load_model_file_scaled, parse_model_scaled, Scale};
use super::Model;
use crate::error::{Error, Result};
use std::path::Path;

/// (name, aliases, file text) of every built-in model.
const BUILTIN: &[(&str, &[&str], &str)] = &[
    (
        "resnet50",
        &["resnet", "resnet-50"],
        include_str!("../../models/resnet50.toml"),
    ),
    ("gnmt", &[], include_str!("../../models/gnmt.toml")),
    (
        "transformer_base",
        &["transformer", "transformer-base"],
        include_str!("../../models/transformer_base.toml"),
    ),
    (
        "vgg16",
        &["vgg", "vgg-16"],
        include_str!("../../models/vgg16.toml"),
    ),
    (
        "mobilenet_v1",
        &["mobilenet", "mobilenet-v1"],
        include_str!("../../models/mobilenet_v1.toml"),
    ),
    (
        "bert_base",
        &["bert", "bert-base"],
        include_str!("../../models/bert_base.toml"),
    ),
    ("las", &[], include_str!("../../models/las.toml")),
    (
        "lstm_stack",
        &["lstm"],
        include_str!("../../models/lstm_stack.toml"),
    ),
    ("gpt2", &["gpt-2"], include_str!("../../models/gpt2.toml")),
    (
        "gpt2_medium",
        &["gpt2-medium", "gpt-2-medium"],
        include_str!("../../models/gpt2_medium.toml"),
    ),
];

/// The built-in models past the paper's seven: `lstm_stack` (the cellular-batching comparison's
/// pure-RNN workload) and the decoder-only language models.
const BEYOND_THE_PAPER: &[&str] = &["lstm_stack", "gpt2", "gpt2_medium"];

/// Names of the paper's seven models, in the paper's order.
pub fn builtin_names() -> Vec<&'static str> {
    BUILTIN
        .iter()
        .map(|(n, _, _)| *n)
        .filter(|n| !BEYOND_THE_PAPER.contains(n))
        .collect()
}

/// Every built-in model: the paper's seven, `lstm_stack`, the pure-RNN workload of the
/// cellular-batching comparison, and GPT-2 small and medium, decoder-only language models.
pub fn all_names() -> Vec<&'static str> {
    BUILTIN.iter().map(|(n, _, _)| *n).collect()
}

/// Loads a built-in model by name or alias, or a model file by path.
pub fn load(name_or_path: &str) -> Result<Model> {
    load_scaled(name_or_path, Scale::default())
}

/// A model of `tests/fixtures` by its file name, for unit tests (which must find it).
#[cfg(test)]
pub(crate) fn fixture(file: &str) -> Model {
    load(&format!(
        "{}/tests/fixtures/{file}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap_or_else(|e| panic!("fixture {file}: {e}"))
}

/// Loads a model (see [`load`]) as a reduced-size variant.
pub fn load_scaled(name_or_path: &str, scale: Scale) -> Result<Model> {
    load_with(name_or_path, scale, &[])
}

/// Loads a model (see [`load`]) as a reduced-size variant; an ONNX file's named axes are
/// fixed by `dims` (an ONNX model brings its weights, so it cannot be scaled).
pub fn load_with(
    name_or_path: &str,
    scale: Scale,
    dims: &crate::graph::onnx::Dims,
) -> Result<Model> {
    let key = name_or_path.trim();
    if crate::graph::onnx::is_onnx(key) {
        if scale != Scale::default() {
            return Err(Error::invalid(
                "--width/--res",
                "an imported ONNX model keeps its own sizes (its weights come with it)",
            ));
        }
        return crate::graph::onnx::import(Path::new(key), dims);
    }
    for (name, aliases, text) in BUILTIN {
        if key.eq_ignore_ascii_case(name) || aliases.iter().any(|a| key.eq_ignore_ascii_case(a)) {
            return parse_model_scaled(text, Path::new(&format!("models/{name}.toml")), scale);
        }
    }
    let p = Path::new(key);
    if key.ends_with(".toml") || p.is_file() {
        return load_model_file_scaled(p, scale);
    }
    Err(Error::UnknownModel(key.to_string(), all_names().join(", ")))
}
