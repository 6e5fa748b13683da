//! `serial`: one request at a time, FIFO, the whole graph without interruption.

use super::spec::{no_params, Entry, ParamError, Parsed};
use super::{Decision, Policy, View};

/// Serial execution (no batching).
#[derive(Clone, Copy, Debug, Default)]
pub struct Serial;

impl Policy for Serial {
    fn name(&self) -> String {
        "serial".into()
    }
    fn never_preempts(&self) -> bool {
        true
    }
    fn decide(&mut self, v: &View) -> Decision {
        if v.table.is_empty() && !v.infq.is_empty() {
            Decision::Admit {
                count: 1,
                pad: true,
            }
        } else {
            Decision::Run
        }
    }
}

/// `serial`.
pub(crate) const ENTRY: Entry = Entry {
    names: &["serial"],
    variant: None,
    usage: "serial",
    examples: &["serial"],
    parse: parse_serial,
};

fn parse_serial(_: &str, params: &[&str], _: u32) -> std::result::Result<Parsed, ParamError> {
    no_params(params, "")?;
    Ok(Parsed::plain(|_| Box::new(Serial)))
}
