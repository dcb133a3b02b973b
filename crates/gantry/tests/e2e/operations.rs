//! Health, metrics, the OpenAPI document, Swagger UI and the administrator bootstrap.

use gantry::config::ServeConfig;

use crate::helpers::{spawn_app, spawn_with};

#[tokio::test]
async fn health_metrics_and_docs_need_no_token() {
    let app = spawn_app().await;
    let health = app.client.get(format!("{}/healthz", app.base)).send().await.unwrap();
    assert_eq!(health.status(), 200);
    app.get("/api/v1/deviceModels", &app.admin).await.result();
    let metrics = app.metrics_text().await;
    assert!(
        metrics.contains(r#"gantry_http_requests_total{method="GET",route="/api/v1/deviceModels",status="200"} 1"#),
        "{metrics}"
    );
    assert!(metrics.contains("gantry_http_request_duration_seconds_bucket"));

    let doc: serde_json::Value = app
        .client
        .get(format!("{}/api-docs/openapi.json", app.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"));
    for path in [
        "/api/v1/deviceModels",
        "/api/v1/projects/{projectId}/devices",
        "/api/v1/devices/{deviceId}",
        "/api/v1/tenants",
    ] {
        assert!(doc["paths"].get(path).is_some(), "OpenAPI lacks {path}");
    }
    let ui = app
        .client
        .get(format!("{}/swagger-ui/", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(ui.status(), 200);
    assert!(
        ui.text().await.unwrap().contains("swagger"),
        "Swagger UI is served from the binary"
    );
}

#[tokio::test]
async fn generated_admin_token_is_printed_once_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    let config = ServeConfig::local(dir.path().to_path_buf());
    let first = gantry::Application::build(config.clone()).await.unwrap();
    let token = first
        .generated_admin_token
        .clone()
        .expect("a token is generated on first start");
    drop(first);
    let file = std::fs::read_to_string(dir.path().join("admin-token")).unwrap();
    assert_eq!(file.trim(), token);
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(dir.path().join("admin-token"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o600
    );

    let data_dir = dir.path().to_path_buf();
    let app = spawn_with(config, dir, token.clone()).await;
    assert!(app.data_dir == data_dir);
    app.get("/api/v1/projects", &token).await.result();
    app.stop().await;
}

#[tokio::test]
async fn fixed_admin_token_replaces_the_generated_one() {
    let dir = tempfile::tempdir().unwrap();
    let config = ServeConfig::local(dir.path().to_path_buf());
    let generated = gantry::Application::build(config.clone())
        .await
        .unwrap()
        .generated_admin_token
        .unwrap();
    let mut fixed = config.clone();
    fixed.admin_token = Some("operator-chosen-token-0123456789".to_owned());
    let app = spawn_with(fixed, dir, "operator-chosen-token-0123456789".to_owned()).await;
    app.get("/api/v1/projects", &app.admin).await.result();
    app.get("/api/v1/projects", &generated).await.error(401);
}

/// The data dir holds every token in clear (the database) and the generated secrets: it is
/// 0700 and its files owner-only whatever the umask, and a looser existing one is tightened.
#[tokio::test]
async fn the_data_dir_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let mode = |path: &std::path::Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;

    let dir = tempfile::tempdir().unwrap();
    // A fresh data dir inside, and an existing loose one.
    let fresh = dir.path().join("fresh");
    let loose = dir.path().join("loose");
    std::fs::create_dir(&loose).unwrap();
    std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(loose.join("notes"), "x").unwrap();
    std::fs::set_permissions(loose.join("notes"), std::fs::Permissions::from_mode(0o644)).unwrap();
    for data_dir in [fresh, loose] {
        let app = gantry::Application::build(ServeConfig::local(data_dir.clone()))
            .await
            .unwrap();
        assert_eq!(mode(&data_dir), 0o700, "{}", data_dir.display());
        let mut files = Vec::new();
        for entry in std::fs::read_dir(&data_dir).unwrap() {
            let path = entry.unwrap().path();
            assert_eq!(mode(&path) & 0o077, 0, "{} is {:o}", path.display(), mode(&path));
            files.push(path.file_name().unwrap().to_string_lossy().into_owned());
        }
        for expected in [
            "gantry.db",
            "gantry.db-wal",
            "gantry-staging.db",
            "gantry-logs.db",
            "admin-token",
        ] {
            assert!(files.iter().any(|f| f == expected), "{expected} in {files:?}");
        }
        drop(app);
    }
}

/// A data dir loosened by hand (a restore, a copy with the wrong umask) is tightened at the next
/// start, its TLS keys too: every file owner-only, certificates writable by the owner alone.
#[tokio::test]
async fn a_loosened_data_dir_is_tightened_at_start_keys_too() {
    use std::os::unix::fs::PermissionsExt;
    let mode = |path: &std::path::Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    fn loosen(dir: &std::path::Path) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                loosen(&path);
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).unwrap();
            } else {
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
            }
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let app = gantry::Application::build(ServeConfig::local(data_dir.clone()))
        .await
        .unwrap();
    drop(app);
    let tls = data_dir.join("tls");
    assert!(tls.join("ca.key").exists() && tls.join("server.key").exists());
    loosen(&data_dir);
    assert_eq!(mode(&tls.join("ca.key")), 0o666);
    let app = gantry::Application::build(ServeConfig::local(data_dir.clone()))
        .await
        .unwrap();
    assert_eq!(mode(&tls), 0o700);
    for key in ["ca.key", "server.key"] {
        assert_eq!(mode(&tls.join(key)), 0o600, "tls/{key}");
    }
    for cert in ["ca.pem", "server.pem"] {
        assert_eq!(mode(&tls.join(cert)), 0o644, "tls/{cert}");
    }
    for entry in std::fs::read_dir(&data_dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            assert_eq!(mode(&path), 0o600, "{}", path.display());
        }
    }
    drop(app);
}

/// Idle and trickling HTTP connections are closed at the header deadline
/// (`--http-header-timeout`), also a kept-alive one that sends no next request, while the
/// server goes on answering.
#[tokio::test]
async fn idle_http_connections_are_closed() {
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let app = crate::helpers::spawn_app_with(|c| c.http_header_timeout = 1).await;
    let addr = app.base.trim_start_matches("http://").to_owned();
    let mut held = Vec::new();
    for i in 0..100 {
        let mut socket = tokio::net::TcpStream::connect(&addr).await.unwrap();
        match i % 3 {
            0 => {}
            1 => socket.write_all(b"GET /healthz HTTP/1.1\r\nHo").await.unwrap(),
            _ => {
                socket
                    .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                    .await
                    .unwrap();
                let mut buf = [0u8; 512];
                let n = socket.read(&mut buf).await.unwrap();
                assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
            }
        }
        held.push(socket);
    }
    let health = app.client.get(format!("{}/healthz", app.base)).send().await.unwrap();
    assert_eq!(health.status(), 200, "the server answers while they are held");
    for socket in &mut held {
        let mut buf = [0u8; 1024];
        let closed = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                match socket.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    // A 408 or the rest of an answer may come before the close.
                    Ok(_) => continue,
                }
            }
        })
        .await;
        assert!(closed.is_ok(), "the server closes an idle connection");
    }
}

/// A listener's address in use: the error names the flag and the variable that move it.
#[tokio::test]
async fn an_address_in_use_names_the_flag_that_moves_it() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut config = ServeConfig::local(dir.path().to_path_buf());
    config.mqtt_addr = gantry::config::Listen(Some(addr));
    let error = gantry::Application::build(config)
        .await
        .err()
        .expect("the MQTT port is taken");
    let text = format!("{error:#}");
    assert!(
        text.contains("--mqtt-addr") && text.contains("GANTRY_MQTT_ADDR"),
        "{text}"
    );
}

/// A server nobody could reach is refused at start, naming the flags to set.
#[tokio::test]
async fn a_server_without_a_rest_listener_does_not_start() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = ServeConfig::local(dir.path().to_path_buf());
    config.http_addr = gantry::config::Listen(None);
    config.https_addr = gantry::config::Listen(None);
    let error = gantry::Application::build(config)
        .await
        .err()
        .expect("no REST listener");
    let text = format!("{error:#}");
    assert!(text.contains("--http-addr") && text.contains("--https-addr"), "{text}");
    assert!(
        std::fs::read_dir(dir.path()).unwrap().next().is_none(),
        "refused before anything is written"
    );
}
