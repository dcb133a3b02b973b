//! A device over MQTT, as a library: what the `gantry device` simulator runs and what the
//! end-to-end tests drive. It logs in with its id and access token, publishes Messages to its
//! upstream topic (QoS 1, waiting for the PUBACK) and reads its inbox.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use gantry_core::enums::{Channel, MessageType};
use gantry_core::message::{MESSAGE_VERSION, Message, MessageMeta, Payload, PayloadAttribute};
use rumqttc::{AsyncClient, ConnectReturnCode, Event, MqttOptions, NetworkOptions, Packet, QoS, SubscribeReasonCode};
use serde_json::Value;
use tokio::sync::mpsc;

enum Incoming {
    Publish(rumqttc::Publish),
    PubAck,
    SubAck(Vec<SubscribeReasonCode>),
    Closed(String),
}

/// One device connection.
pub struct DeviceClient {
    pub id: String,
    prefix: String,
    client: AsyncClient,
    incoming: mpsc::UnboundedReceiver<Incoming>,
    /// Inbox messages that arrived while waiting for something else.
    pending: VecDeque<rumqttc::Publish>,
}

/// A topic and payload that arrived on a subscription.
#[derive(Debug, Clone)]
pub struct Received {
    pub topic: String,
    pub payload: Vec<u8>,
}

impl Received {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.payload).unwrap_or(Value::Null)
    }
}

const WAIT: Duration = Duration::from_secs(10);

impl DeviceClient {
    /// Connects as device `id` with `token`; an error if the broker refuses the login.
    pub async fn connect(broker: SocketAddr, prefix: &str, id: &str, token: &str) -> anyhow::Result<Self> {
        Self::connect_as(broker, prefix, id, id, token).await
    }

    /// Connects with a client id and username that may differ (to test refusals).
    pub async fn connect_as(
        broker: SocketAddr,
        prefix: &str,
        client_id: &str,
        username: &str,
        token: &str,
    ) -> anyhow::Result<Self> {
        let options = MqttOptions::new(client_id, broker.ip().to_string(), broker.port());
        Self::connect_with(options, prefix, username, token).await
    }

    /// Connects over MQTT-over-WebSocket, as a web page does.
    pub async fn connect_ws(
        broker: SocketAddr,
        prefix: &str,
        client_id: &str,
        username: &str,
        token: &str,
    ) -> anyhow::Result<Self> {
        let mut options = MqttOptions::new(client_id, format!("ws://{broker}/mqtt"), broker.port());
        options.set_transport(rumqttc::Transport::Ws);
        Self::connect_with(options, prefix, username, token).await
    }

    /// Connects with options of the caller's (a Last Will, say).
    pub async fn connect_with(
        mut options: MqttOptions,
        prefix: &str,
        username: &str,
        token: &str,
    ) -> anyhow::Result<Self> {
        options.set_credentials(username, token);
        Self::connect_options(options, prefix).await
    }

    /// Connects with options made by the caller: a TLS transport, or no password for a device
    /// that presents a client certificate.
    pub async fn connect_options(mut options: MqttOptions, prefix: &str) -> anyhow::Result<Self> {
        let client_id = options.client_id();
        options.set_keep_alive(Duration::from_secs(30));
        let (client, mut eventloop) = AsyncClient::new(options, 256);
        let mut network = NetworkOptions::new();
        network.set_tcp_nodelay(true);
        eventloop.set_network_options(network);
        loop {
            match tokio::time::timeout(WAIT, eventloop.poll())
                .await
                .context("no CONNACK in time")?
            {
                Ok(Event::Incoming(Packet::ConnAck(ack))) if ack.code == ConnectReturnCode::Success => break,
                Ok(Event::Incoming(Packet::ConnAck(ack))) => bail!("login refused: {:?}", ack.code),
                Ok(_) => {}
                Err(rumqttc::ConnectionError::ConnectionRefused(code)) => bail!("login refused: {code:?}"),
                Err(e) => bail!("connection failed: {e}"),
            }
        }
        let (tx, incoming) = mpsc::unbounded_channel();
        // A client's own connection loop, not the service's background work (no task owner here):
        // it ends when the connection closes or the client is dropped (the channel closes).
        tokio::spawn(async move {
            loop {
                let item = match eventloop.poll().await {
                    Ok(Event::Incoming(Packet::Publish(p))) => Incoming::Publish(p),
                    Ok(Event::Incoming(Packet::PubAck(_))) => Incoming::PubAck,
                    Ok(Event::Incoming(Packet::SubAck(s))) => Incoming::SubAck(s.return_codes),
                    // The connection is closed once DISCONNECT is sent, as MQTT asks of a
                    // client (the broker waits for it to close).
                    Ok(Event::Outgoing(rumqttc::Outgoing::Disconnect)) => return,
                    Ok(_) => continue,
                    Err(e) => {
                        // No reconnect: a closed connection is something to observe here.
                        let _ = tx.send(Incoming::Closed(e.to_string()));
                        return;
                    }
                };
                if tx.send(item).is_err() {
                    return;
                }
            }
        });
        Ok(Self {
            id: client_id.to_owned(),
            prefix: prefix.to_owned(),
            client,
            incoming,
            pending: VecDeque::new(),
        })
    }

    pub fn upstream_topic(&self) -> String {
        format!("{}/in/json/{}", self.prefix, self.id)
    }

