//! MQTT Server Implementation Core
//!
//! Provides a production-grade MQTT broker implementation supporting multiple protocol variants
//! and transport layers. Built on Rust's async/await paradigm with Tokio runtime for high-performance
//! network handling.
//!
//! ## Core Architecture
//! 1. **Protocol Support**:
//!    - Full MQTT v3.1.1 and v5.0 implementations
//!    - TLS/SSL encrypted connections (requires `tls` feature)
//!    - WebSocket transport layer support (requires `ws` feature)
//!
//! 2. **Concurrency Model**:
//!    - Asynchronous connection handling using Tokio's task spawning
//!    - Separate processing for each protocol version (v3/v5)
//!    - Backpressure management through connection limits
//!
//! 3. **Key Components**:
//! ```text
//! MqttServerBuilder
//! ├── Listener Configuration
//! │   ├── TCP (port 1883)
//! │   ├── TLS (requires feature)
//! │   ├── WebSocket (port 8080)
//! │   └── WSS (TLS+WS)
//! └── Runtime Management
//! ```
//!
//! ## Implementation Highlights
//! - **Transport Layer Abstraction**:
//!   ```rust,ignore
//!   enum MqttStream {
//!       V3(v3::Session),
//!       V5(v5::Session)
//!   }
//!   ```
//!   Unified interface for different protocol versions
//!
//! - **Feature-based Compilation**:
//!   ```rust,ignore
//!   #[cfg(feature = "tls")]
//!   async fn listen_tls(...) { /* TLS implementation */ }
//!   ```
//!   Modular architecture allowing optional protocol support
//!
//! - **Connection Lifecycle**:
//!   1. Listener accepts incoming connection
//!   2. Protocol detection (v3/v5)
//!   3. Spawn dedicated async task per connection
//!   4. Session-specific processing
//!
//! ## Performance Characteristics
//! | Operation | Throughput | Concurrency Handling |
//! |-----------|------------|----------------------|
//! | TCP Accept | 50k conn/s | Tokio async I/O |
//! | WS Upgrade | 30k/s      | Parallel handshakes  |
//! | TLS Handshake | 10k/s  | Hardware acceleration|
//!
//! ## Usage Note
//! Configure through `ServerContext` for:
//! - Authentication plugins
//! - Cluster coordination
//! - Metrics collection
//! - QoS 2 persistence
//!
//!
//! ```rust,no_run
//! use std::sync::Arc;
//! use std::time::Duration;
//! use rmqtt::context::ServerContext;
//! use rmqtt::net::{Builder, ListenerType, Result};
//! use rmqtt::server::MqttServer;
//!
//! #[tokio::main]
//! async fn main() -> Result<()>  {
//!     // Create server context
//!     let scx = ServerContext::new().build().await;
//!     
//!     // Build MQTT server with multiple listeners
//!     let server = MqttServer::new(scx)
//!         .listener(Builder::new().name("external/tcp").laddr(([0, 0, 0, 0], 1883).into()).bind()?.tcp()?)
//!         .listener(Builder::new().name("external/ws").laddr(([0, 0, 0, 0], 8080).into()).bind()?.ws()?)
//!         .build().run().await?;
//!     Ok(())
//! }
//! ```

use std::future::Future;
use std::net::SocketAddr;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use itertools::Itertools;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::context::ServerContext;
use crate::net::MqttStream;
use crate::net::{Listener, ListenerType, Result};
use crate::types::ListenerId;
use crate::{v3, v5};

/// Builder for configuring and constructing an MQTT server instance
pub struct MqttServerBuilder {
    /// Server configuration context
    scx: ServerContext,
    /// Collection of network listeners
    listeners: Vec<(ListenerId, Listener)>,
}

impl MqttServerBuilder {
    /// Creates a new builder with server context
    fn new(scx: ServerContext) -> Self {
        Self { scx, listeners: Vec::default() }
    }

    /// Adds a single network listener configuration
    /// # Arguments
    /// * `listen` - Listener configuration to add
    pub fn listener(self, listen: Listener) -> Self {
        let unique_id = listen.cfg.laddr.port();
        if 0 == unique_id {
            log::warn!(
                "As the listener port is dynamically assigned, it is advisable to use `listener_by_id(mut self, listen: Listener, unique_id: u16)` and explicitly provide a unique_id."
            );
        }
        self.listener_by_id(listen, unique_id)
    }

    /// Adds a single network listener configuration
    /// # Arguments
    /// * `listen` - Listener configuration to add
    /// * `unique_id` - Manually assigned unique key for identifying the listener configuration.
    pub fn listener_by_id(mut self, listen: Listener, unique_id: ListenerId) -> Self {
        match self.scx.listen_cfgs.entry(unique_id) {
            dashmap::mapref::entry::Entry::Occupied(entry) => {
                panic!("unique_id already exists: {}", entry.key());
            }
            dashmap::mapref::entry::Entry::Vacant(entry) => {
                entry.insert(listen.cfg.clone());
            }
        }
        self.listeners.push((unique_id, listen));
        self
    }

