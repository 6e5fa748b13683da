//! The library's one error type. Every fallible public function returns [`Result`]; the binary
//! (`main.rs`) turns an [`Error`] into a one-line message and a non-zero exit.

use std::path::PathBuf;

/// Everything that can go wrong in the library, with enough context to act on it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A model file is malformed: names the file, the 1-based line and the field.
    #[error("{file}:{line}: {field}: {msg}")]
    ModelFile {
        /// The file being read.
        file: PathBuf,
        /// 1-based line number (0 when unknown).
        line: usize,
        /// The field or node the problem is in.
        field: String,
        /// What is wrong.
        msg: String,
    },
    /// A configuration file (NPU config, profile, trace) is malformed.
    #[error("{file}{}: {msg}", at_line(*line))]
    ConfigFile {
        /// The file being read.
        file: PathBuf,
        /// 1-based line number (0: the whole file, or unknown; not printed).
        line: usize,
        /// What is wrong.
        msg: String,
    },
    /// A latency table that does not fit the run it is given to: names the file, the field and
    /// what was expected.
    #[error("{file}: {field}: {msg}")]
    ProfileFile {
        /// The table's file.
        file: PathBuf,
        /// The field (`model`, `max_batch`, `nodes[3].name`, …).
        field: String,
        /// What it holds and what was expected.
        msg: String,
    },
    /// An ONNX model that cannot be imported: names the file and, where there is one, the node.
    #[error("{file}: {msg}")]
    Onnx {
        /// The file being read.
        file: PathBuf,
        /// What is wrong, naming the node and the attribute or input.
        msg: String,
    },
    /// A file that is not a valid ONNX protobuf (truncated, or not ONNX at all).
    #[error("{file}: not a readable ONNX model (its protobuf does not decode): {source}")]
    OnnxDecode {
        /// The file being read.
        file: PathBuf,
        /// The decoder's own error.
        source: prost::DecodeError,
    },
    /// A model name that is neither built in nor a readable file.
    #[error("unknown model '{0}' (built in: {1}; or pass a path to a .toml or .onnx model file)")]
    UnknownModel(String, String),
    /// A policy string that does not parse.
    #[error("bad policy '{spec}': {msg}")]
    BadPolicy {
        /// The string as given.
        spec: String,
        /// What is wrong with it.
        msg: String,
    },
    /// A numeric argument out of its range (rate ≤ 0, batch 0, ...).
    #[error("invalid {what}: {msg}")]
    InvalidArgument {
        /// The argument's name.
        what: String,
        /// Why it was refused.
        msg: String,
    },
    /// A device that cannot be used here (no GPU, missing library, ...).
    #[error("device '{device}' unavailable: {msg}")]
    DeviceUnavailable {
        /// The device asked for.
        device: String,
        /// What is missing.
        msg: String,
    },
    /// A device call failed while the device was in use (a driver, cuBLAS or kernel error).
    #[error("device '{device}' failed: {source}")]
    DeviceFailed {
        /// The device.
        device: String,
        /// The failing call's own error (a cudarc driver or cuBLAS error, typed).
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A device's plan needs more memory than the machine has available: refused before it is
    /// allocated.
    #[error("{what} needs {need} bytes ({}), more than the {have} bytes ({}) {pool}: lower the max batch, or use a machine with more memory", human_bytes(*need), human_bytes(*have))]
    OutOfMemory {
        /// The plan (its device, model and maximum batch).
        what: String,
        /// Bytes it needs.
        need: u64,
        /// Bytes available.
        have: u64,
        /// Where from, as the message says it ("this machine has available", "free on the
        /// GPU").
        pool: &'static str,
    },
    /// An internal invariant broke: a bug in lazybatch, never a user error.
    #[error("internal error (please report): {0}")]
    Internal(String),
    /// A server could not be reached (`load --url`).
    #[error("cannot connect to {url}: {why}")]
    Connect {
        /// The URL tried.
        url: String,
        /// What went wrong, in words (connection refused, host not found, ...).
        why: String,
    },
    /// The server could not listen on its address (`serve --listen`).
    #[error("cannot listen on {addr}: {why}")]
    Listen {
        /// The address asked for.
        addr: String,
        /// What went wrong, and what to do.
        why: String,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file involved.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
}

/// The library's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Shorthand for [`Error::InvalidArgument`].
    pub fn invalid(what: impl Into<String>, msg: impl Into<String>) -> Self {
        Error::InvalidArgument {
            what: what.into(),
            msg: msg.into(),
        }
    }

    /// Why binding `addr` failed, in words that say what to do.
    pub fn listen(addr: impl ToString, source: std::io::Error) -> Self {
        use std::io::ErrorKind;
        let why = match source.kind() {
            ErrorKind::AddrInUse => {
                "the address is in use (another server holds the port): pick another with --listen, e.g. --listen 127.0.0.1:0 for any free port".to_string()
            }
            ErrorKind::AddrNotAvailable => {
                "no interface of this machine has that address (use 127.0.0.1 or 0.0.0.0)".to_string()
            }
            ErrorKind::PermissionDenied => {
                "permission denied (ports below 1024 need privileges; pick a higher port)".to_string()
            }
            _ => source.to_string(),
        };
        Error::Listen {
            addr: addr.to_string(),
            why,
            source,
        }
    }

    /// Shorthand for an I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}

/// Bytes in words: `1.5 GiB`, `12 B`.
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut x = b as f64;
    let mut u = 0;
    while x >= 1024.0 && u + 1 < UNITS.len() {
        x /= 1024.0;
        u += 1;
    }
    match u {
        0 => format!("{b} B"),
        _ => format!("{x:.1} {}", UNITS[u]),
    }
}

