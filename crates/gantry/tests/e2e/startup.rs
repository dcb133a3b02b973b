//! The `gantry serve` binary as an operator starts it: the --config file and its precedence
//! (flag > variable > file > default), the start-up output, and start-up failures told in one
//! line that names what to change.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

/// `gantry serve` with no GANTRY_* variable from the test's own environment.
fn serve() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_gantry"));
    command.arg("serve");
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("GANTRY_") {
            command.env_remove(name);
        }
    }
    command
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// Runs `command` to its end: exit code and stderr.
async fn fails(mut command: Command) -> (Option<i32>, String) {
    let out = tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .expect("gantry exits")
        .unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
}

/// A config file sets the data dir, the addresses and a limit; a variable wins over it for the
/// MQTT address and a flag for the WebSocket one; the start-up output names the version, every
/// listener, the Swagger UI and /metrics URLs, the token's and the CA's whereabouts.
#[tokio::test]
async fn a_config_file_sets_the_flags_and_flags_and_variables_win() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let file = dir.path().join("gantry.toml");
    write(
        &file,
        &format!(
            r#"# every key is a `gantry serve` flag's long name
data-dir = "{}"
http-addr = "127.0.0.1:0"
https-addr = "127.0.0.1:0"
mqtt-addr = "off"
mqtt-ws-addr = "127.0.0.1:0"
mqtts-addr = "127.0.0.1:0"
mqtt-wss-addr = "off"
rate-limit = 0
route-tls = false
mqtt-max-packet-size = 65536
"#,
            data.display()
        ),
    );
    let mut command = serve();
    command
        .args(["--config", file.to_str().unwrap(), "--mqtt-ws-addr", "off"])
        .env("GANTRY_MQTT_ADDR", "127.0.0.1:0")
        .env("GANTRY_ADMIN_TOKEN", "start-up-test-admin-token");
    let mut child = command.spawn().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut lines = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = stdout.next_line().await.unwrap() {
            let last = line.starts_with("gantry tls:");
            lines.push(line);
            if last {
                return;
            }
        }
    })
    .await;
    assert!(read.is_ok(), "the start-up output ends with its tls line: {lines:?}");
    let line = |prefix: &str| {
        lines
            .iter()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("a line `{prefix}...` in {lines:#?}"))
            .to_owned()
    };
    assert_eq!(
        line("gantry "),
        format!("{} on the sqlite store", env!("CARGO_PKG_VERSION"))
    );
    let base = line("gantry listening on ");
    assert!(base.starts_with("http://127.0.0.1:"), "{base}");
    let mqtt = line("gantry mqtt on ");
    assert!(
        mqtt.starts_with("mqtt://127.0.0.1:") && !mqtt.contains("ws://"),
        "the variable turned MQTT on over the file, the flag WebSocket off: {mqtt}"
    );
    assert!(line("gantry https on ").starts_with("https://127.0.0.1:"));
    let tls = line("gantry mqtt tls on ");
    assert!(tls.starts_with("mqtts://") && !tls.contains("wss://"), "{tls}");
    // restfulApiAddr, which is the bound address here.
    assert!(line("gantry api docs: ").starts_with(&format!("{base}/swagger-ui/")));
    assert_eq!(line("gantry metrics: "), format!("{base}/metrics"));
    assert_eq!(line("gantry console: "), format!("{base}/console/"));
    assert_eq!(line("gantry administrator token: "), "GANTRY_ADMIN_TOKEN");
    let ca = data.join("tls").join("ca.pem");
    assert!(line("gantry tls: ").ends_with(&ca.display().to_string()));
    assert!(ca.exists(), "the data dir of the file is used");

    let health = reqwest::get(format!("{base}/healthz")).await.unwrap();
    assert_eq!(health.status(), 200);
    child.kill().await.unwrap();
}

#[tokio::test]
async fn an_unknown_key_or_a_bad_value_in_the_config_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gantry.toml");
    write(&file, "http-addr = \"127.0.0.1:0\"\nhttp-adr = \"127.0.0.1:0\"\n");
    let mut command = serve();
    command.current_dir(dir.path()).env("GANTRY_CONFIG", &file);
    let (code, stderr) = fails(command).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("unknown key `http-adr`") && stderr.contains("gantry.toml"),
        "{stderr}"
    );

    write(&file, "mqtt-addr = \"1883\"\n");
    let mut command = serve();
    command
        .current_dir(dir.path())
        .args(["--config", file.to_str().unwrap()]);
    let (code, stderr) = fails(command).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("`mqtt-addr`") && stderr.contains("`1883` is neither host:port"),
        "{stderr}"
    );
    assert!(
        !dir.path().join("gantry-data").exists(),
        "refused before anything is written"
    );
}

/// An address in use: one line naming the flag and the variable, exit status 1, no backtrace
/// even with RUST_BACKTRACE set.
#[tokio::test]
async fn an_address_in_use_is_one_line_without_a_backtrace() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut command = serve();
    command
        .env("GANTRY_DATA_DIR", dir.path())
        .env("GANTRY_HTTP_ADDR", taken.local_addr().unwrap().to_string())
        .env("RUST_BACKTRACE", "1");
    let (code, stderr) = fails(command).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("--http-addr") && stderr.contains("GANTRY_HTTP_ADDR"),
        "{stderr}"
    );
    assert!(!stderr.to_lowercase().contains("backtrace"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
}

/// Two listeners' addresses in use: both told in the one error, each with what moves it.
#[tokio::test]
async fn every_address_in_use_is_told_at_once() {
    let http = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mqtt = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut command = serve();
    command
        .env("GANTRY_DATA_DIR", dir.path())
        .env("GANTRY_HTTP_ADDR", http.local_addr().unwrap().to_string())
        .env("GANTRY_MQTT_ADDR", mqtt.local_addr().unwrap().to_string())
        .env("GANTRY_MQTT_WS_ADDR", "127.0.0.1:0");
    let (code, stderr) = fails(command).await;
    assert_eq!(code, Some(1), "{stderr}");
    for (addr, flag) in [
        (http.local_addr().unwrap(), "--http-addr"),
        (mqtt.local_addr().unwrap(), "--mqtt-addr"),
    ] {
        assert!(stderr.contains(&format!("on {addr} (move it with {flag}")), "{stderr}");
    }
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
}