    /// Constructs the MQTT server instance
    pub fn build(self) -> MqttServer {
        MqttServer { inner: Arc::new(MqttServerInner { scx: self.scx, listeners: self.listeners }) }
    }
}

/// Main MQTT server implementation handling multiple protocols
#[derive(Clone)]
pub struct MqttServer {
    inner: Arc<MqttServerInner>,
}

/// Internal server state container
pub struct MqttServerInner {
    /// Shared server configuration and state
    scx: ServerContext,
    /// Active network listeners
    listeners: Vec<(ListenerId, Listener)>,
}

impl Deref for MqttServer {
    type Target = MqttServerInner;
    #[inline]
    fn deref(&self) -> &Self::Target {
        self.inner.as_ref()
    }
}

impl MqttServer {
    /// Creates a new server builder instance
    #[allow(clippy::new_ret_no_self)]
    pub fn new(scx: ServerContext) -> MqttServerBuilder {
        MqttServerBuilder::new(scx)
    }

    /// Starts the server in a background Tokio task
    pub fn start(self) {
        tokio::spawn(async move {
            if let Err(e) = self.run().await {
                eprintln!("Failed to start the MQTT server! {e}");
                std::process::exit(1);
            }
        });
    }

    /// Main server execution loop handling all listeners
    /// # Returns
    /// Result indicating success or failure
    pub async fn run(self) -> Result<()> {
        // Execute pre-startup hooks
        self.scx.extends.hook_mgr().before_startup().await;

        // Start all listeners concurrently
        futures::future::join_all(
            self.listeners
                .iter()
                .map(|(lid, l)| match l.typ {
                    ListenerType::TCP => listen_tcp(self.scx.clone(), l, *lid).boxed(),
                    #[cfg(feature = "tls")]
                    ListenerType::TLS => listen_tls(self.scx.clone(), l, *lid).boxed(),
                    #[cfg(feature = "ws")]
                    ListenerType::WS => listen_ws(self.scx.clone(), l, *lid).boxed(),
                    #[cfg(feature = "tls")]
                    #[cfg(feature = "ws")]
                    ListenerType::WSS => listen_wss(self.scx.clone(), l, *lid).boxed(),
                    #[cfg(feature = "quic")]
                    ListenerType::QUIC => listen_quic(self.scx.clone(), l, *lid).boxed(),
                })
                .collect_vec(),
        )
        .await;
        Ok(())
    }
}

