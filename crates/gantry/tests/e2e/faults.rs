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
#[ignore = "needs GANTRY_E2E_POSTGRES_URL (a PostgreSQL server)"]
async fn postgres_going_away_is_503_and_recovers() {
    let server = crate::helpers::required_var("GANTRY_E2E_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/postgres");
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

/// Unmounts the test's tmpfs however the test ends.
struct Mount(std::path::PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// A full disk under the embedded store (a small tmpfs as the data dir): writes answer 503
/// (50301) and the server stays up serving reads, nothing acknowledged is lost, and writes
/// resume by themselves once space is freed. Needs root to mount a tmpfs; says skipped otherwise.
#[tokio::test]
async fn a_full_disk_is_503_and_writes_resume() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=24m", "tmpfs"])
        .arg(&data)
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        crate::helpers::say_skipped("a_full_disk_is_503_and_writes_resume", "mounting a tmpfs needs root");
        return;
    }
    let _mount = Mount(data.clone());
    let admin = format!("admin-{}", uuid::Uuid::new_v4().simple());
    let mut config = gantry::config::ServeConfig::local(data.clone());
    config.admin_token = Some(admin.clone());
    let app = crate::helpers::spawn_with(config, tempfile::tempdir().unwrap(), admin).await;
    let world = app.world().await;
    let device = &world.device;
    let id = device["id"].as_str().unwrap();

    // Fill what is left of the disk.
    let filler = data.join("filler");
    {
        use std::io::Write;
        let mut file = std::fs::File::create(&filler).unwrap();
        let chunk = vec![0u8; 64 * 1024];
        while file.write_all(&chunk).is_ok() {}
        let _ = file.sync_all();
    }
    let mut acked = Vec::new();
    let mut refused = None;
    for i in 0..5_000i64 {
        let reply = app
            .post(
                "/api/v1/deviceEvents",
                &app.admin,
                event(device, "count", json!(i), "Integer", 1_714_492_800_000 + i),
            )
            .await;
        match reply.status.as_u16() {
            200 => acked.push(reply.body["result"]["meta"]["id"].as_str().unwrap().to_owned()),
            503 => {
                refused = Some(reply);
                break;
            }
            other => panic!("a write on a full disk answered {other}: {}", reply.body),
        }
    }
    let refused = refused.expect("a write is refused once the disk is full");
    eprintln!("{} writes acknowledged before the disk was full", acked.len());
    assert_eq!(refused.body["returnCode"], 50301, "{}", refused.body);
    // Reads go on.
    app.get(format!("/api/v1/devices/{id}"), &app.admin).await.result();
    app.get("/healthz", &app.admin).await;

    std::fs::remove_file(&filler).unwrap();
    assert!(
        wait_for(Duration::from_secs(20), async || {
            app.post(
                "/api/v1/deviceEvents",
                &app.admin,
                event(device, "count", json!(-1), "Integer", 1_714_492_700_000),
            )
            .await
            .status
                == 200
        })
        .await,
        "writes resume once space is freed"
    );
    for event_id in &acked {
        app.get(format!("/api/v1/deviceEvents/{event_id}"), &app.admin)
            .await
            .result();
    }
    app.stop().await;
}
