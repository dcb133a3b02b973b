//! The way down to devices, as the services see it: the broker (embedded or external) implements
//! it. A service never talks MQTT itself, so the same rules hold whichever broker carries the
//! messages.

use async_trait::async_trait;

use crate::Result;
use crate::ids::DeviceId;
use crate::message::Message;

/// The way down to devices: the MQTT broker, embedded or external.
#[async_trait]
pub trait Downlink: Send + Sync {
    /// Publishes `message` to the inbox of `owner`: a device id, or a route's client id.
    async fn send(&self, owner: &str, message: &Message) -> Result<()>;
    /// Closes the device's connection and those of the route identities that target it, if
    /// they have one (it was Locked or deleted).
    async fn disconnect(&self, device: &DeviceId);
    /// Ends the session of `client` (a device id, or a route's client id) at `at` (epoch ms; at
    /// once when that has passed): the credential it logged in with stops working then. A
    /// later login is judged by its own credential.
    async fn expire_session(&self, client: &str, at: i64);
    /// Whether the device is connected as far as the messages it sends show, where presence
    /// cannot know it: a broker without client events (Mosquitto) records no session, so a
    /// device this node heard from within `--presence-silence` counts as connected. False where
    /// presence knows every session (the embedded broker).
    fn recently_heard(&self, _device: &DeviceId) -> bool {
        false
    }
}
