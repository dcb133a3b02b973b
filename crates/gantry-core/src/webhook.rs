//! Webhooks: a project's receiver of its events over HTTP, the events waiting for it (the
//! outbox), and the deliveries that carry them. A webhook's URL is checked here, once when it is
//! given and again before each delivery, so that no receiver sits in a private network unless
//! the operator allows it (`--webhook-allow-private`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use hmac::{Hmac, Mac};
use serde::Serialize;
use sha2::Sha256;

use crate::enums::DeliveryStatus;
use crate::ids::{DeliveryId, DeviceId, ProjectId, TenantId, WebhookId};
use crate::stream::StreamType;
use crate::{Error, Result};

/// The longest URL a webhook may have.
const MAX_URL: usize = 2048;
/// The longest description.
pub const MAX_DESCRIPTION: usize = 1024;
/// A given secret's length in characters, at least and at most.
pub const SECRET_LENGTH: (usize, usize) = (16, 256);

/// A webhook's URL: http or https, without credentials, whose host is not a private, loopback,
/// link-local or metadata address (unless such are allowed). A host name is checked again when
/// it is resolved, before each delivery (`is_public`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookUrl(url::Url);

impl WebhookUrl {
    pub fn parse(text: &str, allow_private: bool) -> Result<WebhookUrl> {
        let bad = |reason: &str| Error::invalid("url", reason.to_owned());
        if text.len() > MAX_URL {
            return Err(bad(&format!("is longer than {MAX_URL} characters")));
        }
        let url = url::Url::parse(text.trim()).map_err(|e| bad(&format!("is not a URL ({e})")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(bad("must be an http or https URL"));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(bad(
                "must not hold a user name or password (the secret signs the deliveries)",
            ));
        }
        let private = match url.host() {
            None => return Err(bad("has no host")),
            Some(url::Host::Ipv4(ip)) => !is_public(IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) => !is_public(IpAddr::V6(ip)),
            Some(url::Host::Domain(name)) => {
                let name = name.trim_end_matches('.').to_ascii_lowercase();
                name == "localhost" || name.ends_with(".localhost")
            }
        };
        if private && !allow_private {
            return Err(bad(
                "is a loopback, private, link-local or metadata address; receivers there need --webhook-allow-private",
            ));
        }
        Ok(WebhookUrl(url))
    }

    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    /// The host as written, when it is a name rather than an address (it is resolved and checked
    /// before each delivery).
    pub fn domain(&self) -> Option<&str> {
        self.0.domain()
    }
}

/// Whether a receiver may be at `ip` without `--webhook-allow-private`: not unspecified,
/// loopback, private (RFC 1918, unique local), shared (CGNAT, where some clouds keep metadata),
/// link-local (where 169.254.169.254 is), multicast, broadcast, documentation or reserved; an
/// IPv4 address inside IPv6 (mapped, compatible, NAT64) is judged as the IPv4 address.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = embedded_v4(v6) {
                return is_public_v4(v4);
            }
            let first = v6.segments()[0];
            !(v6.is_unspecified()
                || v6.is_loopback()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00 // unique local fc00::/7 (fd00::/8 in it)
                || (first & 0xffc0) == 0xfe80 // link-local fe80::/10
                || (first & 0xffc0) == 0xfec0 // site-local fec0::/10 (deprecated)
                || (first == 0x2001 && v6.segments()[1] == 0x0db8)) // documentation
        }
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(a == 0
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_multicast()
        || ip.is_broadcast()
        || ip.is_documentation()
        || a >= 240
        || (a == 100 && (64..128).contains(&b))
        || (a == 192 && b == 0 && c == 0)
        || (a == 198 && (18..20).contains(&b)))
}

/// The IPv4 address an IPv6 address carries: mapped (::ffff:a.b.c.d), compatible (::a.b.c.d,
/// but :: and ::1) and NAT64 (64:ff9b::a.b.c.d).
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let tail = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    match s {
        [0, 0, 0, 0, 0, 0xffff, _, _] => Some(tail),
        [0, 0, 0, 0, 0, 0, hi, _] if hi != 0 => Some(tail),
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(tail),
        _ => None,
    }
}

