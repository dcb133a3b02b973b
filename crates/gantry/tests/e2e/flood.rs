//! A login flood from one address while other devices go on publishing: the flood is refused
//! and banned as documented, and every bystander publish is acknowledged and stored. The
//! bystanders' publish latency before and during the flood is printed, not asserted (figures of
//! a test run on a shared machine mean little; see docs/RELIABILITY.md for what is guaranteed).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use gantry::device::DeviceClient;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::helpers::{TestApp, World, spawn_app_with, wait_for};

const PREFIX: &str = "gantry";
/// The flooding address: another loopback address than the bystanders' 127.0.0.1, so that the
/// ban (per address) falls on the flood alone.
const FLOODER: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
const FLOOD_WORKERS: usize = 32;
const HALF_OPEN: usize = 200;

/// An MQTT 3.1.1 CONNECT with a username and a wrong password.
fn connect_packet(client_id: &str) -> Vec<u8> {
    login_packet(4, client_id, "not-the-token")
}

/// A CONNECT of MQTT `level` (4: 3.1.1, 5: 5.0) with the client id as username and `password`.
fn login_packet(level: u8, client_id: &str, password: &str) -> Vec<u8> {
    let field = |s: &str| {
        let mut out = (s.len() as u16).to_be_bytes().to_vec();
        out.extend_from_slice(s.as_bytes());
        out
    };
    let mut body = field("MQTT");
    body.extend_from_slice(&[level, 0xC2, 0, 60]); // username, password, clean session; keep-alive 60 s
    if level == 5 {
        body.push(0); // no properties
    }
    for part in [client_id, client_id, password] {
        body.extend(field(part));
    }
    let mut packet = vec![0x10];
    // The remaining length, 7 bits a byte, low first.
    let mut length = body.len();
    loop {
        let byte = (length % 128) as u8;
        length /= 128;
        packet.push(if length > 0 { byte | 0x80 } else { byte });
        if length == 0 {
            break;
        }
    }
    packet.extend(body);
    packet
}

/// The CONNACK's return code (3.1.1) or reason code (5.0), None when none came in time.
async fn connack(stream: &mut TcpStream) -> Option<u8> {
    let read = async {
        let mut head = [0u8; 2];
        stream.read_exact(&mut head).await.ok()?;
        let mut rest = vec![0u8; head[1] as usize];
        stream.read_exact(&mut rest).await.ok()?;
        (head[0] == 0x20 && rest.len() >= 2).then_some(rest[1])
    };
    tokio::time::timeout(Duration::from_secs(10), read).await.ok().flatten()
}

async fn connect_from(ip: IpAddr, server: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(ip, 0))?;
    socket.connect(server).await
}

/// What became of the flood's CONNECTs.
#[derive(Default)]
struct FloodTally {
    attempts: AtomicU64,
    /// CONNACK 4: bad username or password (the credentials were checked).
    bad_credentials: AtomicU64,
    /// CONNACK 5: not authorized (refused unchecked during the ban).
    not_authorized: AtomicU64,
    /// CONNACK 0: a login the flood should never get.
    accepted: AtomicU64,
    /// Closed, or no answer in time, without a CONNACK.
    no_connack: AtomicU64,
}

async fn one_attempt(server: SocketAddr, n: u64, tally: &FloodTally) {
    tally.attempts.fetch_add(1, Ordering::Relaxed);
    let attempt = async {
        let mut stream = connect_from(FLOODER, server).await.ok()?;
        stream.write_all(&connect_packet(&format!("flood-{n}"))).await.ok()?;
        let mut connack = [0u8; 4];
        stream.read_exact(&mut connack).await.ok()?;
        (connack[0] == 0x20).then_some(connack[3])
    };
    let counter = match tokio::time::timeout(Duration::from_secs(10), attempt).await {
        Ok(Some(0)) => &tally.accepted,
        Ok(Some(4)) => &tally.bad_credentials,
        Ok(Some(5)) => &tally.not_authorized,
        _ => &tally.no_connack,
    };
    counter.fetch_add(1, Ordering::Relaxed);
}

