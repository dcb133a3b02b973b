//! `gantry device`: a simulated device that publishes values and acks controls, so a newcomer
//! sees the whole loop (telemetry in, shadow, control down, ack, event log) in minutes.

use std::net::ToSocketAddrs;
use std::time::Duration;

use anyhow::{Context, bail};
use gantry_core::enums::DataType;
use serde_json::{Value, json};

use crate::config::DeviceConfig;
use crate::device::DeviceClient;

/// Parses `code:Type` pairs.
pub fn parse_attrs(specs: &[String]) -> anyhow::Result<Vec<(String, DataType)>> {
    specs
        .iter()
        .map(|spec| {
            let (code, kind) = spec
                .split_once(':')
                .with_context(|| format!("`{spec}` is not CODE:TYPE"))?;
            let kind =
                DataType::parse(kind).with_context(|| format!("`{kind}` is not Integer, Float, String or Boolean"))?;
            Ok((code.to_owned(), kind))
        })
        .collect()
}

/// A plausible value for the `step`-th publish.
pub fn sample(kind: DataType, step: u64) -> Value {
    match kind {
        DataType::Integer => json!(step),
        DataType::Float => json!(((20.0 + 5.0 * (step as f64 / 10.0).sin()) * 100.0).round() / 100.0),
        DataType::String => json!(format!("sample-{step}")),
        DataType::Boolean => json!(step.is_multiple_of(2)),
    }
}

pub async fn run(config: DeviceConfig) -> anyhow::Result<()> {
    let attrs = parse_attrs(&config.attrs)?;
    if attrs.is_empty() {
        bail!("give at least one --attr CODE:TYPE (the attributes of the device's model)");
    }
    let broker = config
        .broker
        .to_socket_addrs()?
        .next()
        .context("the broker address resolves to nothing")?;
    let mut device = DeviceClient::connect(broker, &config.topic_prefix, &config.id, &config.token).await?;
    device.subscribe_inbox().await?;
    println!(
        "device {} connected to {broker}; publishing to {}",
        config.id,
        device.upstream_topic()
    );
    let mut tick = tokio::time::interval(Duration::from_secs_f64(config.interval.max(0.001)));
    let mut step = 0;
    loop {
        tokio::select! {
            _ = tick.tick() => {
                if config.count.is_some_and(|n| step >= n) {
                    break;
                }
                let values: Vec<(&str, Value)> = attrs.iter().map(|(code, kind)| (code.as_str(), sample(*kind, step))).collect();
                let id = device.publish_attrs(&values, Some(gantry_core::time::now_ms() / 1000), false).await?;
                println!("published {id}: {}", values.iter().map(|(c, v)| format!("{c}={v}")).collect::<Vec<_>>().join(" "));
                step += 1;
            }
            received = device.next_message(Duration::from_millis(50)) => {
                let Some(received) = received? else { continue };
                let message = received.json();
                println!("received on {}: {message}", received.topic);
                if message["meta"]["needack"] == true {
                    device.ack(&message).await?;
                    println!("acked {}", message["meta"]["id"]);
                }
            }
            _ = tokio::signal::ctrl_c() => break,
        }
    }
    device.disconnect().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attribute_specs() {
        let parsed = parse_attrs(&["temp:Float".into(), "on:Boolean".into()]).unwrap();
        assert_eq!(
            parsed,
            vec![
                ("temp".to_owned(), DataType::Float),
                ("on".to_owned(), DataType::Boolean)
            ]
        );
        assert!(parse_attrs(&["temp".into()]).is_err());
        assert!(parse_attrs(&["temp:Double".into()]).is_err());
    }

    #[test]
    fn samples_have_their_type() {
        for kind in DataType::ALL {
            for step in 0..3 {
                assert!(kind.accepts(&sample(*kind, step)), "{kind} {step}");
            }
        }
    }
}
