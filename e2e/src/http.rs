//! Plain HTTP GETs against an operator's `/readyz` and `/metrics` and Prometheus's API, and
//! JSON POSTs to a served model (no client dependency).
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

/// `POST http://<addr><path>` with a JSON body: status code and body. `within` bounds the
/// whole exchange (a model's answer takes longer than a probe's).
pub async fn http_post_json(
    addr: &str,
    path: &str,
    body: &serde_json::Value,
    within: Duration,
) -> Result<(u16, String)> {
    let body = body.to_string();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
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
        .map_err(|_| anyhow!("http://{addr}{path} timed out"))??;
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

    #[tokio::test]
    async fn http_post_json_sends_the_body_with_its_length() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut seen = Vec::new();
            let mut buf = [0u8; 512];
            // Until the body's last byte: the request has no end but its length.
            while !seen.ends_with(b"}") {
                let n = s.read(&mut buf).await.unwrap();
                seen.extend_from_slice(&buf[..n]);
            }
            s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                .await
                .unwrap();
            String::from_utf8(seen).unwrap()
        });
        let body = serde_json::json!({"prompt": "the cat", "n_predict": 4});
        let (code, answer) = http_post_json(&addr, "/completion", &body, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!((code, answer.as_str()), (200, "ok"));
        let request = server.await.unwrap();
        let sent = body.to_string();
        assert!(
            request.starts_with("POST /completion HTTP/1.1\r\n"),
            "{request}"
        );
        assert!(
            request.contains(&format!("Content-Length: {}\r\n", sent.len())),
            "{request}"
        );
        assert!(
            request.contains("Content-Type: application/json\r\n"),
            "{request}"
        );
        assert!(request.ends_with(&format!("\r\n\r\n{sent}")), "{request}");
    }
}