/// One connection once its transport is up: protocol detection (boxed by the caller) and the
/// CONNECT handshake (boxed here), each allocated only while it runs, then the online session
/// until it ends.
///
/// Gantry's patch: upstream's listeners awaited `v3::process`/`v5::process`, which ran the
/// session themselves, so every connection's task held the stream in `process`'s frame and
/// again in `run`'s. Here the handshake hands the session and the stream back, and `run` holds
/// them alone (`transport` names the listener in log lines: "", "/TLS", "/WS", ...).
async fn serve<Io, D>(scx: ServerContext, detect: Pin<Box<D>>, lid: ListenerId, remote_addr: SocketAddr, transport: &'static str)
where
    Io: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    D: Future<Output = Result<MqttStream<Io>>>,
{
    // Each step's values live in a scope that ends before the next await, so that none of
    // them keeps room in this future beside `run`'s.
    let (version, handshake): (_, Pin<Box<dyn Future<Output = crate::Result<_>> + Send>>) = {
        let stream = match detect.await {
            Ok(stream) => stream,
            Err(e) => {
                log::info!("MQTT{transport} version detection failed: {e}, from: {remote_addr}");
                return;
            }
        };
        match stream {
            MqttStream::V3(s) => ("MQTTv3", Box::pin(v3::process(scx, s, lid))),
            MqttStream::V5(s) => ("MQTTv5", Box::pin(v5::process(scx, s, lid))),
        }
    };
    let (state, sink, keep_alive) = match handshake.await {
        Ok(online) => online,
        Err(e) => {
            log::info!("{version}{transport} processing error: {e}, from: {remote_addr}");
            return;
        }
    };
    state.run(sink, keep_alive).await;
}

/// Handles incoming TCP connections
/// # Arguments
/// * `scx` - Server context
/// * `l` - TCP listener configuration
async fn listen_tcp(scx: ServerContext, l: &Listener, lid: ListenerId) {
    loop {
        match l.accept().await {
            Ok(accept) => {
                let scx = scx.clone();
                tokio::spawn(async move {
                    // Extract before `accept.tcp()` consumes the acceptor.
                    let remote_addr = accept.remote_addr;
                    log::debug!("TCP connection from {remote_addr}");

                    let stream = match accept.tcp() {
                        Ok(s) => s,
                        Err(e) => {
                            log::warn!("TCP accept error: {e}, from: {remote_addr}");
                            return;
                        }
                    };

                    serve(scx, Box::pin(stream.mqtt()), lid, remote_addr, "").await;
                });
            }
            Err(e) => {
                log::info!("TCP listener error: {e}");
                tokio::time::sleep(Duration::from_millis(1000)).await;
            }
        }
    }
}

#[cfg(feature = "tls")]
/// Handles TLS connections (requires "tls" feature)
/// # Arguments
/// * `scx` - Server context
/// * `l` - TLS listener configuration
async fn listen_tls(scx: ServerContext, l: &Listener, lid: ListenerId) {
    loop {
        match l.accept().await {
            Ok(accept) => {
                let scx = scx.clone();
                tokio::spawn(async move {
                    // Extract before `accept.tls()` consumes the acceptor.
                    let remote_addr = accept.remote_addr;
                    log::debug!("TLS connection from {remote_addr}");

                    let stream = match accept.tls().await {
                        Ok(s) => s,
                        Err(e) => {
                            log::warn!("TLS accept error: {e}, from: {remote_addr}");
                            return;
                        }
                    };

                    serve(scx, Box::pin(stream.mqtt()), lid, remote_addr, "/TLS").await;
                });
            }
            Err(e) => {
                log::info!("TLS listener error: {e}");
                tokio::time::sleep(Duration::from_millis(1000)).await;
            }
        }
    }
}

#[cfg(feature = "ws")]
/// Handles WebSocket connections (requires "ws" feature)
/// # Arguments
/// * `scx` - Server context
/// * `l` - WebSocket listener configuration
async fn listen_ws(scx: ServerContext, l: &Listener, lid: ListenerId) {
    loop {
        match l.accept().await {
            Ok(accept) => {
                let scx = scx.clone();
                tokio::spawn(async move {
                    // Extract before `accept.ws()` consumes the acceptor.
                    let remote_addr = accept.remote_addr;
                    log::debug!("WebSocket connection from {remote_addr}");

                    let stream = match accept.ws().await {
                        Ok(s) => s,
                        Err(e) => {
                            log::warn!("WebSocket accept error: {e}, from: {remote_addr}");
                            return;
                        }
                    };

                    serve(scx, Box::pin(stream.mqtt()), lid, remote_addr, "/WS").await;
                });
            }
            Err(e) => {
                log::info!("WebSocket listener error: {e}");
                tokio::time::sleep(Duration::from_millis(1000)).await;
            }
        }
    }
}

#[cfg(all(feature = "tls", feature = "ws"))]
/// Handles secure WebSocket (WSS) connections (requires both "tls" and "ws" features)
/// # Arguments
/// * `scx` - Server context
/// * `l` - WSS listener configuration
async fn listen_wss(scx: ServerContext, l: &Listener, lid: ListenerId) {
    loop {
        match l.accept().await {
            Ok(accept) => {
                let scx = scx.clone();
                tokio::spawn(async move {
                    // Extract before `accept.wss()` consumes the acceptor.
                    let remote_addr = accept.remote_addr;
                    log::debug!("WSS connection from {remote_addr}");

                    let stream = match accept.wss().await {
                        Ok(s) => s,
                        Err(e) => {
                            log::warn!("WSS accept error: {e}, from: {remote_addr}");
                            return;
                        }
                    };

                    serve(scx, Box::pin(stream.mqtt()), lid, remote_addr, "/WSS").await;
                });
            }
            Err(e) => {
                log::info!("WSS listener error: {e}");
                tokio::time::sleep(Duration::from_millis(1000)).await;
            }
        }
    }
}

#[cfg(feature = "quic")]
/// Handles QUIC connections (requires "quic" feature)
/// # Arguments
/// * `scx` - Server context
/// * `l` - QUIC listener configuration
async fn listen_quic(scx: ServerContext, l: &Listener, lid: ListenerId) {
    loop {
        match l.accept_quic().await {
            Ok(accept) => {
                let scx = scx.clone();
                tokio::spawn(async move {
                    // Extract before `accept.quic()` consumes the acceptor.
                    let remote_addr = accept.remote_addr;
                    log::debug!("QUIC connection from {remote_addr}");

                    let stream = match accept.quic().await {
                        Ok(s) => s,
                        Err(e) => {
                            log::warn!("QUIC accept error: {e}, from: {remote_addr}");
                            return;
                        }
                    };

                    serve(scx, Box::pin(stream.mqtt()), lid, remote_addr, "/QUIC").await;
                });
            }
            Err(e) => {
                log::info!("QUIC listener error: {e}");
                tokio::time::sleep(Duration::from_millis(1000)).await;
            }
        }
    }
}
