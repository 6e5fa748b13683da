//! A wall-clock test's bound on a hang: [`within`] runs the code under test on a thread of its
//! own and fails the test, instead of hanging it, when the code has not returned after a
//! generous limit (a bound on a hang, never a speed goal). A panic on that thread fails the test
//! too, said as such rather than as a hang.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

/// What `f` returns, run on a thread of its own; panics with `hang` when it has not returned
/// within `limit`.
pub(crate) fn within<T: Send + 'static>(
    limit: Duration,
    hang: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(v) => v,
        Err(RecvTimeoutError::Timeout) => panic!("{hang} (not done within {limit:?})"),
        Err(RecvTimeoutError::Disconnected) => panic!("the watched thread failed (above)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The message a panic carried.
    fn said(e: Box<dyn std::any::Any + Send>) -> String {
        match e.downcast::<String>() {
            Ok(s) => *s,
            Err(e) => e
                .downcast_ref::<&str>()
                .map_or_else(String::new, |s| s.to_string()),
        }
    }

    #[test]
    fn a_watched_call_gives_its_value_and_a_hang_or_a_panic_fails() {
        assert_eq!(within(Duration::from_secs(60), "hung", || 7), 7);
        let hang = std::panic::catch_unwind(|| {
            within(Duration::from_millis(1), "hung", || {
                std::thread::sleep(Duration::from_secs(2))
            })
        });
        assert!(said(hang.expect_err("a hang fails")).starts_with("hung"));
        let failed = std::panic::catch_unwind(|| {
            within(Duration::from_secs(60), "hung", || panic!("inside"))
        });
        assert!(said(failed.expect_err("a panic fails")).contains("failed"));
    }
}
