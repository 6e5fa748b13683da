//! The serving runtime's state: requests ([`request`]), the pending queue ([`queue`], the
//! paper's InfQ), the paper's BatchTable stack ([`batch_table`]) and the SLA slack predictor
//! ([`predictor`]).

pub(crate) mod batch_table;
pub mod predictor;
pub(crate) mod queue;
pub mod request;

pub use batch_table::{BatchTable, SubBatch};
pub use predictor::Predictor;
pub use queue::Queue;
pub use request::{Request, RequestId};
