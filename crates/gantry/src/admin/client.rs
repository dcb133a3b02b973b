//! The REST client of `gantry admin`: bearer token, the response envelope, API errors as the
//! server worded them, and listings read page by page.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::Value;

use super::profile::Connection;

/// The largest page the API serves; listings are read in pages of this size.
pub const MAX_PAGE_SIZE: u64 = 1000;

/// A refusal by the server, with the `message` and `returnCode` it sent.
#[derive(Debug, thiserror::Error)]
#[error("{message} (HTTP {status}, returnCode {return_code})")]
pub struct ServerRefusal {
    pub status: StatusCode,
    pub return_code: i64,
    pub message: String,
}

#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error(transparent)]
    Api(#[from] ServerRefusal),
    #[error("cannot reach {url}")]
    Transport {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("{url} answered HTTP {status} with a body that is not Gantry's envelope: {body}")]
    NotGantry {
        url: String,
        status: StatusCode,
        body: String,
    },
}

/// One paged response: the records and the listing's total.
pub struct Page {
    pub total: u64,
    pub results: Vec<Value>,
}

#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl Client {
    pub fn new(connection: &Connection) -> anyhow::Result<Self> {
        use anyhow::Context;
        let mut builder = reqwest::Client::builder()
            .use_rustls_tls()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(60))
            .user_agent(concat!("gantry-admin/", env!("CARGO_PKG_VERSION")));
        if let Some(path) = &connection.cacert {
            let pem = std::fs::read(path).with_context(|| format!("reading --cacert {}", path.display()))?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .with_context(|| format!("{} holds no PEM certificate", path.display()))?;
            anyhow::ensure!(!certs.is_empty(), "{} holds no PEM certificate", path.display());
            for cert in certs {
                builder = builder.add_root_certificate(cert);
            }
        }
        Ok(Self {
            http: builder.build().context("building the HTTP client")?,
            base: connection.url.trim_end_matches('/').to_owned(),
            token: connection.token.clone(),
        })
    }

    /// Calls `/api/v1{path}` and returns the envelope's `result` (Null when there is none).
    /// 429 and 503 mean the server did nothing: those are retried a few times with backoff.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<&Value>,
    ) -> Result<Value, CallError> {
        let url = format!("{}/api/v1{path}", self.base);
        let mut attempt = 0;
        loop {
            let mut request = self
                .http
                .request(method.clone(), &url)
                .bearer_auth(&self.token)
                .query(query);
            if let Some(body) = body {
                request = request.json(body);
            }
            let response = request.send().await.map_err(|source| CallError::Transport {
                url: url.clone(),
                source,
            })?;
            let status = response.status();
            let text = response.text().await.map_err(|source| CallError::Transport {
                url: url.clone(),
                source,
            })?;
            let envelope: Option<Value> = serde_json::from_str(&text).ok();
            let code = envelope
                .as_ref()
                .and_then(|e| e.get("returnCode"))
                .and_then(Value::as_i64);
            match (code, envelope) {
                (Some(0), Some(mut envelope)) if status.is_success() => {
                    return Ok(envelope.get_mut("result").map(Value::take).unwrap_or(Value::Null));
                }
                _ if (status == StatusCode::TOO_MANY_REQUESTS || status == StatusCode::SERVICE_UNAVAILABLE)
                    && attempt < 5 =>
                {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
                }
                (Some(return_code), Some(envelope)) => {
                    let message = envelope
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("(no message)");
                    return Err(ServerRefusal {
                        status,
                        return_code,
                        message: message.to_owned(),
                    }
                    .into());
                }
                _ => {
                    let mut body = text;
                    body.truncate(200);
                    return Err(CallError::NotGantry { url, status, body });
                }
            }
        }
    }

    pub async fn get(&self, path: &str, query: &[(&str, String)]) -> Result<Value, CallError> {
        self.call(Method::GET, path, query, None).await
    }

    pub async fn post(&self, path: &str, body: &Value) -> Result<Value, CallError> {
        self.call(Method::POST, path, &[], Some(body)).await
    }

    pub async fn put(&self, path: &str, body: &Value) -> Result<Value, CallError> {
        self.call(Method::PUT, path, &[], Some(body)).await
    }

    pub async fn delete(&self, path: &str) -> Result<Value, CallError> {
        self.call(Method::DELETE, path, &[], None).await
    }

    /// One page of a listing (`pageNo` from 1).
    pub async fn page(
        &self,
        path: &str,
        query: &[(&str, String)],
        page_no: u64,
        page_size: u64,
    ) -> Result<Page, CallError> {
        let mut query = query.to_vec();
        query.push(("pageNo", page_no.to_string()));
        query.push(("pageSize", page_size.to_string()));
        let mut result = self.get(path, &query).await?;
        let total = result.get("totalResults").and_then(Value::as_u64).unwrap_or(0);
        let results = match result.get_mut("results").map(Value::take) {
            Some(Value::Array(results)) => results,
            _ => Vec::new(),
        };
        Ok(Page { total, results })
    }

    /// Every record of a listing, or the first `limit`, read in pages of up to 1000.
    pub async fn all(&self, path: &str, query: &[(&str, String)], limit: Option<u64>) -> Result<Vec<Value>, CallError> {
        let limit = limit.unwrap_or(u64::MAX);
        let page_size = limit.clamp(1, MAX_PAGE_SIZE);
        let mut records = Vec::new();
        for page_no in 1.. {
            let page = self.page(path, query, page_no, page_size).await?;
            let short = (page.results.len() as u64) < page_size;
            records.extend(page.results);
            if short || records.len() as u64 >= limit.min(page.total) {
                break;
            }
        }
        records.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
        Ok(records)
    }
}

/// Percent-encodes one path segment (an id or name the user typed).
pub fn segment(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}