/// A webhook as the API shows it; its secret is shown only when it is created (`CreatedWebhook`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Webhook {
    pub id: WebhookId,
    pub tenant_id: TenantId,
    pub project_id: ProjectId,
    pub url: String,
    /// The event types it receives.
    pub types: Vec<StreamType>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// A disabled webhook receives nothing: no events wait for it while it is disabled.
    pub enabled: bool,
    /// The HMAC key of `X-Gantry-Signature`.
    #[serde(skip)]
    pub secret: String,
    pub created_by: String,
    pub created_time: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_by: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_time: Option<i64>,
    /// Its place among its project's webhooks: its bit in an outbox row's `Audience`.
    #[serde(skip)]
    pub slot: u8,
}

impl Webhook {
    pub fn wants(&self, kind: StreamType) -> bool {
        self.enabled && self.types.contains(&kind)
    }
}

/// A webhook just created, with its secret (shown this once).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct CreatedWebhook {
    #[serde(flatten)]
    pub webhook: Webhook,
    /// The key of the deliveries' `X-Gantry-Signature` HMAC: the one given, or a generated one.
    pub secret: String,
}

/// The fields a webhook is created or changed with; on a change, absent ones stay.
#[derive(Debug, Clone, Default)]
pub struct WebhookFields {
    pub url: Option<String>,
    pub types: Option<Vec<String>>,
    pub secret: Option<String>,
    pub description: Option<String>,
    pub enabled: Option<bool>,
}

/// The event types of a webhook: at least one, each once, in the stream's spelling.
pub fn parse_types(names: &[String]) -> Result<Vec<StreamType>> {
    if names.is_empty() {
        return Err(Error::invalid("types", "must name at least one event type"));
    }
    let mut types = Vec::with_capacity(names.len());
    for name in names {
        let kind = StreamType::parse_field(name, "types")?;
        if !types.contains(&kind) {
            types.push(kind);
        }
    }
    Ok(types)
}

/// A given secret: `SECRET_LENGTH` characters, printable ASCII.
pub fn parse_secret(secret: &str) -> Result<String> {
    let (min, max) = SECRET_LENGTH;
    if !(min..=max).contains(&secret.chars().count()) {
        return Err(Error::invalid("secret", format!("must be {min} to {max} characters")));
    }
    if !secret.chars().all(|c| c.is_ascii_graphic()) {
        return Err(Error::invalid("secret", "must be printable ASCII without spaces"));
    }
    Ok(secret.to_owned())
}

/// Webhooks of one project, as the outbox keeps them: a bit per webhook's `slot`. A project
/// holds at most `Audience::MAX_WEBHOOKS` webhooks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Audience(pub u64);

impl Audience {
    /// Slots 0 to 62: the bits of a signed 64-bit column that stay positive.
    pub const MAX_WEBHOOKS: u64 = 63;

    pub fn with(self, slot: u8) -> Self {
        Audience(self.0 | Self::bit(slot))
    }

    pub fn bit(slot: u8) -> u64 {
        1u64 << slot
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

/// One event waiting for webhooks (a row of the outbox), in the stream's shape: `data` is the
/// JSON the stream would send. It is written once, whatever the number of webhooks that want
/// it: `pending` are those that have not taken it into a delivery yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookEvent {
    /// Unique, so that a receiver can tell a redelivered event (`id` in the delivery).
    pub id: String,
    pub project_id: ProjectId,
    pub pending: Audience,
    pub device_id: DeviceId,
    pub kind: StreamType,
    /// When it happened (committed), epoch milliseconds.
    pub time: i64,
    pub data: String,
}

impl WebhookEvent {
    /// A fresh event id: a UUIDv7, so ids grow with time.
    pub fn new_id() -> String {
        uuid::Uuid::now_v7().to_string()
    }
}

/// Where the store keeps an outbox row, to remove it once a delivery holds it. Opaque to the
/// services: `outbox` 0 is the main outbox, any other an outbox the store keeps beside its main
/// tables, numbered by the store (SQLite's staging and event-log files).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutboxKey {
    pub outbox: u8,
    pub seq: i64,
}

