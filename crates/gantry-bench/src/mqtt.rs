//! A lean MQTT 3.1.1 client for load generation: one TCP connection with TCP_NODELAY, packets
//! encoded and decoded by rumqttc's codec, and nothing else: no event loop, no queue, no
//! reconnect. The load generator shares the machine's two cores with the broker it measures, so
//! every microsecond it spends per message is taken from the server; a full client with its own
//! task and channels per connection would also blur when a PUBACK really arrived.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, bail};
use bytes::BytesMut;
use rumqttc::mqttbytes::v4::{ConnectReturnCode, Packet, PubAck, Publish, Subscribe, SubscribeReasonCode};
use rumqttc::mqttbytes::{Error as CodecError, QoS};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};

/// Larger than any packet a device of the bench sends or receives.
const MAX_PACKET: usize = 1 << 20;
/// Idle connections are held longer than any scenario runs, so no PINGREQ is needed.
pub const KEEP_ALIVE_SECS: u16 = 600;

/// The receiving half: whole packets out of the byte stream (TCP or TLS; one virtual call per
/// read, the same for both, so the two compare in one run).
pub struct Reader {
    half: Box<dyn AsyncRead + Send + Unpin>,
    buf: BytesMut,
}

/// The sending half, with the packet ids of QoS 1 publishes and subscriptions.
pub struct Writer {
    half: Box<dyn AsyncWrite + Send + Unpin>,
    buf: BytesMut,
    next_pkid: u16,
}

/// Where a client connects: a TCP address, over TLS when a connector is given.
#[derive(Clone)]
pub struct Endpoint {
    pub addr: SocketAddr,
    pub tls: Option<TlsConnector>,
}

impl From<SocketAddr> for Endpoint {
    fn from(addr: SocketAddr) -> Self {
        Self { addr, tls: None }
    }
}

/// A TLS client that trusts the certificates in the PEM file `ca` (Gantry's generated CA).
pub fn tls_trusting(ca: &Path) -> anyhow::Result<TlsConnector> {
    let mut roots = tokio_rustls::rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).with_context(|| format!("reading {}", ca.display()))? {
        roots.add(cert?)?;
    }
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let config = tokio_rustls::rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(TlsConnector::from(Arc::new(config)))
}

/// Connects, logs in (when `login` is given) and waits for the CONNACK; an error when the broker
/// refuses.
pub async fn connect(
    endpoint: &Endpoint,
    client_id: &str,
    login: Option<(&str, &str)>,
) -> anyhow::Result<(Reader, Writer)> {
    let addr = endpoint.addr;
    let stream = TcpStream::connect(addr)
        .await
        .with_context(|| format!("connecting to mqtt://{addr}"))?;
    stream.set_nodelay(true)?;
    let (read, write): (Box<dyn AsyncRead + Send + Unpin>, Box<dyn AsyncWrite + Send + Unpin>) = match &endpoint.tls {
        None => {
            let (read, write) = stream.into_split();
            (Box::new(read), Box::new(write))
        }
        Some(tls) => {
            let name = ServerName::from(addr.ip());
            let stream = tls
                .connect(name, stream)
                .await
                .with_context(|| format!("TLS to {addr}"))?;
            let (read, write) = tokio::io::split(stream);
            (Box::new(read), Box::new(write))
        }
    };
    let mut reader = Reader {
        half: read,
        buf: BytesMut::with_capacity(512),
    };
    let mut writer = Writer {
        half: write,
        buf: BytesMut::with_capacity(512),
        next_pkid: 0,
    };
    let mut connect = rumqttc::mqttbytes::v4::Connect::new(client_id);
    connect.keep_alive = KEEP_ALIVE_SECS;
    if let Some((username, password)) = login {
        connect.set_login(username, password);
    }
    writer.send(&Packet::Connect(connect)).await?;
    match reader.next().await? {
        Packet::ConnAck(ack) if ack.code == ConnectReturnCode::Success => Ok((reader, writer)),
        Packet::ConnAck(ack) => bail!("{client_id}: login refused ({:?})", ack.code),
        other => bail!("{client_id}: expected CONNACK, got {other:?}"),
    }
}

