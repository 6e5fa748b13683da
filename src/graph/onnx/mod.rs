//! ONNX import: a `.onnx` file becomes a [`Model`] with its real weights. The protobuf is
//! decoded by prost ([`proto`]); its nodes are translated one by one into our ops
//! ([`translate`]), written out as model-file text and read back by the one model loader, so
//! that an imported graph passes every check a hand-written one does (shapes along every edge,
//! sizes); the weights ride along as the model's [`Imported`] weights. Every node is STATIC (one pass per
//! request): seq2seq decoders stay in the model-file format.
//!
//! The batch axis is the first axis of the graph's one input (named or fixed); every other
//! axis must be fixed in the file or by `--dim NAME=SIZE`. A float input is one row per
//! request (an image, a vector); an integer input `[batch, seq]` is a sequence of token ids,
//! `seq` rows per request. Anything else — an operator outside
//! [`translate::SUPPORTED`] (every one listed, with a node each), an attribute we do not
//! implement, a missing initializer, a shape we cannot fix — is an error naming the file and
//! the node.

mod checker;
mod decoder;
mod dense;
mod fold;
mod patterns;
mod proto;
mod sequence;
#[cfg(test)]
mod test_graph;
mod translate;
mod values;
mod vision;

use super::weights::{Imported, Weights};
use super::Model;
use crate::error::{Error, Result};
use prost::Message;
use proto::pb::{GraphProto, ModelProto};
use proto::{is_float, is_int, take_tensor, value_type, Dim};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::Path;
use translate::{Translator, Val, SUPPORTED};

/// Sizes for named (symbolic) axes, from `--dim NAME=SIZE`.
pub type Dims = [(String, usize)];

/// True when `path` names an ONNX file (by its extension).
pub fn is_onnx(path: &str) -> bool {
    Path::new(path)
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("onnx"))
}

/// Imports the ONNX model at `path`, fixing named axes by `dims`.
pub fn import(path: &Path, dims: &Dims) -> Result<Model> {
    let bytes = crate::files::read(path, crate::files::MODEL_ONNX)?;
    import_bytes(path, bytes, dims)
}

/// Imports the ONNX model `bytes` read from `path` (which names it in messages and places its
/// external data), fixing named axes by `dims`.
fn import_bytes(path: &Path, bytes: Vec<u8>, dims: &Dims) -> Result<Model> {
    let err = |msg: String| Error::Onnx {
        file: path.to_path_buf(),
        msg,
    };
    let mut model = ModelProto::decode(&bytes[..]).map_err(|source| Error::OnnxDecode {
        file: path.to_path_buf(),
        source,
    })?;
    drop(bytes);
    let mut graph = model
        .graph
        .take()
        .ok_or_else(|| err("the file holds no graph".into()))?;
    checker::structure(&model, &graph).map_err(err)?;
    load_external(&mut graph, path).map_err(err)?;
    let (text, weights) = if decoder::is_decoder(&graph) {
        // a decoder with its key/value cache: its prompt and steps keep their own lengths
        if let Some((k, _)) = dims.first() {
            return Err(err(format!(
                "--dim {k}: a decoder export's sequence axes stay variable (a prompt's length, a \
                 step's one token); it takes no --dim"
            )));
        }
        let (stem, about) = identity(path, &model);
        decoder::translate(&stem, &about, &graph).map_err(err)?
    } else {
        check_ops(&graph).map_err(err)?;
        translate_graph(path, &model, &mut graph, dims).map_err(err)?
    };
    let mut m = super::loader::parse_model(&text, path)
        .map_err(|e| err(format!("the translated graph does not load: {e}")))?;
    let mut per_node = vec![None; m.nodes.len()];
    for (name, w) in weights {
        let i = m
            .nodes
            .iter()
            .position(|n| n.name == name)
            .ok_or_else(|| Error::Internal(format!("imported node '{name}' went missing")))?;
        per_node[i] = Some(w);
    }
    m.imported = Imported::new(per_node);
    check_sizes(&m).map_err(err)?;
    Ok(m)
}

/// The largest external data file read (bytes): more than any model this project imports.
const MAX_EXTERNAL: u64 = 16 << 30;