impl OutboxKey {
    /// The main outbox, where the store keeps every outbox row that is not apart.
    pub const MAIN: u8 = 0;

    /// Whether the row is in the main outbox.
    pub fn in_main(&self) -> bool {
        self.outbox == Self::MAIN
    }
}

/// One POST of a batch of events to a webhook, and its retries.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Delivery {
    /// Sent as `X-Gantry-Delivery`.
    pub id: DeliveryId,
    pub webhook_id: WebhookId,
    #[serde(skip)]
    pub tenant_id: TenantId,
    pub status: DeliveryStatus,
    /// Events in the batch.
    pub event_count: u32,
    /// POSTs made so far.
    pub attempts: u32,
    /// The HTTP status of the last attempt; absent when it got no answer (or none was made).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_http_status: Option<u16>,
    /// Why the last attempt did not deliver (a non-2xx status, a timeout, a refused address).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Epoch milliseconds, as every time below.
    pub created_time: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_attempt_time: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_attempt_time: Option<i64>,
    /// When a pending delivery is tried next.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_attempt_time: Option<i64>,
    /// When it was delivered or given up.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finished_time: Option<i64>,
    /// The request body, the same on every attempt (so is its signature).
    #[serde(skip)]
    pub body: String,
}

/// The body of a delivery: `{webhookId, events: [{id, type, time, data}]}`, in the outbox's order.
pub fn delivery_body(webhook: &WebhookId, events: &[WebhookEvent]) -> String {
    #[derive(Serialize)]
    struct Event<'a> {
        id: &'a str,
        #[serde(rename = "type")]
        kind: StreamType,
        time: i64,
        data: serde_json::Value,
    }
    let events: Vec<Event> = events
        .iter()
        .map(|e| Event {
            id: &e.id,
            kind: e.kind,
            time: e.time,
            data: serde_json::from_str(&e.data).unwrap_or(serde_json::Value::Null),
        })
        .collect();
    serde_json::json!({"webhookId": webhook, "events": events}).to_string()
}

/// `X-Gantry-Signature`: `sha256=` and the hex HMAC-SHA256 of `body` keyed with `secret`.
pub fn signature(secret: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes a key of any length");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// How a failed delivery is retried: after `base`, doubling, at most `cap` apart (each wait
/// drawn between half and all of its step, so receivers that failed together do not all come
/// back at once), and given up once the next try would be more than `give_up` after the first.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    pub base: Duration,
    pub cap: Duration,
    pub give_up: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            base: Duration::from_secs(5),
            cap: Duration::from_secs(3600),
            give_up: Duration::from_secs(24 * 3600),
        }
    }
}

