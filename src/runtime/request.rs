//! A request: its id, arrival, deadline and actual lengths, and what happened to it.

use crate::graph::Lengths;
use crate::time::Nanos;
use serde::Serialize;

/// A request's index in its run (0-based, in arrival order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct RequestId(pub u32);

/// One inference request and its life.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Request {
    /// Id.
    pub id: RequestId,
    /// Arrival time.
    pub arrival: Nanos,
    /// Arrival + SLA.
    pub deadline: Nanos,
    /// Actual lengths (the decoder length is unknown to policies until the request ends).
    pub len: Lengths,
    /// Device slot holding its activations while in flight.
    pub slot: Option<u32>,
    /// When it first executed a node.
    pub first_issue: Option<Nanos>,
    /// When it completed.
    pub completion: Option<Nanos>,
    /// Decoder steps it has finished (seq2seq).
    pub dec_done: u32,
    /// When its first output token came (models with a decoder): the end of its first decoder
    /// step, or of its prefill where the prefill emits the first token.
    pub first_token: Option<Nanos>,
    /// Output tokens it produces (models with a decoder): its decoder steps, plus one where the
    /// prefill emits the first token ([`crate::graph::Model::tokens_of`]).
    pub tokens: u32,
    /// The co-located model it is for (0 for a single model).
    pub part: u16,
    /// Its SLA class (0 without classes).
    pub class: u8,
    /// The key its input and outputs go by on a real device (its arrival's, else its id).
    pub key: u64,
}

impl Request {
    /// A new pending request.
    pub fn new(id: RequestId, arrival: Nanos, sla: Nanos, len: Lengths) -> Self {
        Request {
            id,
            arrival,
            deadline: arrival + sla,
            len,
            slot: None,
            first_issue: None,
            completion: None,
            dec_done: 0,
            first_token: None,
            tokens: len.dec,
            part: 0,
            class: 0,
            key: u64::from(id.0),
        }
    }

    /// The encoder length (known on arrival).
    pub(crate) fn enc_len(&self) -> u32 {
        self.len.enc
    }

    /// End-to-end latency, once completed.
    pub fn latency(&self) -> Option<Nanos> {
        self.completion.map(|c| c - self.arrival)
    }
}
