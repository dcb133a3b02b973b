//! `gantry healthcheck`: asks a running server's `GET /healthz` and exits 0 when it answers 200,
//! 1 otherwise. It is the container image's HEALTHCHECK: a `FROM scratch` image has no shell or
//! curl, so the binary checks itself.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use hyper::{Request, StatusCode, Uri, header};
use hyper_util::rt::TokioIo;

#[derive(Debug, Clone, Args)]
pub struct HealthcheckConfig {
    /// The URL to ask, `http://host:port/healthz`; default: the local address of --http-addr.
    #[arg(long)]
    pub url: Option<String>,
    /// The server's REST address (the same variable as `gantry serve` reads): an unspecified
    /// host (0.0.0.0, [::]) is asked on loopback.
    #[arg(long, env = "GANTRY_HTTP_ADDR", default_value = "0.0.0.0:8080")]
    pub http_addr: SocketAddr,
    /// Seconds to wait for the answer.
    #[arg(long, default_value_t = 5)]
    pub timeout: u64,
}

impl HealthcheckConfig {
    /// `--url`, else `http://<loopback or the bound host>:<port>/healthz`.
    fn url(&self) -> String {
        if let Some(url) = &self.url {
            return url.clone();
        }
        let ip = match self.http_addr.ip() {
            IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
            ip => ip,
        };
        format!("http://{}/healthz", SocketAddr::new(ip, self.http_addr.port()))
    }
}

/// Ok when the server answered 200; an error naming the URL and what went wrong otherwise
/// (`main` turns it into exit status 1).
pub async fn run(config: HealthcheckConfig) -> anyhow::Result<()> {
    let url = config.url();
    let status = tokio::time::timeout(Duration::from_secs(config.timeout), get(&url))
        .await
        .with_context(|| format!("{url}: no answer within {} s", config.timeout))?
        .with_context(|| format!("asking {url}"))?;
    if status != StatusCode::OK {
        bail!("{url} answered {status}");
    }
    println!("{url}: {status}");
    Ok(())
}

/// One plain-HTTP GET on a connection of its own; the status of the answer.
async fn get(url: &str) -> anyhow::Result<StatusCode> {
    let uri: Uri = url.parse().context("not a URL")?;
    if uri.scheme_str() != Some("http") {
        bail!("only http:// URLs are checked (the plain REST listener)");
    }
    let authority = uri.authority().context("the URL has no host")?.clone();
    let port = authority.port_u16().unwrap_or(80);
    let stream = tokio::net::TcpStream::connect((authority.host().trim_matches(['[', ']']), port)).await?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    // `gantry healthcheck` is a one-shot client, not the service: its connection's driver ends
    // with the request (or the process), so no task owner is needed.
    tokio::spawn(connection);
    let request = Request::get(uri.path_and_query().map_or("/", |p| p.as_str()))
        .header(header::HOST, authority.as_str())
        .body(String::new())?;
    Ok(sender.send_request(request).await?.status())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(http_addr: &str, url: Option<&str>) -> HealthcheckConfig {
        HealthcheckConfig {
            url: url.map(str::to_owned),
            http_addr: http_addr.parse().unwrap(),
            timeout: 5,
        }
    }

    #[test]
    fn the_default_url_asks_loopback_on_the_serve_port() {
        assert_eq!(config("0.0.0.0:8080", None).url(), "http://127.0.0.1:8080/healthz");
        assert_eq!(config("[::]:9000", None).url(), "http://[::1]:9000/healthz");
        assert_eq!(config("10.1.2.3:8081", None).url(), "http://10.1.2.3:8081/healthz");
        assert_eq!(
            config("0.0.0.0:8080", Some("http://gantry:8080/healthz")).url(),
            "http://gantry:8080/healthz"
        );
    }
}