impl Reader {
    /// The next whole packet. Cancel-safe: bytes read are kept in the buffer, and a packet is
    /// taken out of it only when it is returned.
    pub async fn next(&mut self) -> anyhow::Result<Packet> {
        loop {
            if let Some(packet) = self.buffered()? {
                return Ok(packet);
            }
            if self.half.read_buf(&mut self.buf).await? == 0 {
                bail!("the broker closed the connection");
            }
        }
    }

    /// A packet already in the buffer, without reading.
    pub fn buffered(&mut self) -> anyhow::Result<Option<Packet>> {
        match Packet::read(&mut self.buf, MAX_PACKET) {
            Ok(packet) => Ok(Some(packet)),
            Err(CodecError::InsufficientBytes(_)) => Ok(None),
            Err(e) => bail!("malformed packet from the broker: {e}"),
        }
    }
}

impl Writer {
    pub async fn send(&mut self, packet: &Packet) -> anyhow::Result<()> {
        self.buf.clear();
        packet
            .write(&mut self.buf, MAX_PACKET)
            .map_err(|e| anyhow::anyhow!("encoding {packet:?}: {e}"))?;
        self.half.write_all(&self.buf).await?;
        // TLS may keep written bytes in its buffer until flushed; for TCP this is free.
        self.half.flush().await?;
        Ok(())
    }

    fn pkid(&mut self) -> u16 {
        // Packet id 0 is not allowed.
        self.next_pkid = self.next_pkid.checked_add(1).unwrap_or(1);
        self.next_pkid
    }

    /// Publishes at QoS 1 and returns the packet id its PUBACK will carry.
    pub async fn publish(&mut self, topic: &str, payload: Vec<u8>) -> anyhow::Result<u16> {
        let pkid = self.pkid();
        let mut publish = Publish::new(topic, QoS::AtLeastOnce, payload);
        publish.pkid = pkid;
        self.send(&Packet::Publish(publish)).await?;
        Ok(pkid)
    }

    pub async fn subscribe(&mut self, filter: &str) -> anyhow::Result<u16> {
        let pkid = self.pkid();
        let mut subscribe = Subscribe::new(filter, QoS::AtLeastOnce);
        subscribe.pkid = pkid;
        self.send(&Packet::Subscribe(subscribe)).await?;
        Ok(pkid)
    }

    /// Acknowledges a QoS 1 message the broker delivered.
    pub async fn puback(&mut self, pkid: u16) -> anyhow::Result<()> {
        self.send(&Packet::PubAck(PubAck::new(pkid))).await
    }

    /// Writes several PUBACKs in one call (a subscriber draining a burst).
    pub async fn pubacks(&mut self, pkids: &[u16]) -> anyhow::Result<()> {
        self.buf.clear();
        for pkid in pkids {
            PubAck::new(*pkid)
                .write(&mut self.buf)
                .map_err(|e| anyhow::anyhow!("encoding PUBACK: {e}"))?;
        }
        self.half.write_all(&self.buf).await?;
        // TLS may keep written bytes in its buffer until flushed; for TCP this is free.
        self.half.flush().await?;
        Ok(())
    }

    pub async fn disconnect(mut self) {
        let _ = self.send(&Packet::Disconnect).await;
        let _ = self.half.shutdown().await;
    }
}

/// Subscribes and waits for the SUBACK; an error when the broker refuses the filter. Anything
/// else that arrives meanwhile is dropped (nothing is published to a fresh subscriber yet).
pub async fn subscribe(reader: &mut Reader, writer: &mut Writer, filter: &str) -> anyhow::Result<()> {
    let pkid = writer.subscribe(filter).await?;
    loop {
        if let Packet::SubAck(ack) = reader.next().await?
            && ack.pkid == pkid
        {
            if ack
                .return_codes
                .iter()
                .all(|c| matches!(c, SubscribeReasonCode::Success(_)))
            {
                return Ok(());
            }
            bail!("subscription to {filter} refused");
        }
    }
}
