//! The Open Inference Protocol's JSON (KServe v2): an inference request's tensors, checked
//! against the model's one input, and the protocol's error object.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

/// A tensor as the protocol writes it (the data flattened, row-major).
#[derive(Debug, Deserialize, Serialize)]
pub(super) struct Tensor {
    pub name: String,
    pub datatype: String,
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

/// An inference request's body.
#[derive(Debug, Deserialize)]
pub(super) struct InferRequest {
    inputs: Vec<serde_json::Value>,
}

impl InferRequest {
    /// The values of its one input, checked against the model's `name`, `datatype` and
    /// one-request `shape` (the data may also be nested lists, as the protocol allows).
    pub(super) fn one_input(
        self,
        name: &str,
        datatype: &str,
        shape: &[usize],
    ) -> Result<Vec<f32>, String> {
        let [input] = &self.inputs[..] else {
            return Err(format!(
                "{} inputs: the model takes one, '{name}'",
                self.inputs.len()
            ));
        };
        let field = |k: &str| input.get(k).ok_or_else(|| format!("input without '{k}'"));
        let got_name = field("name")?.as_str().unwrap_or("");
        if got_name != name {
            return Err(format!("input '{got_name}': the model's input is '{name}'"));
        }
        let got_type = field("datatype")?.as_str().unwrap_or("");
        if got_type != datatype {
            return Err(format!("datatype {got_type}: input '{name}' is {datatype}"));
        }
        let got_shape: Vec<usize> =
            serde_json::from_value(field("shape")?.clone()).map_err(|e| format!("shape: {e}"))?;
        if got_shape != shape {
            return Err(format!(
                "shape {got_shape:?}: input '{name}' is {shape:?} (one request per call)"
            ));
        }
        let mut data = Vec::new();
        flatten(field("data")?, &mut data)?;
        let want: usize = shape.iter().product();
        if data.len() != want {
            return Err(format!(
                "{} values for shape {shape:?} ({want})",
                data.len()
            ));
        }
        Ok(data)
    }
}

fn flatten(v: &serde_json::Value, out: &mut Vec<f32>) -> Result<(), String> {
    match v {
        serde_json::Value::Array(items) => items.iter().try_for_each(|x| flatten(x, out)),
        serde_json::Value::Number(n) => {
            let x = n.as_f64().ok_or("a number out of range")?;
            if !x.is_finite() {
                return Err("a value that is not finite".into());
            }
            out.push(x as f32);
            Ok(())
        }
        other => Err(format!("data holds {other}: numbers only")),
    }
}

/// The protocol's error object with its status.
pub(super) fn error(status: StatusCode, msg: String) -> Response {
    (status, axum::Json(serde_json::json!({ "error": msg }))).into_response()
}
