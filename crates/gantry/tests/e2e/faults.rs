//! Faults of the parts around Gantry: PostgreSQL going away and coming back.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::json;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

use crate::events::event;
use crate::helpers::{spawn_app_with, wait_for};

/// A TCP proxy to PostgreSQL that can be cut: every open connection dropped and new ones closed
/// at once, as while the server restarts.
struct Proxy {
    addr: SocketAddr,
    down: Arc<AtomicBool>,
    cut: Arc<Notify>,
}

impl Proxy {
    async fn to(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (down, cut) = (Arc::new(AtomicBool::new(false)), Arc::new(Notify::new()));
        let (down_flag, cut_signal) = (down.clone(), cut.clone());
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if down_flag.load(Ordering::SeqCst) {
                    continue;
                }
                let cut = cut_signal.clone();
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = cut.notified() => {}
                    }
                });
            }
        });
        Self { addr, down, cut }
    }

    fn go_down(&self) {
        self.down.store(true, Ordering::SeqCst);
        self.cut.notify_waiters();
    }

    fn come_back(&self) {
        self.down.store(false, Ordering::SeqCst);
    }
}

/// While PostgreSQL cannot be reached, requests answer 503 (returnCode 50301, retry) instead of
/// 500, and a device's publishes are not acknowledged; once it is back Gantry recovers by itself
/// and nothing acknowledged is lost. Runs with `GANTRY_E2E_POSTGRES_URL` only.
#[tokio::test]
async fn postgres_going_away_is_503_and_recovers() {
    let Ok(server) = std::env::var("GANTRY_E2E_POSTGRES_URL") else {
        eprintln!("skipped: postgres_going_away_is_503_and_recovers needs GANTRY_E2E_POSTGRES_URL");
        return;
    };
    // postgres://user@host:port/database: the app reaches host:port through the proxy.
    let host_port = server
        .split_once('@')
        .and_then(|(_, rest)| rest.split('/').next())
        .expect("user@host:port");
    let target = tokio::net::lookup_host(host_port).await.unwrap().next().unwrap();
    let proxy = Proxy::to(target).await;
    let via = proxy.addr;
    let app = spawn_app_with(|config| {
        let url = config.database_url.take().expect("a fresh PostgreSQL database");
        config.database_url = Some(url.replacen(host_port, &via.to_string(), 1));
    })
    .await;
    let world = app.world().await;
    let device = &world.device;
    let post = |i: i64| {
        app.post(
            "/api/v1/deviceEvents",
            &app.admin,
            event(device, "count", json!(i), "Integer", 1_714_492_800_000 + i),
        )
    };
    let first = post(1).await.result();

    proxy.go_down();
    let reply = post(2).await;
    assert_eq!(reply.status, 503, "{:?}", reply.body);
    assert_eq!(reply.body["returnCode"], 50301);
    let reply = app
        .get(
            format!("/api/v1/devices/{}/events", device["id"].as_str().unwrap()),
            &app.admin,
        )
        .await;
    assert_eq!(
        (reply.status.as_u16(), reply.body["returnCode"].clone()),
        (503, json!(50301)),
        "reads too"
    );

    proxy.come_back();
    assert!(
        wait_for(Duration::from_secs(20), async || post(3).await.status == 200).await,
        "writes resume by themselves"
    );
    let events = app
        .get(
            format!("/api/v1/devices/{}/events", device["id"].as_str().unwrap()),
            &app.admin,
        )
        .await
        .result();
    let ids: Vec<&str> = events["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&first["meta"]["id"].as_str().unwrap()),
        "the acknowledged event is kept: {events}"
    );
    assert!(
        !events["results"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["attributeData"] == 2),
        "the refused one was not stored: {events}"
    );
}
