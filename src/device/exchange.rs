//! Request data a front end exchanges with a real device while the engine serves: each
//! request's input values, put in before its arrival is sent (keyed by the request's key,
//! `Arrival::key`), and its final outputs, taken out once the engine reports it completed.
//! Without an exchange a device generates inputs from its seed and keeps no outputs.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Inputs in, outputs out, by request key.
#[derive(Debug, Default)]
pub struct Exchange {
    inputs: Mutex<HashMap<u64, Vec<f32>>>,
    outputs: Mutex<HashMap<u64, Vec<f32>>>,
    misfits: AtomicU64,
}

impl Exchange {
    /// An empty exchange.
    pub fn new() -> Self {
        Exchange::default()
    }

    /// Request `key`'s model input, in the graph's order (`[C, H, W]` for an image; token
    /// ids as values for a token input), one request's worth.
    pub fn put_input(&self, key: u64, values: Vec<f32>) {
        lock(&self.inputs).insert(key, values);
    }

    /// Request `key`'s input, once (the device takes it when the request's input node runs).
    pub fn take_input(&self, key: u64) -> Option<Vec<f32>> {
        lock(&self.inputs).remove(&key)
    }

    /// Request `key`'s input as `len` values of rows of `feat`: its own, or, when the request
    /// runs padded to a longer sub-batch member's length (graph batching), its rows followed
    /// by zero rows. An input that does not fit (longer, or not whole rows) is taken out and
    /// counted ([`Exchange::misfits`]), and the device serves the request on generated values.
    pub fn input_for(&self, key: u64, len: usize, feat: usize) -> Option<Vec<f32>> {
        let mut v = self.take_input(key)?;
        let whole_rows = feat > 0 && !v.is_empty() && v.len().is_multiple_of(feat);
        if v.len() == len || (v.len() < len && whole_rows) {
            v.resize(len, 0.0);
            return Some(v);
        }
        self.misfit();
        None
    }

    /// Request `key`'s final outputs (the device puts them when the request completes).
    pub fn put_output(&self, key: u64, values: Vec<f32>) {
        lock(&self.outputs).insert(key, values);
    }

    /// Request `key`'s final outputs, once.
    pub fn take_output(&self, key: u64) -> Option<Vec<f32>> {
        lock(&self.outputs).remove(&key)
    }

    /// Counts an input that did not hold one request's worth of values (the device served
    /// that request on generated values instead; a front end checks shapes first, so this
    /// counts its bugs).
    pub fn misfit(&self) {
        self.misfits.fetch_add(1, Ordering::Relaxed);
    }

    /// Inputs refused for their length so far.
    pub fn misfits(&self) -> u64 {
        self.misfits.load(Ordering::Relaxed)
    }

    /// Requests whose inputs or outputs are still held (a front end that takes every output
    /// leaves none: a test checks that nothing accumulates).
    pub fn held(&self) -> (usize, usize) {
        (lock(&self.inputs).len(), lock(&self.outputs).len())
    }
}

/// What a mutex guards, even if a thread panicked holding it (for data that each operation
/// leaves consistent: one insert, remove or push).
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shorter_input_is_padded_with_zero_rows_and_a_misfit_counted() {
        let x = Exchange::new();
        x.put_input(1, vec![1.0, 2.0, 3.0, 4.0]);
        assert_eq!(
            x.input_for(1, 6, 2),
            Some(vec![1.0, 2.0, 3.0, 4.0, 0.0, 0.0])
        );
        x.put_input(2, vec![1.0, 2.0, 3.0]);
        assert_eq!(x.input_for(2, 6, 2), None, "not whole rows");
        x.put_input(3, vec![1.0; 8]);
        assert_eq!(x.input_for(3, 6, 2), None, "longer");
        assert_eq!(x.misfits(), 2);
        assert_eq!(x.input_for(4, 6, 2), None, "none given");
        assert_eq!(x.held(), (0, 0));
    }
}