/// A file of `len` bytes of external data is read, or why not.
fn within_external_limit(len: u64) -> std::result::Result<(), String> {
    match len > MAX_EXTERNAL {
        true => Err(format!(
            "{len} bytes of external data, more than the {MAX_EXTERNAL} read"
        )),
        false => Ok(()),
    }
}

/// Reads the initializers an exporter stored in external files (`torch.onnx.export` does
/// for large models: `model.onnx.data` beside `model.onnx`) into the tensors themselves. A
/// location must be a relative path inside the model's directory, as the ONNX spec requires,
/// and stay there once links are followed (a symlink out of the directory is refused: the
/// class of `onnx`'s CVE-2024-27318; so is a file with several hard links, whose other names no
/// path shows); it must name a regular file of at most [`MAX_EXTERNAL`]
/// bytes, its size checked before it is read. Only each initializer's own region is read,
/// once: its length must be the tensor's declared size (a region larger than its tensor was
/// copied whole before the mismatch was seen: 40 tensors of 4 values naming one 100 MB region
/// took 4 GB), and the bytes must fit the memory the process may still use
/// ([`crate::device::memory::check_host`]) before they are allocated.
fn load_external(g: &mut GraphProto, model: &Path) -> std::result::Result<(), String> {
    use proto::pb::tensor_proto::DataLocation;
    let dir = model.parent().unwrap_or(Path::new("."));
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    // each file opened once: its handle and length
    let mut files: HashMap<String, (std::fs::File, u64)> = HashMap::new();
    for t in &mut g.initializer {
        if t.data_location != Some(DataLocation::External as i32) {
            continue;
        }
        let name = t.name().to_string();
        let get = |k: &str| {
            t.external_data
                .iter()
                .find(|e| e.key() == k)
                .map(|e| e.value().to_string())
        };
        let num = |k: &str| -> std::result::Result<Option<usize>, String> {
            get(k)
                .map(|v| {
                    v.parse::<usize>()
                        .map_err(|_| format!("initializer '{name}': {k} = '{v}'"))
                })
                .transpose()
        };
        let loc = get("location")
            .ok_or_else(|| format!("initializer '{name}': external data without a location"))?;
        let rel = Path::new(&loc);
        let inside = rel
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
        if !inside {
            return Err(format!(
                "initializer '{name}': external data location '{loc}' must be a relative path \
                 inside the model's directory"
            ));
        }
        if !files.contains_key(&loc) {
            let path = dir.join(rel);
            let shown = |e: &dyn std::fmt::Display| {
                format!("initializer '{name}': {}: {e}", path.display())
            };
            let (real_dir, real) = (
                dir.canonicalize().map_err(|e| shown(&e))?,
                path.canonicalize().map_err(|e| shown(&e))?,
            );
            if !real.starts_with(&real_dir) {
                return Err(shown(&format!(
                    "external data location '{loc}' leads outside the model's directory (to {}): refused",
                    real.display()
                )));
            }
            let meta = std::fs::metadata(&real).map_err(|e| shown(&e))?;
            if !meta.is_file() {
                return Err(shown(&"external data must be a regular file"));
            }
            // a hard link has no path to follow: its other names may lie outside the folder
            #[cfg(unix)]
            if std::os::unix::fs::MetadataExt::nlink(&meta) > 1 {
                return Err(shown(&format!(
                    "external data has {} hard links, and one may lead outside the model's \
                     directory where no path shows it: refused (copy the file into the directory)",
                    std::os::unix::fs::MetadataExt::nlink(&meta)
                )));
            }
            within_external_limit(meta.len()).map_err(|e| shown(&e))?;
            let f = std::fs::File::open(&real).map_err(|e| shown(&e))?;
            files.insert(loc.clone(), (f, meta.len()));
        }
        let Some((file, size)) = files.get_mut(&loc) else {
            return Err(format!("initializer '{name}': {loc} was not opened"));
        };
        let size = *size as usize;
        let offset = num("offset")?.unwrap_or(0);
        let length = num("length")?.unwrap_or(size.saturating_sub(offset));
        if offset.checked_add(length).is_none_or(|end| end > size) {
            return Err(format!(
                "initializer '{name}': bytes {offset}..+{length} lie outside {loc} ({size} bytes)"
            ));
        }
        if let Some(want) = declared_bytes(t) {
            if want != length as u128 {
                return Err(format!(
                    "initializer '{name}': its external data is {length} bytes, its tensor's shape {:?} and type take {want}",
                    t.dims
                ));
            }
        }
        crate::device::memory::check_host(&format!("initializer '{name}' ({loc})"), length as u64)
            .map_err(|e| e.to_string())?;
        use std::io::{Seek, SeekFrom};
        file.seek(SeekFrom::Start(offset as u64))
            .map_err(|e| format!("initializer '{name}': reading {loc}: {e}"))?;
        let reading = |e: std::io::Error| format!("initializer '{name}': reading {loc}: {e}");
        let room = |e: std::collections::TryReserveError| {
            format!("initializer '{name}': {length} bytes: {e}")
        };
        if t.data_type == Some(proto::pb::tensor_proto::DataType::Float as i32) {
            // decoded as it is read: the values are held once, never beside their bytes
            t.float_data = read_floats(file, length).map_err(|e| match e {
                Short::Io(e) => reading(e),
                Short::Room(e) => room(e),
            })?;
        } else {
            let mut bytes: Vec<u8> = Vec::new();
            bytes.try_reserve_exact(length).map_err(room)?;
            bytes.resize(length, 0);
            std::io::Read::read_exact(file, &mut bytes).map_err(reading)?;
            t.raw_data = Some(bytes);
        }
        t.data_location = None;
        t.external_data.clear();
    }
    Ok(())
}

