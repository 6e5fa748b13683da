//! The `lazybatch` command line: parses arguments (clap), validates them into library calls, and
//! turns any error into one line on stderr and a non-zero exit.

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
    match cli::run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", message(&e));
            ExitCode::from(2)
        }
    }
}

/// The error and its causes on one line, each cause once: a cause whose text the message
/// already ends with (an error that shows its source) is not repeated.
fn message(e: &anyhow::Error) -> String {
    let mut msg = e.to_string();
    for cause in e.chain().skip(1) {
        let c = cause.to_string();
        if !msg.ends_with(&c) {
            msg = format!("{msg}: {c}");
        }
    }
    msg
}
