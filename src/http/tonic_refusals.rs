//! What tonic answers before any gRPC handler runs, counted as HTTP counts the same refusals:
//! a message larger than `--max-body-mib` (`too_large`), and a message that does not decode
//! (answered `INVALID_ARGUMENT` instead of tonic's `INTERNAL`, and counted `malformed`).

use super::metrics::outcome;
use std::sync::Arc;

/// Counts the calls tonic turns away before any handler runs — a message, or its inflated
/// form, larger than `--max-body-mib` (`RESOURCE_EXHAUSTED` or `OUT_OF_RANGE`, in a
/// trailers-only answer) — under `too_large`, as HTTP counts a body too large: no handler
/// sees them, and the model they were for is unknown (labelled `model=""` with several).
/// The handlers never answer those two codes themselves, so nothing is counted twice.
#[derive(Clone)]
pub(super) struct CountRefusals(pub(super) Arc<super::metrics::Metrics>);

impl<S> tower::Layer<S> for CountRefusals {
    type Service = Counted<S>;
    fn layer(&self, inner: S) -> Counted<S> {
        Counted {
            inner,
            metrics: self.0.clone(),
        }
    }
}

/// A service whose refused calls [`CountRefusals`] counts.
#[derive(Clone)]
pub(super) struct Counted<S> {
    inner: S,
    metrics: Arc<super::metrics::Metrics>,
}

impl<S, B, RB> tower::Service<axum::http::Request<B>> for Counted<S>
where
    S: tower::Service<axum::http::Request<B>, Response = axum::http::Response<RB>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future =
        std::pin::Pin<Box<dyn std::future::Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: axum::http::Request<B>) -> Self::Future {
        let answer = self.inner.call(req);
        let metrics = self.metrics.clone();
        Box::pin(async move {
            let mut resp = answer.await?;
            if refused_by_tonic(resp.headers()) {
                metrics.count(None, outcome::TOO_LARGE);
            }
            if undecodable(resp.headers()) {
                // the client's message, not the server: gRPC's code for a bad argument, and
                // counted as HTTP counts a malformed body
                resp.headers_mut().insert(
                    "grpc-status",
                    axum::http::HeaderValue::from(tonic::Code::InvalidArgument as i32),
                );
                metrics.count(None, outcome::MALFORMED);
            }
            Ok(resp)
        })
    }
}

/// True when a trailers-only answer is tonic's refusal of a message it could not decode
/// (`INTERNAL`, "failed to decode Protobuf message"): garbage, a truncated message, a huge
/// length prefix.
fn undecodable(headers: &axum::http::HeaderMap) -> bool {
    let internal = headers
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.parse::<i32>().ok())
        == Some(tonic::Code::Internal as i32);
    let says = headers
        .get("grpc-message")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|m| m.contains("decode%20Protobuf") || m.contains("decode Protobuf"));
    internal && says
}

/// True when a trailers-only answer carries the codes tonic refuses an oversized message with.
fn refused_by_tonic(headers: &axum::http::HeaderMap) -> bool {
    let code = headers
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.parse::<i32>().ok());
    code.is_some_and(|c| {
        c == tonic::Code::ResourceExhausted as i32 || c == tonic::Code::OutOfRange as i32
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_tonics_size_refusals_are_counted() {
        let with = |code: Option<&str>| {
            let mut h = axum::http::HeaderMap::new();
            if let Some(c) = code {
                h.insert("grpc-status", c.parse().unwrap());
            }
            refused_by_tonic(&h)
        };
        assert!(with(Some("8")) && with(Some("11")));
        // the handlers' own codes (not found, invalid argument, unavailable, internal), a
        // success and a streamed answer (its status in trailers) are not
        for c in ["5", "3", "14", "13", "0", "x"] {
            assert!(!with(Some(c)), "{c}");
        }
        assert!(!with(None));
    }

    #[test]
    fn an_undecodable_message_is_told_apart_from_the_handlers_own_internal_errors() {
        let with = |code: &str, msg: &str| {
            let mut h = axum::http::HeaderMap::new();
            h.insert("grpc-status", code.parse().unwrap());
            h.insert("grpc-message", msg.parse().unwrap());
            undecodable(&h)
        };
        assert!(with(
            "13",
            "failed%20to%20decode%20Protobuf%20message%3A%20invalid%20wire%20type"
        ));
        assert!(!with("13", "the%20engine%20stopped%20before%20answering"));
        assert!(!with("3", "failed%20to%20decode%20Protobuf%20message"));
    }
}