/// A bystander publishing QoS 1 every 20 ms (under the per-connection rate) until `stop`;
/// each publish's time to PUBACK, and whether every one was acknowledged.
async fn keep_publishing(mut device: DeviceClient, stop: Arc<AtomicBool>) -> (DeviceClient, Vec<Duration>) {
    let mut latencies = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        let started = Instant::now();
        device
            .publish_attrs(&[("count", json!(latencies.len()))], None, false)
            .await
            .expect("every bystander publish is acknowledged");
        latencies.push(started.elapsed());
    }
    (device, latencies)
}

async fn bystanders_for(
    devices: Vec<DeviceClient>,
    phase: Duration,
    during: impl Future<Output = ()>,
) -> (Vec<DeviceClient>, Vec<Duration>) {
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = devices
        .into_iter()
        .map(|d| tokio::spawn(keep_publishing(d, stop.clone())))
        .collect();
    tokio::join!(during, tokio::time::sleep(phase));
    stop.store(true, Ordering::Relaxed);
    let (mut devices, mut all) = (Vec::new(), Vec::new());
    for task in tasks {
        let (device, latencies) = task.await.expect("a bystander task");
        devices.push(device);
        all.extend(latencies);
    }
    (devices, all)
}

fn summary(latencies: &mut [Duration]) -> String {
    latencies.sort();
    let at = |q: usize| latencies[(latencies.len() * q / 100).min(latencies.len() - 1)];
    format!(
        "{} publishes, p50 {:?}, p99 {:?}, max {:?}",
        latencies.len(),
        at(50),
        at(99),
        latencies.last().unwrap()
    )
}

async fn stored(app: &TestApp, world: &World) -> u64 {
    app.get(
        format!(
            "/api/v1/devices/{}/events?pageSize=1",
            world.device["id"].as_str().unwrap()
        ),
        &app.admin,
    )
    .await
    .result()["totalResults"]
        .as_u64()
        .unwrap()
}

