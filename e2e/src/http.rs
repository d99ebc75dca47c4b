//! Plain HTTP GETs against an operator's `/readyz` and `/metrics` and Prometheus's API (no
//! client dependency).
use std::time::Duration;

use anyhow::{Result, anyhow};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The status code of `GET http://<addr><path>` (plain HTTP/1.1, no client dependency).
pub async fn http_status(addr: &str, path: &str) -> Result<u16> {
    let (code, _) = http_get(addr, path).await?;
    Ok(code)
}

/// `GET http://<addr><path>`: status code and body.
pub async fn http_get(addr: &str, path: &str) -> Result<(u16, String)> {
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    exchange(addr, path, &request, Duration::from_secs(5)).await
}

/// `GET http://<addr><path>` as HTTP/1.0, whose answer comes without chunked encoding (which
/// Prometheus uses for larger HTTP/1.1 answers): status code and body.
pub async fn http10_get(addr: &str, path: &str, within: Duration) -> Result<(u16, String)> {
    let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    exchange(addr, path, &request, within).await
}

/// Sends `request`, reads until the server closes, and splits the status code from the body.
async fn exchange(
    addr: &str,
    path: &str,
    request: &str,
    within: Duration,
) -> Result<(u16, String)> {
    let fut = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        stream.write_all(request.as_bytes()).await?;
        let mut buf = Vec::new();
        stream.read_to_end(&mut buf).await?;
        anyhow::Ok(String::from_utf8_lossy(&buf).into_owned())
    };
    let text = tokio::time::timeout(within, fut)
        .await
        .map_err(|_| anyhow!("GET http://{addr}{path} timed out"))??;
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| {
            anyhow!(
                "GET http://{addr}{path}: not an HTTP response: {:?}",
                text.lines().next()
            )
        })?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((code, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn http_status_reads_the_status_line() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 512];
            let _ = s.read(&mut buf).await;
            s.write_all(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 2\r\n\r\nno")
                .await
                .unwrap();
        });
        let (code, body) = http_get(&addr, "/readyz").await.unwrap();
        assert_eq!((code, body.as_str()), (503, "no"));
    }
}
