//! The way out to webhook receivers (`gantry_core::outbound::Outbound`) over reqwest: no
//! redirects, no proxy (a proxy would connect where the check cannot see), a 10 s limit on the
//! whole exchange, and a resolver that refuses a name when any of its addresses is loopback,
//! private, link-local or metadata (unless allowed): the addresses it returns are the ones
//! connected to, so a name cannot pass the check and then resolve elsewhere. An address written
//! in the URL skips the resolver; the delivery checks it itself (`WebhookUrl::parse`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use gantry_core::outbound::Outbound;
use gantry_core::webhook::is_public;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// How long a receiver has to answer a delivery.
const TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) struct HttpOutbound {
    client: reqwest::Client,
}

impl HttpOutbound {
    pub(crate) fn new(allow_private: bool) -> anyhow::Result<Self> {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .timeout(TIMEOUT)
            .user_agent(concat!("gantry-webhooks/", env!("CARGO_PKG_VERSION")))
            .dns_resolver(Arc::new(CheckedResolver { allow_private }))
            .build()?;
        Ok(Self { client })
    }
}

#[async_trait]
impl Outbound for HttpOutbound {
    async fn post(&self, url: &str, headers: &[(&'static str, String)], body: String) -> Result<u16, String> {
        let request = headers
            .iter()
            .fold(self.client.post(url), |request, (name, value)| {
                request.header(*name, value)
            })
            .body(body);
        match request.send().await {
            Ok(response) => Ok(response.status().as_u16()),
            Err(e) if e.is_timeout() => Err(format!("no answer within {} s", TIMEOUT.as_secs())),
            Err(e) => Err(describe(&e)),
        }
    }
}

/// The error with its causes (reqwest's own text says only "error sending request").
fn describe(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Resolves through the system, then checks every address.
struct CheckedResolver {
    allow_private: bool,
}

impl Resolve for CheckedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let allow_private = self.allow_private;
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if !allow_private && let Some(refused) = addrs.iter().find(|a| !is_public(a.ip())) {
                return Err(format!(
                    "{host} resolves to {}, a loopback, private, link-local or metadata address \
                     (allowed only with --webhook-allow-private)",
                    refused.ip()
                )
                .into());
            }
            let addrs: Addrs = Box::new(addrs.into_iter());
            Ok(addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn names_resolving_to_private_addresses_are_refused() {
        let refused = CheckedResolver { allow_private: false }
            .resolve("localhost".parse().unwrap())
            .await;
        let error = refused.err().expect("localhost is loopback").to_string();
        assert!(error.contains("localhost resolves to"), "{error}");
        let allowed = CheckedResolver { allow_private: true }
            .resolve("localhost".parse().unwrap())
            .await
            .expect("allowed with the flag");
        assert!(allowed.into_iter().all(|a| a.ip().is_loopback()));
    }
}