/// Thousands of wrong-password CONNECTs per second and hundreds of half-open sockets from one
/// address: the address is banned after `--login-failures` refusals and every later attempt is
/// refused unchecked (CONNACK 5), no attempt logs in, the half-open sockets are closed at the
/// CONNECT deadline; devices on other addresses keep publishing, every publish acknowledged and
/// stored, and a new device from another address logs in during the flood.
#[tokio::test]
async fn a_login_flood_from_one_address_spares_other_devices() {
    let app = spawn_app_with(|c| c.mqtt_connect_timeout = 3).await;
    let server = app.mqtt;
    if connect_from(FLOODER, server).await.is_err() {
        println!("SKIPPED a_login_flood_from_one_address_spares_other_devices: cannot connect from {FLOODER}");
        return;
    }
    let worlds = [app.world().await, app.world().await, app.world().await];
    let mut devices = Vec::new();
    for world in &worlds {
        let (id, token) = (
            world.device["id"].as_str().unwrap(),
            world.device["accessToken"].as_str().unwrap(),
        );
        devices.push(
            DeviceClient::connect(server, PREFIX, id, token)
                .await
                .expect("a bystander logs in"),
        );
    }
    let late = app.world().await;

    let (devices, mut before) = bystanders_for(devices, Duration::from_secs(2), async {}).await;

    let tally = Arc::new(FloodTally::default());
    let flood_for = Duration::from_secs(3);
    let flood = async {
        // Half-open: part of a CONNECT, then nothing.
        let mut half_open = Vec::new();
        for _ in 0..HALF_OPEN {
            if let Ok(mut stream) = connect_from(FLOODER, server).await {
                let _ = stream.write_all(&connect_packet("half-open")[..5]).await;
                half_open.push(stream);
            }
        }
        let started = Instant::now();
        let next = Arc::new(AtomicU64::new(0));
        let workers: Vec<_> = (0..FLOOD_WORKERS)
            .map(|_| {
                let (tally, next) = (tally.clone(), next.clone());
                tokio::spawn(async move {
                    while started.elapsed() < flood_for {
                        one_attempt(server, next.fetch_add(1, Ordering::Relaxed), &tally).await;
                    }
                })
            })
            .collect();
        // Another device, from another address, logs in while the flood goes on.
        tokio::time::sleep(flood_for / 2).await;
        let (id, token) = (
            late.device["id"].as_str().unwrap(),
            late.device["accessToken"].as_str().unwrap(),
        );
        DeviceClient::connect(server, PREFIX, id, token)
            .await
            .expect("a device of another address logs in during the flood")
            .disconnect()
            .await;
        for worker in workers {
            worker.await.unwrap();
        }
        let rate = tally.attempts.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64();
        println!("flood: {rate:.0} CONNECT attempts/s from {FLOODER}, {HALF_OPEN} half-open sockets");
        half_open
    };
    let (half_open, mut during) = {
        let mut half_open = Vec::new();
        let (devices, during) = bystanders_for(devices, flood_for, async {
            half_open = flood.await;
        })
        .await;
        for device in devices {
            device.disconnect().await;
        }
        (half_open, during)
    };
    println!("bystanders before the flood: {}", summary(&mut before));
    println!("bystanders during the flood: {}", summary(&mut during));

    let count = |c: &AtomicU64| c.load(Ordering::Relaxed);
    println!(
        "flood answers: {} attempts, {} bad credentials (CONNACK 4), {} banned (CONNACK 5), {} without CONNACK",
        count(&tally.attempts),
        count(&tally.bad_credentials),
        count(&tally.not_authorized),
        count(&tally.no_connack)
    );
    assert_eq!(count(&tally.accepted), 0, "no flood attempt logs in");
    // The credentials were checked until the ban, give or take the attempts in flight when it fell.
    assert!(count(&tally.bad_credentials) >= 10, "the first attempts were checked");
    assert!(
        count(&tally.bad_credentials) <= 10 + FLOOD_WORKERS as u64,
        "the ban stopped the checking"
    );
    assert!(
        count(&tally.not_authorized) > 0,
        "later attempts were refused as banned"
    );
    assert_eq!(app.metric("gantry_login_bans_total").await, 1);
    assert!(app.metric("gantry_login_refused_banned_total").await > 0);

    // Every acknowledged bystander publish was stored.
    let acked = (before.len() + during.len()) as u64;
    let mut total = 0;
    for world in &worlds {
        total += stored(&app, world).await;
    }
    assert_eq!(total, acked, "every acknowledged publish is stored");

    // The half-open sockets are closed at the CONNECT deadline.
    assert_eq!(half_open.len(), HALF_OPEN, "every half-open socket was accepted");
    let closed = wait_for(Duration::from_secs(15), async || {
        let mut open = 0;
        for stream in &half_open {
            let mut byte = [0u8; 1];
            if let Err(e) = stream.try_read(&mut byte)
                && e.kind() == std::io::ErrorKind::WouldBlock
            {
                open += 1;
            }
        }
        open == 0
    })
    .await;
    assert!(closed, "half-open sockets are closed at the CONNECT deadline");
    app.stop().await;
}

/// A device that closes its connection, or sends DISCONNECT, and logs in again at once with the
/// same client id (a flaky link) is accepted every time, on MQTT 3.1.1 and 5.0, also with other
/// devices doing the same: its old session, still ending, never makes the broker answer "server
/// unavailable".
#[tokio::test]
async fn an_immediate_relogin_is_accepted() {
    const DEVICES: usize = 8;
    let app = spawn_app_with(|_| {}).await;
    let mut devices = Vec::new();
    for _ in 0..DEVICES {
        let world = app.world().await;
        devices.push((
            world.device["id"].as_str().unwrap().to_owned(),
            world.device["accessToken"].as_str().unwrap().to_owned(),
        ));
    }
    let server = app.mqtt;
    let tasks: Vec<_> = devices
        .into_iter()
        .map(|(id, token)| tokio::spawn(async move { relogins(server, &id, &token).await }))
        .collect();
    let mut refused = Vec::new();
    for task in tasks {
        refused.extend(task.await.unwrap());
    }
    assert!(
        refused.is_empty(),
        "re-logins refused (level, attempt, code): {refused:?}"
    );
    app.stop().await;
}

