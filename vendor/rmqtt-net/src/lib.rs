#![deny(unsafe_code)]
//! Basic Implementation of MQTT Server
//!
//! The basic implementation of MQTT proxy, supporting v3.1.1 and v5.0 protocols, with TLS and
//! WebSocket functionality.
//!
//! ## Basic Usage
//!
//! ```rust,no_run
//! use rmqtt_net::{Builder, ListenerType};
//! use std::net::SocketAddr;
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let builder = Builder::new()
//!         .name("MyBroker")
//!         .laddr("127.0.0.1:1883".parse()?);
//!
//!     let listener = builder.bind()?;
//!     loop {
//!         let acceptor = listener.accept().await?;
//!         let dispatcher = acceptor.tcp()?;
//!         // Handle connection...
//!     }
//!     Ok(())
//! }
//! ```

mod builder;
mod cert_extractor;
mod error;
mod framed;
#[cfg(feature = "quic")]
mod quic;
mod stream;
#[cfg(feature = "ws")]
mod ws;

/// QUIC bidirectional stream type for MQTT over QUIC transport
#[cfg(feature = "quic")]
pub use quic::QuinnBiStream;

/// Server configuration and listener management
pub use builder::{Builder, Listener, ListenerType};

/// Trait for extracting TLS certificate information from client connections
pub use cert_extractor::TlsCertExtractor;

/// Error types for MQTT operations
pub use error::MqttError;

/// TLS implementation providers
#[cfg(feature = "tls")]
pub use rustls;

/// The TLS provider: ring on every platform (Gantry's build has one crypto stack, see PATCHED.md)
#[cfg(feature = "tls")]
pub use rustls::crypto::ring as tls_provider;

/// MQTT protocol implementations and stream handling
pub use stream::{v3, v5, MqttStream};

/// Convenience type alias for generic errors
pub type Error = anyhow::Error;

/// Result type alias using crate's Error type
pub type Result<T> = anyhow::Result<T, Error>;