/// Why external data could not be read: the file, or the memory for its values.
enum Short {
    Io(std::io::Error),
    Room(std::collections::TryReserveError),
}

/// `length` bytes (a multiple of 4, the caller has checked them against the tensor's size) of
/// little-endian 32-bit floats from `file`, decoded a chunk at a time into one vector reserved
/// up front and fallibly.
fn read_floats(file: &mut std::fs::File, length: usize) -> std::result::Result<Vec<f32>, Short> {
    use std::io::Read;
    let mut out: Vec<f32> = Vec::new();
    out.try_reserve_exact(length / 4).map_err(Short::Room)?;
    let mut chunk = vec![0u8; (1 << 20).min(length)];
    let mut left = length;
    while left > 0 {
        let n = chunk.len().min(left);
        file.read_exact(&mut chunk[..n]).map_err(Short::Io)?;
        out.extend(
            chunk[..n]
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        );
        left -= n;
    }
    Ok(out)
}

/// The bytes a tensor's shape and element type take, when its type has a fixed size.
fn declared_bytes(t: &proto::pb::TensorProto) -> Option<u128> {
    use proto::pb::tensor_proto::DataType as D;
    let each: u128 = match D::try_from(t.data_type.unwrap_or(0)).ok()? {
        D::Bool | D::Int8 | D::Uint8 => 1,
        D::Float16 | D::Bfloat16 | D::Int16 | D::Uint16 => 2,
        D::Float | D::Int32 | D::Uint32 => 4,
        D::Double | D::Int64 | D::Uint64 | D::Complex64 => 8,
        D::Complex128 => 16,
        _ => return None,
    };
    t.dims
        .iter()
        .try_fold(each, |n, &d| n.checked_mul(u128::try_from(d).ok()?))
}

/// Every operator outside [`SUPPORTED`], each with the first node that uses it; then every node
/// given more or fewer inputs than its operator takes (a `Relu` of 200,001 inputs was imported,
/// the extra inputs unread).
fn check_ops(g: &GraphProto) -> std::result::Result<(), String> {
    let mut bad: BTreeMap<&str, &str> = BTreeMap::new();
    for n in &g.node {
        let domain = n.domain();
        let known = SUPPORTED.iter().any(|(op, ..)| *op == n.op_type());
        if !known || !(domain.is_empty() || domain == "ai.onnx") {
            bad.entry(n.op_type()).or_insert(n.name());
        }
    }
    if !bad.is_empty() {
        let list: Vec<String> = bad
            .iter()
            .map(|(op, node)| format!("{op} (node '{node}')"))
            .collect();
        let names: Vec<&str> = SUPPORTED.iter().map(|(op, ..)| *op).collect();
        return Err(format!(
            "unsupported operators: {} (supported: {})",
            list.join(", "),
            names.join(", ")
        ));
    }
    for n in &g.node {
        let Some(&(op, fewest, most)) = SUPPORTED.iter().find(|(op, ..)| *op == n.op_type()) else {
            continue;
        };
        let got = n.input.len();
        if got < fewest || got > most {
            let takes = match (fewest, most) {
                (a, b) if a == b => format!("{a}"),
                (a, usize::MAX) => format!("at least {a}"),
                (a, b) => format!("{a} to {b}"),
            };
            return Err(format!(
                "node '{}' ({op}): {got} inputs, where the operator takes {takes}",
                n.name()
            ));
        }
    }
    Ok(())
}

