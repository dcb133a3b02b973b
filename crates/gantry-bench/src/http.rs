//! A minimal HTTP/1.1 client over hyper's connection API: one TCP connection per worker, keep-alive,
//! no pool and no redirects, so that the load generator spends as little CPU per request as it can
//! (it shares the machine's cores with the server it measures). Also a small JSON helper for setup.

use std::net::SocketAddr;
use std::sync::Mutex;

use anyhow::{Context, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST, HeaderValue};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpStream;

/// Where requests go: the resolved address of a Gantry and the bearer token to send.
#[derive(Debug, Clone)]
pub struct Target {
    pub addr: SocketAddr,
    host: HeaderValue,
    bearer: HeaderValue,
}

impl Target {
    /// `base` is `http://host:port` (plain HTTP only; a path after it is ignored).
    pub async fn resolve(base: &str, token: &str) -> anyhow::Result<Self> {
        let authority = authority_of(base)?;
        let addr = tokio::net::lookup_host(authority)
            .await
            .with_context(|| format!("resolving {authority}"))?
            .next()
            .with_context(|| format!("{authority} has no address"))?;
        Ok(Self {
            addr,
            host: HeaderValue::from_str(authority)?,
            bearer: HeaderValue::from_str(&format!("Bearer {token}"))?,
        })
    }

    /// The Host header's value.
    pub fn host_str(&self) -> &str {
        self.host.to_str().unwrap_or_default()
    }

    /// The Authorization header's value (`Bearer <token>`).
    pub fn bearer_str(&self) -> &str {
        self.bearer.to_str().unwrap_or_default()
    }

    /// A request with the Host and Authorization headers set; `body` makes it a JSON POST/PUT.
    pub fn request(&self, method: Method, path_and_query: &str, body: Option<Bytes>) -> Request<Full<Bytes>> {
        self.request_as(&self.bearer, method, path_and_query, body)
    }

    /// As `request`, with another precomputed `Authorization` value (device tokens).
    pub fn request_as(
        &self,
        bearer: &HeaderValue,
        method: Method,
        path_and_query: &str,
        body: Option<Bytes>,
    ) -> Request<Full<Bytes>> {
        let mut builder = Request::builder()
            .method(method)
            .uri(path_and_query)
            .header(HOST, self.host.clone())
            .header(AUTHORIZATION, bearer.clone());
        if body.is_some() {
            builder = builder.header(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
        builder
            .body(Full::new(body.unwrap_or_default()))
            .expect("method, path and headers are valid")
    }
}

/// `host:port` of `http://host:port[/...]`.
pub fn authority_of(base: &str) -> anyhow::Result<&str> {
    let Some(rest) = base.strip_prefix("http://") else {
        bail!("the URL must start with http:// (got `{base}`)");
    };
    let authority = rest.split('/').next().unwrap_or_default();
    if authority.is_empty() || !authority.contains(':') {
        bail!("the URL must name host and port, as http://127.0.0.1:8080 (got `{base}`)");
    }
    Ok(authority)
}

/// A bearer header value for a token.
pub fn bearer(token: &str) -> anyhow::Result<HeaderValue> {
    Ok(HeaderValue::from_str(&format!("Bearer {token}"))?)
}

/// One keep-alive connection.
pub struct Conn {
    sender: SendRequest<Full<Bytes>>,
}

impl Conn {
    pub async fn connect(addr: SocketAddr) -> anyhow::Result<Self> {
        let stream = TcpStream::connect(addr)
            .await
            .with_context(|| format!("connecting to {addr}"))?;
        // Requests are small and answered one at a time: Nagle would only add delay.
        stream.set_nodelay(true)?;
        let (sender, connection) = http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            // Ends when the sender is dropped or the server closes; errors surface on send.
            let _ = connection.await;
        });
        Ok(Self { sender })
    }

    /// Sends a request and reads the whole answer.
    pub async fn send(&mut self, request: Request<Full<Bytes>>) -> anyhow::Result<(StatusCode, Bytes)> {
        let (status, _, body) = self.send_full(request).await?;
        Ok((status, body))
    }

    /// As `send`, with the answer's headers (the console's cookies).
    pub async fn send_full(
        &mut self,
        request: Request<Full<Bytes>>,
    ) -> anyhow::Result<(StatusCode, hyper::HeaderMap, Bytes)> {
        self.sender.ready().await?;
        let response = self.sender.send_request(request).await?;
        let status = response.status();
        let headers = response.headers().clone();
        let body = response.into_body().collect().await?.to_bytes();
        Ok((status, headers, body))
    }
}

/// The same request again (http's Request is not Clone).
fn copy_of(request: &Request<Full<Bytes>>) -> Request<Full<Bytes>> {
    let mut copy = Request::new(request.body().clone());
    *copy.method_mut() = request.method().clone();
    *copy.uri_mut() = request.uri().clone();
    *copy.headers_mut() = request.headers().clone();
    copy
}

/// JSON calls for setup and checks, over a few reused connections.
pub struct Api {
    pub target: Target,
    idle: Mutex<Vec<Conn>>,
}

impl Api {
    pub fn new(target: Target) -> Self {
        Self {
            target,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// Sends a request and returns the `result` of a `returnCode` 0 answer; anything else is an
    /// error carrying the status and body.
    pub async fn call(&self, method: Method, path: &str, body: Option<&Value>) -> anyhow::Result<Value> {
        let body = body.map(|b| Bytes::from(b.to_string()));
        let request = self.target.request(method.clone(), path, body);
        let (status, bytes) = self.send(request).await?;
        let value: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        if status != StatusCode::OK || value["returnCode"] != 0 {
            bail!(
                "{method} {path} answered {status}: {}",
                String::from_utf8_lossy(&bytes).chars().take(300).collect::<String>()
            );
        }
        Ok(value["result"].clone())
    }

    pub async fn get(&self, path: &str) -> anyhow::Result<Value> {
        self.call(Method::GET, path, None).await
    }

    pub async fn post(&self, path: &str, body: &Value) -> anyhow::Result<Value> {
        self.call(Method::POST, path, Some(body)).await
    }

    /// Sends on an idle connection (or a new one) and keeps the connection for the next call.
    /// The server closes kept-alive connections left idle past its header timeout: those are
    /// skipped, and a request that meets one closing as it is sent goes again on a new one.
    pub async fn send(&self, request: Request<Full<Bytes>>) -> anyhow::Result<(StatusCode, Bytes)> {
        let idle = loop {
            match self.idle.lock().expect("connection list").pop() {
                Some(conn) if conn.sender.is_closed() => continue,
                other => break other,
            }
        };
        let (conn, answer) = match idle {
            Some(mut conn) => {
                let again = copy_of(&request);
                match conn.send(request).await {
                    Ok(answer) => (conn, answer),
                    Err(_) => {
                        let mut fresh = Conn::connect(self.target.addr).await?;
                        let answer = fresh.send(again).await?;
                        (fresh, answer)
                    }
                }
            }
            None => {
                let mut conn = Conn::connect(self.target.addr).await?;
                let answer = conn.send(request).await?;
                (conn, answer)
            }
        };
        self.idle.lock().expect("connection list").push(conn);
        Ok(answer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authorities() {
        assert_eq!(authority_of("http://127.0.0.1:8080").unwrap(), "127.0.0.1:8080");
        assert_eq!(authority_of("http://localhost:80/api").unwrap(), "localhost:80");
        assert!(authority_of("https://x:1").is_err());
        assert!(authority_of("http://nohost").is_err());
    }
}
