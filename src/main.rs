//! The `lazybatch` command line: parses arguments (clap), validates them into library calls, and
//! turns any error into one line on stderr and a non-zero exit.

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
    match cli::run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
