//! The clients connected to the embedded broker now, by kind and transport: a line per connect
//! and disconnect, and the `gantry_mqtt_connected_clients` gauge. Each connection is keyed by
//! its rmqtt session id (which includes its start time), so an old session's disconnect after a
//! take-over by the same client id ends that session's count, not the new one's.

use std::collections::HashMap;
use std::fmt::Write;
use std::sync::Mutex;

use rmqtt::codec::v5::DisconnectReasonCode;
use rmqtt::types::{Disconnect, Id, Reason};

/// Who a connected client is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Kind {
    Device,
    /// A route's temporary identity (an application or web page).
    Temporary,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Device => "device",
            Kind::Temporary => "temporary",
        }
    }
}

/// The listeners' transports, by rmqtt listener id (`EmbeddedBroker::start` numbers them from 1
/// in the order they were bound).
#[derive(Debug, Clone, Default)]
pub(crate) struct Transports(pub(crate) Vec<&'static str>);

impl Transports {
    pub(crate) fn of(&self, listener_id: u16) -> &'static str {
        (listener_id as usize)
            .checked_sub(1)
            .and_then(|i| self.0.get(i).copied())
            .unwrap_or("unknown")
    }
}

/// Every transport a client can come over, so that the gauge has a series for each at 0.
const ALL_TRANSPORTS: [&str; 4] = ["tcp", "tls", "ws", "wss"];

#[derive(Debug, Default)]
pub(crate) struct Connections {
    live: Mutex<HashMap<Id, (Kind, &'static str)>>,
}

impl Connections {
    pub(crate) fn connected(&self, id: &Id, kind: Kind, transport: &'static str) {
        self.live
            .lock()
            .expect("connections lock")
            .insert(id.clone(), (kind, transport));
    }

    /// The kind and transport of the session that ended; None for one never counted.
    pub(crate) fn disconnected(&self, id: &Id) -> Option<(Kind, &'static str)> {
        self.live.lock().expect("connections lock").remove(id)
    }

    pub(crate) fn render(&self, out: &mut String) {
        let mut counts: HashMap<(Kind, &str), u64> = HashMap::new();
        for (kind, transport) in self.live.lock().expect("connections lock").values() {
            *counts.entry((*kind, transport)).or_default() += 1;
        }
        out.push_str(
            "# HELP gantry_mqtt_connected_clients Clients connected to the embedded broker, by kind (device or temporary route identity) and transport.\n\
             # TYPE gantry_mqtt_connected_clients gauge\n",
        );
        for kind in [Kind::Device, Kind::Temporary] {
            for transport in ALL_TRANSPORTS {
                let n = counts.get(&(kind, transport)).copied().unwrap_or(0);
                let _ = writeln!(
                    out,
                    "gantry_mqtt_connected_clients{{kind=\"{}\",transport=\"{transport}\"}} {n}",
                    kind.label()
                );
            }
        }
    }
}

/// The protocol a client speaks, by its CONNECT's protocol level.
pub(crate) fn protocol_name(level: u8) -> &'static str {
    match level {
        3 => "MQTT 3.1",
        4 => "MQTT 3.1.1",
        5 => "MQTT 5",
        _ => "MQTT",
    }
}

/// Why a connection ended, as a reader of the log would put it.
pub(crate) fn describe(reason: &Reason) -> String {
    match reason {
        Reason::ConnectDisconnect(disconnect) => {
            match (
                disconnect.as_ref().and_then(Disconnect::reason),
                disconnect.as_ref().and_then(Disconnect::reason_code),
            ) {
                (Some(text), _) => format!("the client sent DISCONNECT: {text}"),
                (None, Some(code)) if code != DisconnectReasonCode::NormalDisconnection => {
                    format!("the client sent DISCONNECT with reason code {:#04x}", code as u8)
                }
                _ => "the client sent DISCONNECT".to_owned(),
            }
        }
        Reason::ConnectRemoteClose => "the client closed the connection".to_owned(),
        Reason::ConnectReadWriteTimeout => "the connection timed out".to_owned(),
        Reason::ConnectReadWriteError => "the connection failed".to_owned(),
        Reason::ConnectKeepaliveTimeout => "no packet within the keep-alive interval".to_owned(),
        Reason::ConnectKicked(_) => {
            "closed by Gantry (a new login with the same client id, or its credential ended)".to_owned()
        }
        Reason::PublishResult(result) => match &result.reason_string {
            Some(text) => format!("a publish was refused: {text}"),
            None => "a publish was refused".to_owned(),
        },
        // What happened first is the cause (a DISCONNECT, then the socket's close).
        Reason::Reasons(reasons) => reasons.first().map(describe).unwrap_or_else(|| "unknown".to_owned()),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_kind_and_transport_and_ends_the_session_that_ended() {
        let connections = Connections::default();
        let first = Id::new(1, 1, None, None, "d1".into(), None);
        connections.connected(&first, Kind::Device, "tcp");
        let mut out = String::new();
        connections.render(&mut out);
        assert!(
            out.contains("gantry_mqtt_connected_clients{kind=\"device\",transport=\"tcp\"} 1\n"),
            "{out}"
        );
        assert!(
            out.contains("gantry_mqtt_connected_clients{kind=\"temporary\",transport=\"wss\"} 0\n"),
            "{out}"
        );
        assert_eq!(connections.disconnected(&first), Some((Kind::Device, "tcp")));
        assert_eq!(connections.disconnected(&first), None);
        let mut out = String::new();
        connections.render(&mut out);
        assert!(
            out.contains("gantry_mqtt_connected_clients{kind=\"device\",transport=\"tcp\"} 0\n"),
            "{out}"
        );
    }

    #[test]
    fn listener_ids_name_their_transport() {
        // As EmbeddedBroker::bind lists them with MQTT/TLS off: ids 1, 2, 3.
        let transports = Transports(vec!["tcp", "ws", "wss"]);
        assert_eq!(
            [0, 1, 2, 3, 4].map(|id| transports.of(id)),
            ["unknown", "tcp", "ws", "wss", "unknown"]
        );
    }

    #[test]
    fn reasons_read_as_text() {
        assert_eq!(
            describe(&Reason::ConnectRemoteClose),
            "the client closed the connection"
        );
        assert_eq!(describe(&Reason::ConnectDisconnect(None)), "the client sent DISCONNECT");
        assert!(!describe(&Reason::ConnectKicked(false)).contains("Kicked"));
        let both = Reason::Reasons(vec![
            Reason::ConnectDisconnect(Some(Disconnect::V3)),
            Reason::ConnectRemoteClose,
        ]);
        assert_eq!(describe(&both), "the client sent DISCONNECT");
    }
}
