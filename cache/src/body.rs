//! Reading a response body: chunk by chunk, each within an idle timeout (a download of many
//! gigabytes has no useful total timeout, but a stalled one must end), or whole up to a limit.
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use vramfit_hub::error_chain;

/// Why a body could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BodyError {
    /// The connection failed or closed before the body ended.
    #[error("the body broke off: {0}")]
    Broken(String),
    /// No bytes came for the idle timeout.
    #[error("no bytes for {0:?}")]
    Stalled(Duration),
    /// More bytes than allowed.
    #[error("more than {0} bytes")]
    TooLarge(u64),
}

/// The next bytes of `body`; `None` at its end.
pub async fn next_data(body: &mut Incoming, idle: Duration) -> Result<Option<Bytes>, BodyError> {
    loop {
        let frame = match tokio::time::timeout(idle, body.frame()).await {
            Err(_) => return Err(BodyError::Stalled(idle)),
            Ok(None) => return Ok(None),
            Ok(Some(frame)) => frame.map_err(|e| BodyError::Broken(error_chain(&e)))?,
        };
        // Trailers carry no bytes.
        if let Ok(data) = frame.into_data() {
            return Ok(Some(data));
        }
    }
}

/// The whole body, at most `limit` bytes.
pub async fn read_bounded(
    mut body: Incoming,
    limit: u64,
    idle: Duration,
) -> Result<Vec<u8>, BodyError> {
    let mut out = Vec::new();
    while let Some(data) = next_data(&mut body, idle).await? {
        if out.len() as u64 + data.len() as u64 > limit {
            return Err(BodyError::TooLarge(limit));
        }
        out.extend_from_slice(&data);
    }
    Ok(out)
}
