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

/// A shard's `shard.json` (`lazybatch merge`): 1 GiB.
pub const SHARD: Kind = Kind {
    what: "a shard file",
    max: 1 << 30,
};

/// The most bytes read from a file whose size reads as 0 ([`read`]).
const PSEUDO_MAX: u64 = 1 << 20;

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
    // a file that says it is empty may be a pseudo-file whose size is not known before it is
    // read (`/proc/self/pagemap` yields gigabytes): at most PSEUDO_MAX of it
    let limit = if meta.len() == 0 {
        kind.max.min(PSEUDO_MAX)
    } else {
        kind.max
    };
    let mut bytes = Vec::new();
    let f = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    // the file may grow after it was measured: never read far past the limit (8 bytes past
    // it, so that a pseudo-file read in words, like pagemap, is read whole words)
    f.take(limit + 8)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io(path, e))?;
    if bytes.len() as u64 > kind.max {
        return Err(refuse(too_large(bytes.len() as u64, kind)));
    }
    if bytes.len() as u64 > limit {
        return Err(refuse(format!(
            "its size reads as 0 bytes but it holds more than {} (a /proc or /sys pseudo-file?): {} must be a regular file",
            crate::error::human_bytes(PSEUDO_MAX),
            kind.what
        )));
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

/// The longest model name a model file may give ([`check_name`]).
pub const NAME_MAX: usize = 128;

/// Checks a model's name, which names files (`compare --out`'s `<name>_<policy>_<rate>rps.hgrm`)
/// and is printed to terminals: 1 to [`NAME_MAX`] characters of `[A-Za-z0-9_.+-]`, not starting
/// with a dot (so never `..`, a path, or a terminal's control sequence). The error says what
/// is allowed.
pub fn check_name(name: &str) -> std::result::Result<(), String> {
    if name.is_empty() || name.len() > NAME_MAX {
        return Err(format!(
            "must be 1 to {NAME_MAX} characters, got {}",
            name.chars().count()
        ));
    }
    if name.starts_with('.') {
        return Err("must not start with '.'".into());
    }
    match name.chars().find(|&c| !allowed_in_name(c)) {
        Some(c) => Err(format!(
            "use only [A-Za-z0-9_.+-], got {:?}",
            c.escape_default().to_string()
        )),
        None => Ok(()),
    }
}

fn allowed_in_name(c: char) -> bool {
    c.is_ascii_alphanumeric() || "_.+-".contains(c)
}

/// `name` made safe as the start of a file name inside an output folder, for names that did
/// not pass [`check_name`] (a tampered `shard.json`, an ONNX file's stem): every character
/// outside `[A-Za-z0-9_.+-]` becomes `_`, leading dots are dropped, and it is cut to
/// [`NAME_MAX`] characters; `model` when nothing is left. A name that passes [`check_name`]
/// is returned as it is.
pub fn file_stem(name: &str) -> String {
    let kept: String = name
        .chars()
        .map(|c| if allowed_in_name(c) { c } else { '_' })
        .skip_while(|&c| c == '.')
        .take(NAME_MAX)
        .collect();
    if kept.is_empty() {
        "model".into()
    } else {
        kept
    }
}

/// `text` safe to print to a terminal: every control character (an escape sequence's start
/// among them) but a line break shown escaped, so that a title read from a file cannot move the
/// cursor or recolour the screen.
pub fn printable(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() && c != '\n' {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
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
    fn a_model_name_names_files_inside_the_folder_only() {
        for ok in [
            "resnet50",
            "transformer_base",
            "a.b-c",
            "resnet50+gnmt",
            "X",
        ] {
            assert_eq!(check_name(ok), Ok(()), "{ok}");
            assert_eq!(file_stem(ok), ok);
        }
        let long = "a".repeat(NAME_MAX + 1);
        for (bad, why) in [
            ("", "must be 1 to 128 characters, got 0"),
            (long.as_str(), "must be 1 to 128 characters, got 129"),
            ("..", "must not start with '.'"),
            (".hidden", "must not start with '.'"),
            ("../../X", "must not start with '.'"),
            ("/abs/dir/X", "use only [A-Za-z0-9_.+-], got \"/\""),
            ("a b", "use only [A-Za-z0-9_.+-], got \" \""),
            ("a\u{1b}[31m", "use only [A-Za-z0-9_.+-], got \"\\\\u{1b}\""),
            ("a\0b", "use only [A-Za-z0-9_.+-], got \"\\\\u{0}\""),
        ] {
            assert_eq!(check_name(bad), Err(why.to_string()), "{bad:?}");
        }
        assert_eq!(file_stem("../../X"), "_.._X");
        assert_eq!(file_stem("/abs/dir/X"), "_abs_dir_X");
        assert_eq!(file_stem(".."), "model");
        assert_eq!(file_stem(""), "model");
        assert_eq!(file_stem("a\u{1b}[31m"), "a__31m");
        assert_eq!(file_stem(&"b".repeat(1000)).len(), NAME_MAX);
        // whatever the name, the stem is one path component inside the folder
        for hostile in ["../../X", "/abs/X", "..", "a/../../b", "C:\\x", "\u{0}"] {
            let p = Path::new("out").join(format!("{}_lazy_100rps.hgrm", file_stem(hostile)));
            assert_eq!(p.parent(), Some(Path::new("out")), "{hostile:?}");
            assert_eq!(p.components().count(), 2, "{hostile:?}");
        }
    }

    #[test]
    fn printable_text_holds_no_control_character_but_line_breaks() {
        assert_eq!(printable("GPT-2 · NPU"), "GPT-2 · NPU");
        assert_eq!(printable("a\u{1b}[31mred"), "a\\u{1b}[31mred");
        assert_eq!(printable("one\ntwo\r"), "one\ntwo\\r");
    }

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
        if Path::new("/proc/self/pagemap").exists() {
            let e = read(Path::new("/proc/self/pagemap"), TRACE)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("its size reads as 0 bytes but it holds more than 1.0 MiB"),
                "{e}"
            );
        }
        let empty = dir.join("empty");
        std::fs::write(&empty, "").unwrap();
        assert_eq!(read(&empty, small).unwrap(), Vec::<u8>::new());
        let bad = dir.join("bad");
        std::fs::write(&bad, [0xff, 0xfe]).unwrap();
        assert!(read_text(&bad, small).is_err());
        assert!(read(&dir.join("missing"), small).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
