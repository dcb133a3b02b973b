//! Gantry's MQTT side: the embedded broker (rmqtt as a library) whose hooks log devices in
//! against the store, keep each device to its own topics, and hand upstream messages to the
//! same core services as REST; and the downlink that publishes control messages.

mod broker;
mod connections;
mod external;
mod hooks;
pub mod policy;
mod rate;
mod sessions;
mod stats;
mod tasks;
pub mod topics;
mod upstream;

pub use broker::{BrokerConfig, BrokerLimits, BrokerTls, EmbeddedBroker};
pub use external::ExternalBroker;
pub use policy::Policy;
pub use stats::MqttStats;
pub use tasks::BrokerTasks;
pub use topics::Topics;
