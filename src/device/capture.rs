//! What a real device records while serving, for `verify` and device-against-device checks:
//! each request's final outputs, or, to compare two devices op by op, every node execution's
//! output rows in execution order, so that a difference can be traced to the first node (and
//! step) where it appears.

use super::exchange::Exchange;
use crate::graph::op::Op;
use crate::graph::Model;
use std::collections::HashMap;
use std::sync::Arc;

/// Final outputs per request input key, in the order they are computed: the last node's rows
/// (every step for seq2seq models) and a decoder-only model's first token, each after the
/// input of its argmax.
pub type Captured = HashMap<u64, Vec<f32>>;

/// Which outputs a real device records.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CaptureMode {
    /// Nothing (serving).
    #[default]
    Off,
    /// Each request's final outputs.
    Outputs,
    /// The final outputs and every node execution's output rows.
    EveryNode,
    /// Each request's last node's rows only (every step for a seq2seq model: its tokens), what
    /// a front end answers.
    Answers,
    /// The final outputs, and each execution of an output node as a trace entry (to compare
    /// two devices' decoded tokens step by step: [`crate::run::verify::compare_outputs`]).
    OutputSteps,
}

/// One node execution's output rows for one request.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceEntry {
    /// The request's input key.
    pub input: u64,
    /// Node index in the model.
    pub node: usize,
    /// The step the node ran at.
    pub step: u32,
    /// The rows the node wrote for this request.
    pub values: Vec<f32>,
}

/// What a device captured.
#[derive(Clone, Debug, Default)]
pub struct Capture {
    mode: CaptureMode,
    /// A front end's exchange: final outputs are handed to it as requests complete.
    exchange: Option<Arc<Exchange>>,
    /// Final outputs per request.
    pub outputs: Captured,
    /// Every node execution, in order ([`CaptureMode::EveryNode`] only).
    pub trace: Vec<TraceEntry>,
}

impl Capture {
    /// An empty capture recording `mode`.
    pub fn new(mode: CaptureMode) -> Self {
        Capture {
            mode,
            ..Capture::default()
        }
    }

    /// An empty capture recording `mode` that keeps this one's front end exchange (inputs
    /// still come from it, final outputs still go to it): what
    /// [`crate::device::Device::set_capture`] installs.
    pub(crate) fn recording(&mut self, mode: CaptureMode) -> Self {
        Capture {
            mode,
            exchange: self.exchange.take(),
            ..Capture::default()
        }
    }

    /// A capture of final outputs for a front end's exchange `x` (none: nothing captured):
    /// what [`crate::device::Device::set_exchange`] installs on a real device.
    pub(crate) fn exchanging(x: Option<Arc<Exchange>>) -> Self {
        Capture {
            mode: if x.is_some() {
                CaptureMode::Answers
            } else {
                CaptureMode::Off
            },
            exchange: x,
            ..Capture::default()
        }
    }

    /// What was recorded so far, leaving nothing recorded in its place (and recording off)
    /// but the front end's exchange: what [`crate::device::Device::take_captured`] returns.
    pub(crate) fn take(&mut self) -> Capture {
        let exchange = self.exchange.take();
        let recorded = std::mem::take(self);
        self.exchange = exchange;
        recorded
    }

    /// The front end's exchange, when serving one.
    pub(crate) fn exchange(&self) -> Option<&Exchange> {
        self.exchange.as_deref()
    }

    /// Hands request `key`'s final outputs to the exchange (a device calls it as the request
    /// completes).
    pub(crate) fn hand_over(&mut self, key: u64) {
        if let Some(x) = &self.exchange {
            if let Some(v) = self.outputs.remove(&key) {
                x.put_output(key, v);
            }
        }
    }

    /// True when anything is recorded.
    pub(crate) fn is_on(&self) -> bool {
        self.mode != CaptureMode::Off
    }

    /// True when node `i`'s rows belong to the final outputs: the last node of its model (of
    /// its part, for co-located models) and a decoder-only model's prefill argmax (its first
    /// token), or the input of such a node when it is an argmax.
    fn is_output(&self, model: &Model, i: usize) -> bool {
        let last = match model.parts.get(usize::from(model.node_part[i])) {
            Some(p) => p.end as usize - 1,
            None => model.nodes.len() - 1,
        };
        let emits = |j: usize| j == last || model.emits_first_token(crate::graph::NodeId(j as u32));
        let feeds_an_emitting_argmax = || {
            model.nodes.iter().any(|n| {
                emits(n.id.idx())
                    && matches!(n.op, Op::Argmax)
                    && n.inputs.first().is_some_and(|x| x.node.idx() == i)
            })
        };
        emits(i) || (self.mode != CaptureMode::Answers && feeds_an_emitting_argmax())
    }

    /// True when node `i`'s rows are to be recorded.
    pub(crate) fn wants(&self, model: &Model, i: usize) -> bool {
        match self.mode {
            CaptureMode::Off => false,
            CaptureMode::Outputs | CaptureMode::Answers | CaptureMode::OutputSteps => {
                self.is_output(model, i)
            }
            CaptureMode::EveryNode => true,
        }
    }

    /// Records the rows node `i` wrote at `step` for the request with input key `input`.
    pub fn record(&mut self, model: &Model, i: usize, step: u32, input: u64, values: Vec<f32>) {
        let output = self.is_output(model, i);
        if output {
            self.outputs
                .entry(input)
                .or_default()
                .extend_from_slice(&values);
        }
        if self.mode == CaptureMode::EveryNode || (self.mode == CaptureMode::OutputSteps && output)
        {
            self.trace.push(TraceEntry {
                input,
                node: i,
                step,
                values,
            });
        }
    }
}