/// The graph as model-file text, and each weighted node's weights by name.
fn translate_graph(
    path: &Path,
    model: &ModelProto,
    g: &mut GraphProto,
    dims: &Dims,
) -> std::result::Result<(String, Vec<(String, Weights)>), String> {
    let mut uses: HashMap<String, usize> = HashMap::new();
    for n in &g.node {
        for i in n.input.iter().filter(|i| !i.is_empty()) {
            *uses.entry(i.clone()).or_default() += 1;
        }
    }
    for o in &g.output {
        *uses.entry(o.name().to_string()).or_default() += 1;
    }
    let mut t = Translator::new(uses);
    // (the values move out of the message: each weight is held once)
    for init in &mut g.initializer {
        let c = take_tensor(init).map_err(|e| format!("initializer '{}': {e}", init.name()))?;
        t.vals.insert(init.name().to_string(), Val::Const(c));
    }
    let g = &*g;
    let (input, shape, tokens) = graph_input(g, &t.vals, dims)?;
    t.graph_input(&input, shape, tokens);
    let mut text = header(path, model);
    for n in &g.node {
        t.node(n)?;
    }
    let out = match &g.output[..] {
        [o] => o.name(),
        outs => {
            return Err(format!(
                "{} graph outputs: exactly one is supported",
                outs.len()
            ))
        }
    };
    match t.vals.get(out) {
        Some(Val::Node { idx: 0, .. }) => {
            return Err(format!("output '{out}' is the input itself"))
        }
        Some(Val::Node { idx, .. }) if *idx + 1 == t.nodes.len() => {}
        Some(Val::Node { .. }) => {
            return Err(format!(
                "output '{out}' is not the last node computed (other nodes follow it)"
            ))
        }
        Some(Val::Const(_)) => return Err(format!("output '{out}' is a constant")),
        Some(Val::Part(p)) => {
            return Err(format!(
                "output '{out}' is {}, not a complete layer",
                p.what()
            ))
        }
        None => return Err(format!("output '{out}' is never computed")),
    }
    let mut weights = Vec::new();
    for e in t.nodes {
        let _ = writeln!(text, "\n[[node]]");
        if !e.origin.is_empty() {
            let _ = writeln!(text, "# {}", e.origin.replace('\n', " "));
        }
        let _ = writeln!(text, "name = {}", quote(&e.name));
        let _ = writeln!(text, "op = \"{}\"", e.op);
        if !e.inputs.is_empty() {
            let ins: Vec<String> = e.inputs.iter().map(|i| quote(i)).collect();
            let _ = writeln!(text, "inputs = [{}]", ins.join(", "));
        }
        for (k, v) in &e.fields {
            let _ = writeln!(text, "{k} = {}", v.to_string().trim());
        }
        if let Some(a) = e.act {
            let _ = writeln!(text, "act = \"{a}\"");
        }
        if let Some(w) = e.weights {
            weights.push((e.name, w));
        }
    }
    Ok((text, weights))
}

fn quote(s: &str) -> String {
    toml_edit::Value::from(s).to_string().trim().to_string()
}

/// An imported model's name (the file's stem, made a valid model name:
/// [`crate::files::file_stem`]) and what it is (`imported from ONNX (opset 17,
/// its producer)`).
fn identity(path: &Path, model: &ModelProto) -> (String, String) {
    let stem = path.file_stem().map_or_else(
        || "onnx".into(),
        |s| crate::files::file_stem(&s.to_string_lossy()),
    );
    let opset = model
        .opset_import
        .iter()
        .find(|o| o.domain().is_empty() || o.domain() == "ai.onnx")
        .and_then(|o| o.version)
        .unwrap_or(0);
    let producer = format!("{} {}", model.producer_name(), model.producer_version());
    let about = match producer.trim() {
        "" => format!("imported from ONNX (opset {opset})"),
        by => format!("imported from ONNX (opset {opset}, {by})"),
    };
    (stem, about)
}

