//! The Open Inference Protocol's JSON (KServe v2): a model's input and output as the protocol
//! describes them, an inference request's tensors checked against the model's one input, its
//! parameters (`sla_ms`, `decode_steps`), and the protocol's error object.

use crate::time::Nanos;

use super::numbers::Numbers;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::Value;

/// One model's input or output as the protocol describes it.
#[derive(Clone, Debug)]
pub(crate) struct Io {
    pub name: String,
    pub datatype: &'static str,
    /// One request's shape (the batch axis of 1 first); -1: a length the request chooses.
    pub shape: Vec<i64>,
    /// Token ids: each value an integer in `[0, vocab)`.
    pub vocab: Option<usize>,
    /// The longest variable axis accepted.
    pub max_len: usize,
    /// Binary values must be finite 32-bit floats: a device computes on them (a model device,
    /// which computes nothing, takes NaN and infinities too, as tools send at random).
    pub finite: bool,
}

/// An inference request's body (its JSON part, with the binary tensor extension).
#[derive(Debug, Deserialize)]
pub(crate) struct InferRequest {
    /// The client's identifier, echoed in the response (clients match answers by it).
    #[serde(default)]
    pub(super) id: Option<String>,
    pub(super) inputs: Vec<InputTensor>,
    #[serde(default)]
    pub(super) parameters: Option<serde_json::Map<String, Value>>,
    #[serde(default)]
    pub(super) outputs: Option<Vec<RequestedOutput>>,
}

/// One input tensor: its values in `data` (flat or nested), or in the binary part of the
/// body (`parameters.binary_data_size` bytes).
#[derive(Debug, Deserialize)]
pub(super) struct InputTensor {
    pub(super) name: String,
    pub(super) datatype: String,
    pub(super) shape: Vec<usize>,
    #[serde(default)]
    pub(super) data: Option<Numbers>,
    #[serde(default)]
    pub(super) parameters: Option<serde_json::Map<String, Value>>,
}

/// An output the client asks for (`parameters.binary_data`: in the binary part).
#[derive(Debug, Deserialize)]
pub(super) struct RequestedOutput {
    pub(super) name: String,
    #[serde(default)]
    pub(super) parameters: Option<serde_json::Map<String, Value>>,
}

/// A request's input, checked.
#[derive(Debug)]
pub(crate) struct Checked {
    /// The values, flattened row-major (token ids as values).
    pub values: Vec<f32>,
    /// The length of its variable axis (1 when the shape is fixed).
    pub len: usize,
    /// Its own SLA (`parameters.sla_ms`).
    pub sla: Option<Nanos>,
    /// Decoder steps to run (`parameters.decode_steps`, seq2seq models).
    pub decode_steps: Option<u32>,
    /// Answer with the output in the binary part of the body.
    pub binary_output: bool,
    /// The request's `id`, to echo.
    pub id: Option<String>,
}

impl InferRequest {
    /// Its one input checked against the model's `io`, its values from `data` or from
    /// `binary` (the body after the JSON part), and its parameters; `max_dec`: the most
    /// decoder steps (0: none).
    /// Refuses a requested output the model does not have (`output`, its one output): it was
    /// answered 200 with the model's output, as if asked for.
    pub(crate) fn check_outputs(&self, output: &Io) -> Result<(), String> {
        for o in self.outputs.iter().flatten() {
            if o.name != output.name {
                return Err(format!(
                    "output '{}': the model's output is '{}'",
                    o.name, output.name
                ));
            }
            // the classification extension would answer class labels: it was ignored, and the
            // whole tensor answered
            if o.parameters
                .as_ref()
                .is_some_and(|p| p.contains_key("class_count"))
            {
                return Err(format!(
                    "output '{}': parameter class_count (the classification extension) is not supported",
                    o.name
                ));
            }
        }
        Ok(())
    }

