//! Reading the files a user names — model files, NPU configurations, latency tables, traces —
//! as regular files below a size stated for each kind, so that a device (`/dev/zero`), a FIFO
//! or a directory is refused with a message instead of being read forever or into all memory,
//! and a file too large to be one of its kind is refused before it is read.

use crate::error::{Error, Result};
use std::io::Read;
use std::path::Path;

/// A kind of input file and the most bytes one may hold.
#[derive(Clone, Copy, Debug)]
pub struct Kind {
    /// What the file is, in words, with its article ("a model file").
    pub what: &'static str,
    /// The most bytes it may hold.
    pub max: u64,
}

/// A model file in the TOML format: 64 MiB.
pub const MODEL_TOML: Kind = Kind {
    what: "a model file",
    max: 64 << 20,
};
/// An ONNX model (its weights may also lie beside it, in external data files): 2 GiB, the
/// protobuf format's own limit.
pub const MODEL_ONNX: Kind = Kind {
    what: "an ONNX model",
    max: 2 << 30,
};
/// An NPU configuration: 1 MiB.
pub const NPU_CONFIG: Kind = Kind {
    what: "an NPU configuration",
    max: 1 << 20,
};
/// A saved latency table: 1 GiB.
pub const PROFILE: Kind = Kind {
    what: "a latency table",
    max: 1 << 30,
};
/// A trace of arrivals: 4 GiB.
pub const TRACE: Kind = Kind {
    what: "a trace",
    max: 4 << 30,
};
/// The JSON of earlier measured runs (`validate --measured`): 1 GiB.
pub const MEASURED: Kind = Kind {
    what: "a file of measured runs",
    max: 1 << 30,
};

/// The bytes of `path`, a regular file of at most `kind.max` bytes.
pub fn read(path: &Path, kind: Kind) -> Result<Vec<u8>> {
    let refuse = |msg: String| Error::io(path, std::io::Error::other(msg));
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    if !meta.is_file() {
        return Err(refuse(format!(
            "not a regular file ({} must be one)",
            kind.what
        )));
    }
    if meta.len() > kind.max {
        return Err(refuse(too_large(meta.len(), kind)));
    }
    let mut bytes = Vec::new();
    let f = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    // the file may grow after it was measured: never read past the limit
    f.take(kind.max + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io(path, e))?;
    if bytes.len() as u64 > kind.max {
        return Err(refuse(too_large(bytes.len() as u64, kind)));
    }
    Ok(bytes)
}

/// The text of `path` ([`read`]), which must be UTF-8.
pub fn read_text(path: &Path, kind: Kind) -> Result<String> {
    String::from_utf8(read(path, kind)?).map_err(|e| {
        Error::io(
            path,
            std::io::Error::new(std::io::ErrorKind::InvalidData, e.utf8_error()),
        )
    })
}

fn too_large(len: u64, kind: Kind) -> String {
    format!(
        "{len} bytes, larger than {} may be ({} bytes, {})",
        kind.what,
        kind.max,
        crate::error::human_bytes(kind.max)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_below_their_kinds_limit_are_read() {
        let dir = std::env::temp_dir().join(format!("lazybatch-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let small = Kind {
            what: "a thing",
            max: 8,
        };
        let ok = dir.join("ok");
        std::fs::write(&ok, "12345678").unwrap();
        assert_eq!(read_text(&ok, small).unwrap(), "12345678");
        let big = dir.join("big");
        std::fs::write(&big, "123456789").unwrap();
        let e = read(&big, small).unwrap_err().to_string();
        assert!(
            e.ends_with("9 bytes, larger than a thing may be (8 bytes, 8 B)"),
            "{e}"
        );
        let e = read(&dir, small).unwrap_err().to_string();
        assert!(
            e.ends_with("not a regular file (a thing must be one)"),
            "{e}"
        );
        if Path::new("/dev/zero").exists() {
            let e = read(Path::new("/dev/zero"), MODEL_TOML)
                .unwrap_err()
                .to_string();
            assert_eq!(
                e,
                "/dev/zero: not a regular file (a model file must be one)"
            );
        }
        let bad = dir.join("bad");
        std::fs::write(&bad, [0xff, 0xfe]).unwrap();
        assert!(read_text(&bad, small).is_err());
        assert!(read(&dir.join("missing"), small).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