fn header(path: &Path, model: &ModelProto) -> String {
    let (stem, about) = identity(path, model);
    format!(
        "# imported from {}\nname = {}\ndescription = {}\nsource = {}\nmax_batch = 64\n",
        path.display(),
        quote(&stem),
        quote(&about),
        quote(&path.display().to_string()),
    )
}

/// The graph's one input: its name and one request's shape.
fn graph_input(
    g: &GraphProto,
    consts: &HashMap<String, Val>,
    dims: &Dims,
) -> std::result::Result<(String, Vec<usize>, bool), String> {
    let real: Vec<_> = g
        .input
        .iter()
        .filter(|i| !consts.contains_key(i.name()))
        .collect();
    let [v] = real[..] else {
        let names: Vec<&str> = real.iter().map(|i| i.name()).collect();
        return Err(format!(
            "{} graph inputs besides initializers ({}): exactly one is supported",
            names.len(),
            names.join(", ")
        ));
    };
    let name = v.name();
    let (elem, shape) = value_type(v).ok_or_else(|| format!("input '{name}' is not a tensor"))?;
    let named: Vec<&str> = shape
        .iter()
        .skip(1)
        .filter_map(|d| match d {
            Dim::Named(p) => Some(p.as_str()),
            _ => None,
        })
        .collect();
    if let Some((k, _)) = dims.iter().find(|(k, _)| !named.contains(&k.as_str())) {
        return Err(format!(
            "--dim {k}: input '{name}' has no axis named '{k}' besides its batch axis (named: {})",
            if named.is_empty() {
                "none".to_string()
            } else {
                named.join(", ")
            }
        ));
    }
    let tokens = is_int(elem);
    if !tokens && !is_float(elem) {
        return Err(format!(
            "input '{name}': element type {elem}: float (values) or int64/int32 (token ids)"
        ));
    }
    if shape.len() < 2 {
        return Err(format!(
            "input '{name}': shape of rank {}: expected a batch axis and at least one more",
            shape.len()
        ));
    }
    let mut per_request = Vec::new();
    for (axis, d) in shape.iter().enumerate().skip(1) {
        let size = match d {
            Dim::Fixed(s) => *s,
            Dim::Named(p) => dims.iter().find(|(k, _)| k == p).map(|(_, v)| *v).ok_or_else(|| {
                format!("input '{name}': axis {axis} is named '{p}', not fixed: give its size with --dim {p}=SIZE")
            })?,
            Dim::Unknown => {
                return Err(format!("input '{name}': axis {axis} has no size: the graph's shapes must be static"))
            }
        };
        if size > 1 << 20 {
            return Err(format!(
                "input '{name}': axis {axis} of {size}: at most 1048576"
            ));
        }
        per_request.push(size);
    }
    let numel = per_request
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d));
    if numel.is_none_or(|v| v > 1 << 32) {
        return Err(format!(
            "input '{name}': {per_request:?} per request: more than 2^32 values"
        ));
    }
    if tokens && per_request.len() != 1 {
        return Err(format!(
            "input '{name}': token ids of shape {per_request:?} per request: expected [seq]"
        ));
    }
    Ok((name.to_string(), per_request, tokens))
}

/// Each weighted node's weights have the sizes its op and shapes imply.
fn check_sizes(m: &Model) -> std::result::Result<(), String> {
    use super::op::Op;
    for n in &m.nodes {
        let Some(w) = m.imported.of(n) else { continue };
        let in_feat: usize = n
            .in_shapes
            .iter()
            .map(|s| s.feat.iter().product::<usize>())
            .sum();
        let want = match &n.op {
            Op::Conv2d {
                out_channels,
                kernel: (kh, kw),
                groups,
                ..
            } => {
                let (c, _, _) = n.in_chw();
                c / groups * kh * kw * out_channels
            }
            Op::Linear { out_features, .. } => {
                let k = n
                    .in_shapes
                    .first()
                    .and_then(|s| s.feat.last())
                    .copied()
                    .unwrap_or(in_feat);
                k * out_features
            }
            _ => w.w.len(),
        };
        if w.w.len() != want {
            return Err(format!(
                "node '{}': {} weights where its op needs {want}",
                n.name,
                w.w.len()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