/// 100 immediate re-logins of one device on each MQTT version, each after a SUBSCRIBE to its
/// inbox; the refused ones as (level, attempt, CONNACK code).
async fn relogins(server: SocketAddr, id: &str, token: &str) -> Vec<(u8, usize, Option<u8>)> {
    // SUBSCRIBE to the device's inbox, QoS 1, as a device does after each login.
    let subscribe = |level: u8| {
        let topic = format!("{PREFIX}/out/json/{id}");
        let mut body = vec![0, 1]; // packet id 1
        if level == 5 {
            body.push(0); // no properties
        }
        body.extend((topic.len() as u16).to_be_bytes());
        body.extend(topic.as_bytes());
        body.push(1);
        let mut packet = vec![0x82, body.len() as u8];
        packet.extend(body);
        packet
    };
    let mut refused = Vec::new();
    for level in [4u8, 5] {
        let mut stream = TcpStream::connect(server).await.unwrap();
        stream.write_all(&login_packet(level, id, token)).await.unwrap();
        assert_eq!(connack(&mut stream).await, Some(0), "the first login (level {level})");
        for attempt in 0..100 {
            stream.write_all(&subscribe(level)).await.unwrap();
            let mut suback = [0u8; 2];
            let _ = stream.read_exact(&mut suback).await;
            let mut rest = vec![0u8; suback[1] as usize];
            let _ = stream.read_exact(&mut rest).await;
            if attempt % 2 == 0 {
                // DISCONNECT (5.0: reason 0, no properties, in the short form).
                let _ = stream.write_all(&[0xE0, 0]).await;
            }
            drop(stream);
            stream = TcpStream::connect(server).await.unwrap();
            stream.write_all(&login_packet(level, id, token)).await.unwrap();
            let code = connack(&mut stream).await;
            if code != Some(0) {
                refused.push((level, attempt, code));
            }
        }
    }
    refused
}

/// 500 wrong-password CONNECTs sent at once from a fresh address have at most `--login-failures`
/// (10) passwords checked: each attempt is counted before its check, so the ban cannot be outrun
/// by attempts in flight. The rest are refused unchecked (CONNACK 5).
#[tokio::test]
async fn a_concurrent_login_flood_cannot_outrun_the_ban() {
    const ATTEMPTS: usize = 500;
    let flooder = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3));
    let app = spawn_app_with(|_| {}).await;
    let world = app.world().await;
    let id = world.device["id"].as_str().unwrap().to_owned();
    if connect_from(flooder, app.mqtt).await.is_err() {
        crate::helpers::say_skipped(
            "a_concurrent_login_flood_cannot_outrun_the_ban",
            "cannot connect from 127.0.0.3",
        );
        return;
    }
    // Every socket is connected and its CONNECT written before any is answered's turn comes.
    let mut streams = Vec::new();
    for _ in 0..ATTEMPTS {
        streams.push(connect_from(flooder, app.mqtt).await.unwrap());
    }
    let start = Arc::new(tokio::sync::Barrier::new(ATTEMPTS));
    let tasks: Vec<_> = streams
        .into_iter()
        .map(|mut stream| {
            let (start, id) = (start.clone(), id.clone());
            tokio::spawn(async move {
                start.wait().await;
                stream.write_all(&login_packet(4, &id, "not-the-token")).await.ok()?;
                connack(&mut stream).await
            })
        })
        .collect();
    let (mut checked, mut banned, mut other) = (0, 0, 0);
    for task in tasks {
        match task.await.unwrap() {
            Some(4) => checked += 1,
            Some(5) => banned += 1,
            _ => other += 1,
        }
    }
    println!("{checked} checked (CONNACK 4), {banned} refused unchecked (CONNACK 5), {other} other");
    assert!(checked >= 1, "the first attempts were checked");
    assert!(
        checked <= 10,
        "{checked} passwords checked: at most --login-failures (10)"
    );
    assert_eq!(
        checked + banned,
        ATTEMPTS,
        "every attempt answered ({other} without a CONNACK)"
    );
    assert_eq!(app.metric("gantry_login_bans_total").await, 1);
    app.stop().await;
}