/// A number as an error message shows it: plain when it reads well, in scientific notation when
/// it is very large or very small (`1e300`, not three hundred digits).
pub fn num(x: f64) -> String {
    let a = x.abs();
    if a != 0.0 && a.is_finite() && !(1e-4..1e9).contains(&a) {
        format!("{x:e}")
    } else {
        format!("{x}")
    }
}

/// `:LINE` after a file's name, or nothing for line 0 (the whole file).
fn at_line(line: usize) -> String {
    if line == 0 {
        String::new()
    } else {
        format!(":{line}")
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// Words that mark a condition of the wall clock — how late, how long, how busy the machine
    /// was — in an `Error::Internal`'s condition or message. Such a condition is a measurement
    /// to report (a busy machine delivers requests late), never a bug of lazybatch.
    const WALL_CLOCK: [&str; 10] = [
        "late", "lateness", "lag", "elapsed", "instant", "timed", "timeout", "slow", "busy",
        "sleep",
    ];

    /// The lines of `text` (1-based) where an `Error::Internal` is built under a condition, or
    /// with a message, that holds one of the [`WALL_CLOCK`] words: the condition lines (`if`,
    /// `||`, `&&`, `match`) up to four lines above it and the message lines (string literals)
    /// up to four below. Bindings (`let t0 = Instant::now();`) and fields are not conditions.
    fn wall_clock_internals(text: &str) -> Vec<usize> {
        let lines: Vec<&str> = text.lines().collect();
        let timed = |l: &str| -> bool {
            l.split(|c: char| !c.is_alphanumeric())
                .any(|w| WALL_CLOCK.contains(&w.to_lowercase().as_str()))
        };
        let condition = |l: &str| {
            let t = l.trim_start();
            ["if ", "} else if ", "|| ", "&& ", "match ", "while "]
                .iter()
                .any(|k| t.starts_with(k))
        };
        (0..lines.len())
            .filter(|&i| lines[i].contains("Error::Internal("))
            .filter(|&i| {
                let above = &lines[i.saturating_sub(4)..i];
                let below = &lines[i..(i + 5).min(lines.len())];
                above.iter().any(|l| condition(l) && timed(l))
                    || below
                        .iter()
                        .any(|l| l.contains('"') && !l.trim_start().starts_with("//") && timed(l))
            })
            .map(|i| i + 1)
            .collect()
    }

    fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                rust_files(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }

    #[test]
    fn no_wall_clock_condition_is_reported_as_an_internal_error() {
        let mut files = Vec::new();
        rust_files(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut files,
        );
        assert!(files.len() > 100, "{} files", files.len());
        let this = Path::new(file!()).file_name().unwrap();
        let found: Vec<String> = files
            .iter()
            .filter(|f| f.file_name() != Some(this))
            .flat_map(|f| {
                let text = std::fs::read_to_string(f).unwrap();
                wall_clock_internals(&text)
                    .into_iter()
                    .map(move |l| format!("{}:{l}", f.display()))
            })
            .collect();
        assert!(
            found.is_empty(),
            "a wall-clock condition reported as an internal error (report it as a measurement, or give it its own error): {found:?}"
        );
    }

    #[test]
    fn the_scan_finds_a_lateness_check_reported_as_internal() {
        // the delivery check `validate` had until 2026-12 (a busy machine failed the README's
        // test command with "internal error (please report)")
        let old = r#"
        let lag = m.arrival.0 as i128 - p.arrival.0 as i128;
        if lag < 0 || lag > i128::from(MAX_DELIVERY_LAG.0) {
            return Err(Error::Internal(format!(
                "request {} arrived {:.3} ms from its instant (allowed: 0 to {} ms late)",
"#;
        assert_eq!(wall_clock_internals(old), vec![4]);
        // a bug of the program, not of the clock, passes; so does a word inside another one
        let bug = "if table.is_empty() {\n    // translated, templated\n    return Err(Error::Internal(\"empty table\".into()));\n}";
        assert!(wall_clock_internals(bug).is_empty());
    }
}