    pub(crate) fn check(self, io: &Io, max_dec: u32, binary: &[u8]) -> Result<Checked, String> {
        let name = &io.name;
        let [input] = &self.inputs[..] else {
            return Err(format!(
                "{} inputs: the model takes one, '{name}'",
                self.inputs.len()
            ));
        };
        if &input.name != name {
            return Err(format!(
                "input '{}': the model's input is '{name}'",
                input.name
            ));
        }
        if input.datatype != io.datatype {
            return Err(format!(
                "datatype {}: input '{name}' is {}",
                input.datatype, io.datatype
            ));
        }
        let len = check_shape(&input.shape, io)?;
        let want: usize = input.shape.iter().product();
        let size = input
            .parameters
            .as_ref()
            .and_then(|p| p.get("binary_data_size"));
        let values = match (&input.data, size) {
            (Some(_), Some(_)) => {
                return Err("both data and binary_data_size: give the values once".into())
            }
            (Some(Numbers(v)), None) => v.clone(),
            (None, Some(n)) => from_binary(n, binary, io)?,
            (None, None) => return Err(format!("input '{name}' without data")),
        };
        if values.len() != want {
            return Err(format!(
                "{} values for shape {:?} ({want})",
                values.len(),
                input.shape
            ));
        }
        if size.is_none() && !binary.is_empty() {
            return Err(format!(
                "{} bytes after the JSON header that no input claims",
                binary.len()
            ));
        }
        if let Some(vocab) = io.vocab {
            if let Some(bad) = values
                .iter()
                .find(|v| v.fract() != 0.0 || **v < 0.0 || **v >= vocab as f32)
            {
                return Err(format!(
                    "token id {bad}: input '{name}' takes integers in [0, {vocab})"
                ));
            }
        }
        let params = self.parameters.unwrap_or_default();
        let flag = |p: &Option<serde_json::Map<String, Value>>, k: &str| {
            p.as_ref().and_then(|p| p.get(k)).and_then(Value::as_bool) == Some(true)
        };
        let binary_output = params.get("binary_data_output").and_then(Value::as_bool) == Some(true)
            || self
                .outputs
                .iter()
                .flatten()
                .any(|o| flag(&o.parameters, "binary_data"));
        let sla = match params.get("sla_ms") {
            None => None,
            Some(v) => Some(sla_ms(v)?),
        };
        let decode_steps = match params.get("decode_steps") {
            None => None,
            Some(_) if max_dec == 0 => {
                return Err("parameter decode_steps: the model has no decoder".into())
            }
            Some(v) => Some(
                v.as_u64()
                    .filter(|d| (1..=u64::from(max_dec)).contains(d))
                    .ok_or_else(|| {
                        format!("parameter decode_steps {v}: an integer in [1, {max_dec}]")
                    })? as u32,
            ),
        };
        Ok(Checked {
            values,
            len,
            sla,
            decode_steps,
            binary_output,
            id: self.id,
        })
    }
}

/// The length of `got`'s variable axis (1 if none), or why it does not fit `io`.
fn check_shape(got: &[usize], io: &Io) -> Result<usize, String> {
    let fits = got.len() == io.shape.len()
        && got.iter().zip(&io.shape).all(|(&g, &w)| {
            if w < 0 {
                (1..=io.max_len).contains(&g)
            } else {
                g as i64 == w
            }
        });
    if !fits {
        return Err(format!(
            "shape {got:?}: input '{}' is {:?} (one request per call{})",
            io.name,
            io.shape,
            if io.shape.contains(&-1) {
                format!("; -1: a length in [1, {}]", io.max_len)
            } else {
                String::new()
            }
        ));
    }
    Ok(got
        .iter()
        .zip(&io.shape)
        .find(|(_, &w)| w < 0)
        .map_or(1, |(&g, _)| g))
}

