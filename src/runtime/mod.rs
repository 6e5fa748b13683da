//! The serving runtime's state: its bounds ([`bounds`]: max batch, max pending), requests ([`request`]), the pending queue ([`infq`], the
//! paper's InfQ), the paper's BatchTable stack ([`batch_table`]), the SLA slack predictor
//! ([`predictor`]) and the ledger of requests in the server ([`ledger`]).

pub(crate) mod batch_table;
pub mod bounds;
pub(crate) mod infq;
pub mod ledger;
pub mod predictor;
pub mod request;

pub use batch_table::{BatchTable, SubBatch};
pub use bounds::{MaxBatch, MaxPending};
pub use infq::InfQ;
pub use ledger::{Ledger, Rejection};
pub use predictor::Predictor;
pub use request::{Request, RequestId};