    pub fn inbox_topic(&self) -> String {
        format!("{}/out/json/{}", self.prefix, self.id)
    }

    /// Subscribes to the device's own inbox; an error if refused.
    pub async fn subscribe_inbox(&mut self) -> anyhow::Result<()> {
        let inbox = self.inbox_topic();
        if self.subscribe(&inbox).await? {
            Ok(())
        } else {
            Err(anyhow!("subscription to {inbox} refused"))
        }
    }

    /// Subscribes to any filter; whether the broker granted it.
    pub async fn subscribe(&mut self, filter: &str) -> anyhow::Result<bool> {
        self.client.subscribe(filter, QoS::AtLeastOnce).await?;
        match self.wait_for(|i| matches!(i, Incoming::SubAck(_))).await? {
            Incoming::SubAck(codes) => Ok(codes.iter().all(|c| matches!(c, SubscribeReasonCode::Success(_)))),
            _ => unreachable!("wait_for returns what it waited for"),
        }
    }

    /// Publishes a measurement (type m) with these attributes; returns the message id once the
    /// broker acknowledged it (which Gantry does only after the events are stored).
    pub async fn publish_attrs(
        &mut self,
        attrs: &[(&str, Value)],
        ts: Option<i64>,
        needack: bool,
    ) -> anyhow::Result<String> {
        let message = Message {
            meta: MessageMeta {
                id: uuid::Uuid::new_v4().to_string(),
                message_type: MessageType::M,
                deviceid: Some(self.id.clone()),
                version: Some(MESSAGE_VERSION.into()),
                ts,
                needack,
                correlation_id: None,
            },
            payload: Payload {
                attrs: attrs
                    .iter()
                    .map(|(code, value)| PayloadAttribute {
                        code: (*code).to_owned(),
                        value: value.clone(),
                        channel: Channel::M,
                    })
                    .collect(),
                ..Payload::default()
            },
        };
        self.publish_message(&message).await?;
        Ok(message.meta.id)
    }

    /// Answers a control message with an ack carrying its id as correlationId.
    pub async fn ack(&mut self, control: &Value) -> anyhow::Result<()> {
        let ack = serde_json::json!({
            "meta": {"id": uuid::Uuid::new_v4().to_string(), "type": "ack", "deviceid": self.id, "version": MESSAGE_VERSION,
                     "ts": gantry_core::time::now_ms() / 1000, "correlationId": control["meta"]["id"]},
            "payload": {"attrs": []}
        });
        let topic = self.upstream_topic();
        self.publish_raw(&topic, serde_json::to_vec(&ack)?).await
    }

    pub async fn publish_message(&mut self, message: &Message) -> anyhow::Result<()> {
        let topic = self.upstream_topic();
        self.publish_raw(&topic, serde_json::to_vec(message)?).await
    }

    /// Publishes bytes to any topic at QoS 1 and waits for the PUBACK.
    pub async fn publish_raw(&mut self, topic: &str, payload: Vec<u8>) -> anyhow::Result<()> {
        self.client.publish(topic, QoS::AtLeastOnce, false, payload).await?;
        self.wait_for(|i| matches!(i, Incoming::PubAck)).await.map(|_| ())
    }

    /// The next message on a subscription, or None if none comes within `wait`.
    pub async fn next_message(&mut self, wait: Duration) -> anyhow::Result<Option<Received>> {
        if let Some(p) = self.pending.pop_front() {
            return Ok(Some(received(p)));
        }
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            match tokio::time::timeout_at(deadline, self.incoming.recv()).await {
                Err(_) => return Ok(None),
                Ok(None) => bail!("the connection task ended"),
                Ok(Some(Incoming::Publish(p))) => return Ok(Some(received(p))),
                Ok(Some(Incoming::Closed(why))) => bail!("connection closed: {why}"),
                Ok(Some(_)) => {}
            }
        }
    }

    /// Whether the broker closes the connection within `wait`.
    pub async fn closed_within(&mut self, wait: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            match tokio::time::timeout_at(deadline, self.incoming.recv()).await {
                Err(_) => return false,
                Ok(None) | Ok(Some(Incoming::Closed(_))) => return true,
                Ok(Some(Incoming::Publish(p))) => self.pending.push_back(p),
                Ok(Some(_)) => {}
            }
        }
    }

    async fn wait_for(&mut self, wanted: impl Fn(&Incoming) -> bool) -> anyhow::Result<Incoming> {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            match tokio::time::timeout_at(deadline, self.incoming.recv()).await {
                Err(_) => bail!("no answer from the broker in time"),
                Ok(None) => bail!("the connection task ended"),
                Ok(Some(Incoming::Closed(why))) => bail!("connection closed: {why}"),
                Ok(Some(Incoming::Publish(p))) => self.pending.push_back(p),
                Ok(Some(item)) if wanted(&item) => return Ok(item),
                Ok(Some(_)) => {}
            }
        }
    }

    /// Sends DISCONNECT and closes the connection; returns once it is closed.
    pub async fn disconnect(mut self) {
        if self.client.disconnect().await.is_ok() {
            let _ = self.closed_within(WAIT).await;
        }
    }
}

fn received(p: rumqttc::Publish) -> Received {
    Received {
        topic: p.topic,
        payload: p.payload.to_vec(),
    }
}