/// Values from the binary part: `size` bytes of little-endian FP32 or INT64 (`io`'s datatype),
/// finite unless `io` says otherwise.
fn from_binary(size: &Value, binary: &[u8], io: &Io) -> Result<Vec<f32>, String> {
    let datatype = io.datatype;
    let n = size
        .as_u64()
        .ok_or_else(|| format!("binary_data_size {size}: a number of bytes"))?;
    if n != binary.len() as u64 {
        return Err(format!(
            "binary_data_size {n}, but {} bytes follow the JSON header",
            binary.len()
        ));
    }
    let width = if datatype == "INT64" { 8 } else { 4 };
    if !binary.len().is_multiple_of(width) {
        return Err(format!(
            "{} bytes of {datatype}: not a whole number of {width}-byte values",
            binary.len()
        ));
    }
    binary
        .chunks_exact(width)
        .map(|c| {
            let x = if width == 8 {
                let mut b = [0; 8];
                b.copy_from_slice(c);
                i64::from_le_bytes(b) as f64
            } else {
                f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            };
            if io.finite {
                finite(x)
            } else {
                Ok(x as f32)
            }
        })
        .collect()
}

pub(super) fn finite(x: f64) -> Result<f32, String> {
    if !x.is_finite() || x.abs() > f64::from(f32::MAX) {
        return Err(format!("{x}: not a finite 32-bit float"));
    }
    Ok(x as f32)
}

/// `parameters.sla_ms`, checked against (0, one day].
fn sla_ms(v: &Value) -> Result<Nanos, String> {
    v.as_f64()
        .and_then(crate::time::sla_from_ms)
        .ok_or_else(|| {
            format!(
                "parameter sla_ms {v}: a number in {}",
                crate::time::SLA_RANGE
            )
        })
}

/// An output tensor in the protocol's JSON (token ids written as integers), or, `binary`,
/// its description with `binary_data_size` and its little-endian bytes (FP32, or INT64).
pub(crate) fn tensor(io: &Io, shape: &[usize], data: &[f32], binary: bool) -> (Value, Vec<u8>) {
    let int = io.datatype == "INT64";
    if binary {
        let bytes = le_bytes(io.datatype, data);
        let t = serde_json::json!({"name": io.name, "datatype": io.datatype, "shape": shape,
            "parameters": {"binary_data_size": bytes.len()}});
        return (t, bytes);
    }
    let data: Vec<Value> = if int {
        data.iter().map(|&v| Value::from(v as i64)).collect()
    } else {
        data.iter().map(|&v| Value::from(f64::from(v))).collect()
    };
    let t =
        serde_json::json!({"name": io.name, "datatype": io.datatype, "shape": shape, "data": data});
    (t, Vec::new())
}

/// Values as the binary tensor extension carries them: little-endian INT64 or FP32.
pub(crate) fn le_bytes(datatype: &str, data: &[f32]) -> Vec<u8> {
    if datatype == "INT64" {
        data.iter()
            .flat_map(|&v| (v as i64).to_le_bytes())
            .collect()
    } else {
        data.iter().flat_map(|&v| v.to_le_bytes()).collect()
    }
}

/// The binary tensor extension's header: the length of the body's JSON part.
pub(crate) const HEADER_LENGTH: &str = "inference-header-content-length";

/// The protocol's error object with its status.
pub(super) fn error(status: StatusCode, msg: String) -> Response {
    (
        status,
        axum::Json(serde_json::json!({ "error": capped(msg) })),
    )
        .into_response()
}

/// The longest error message answered (bytes): a message that quotes the request (a value, a
/// field) says what is wrong in its first line, and a 94 MB body must not come back as a
/// 94 MB error.
const MAX_ERROR: usize = 1024;