impl RetryPolicy {
    /// When to try again after `attempts` failed tries, the first at `first` (epoch ms); None:
    /// give up.
    pub fn next_attempt(&self, attempts: u32, first: i64, now: i64) -> Option<i64> {
        let step = self
            .base
            .saturating_mul(1u32 << attempts.saturating_sub(1).min(20))
            .min(self.cap);
        let step_ms = step.as_millis() as i64;
        let wait = rand::random_range(step_ms / 2..=step_ms.max(1));
        let next = now + wait;
        (next <= first + self.give_up.as_millis() as i64).then_some(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(url: &str) -> bool {
        match WebhookUrl::parse(url, false) {
            Err(Error::Invalid { field, .. }) => {
                assert_eq!(field, "url");
                true
            }
            Err(e) => panic!("{url}: {e}"),
            Ok(_) => false,
        }
    }

    #[test]
    fn private_and_special_addresses_are_refused() {
        for url in [
            "http://127.0.0.1/hook",
            "http://127.1.2.3:8080/",
            "http://localhost:9000/",
            "http://api.localhost/",
            "http://10.0.0.5/",
            "http://172.16.0.1/",
            "http://172.31.255.255/",
            "http://192.168.1.1/",
            "http://169.254.169.254/latest/meta-data/",
            "http://169.254.0.1/",
            "http://100.100.100.200/",
            "http://0.0.0.0/",
            "http://255.255.255.255/",
            "http://224.0.0.1/",
            "http://[::1]/",
            "http://[::]/",
            "http://[fd00::1]/",
            "http://[fd00:ec2::254]/",
            "http://[fc00::1]/",
            "http://[fe80::1]/",
            "http://[ff02::1]/",
            "http://[::ffff:127.0.0.1]/",
            "http://[::ffff:10.1.2.3]/",
            "http://[::ffff:169.254.169.254]/",
            "http://[64:ff9b::a00:1]/",
            "http://2130706433/",
            "http://0x7f.1/",
        ] {
            assert!(refused(url), "{url} should be refused");
            assert!(WebhookUrl::parse(url, true).is_ok(), "{url} is allowed with the flag");
        }
    }

    #[test]
    fn public_addresses_and_names_pass() {
        for url in [
            "https://hooks.example.com/gantry",
            "http://93.184.216.34:8080/x?y=1",
            "http://172.32.0.1/",
            "http://100.128.0.1/",
            "https://[2606:4700::1111]/",
            "http://[::ffff:8.8.8.8]/",
        ] {
            assert!(!refused(url), "{url} should pass");
        }
        assert_eq!(
            WebhookUrl::parse("https://hooks.example.com/gantry", false)
                .unwrap()
                .domain(),
            Some("hooks.example.com")
        );
    }

    #[test]
    fn only_http_urls_without_credentials() {
        for url in [
            "ftp://example.com/",
            "file:///etc/passwd",
            "example.com/hook",
            "",
            "https://user:pw@example.com/",
            "javascript:alert(1)",
        ] {
            assert!(refused(url), "{url:?} should be refused");
        }
    }

    #[test]
    fn types_and_secrets() {
        let types = parse_types(&["telemetry".into(), "eventLog".into(), "telemetry".into()]).unwrap();
        assert_eq!(types, vec![StreamType::Telemetry, StreamType::EventLog]);
        assert!(matches!(parse_types(&[]), Err(Error::Invalid { field, .. }) if field == "types"));
        assert!(matches!(parse_types(&["alarms".into()]), Err(Error::Invalid { field, .. }) if field == "types"));
        assert!(parse_secret("0123456789abcdef").is_ok());
        assert!(matches!(parse_secret("short"), Err(Error::Invalid { field, .. }) if field == "secret"));
        assert!(parse_secret("0123456789 abcdef").is_err());
    }

    #[test]
    fn signature_is_the_hmac_of_the_body() {
        // RFC 4231, test case 2.
        assert_eq!(
            signature("Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn retries_back_off_and_give_up() {
        let policy = RetryPolicy {
            base: Duration::from_secs(10),
            cap: Duration::from_secs(60),
            give_up: Duration::from_secs(300),
        };
        let first = 1_000_000;
        let wait = |attempts, now| policy.next_attempt(attempts, first, now).map(|t| t - now);
        let w1 = wait(1, first).unwrap();
        assert!((5_000..=10_000).contains(&w1), "{w1}");
        let w3 = wait(3, first).unwrap();
        assert!((20_000..=40_000).contains(&w3), "{w3}");
        let w10 = wait(10, first).unwrap();
        assert!((30_000..=60_000).contains(&w10), "capped: {w10}");
        assert_eq!(wait(10, first + 299_000), None, "past the give-up time");
    }

    #[test]
    fn body_holds_the_events_in_order() {
        let webhook = WebhookId::from_string("w");
        let event = |id: &str, data: &str| WebhookEvent {
            id: id.into(),
            project_id: ProjectId::from_string("p"),
            pending: Audience::default().with(0),
            device_id: DeviceId::from_string("d"),
            kind: StreamType::Telemetry,
            time: 5,
            data: data.into(),
        };
        let body: serde_json::Value =
            serde_json::from_str(&delivery_body(&webhook, &[event("a", r#"{"x":1}"#), event("b", "2")])).unwrap();
        assert_eq!(
            body,
            serde_json::json!({"webhookId": "w", "events": [
                {"id": "a", "type": "telemetry", "time": 5, "data": {"x": 1}},
                {"id": "b", "type": "telemetry", "time": 5, "data": 2},
            ]})
        );
    }
}