/// `msg` cut to [`MAX_ERROR`] bytes at a character boundary, saying how much was left out.
pub(super) fn capped(mut msg: String) -> String {
    if msg.len() <= MAX_ERROR {
        return msg;
    }
    let mut cut = MAX_ERROR;
    while !msg.is_char_boundary(cut) {
        cut -= 1;
    }
    let more = msg.len() - cut;
    msg.truncate(cut);
    msg.push_str(&format!("… ({more} bytes more)"));
    msg
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens() -> Io {
        Io {
            name: "src".into(),
            datatype: "INT64",
            shape: vec![1, -1],
            vocab: Some(100),
            max_len: 8,
            finite: true,
        }
    }

    fn req(v: Value) -> InferRequest {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_variable_axis_takes_lengths_up_to_the_models_maximum() {
        let body = |n: usize, p: Value| {
            req(
                serde_json::json!({"inputs": [{"name": "src", "datatype": "INT64", "shape": [1, n], "data": vec![3; n]}], "parameters": p}),
            )
        };
        let c = body(5, serde_json::json!({"decode_steps": 7, "sla_ms": 20}))
            .check(&tokens(), 9, &[])
            .unwrap();
        assert_eq!((c.len, c.decode_steps, c.values.len()), (5, Some(7), 5));
        assert_eq!(c.sla, Some(Nanos::from_ms(20.0)));
        let e = body(9, Value::Null).check(&tokens(), 9, &[]).unwrap_err();
        assert!(e.contains("a length in [1, 8]"), "{e}");
        let e = body(0, Value::Null).check(&tokens(), 9, &[]).unwrap_err();
        assert!(e.contains("shape [1, 0]"), "{e}");
        for (p, says) in [
            (serde_json::json!({"decode_steps": 10}), "[1, 9]"),
            (serde_json::json!({"decode_steps": 0}), "[1, 9]"),
            (serde_json::json!({"decode_steps": 2.5}), "[1, 9]"),
            (serde_json::json!({"sla_ms": -1}), "sla_ms -1"),
            (serde_json::json!({"sla_ms": "x"}), "sla_ms \"x\""),
            (serde_json::json!({"sla_ms": 1e12}), "(0, 86400000]"),
        ] {
            let e = body(2, p).check(&tokens(), 9, &[]).unwrap_err();
            assert!(e.contains(says), "{e} lacks {says}");
        }
        let e = body(2, serde_json::json!({"decode_steps": 3}))
            .check(&tokens(), 0, &[])
            .unwrap_err();
        assert!(e.contains("no decoder"), "{e}");
    }

    #[test]
    fn a_requested_output_must_be_the_models_own() {
        let out = Io {
            name: "logits".into(),
            ..tokens()
        };
        let ask = |name: &str| {
            req(serde_json::json!({"inputs": [], "outputs": [{"name": name}]})).check_outputs(&out)
        };
        assert_eq!(ask("logits"), Ok(()));
        assert_eq!(
            ask("nope"),
            Err("output 'nope': the model's output is 'logits'".into())
        );
        assert_eq!(
            req(serde_json::json!({"inputs": []})).check_outputs(&out),
            Ok(())
        );
        let e = req(serde_json::json!({"inputs": [], "outputs": [{"name": "logits", "parameters": {"class_count": 3}}]}))
            .check_outputs(&out)
            .unwrap_err();
        assert!(
            e.contains("class_count (the classification extension) is not supported"),
            "{e}"
        );
    }

    #[test]
    fn token_ids_must_be_integers_in_the_vocabulary() {
        for bad in [-1.0, 100.0, 2.5] {
            let e = req(serde_json::json!({"inputs": [{"name": "src", "datatype": "INT64", "shape": [1, 2], "data": [1, bad]}]}))
                .check(&tokens(), 0, &[])
                .unwrap_err();
            assert!(e.contains("[0, 100)"), "{e}");
        }
        let e = serde_json::from_value::<InferRequest>(serde_json::json!({"inputs": [{"name": "src", "datatype": "INT64", "shape": [1, 1], "data": [[1e300]]}]}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a finite 32-bit float"), "{e}");
        // data that is not numbers says what it should be
        let e = serde_json::from_value::<InferRequest>(serde_json::json!({"inputs": [{"name": "src", "datatype": "INT64", "shape": [1, 1], "data": "7"}]}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("expected numbers, or lists of them"), "{e}");
    }

    #[test]
    fn binary_tensors_are_read_from_the_bytes_after_the_json_header() {
        let head = |n: usize| {
            req(
                serde_json::json!({"inputs": [{"name": "src", "datatype": "INT64", "shape": [1, 2], "parameters": {"binary_data_size": n}}], "outputs": [{"name": "y", "parameters": {"binary_data": true}}]}),
            )
        };
        let bytes: Vec<u8> = [7i64, 42].iter().flat_map(|v| v.to_le_bytes()).collect();
        let c = head(16).check(&tokens(), 0, &bytes).unwrap();
        assert_eq!((c.values, c.binary_output), (vec![7.0, 42.0], true));
        let e = head(15).check(&tokens(), 0, &bytes).unwrap_err();
        assert!(e.contains("binary_data_size 15, but 16 bytes"), "{e}");
        let e = head(12).check(&tokens(), 0, &bytes[..12]).unwrap_err();
        assert!(e.contains("not a whole number of 8-byte values"), "{e}");
        let image = image();
        let f: Vec<u8> = [0.5f32, -2.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let c = req(serde_json::json!({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2], "parameters": {"binary_data_size": 8}}]}))
            .check(&image, 0, &f)
            .unwrap();
        assert_eq!((c.values, c.binary_output), (vec![0.5, -2.0], false));
        let e = req(serde_json::json!({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]}]}))
            .check(&image, 0, &f)
            .unwrap_err();
        assert!(
            e.contains("8 bytes after the JSON header that no input claims"),
            "{e}"
        );
        // NaN and infinities: refused where a device computes on them, taken where not
        let odd: Vec<u8> = [f32::NAN, f32::INFINITY]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let body = || {
            req(
                serde_json::json!({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2], "parameters": {"binary_data_size": 8}}]}),
            )
        };
        let e = body().check(&image, 0, &odd).unwrap_err();
        assert!(e.contains("not a finite 32-bit float"), "{e}");
        let emulated = Io {
            finite: false,
            ..image
        };
        let c = body().check(&emulated, 0, &odd).unwrap();
        assert!(c.values[0].is_nan() && c.values[1].is_infinite());
    }

    /// An FP32 input of fixed shape [1, 2].
    fn image() -> Io {
        Io {
            name: "x".into(),
            datatype: "FP32",
            shape: vec![1, 2],
            vocab: None,
            max_len: 1,
            finite: true,
        }
    }

    #[test]
    fn each_field_of_a_request_is_checked_at_its_boundary() {
        let one = |t: Value| req(serde_json::json!({ "inputs": [t] }));
        let x = |shape: Value, data: Value| serde_json::json!({"name": "x", "datatype": "FP32", "shape": shape, "data": data});
        let fails = |r: InferRequest, says: &str| {
            let e = r.check(&image(), 0, &[]).unwrap_err();
            assert!(e.contains(says), "{e} lacks {says}");
        };
        // one input, the model's, of its datatype
        fails(req(serde_json::json!({ "inputs": [] })), "0 inputs");
        let two = x(serde_json::json!([1, 2]), serde_json::json!([1, 2]));
        fails(
            req(serde_json::json!({ "inputs": [two.clone(), two] })),
            "2 inputs: the model takes one, 'x'",
        );
        fails(
            one(
                serde_json::json!({"name": "y", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]}),
            ),
            "input 'y': the model's input is 'x'",
        );
        fails(
            one(
                serde_json::json!({"name": "x", "datatype": "INT64", "shape": [1, 2], "data": [1, 2]}),
            ),
            "datatype INT64: input 'x' is FP32",
        );
        // a fixed shape exactly, its rank too; the values as many as it holds
        for bad in [
            serde_json::json!([1, 3]),
            serde_json::json!([2, 2]),
            serde_json::json!([1, 2, 1]),
            serde_json::json!([2]),
        ] {
            fails(
                one(x(bad, serde_json::json!([1, 2]))),
                "input 'x' is [1, 2] (one request per call)",
            );
        }
        fails(
            one(x(serde_json::json!([1, 2]), serde_json::json!([1, 2, 3]))),
            "3 values for shape [1, 2] (2)",
        );
        fails(
            one(serde_json::json!({"name": "x", "datatype": "FP32", "shape": [1, 2]})),
            "input 'x' without data",
        );
        fails(
            one(
                serde_json::json!({"name": "x", "datatype": "FP32", "shape": [1, 2], "data": [1, 2], "parameters": {"binary_data_size": 8}}),
            ),
            "both data and binary_data_size",
        );
        let c = one(x(serde_json::json!([1, 2]), serde_json::json!([[0.5, -2]])))
            .check(&image(), 0, &[])
            .unwrap();
        assert_eq!((c.values, c.len), (vec![0.5, -2.0], 1));
        assert_eq!(
            (c.sla, c.decode_steps, c.binary_output),
            (None, None, false)
        );
        // a variable axis at both ends of [1, max_len]; token ids at both ends of the vocabulary
        for n in [1, 8] {
            let c = one(serde_json::json!({"name": "src", "datatype": "INT64", "shape": [1, n], "data": vec![99; n]}))
                .check(&tokens(), 0, &[])
                .unwrap();
            assert_eq!(c.len, n);
        }
        let c = one(serde_json::json!({"name": "src", "datatype": "INT64", "shape": [1, 2], "data": [0, 99]}))
            .check(&tokens(), 0, &[])
            .unwrap();
        assert_eq!(c.values, vec![0.0, 99.0]);
        // decode steps at both ends of [1, max]
        for d in [1, 9] {
            let c = req(serde_json::json!({"inputs": [{"name": "src", "datatype": "INT64", "shape": [1, 1], "data": [3]}], "parameters": {"decode_steps": d}}))
                .check(&tokens(), 9, &[])
                .unwrap();
            assert_eq!(c.decode_steps, Some(d));
        }
        // binary output asked for by the request's parameter, or by an output's; false is no
        let ask = |p: Value, outputs: Value| {
            req(serde_json::json!({"inputs": [x(serde_json::json!([1, 2]), serde_json::json!([1, 2]))], "parameters": p, "outputs": outputs, "id": "r7"}))
                .check(&image(), 0, &[])
                .unwrap()
        };
        let c = ask(serde_json::json!({"binary_data_output": true}), Value::Null);
        assert_eq!((c.binary_output, c.id.as_deref()), (true, Some("r7")));
        assert!(
            !ask(
                serde_json::json!({"binary_data_output": false}),
                Value::Null
            )
            .binary_output
        );
        let out = |b: bool| serde_json::json!([{"name": "y", "parameters": {"binary_data": b}}]);
        assert!(ask(Value::Null, out(true)).binary_output);
        assert!(!ask(Value::Null, out(false)).binary_output);
    }

    #[test]
    fn only_a_negative_axis_is_variable_and_a_fixed_one_matches_exactly_even_at_zero() {
        let io = Io {
            shape: vec![1, 0],
            max_len: 8,
            ..image()
        };
        assert_eq!(check_shape(&[1, 0], &io), Ok(1));
        assert!(check_shape(&[1, 3], &io).is_err());
        assert_eq!(check_shape(&[1, 3], &tokens()), Ok(3));
    }

    #[test]
    fn binary_values_are_whole_finite_and_counted_in_bytes() {
        let body = || {
            req(
                serde_json::json!({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2], "parameters": {"binary_data_size": 8}}]}),
            )
        };
        let e = req(serde_json::json!({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2], "parameters": {"binary_data_size": "8"}}]}))
            .check(&image(), 0, &[0; 8])
            .unwrap_err();
        assert!(
            e.contains("binary_data_size \"8\": a number of bytes"),
            "{e}"
        );
        // FP32 values are 4 bytes: 6 is not whole, 8 is two
        let e = req(serde_json::json!({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2], "parameters": {"binary_data_size": 6}}]}))
            .check(&image(), 0, &[0; 6])
            .unwrap_err();
        assert!(
            e.contains("6 bytes of FP32: not a whole number of 4-byte values"),
            "{e}"
        );
        let le = |v: [f32; 2]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let c = body()
            .check(&image(), 0, &le([f32::MAX, -f32::MAX]))
            .unwrap();
        assert_eq!(c.values, vec![f32::MAX, -f32::MAX]);
        // the largest finite float is taken, the next double above it is not
        assert_eq!(finite(f64::from(f32::MAX)), Ok(f32::MAX));
        assert!(finite(f64::from(f32::MAX) * (1.0 + f64::EPSILON)).is_err());
        assert!(finite(-f64::from(f32::MAX) * (1.0 + f64::EPSILON)).is_err());
        assert_eq!(finite(-1.5), Ok(-1.5));
    }

    #[test]
    fn outputs_are_written_as_json_numbers_or_little_endian_bytes() {
        let ids = Io {
            name: "y".into(),
            ..tokens()
        };
        let (t, bytes) = tensor(&ids, &[1, 2], &[3.0, 70000.0], false);
        assert_eq!(
            t,
            serde_json::json!({"name": "y", "datatype": "INT64", "shape": [1, 2], "data": [3, 70000]})
        );
        assert!(t["data"][1].is_i64() && bytes.is_empty());
        let (t, bytes) = tensor(&image(), &[1, 2], &[0.5, -2.0], false);
        assert_eq!(t["data"], serde_json::json!([0.5, -2.0]));
        assert!(t["data"][0].is_f64() && bytes.is_empty());
        let (t, bytes) = tensor(&ids, &[1, 2], &[3.0, -1.0], true);
        assert_eq!(
            t,
            serde_json::json!({"name": "y", "datatype": "INT64", "shape": [1, 2], "parameters": {"binary_data_size": 16}})
        );
        let want: Vec<u8> = [3i64, -1].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(bytes, want);
        let (t, bytes) = tensor(&image(), &[1, 2], &[0.5, -2.0], true);
        assert_eq!(t["parameters"]["binary_data_size"], 8);
        let want: Vec<u8> = [0.5f32, -2.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(bytes, want);
    }

    #[test]
    fn error_messages_are_capped_at_a_character_boundary() {
        // exactly the cap is whole; a byte over is cut
        let at = "a".repeat(MAX_ERROR);
        assert_eq!(capped(at.clone()), at);
        let over = capped("a".repeat(MAX_ERROR + 1));
        assert_eq!(over, format!("{at}… (1 bytes more)"));
        // three-byte characters: after "a", 341 of them end exactly at the cap (1 + 1023), so
        // the cut is there; after "ab", the 341st spans bytes 1022..1025, across the cap, and
        // is left out whole (the cut moves back to 1022)
        let c = capped(format!("a{}", "€".repeat(342)));
        assert_eq!(c, format!("a{}… (3 bytes more)", "€".repeat(341)));
        let c = capped(format!("ab{}", "€".repeat(342)));
        assert_eq!(c, format!("ab{}… (6 bytes more)", "€".repeat(340)));
        assert_eq!(capped("short".into()), "short");
        let long = "é".repeat(5000);
        let c = capped(long.clone());
        assert!(c.len() < MAX_ERROR + 40, "{}", c.len());
        assert!(c.starts_with(&"é".repeat(MAX_ERROR / 2)));
        assert!(
            c.ends_with(&format!("({} bytes more)", long.len() - MAX_ERROR)),
            "{c}"
        );
    }
}
