//! The MQTT examples of the README and of the user guide work as written: every `mosquitto_*`
//! command (and the `openssl` lines beside them) of their `sh` blocks is taken from the files
//! themselves and run with mosquitto's command-line clients against a server on port 0. Only
//! what differs on a test server is put in: the generated CA's path, and `$DEVICE`,
//! `$DEVICE_TOKEN`, `$MQTT_PORT` and `$MQTTS_PORT` as environment variables. A command that
//! names its port other than by those variables, or documents without one of the kinds of
//! example checked here, fails the test. The guide's sample model file is checked here too.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use crate::helpers::{TestApp, spawn_app, spawn_app_with, unique};

const README: &str = include_str!("../../../../README.md");

/// The user guide's chapters that show `mosquitto_*` commands.
const GUIDE_MQTT: &str = include_str!("../../../../docs/book/src/mqtt.md");
const GUIDE_SECURITY: &str = include_str!("../../../../docs/book/src/security.md");

/// The sample model file the guide applies with `gantry admin models apply`.
const TOWER_CRANE: &str = include_str!("../../../../docs/examples/tower-crane.yaml");

/// How long one command may take before the test gives up on it (a bound, not a measurement).
const COMMAND_BOUND: Duration = Duration::from_secs(30);

/// The text of each ```sh block of `markdown`, as a reader pastes it (continuation lines and
/// all: a backslash at a line's end inside quotes is bash's to join).
pub(crate) fn sh_texts(markdown: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        match (&mut current, line.trim_end()) {
            (None, "```sh") => current = Some(String::new()),
            (Some(_), "```") => blocks.push(current.take().expect("inside a block")),
            (Some(text), _) => {
                text.push_str(line);
                text.push('\n');
            }
            (None, _) => {}
        }
    }
    blocks
}

/// The commands of each ```sh block of `markdown`, continuation lines joined.
fn sh_blocks(markdown: &str) -> Vec<Vec<String>> {
    sh_texts(markdown).iter().map(|text| commands_of(text)).collect()
}

/// A block's commands: continuation lines joined, comments and blank lines left out.
fn commands_of(text: &str) -> Vec<String> {
    let mut commands = Vec::new();
    let mut pending = String::new();
    for line in text.lines() {
        let line = line.trim_end();
        let (line, continued) = match line.strip_suffix('\\') {
            Some(head) => (head, true),
            None => (line, false),
        };
        pending.push_str(line.trim());
        pending.push(' ');
        if !continued {
            let command = std::mem::take(&mut pending).trim().to_owned();
            if !command.is_empty() && !command.starts_with('#') {
                commands.push(command);
            }
        }
    }
    commands
}

/// The blocks of the README and the guide that hold a `mosquitto_*` command.
fn mqtt_blocks() -> Vec<Vec<String>> {
    [README, GUIDE_MQTT, GUIDE_SECURITY]
        .into_iter()
        .flat_map(sh_blocks)
        .filter(|block| block.iter().any(|c| c.starts_with("mosquitto_")))
        .collect()
}

/// The JSON message of a command's `-m '...'` argument.
fn message_of(command: &str) -> Value {
    let (_, rest) = command.split_once("-m '").expect("a -m '...' message");
    let (text, _) = rest.split_once('\'').expect("the message's closing quote");
    serde_json::from_str(text).unwrap_or_else(|e| panic!("the README's message is not JSON ({e}): {text}"))
}

/// The load values a message carries.
fn values_of(message: &Value) -> Vec<f64> {
    message["payload"]["attrs"]
        .as_array()
        .expect("payload.attrs")
        .iter()
        .map(|a| a["value"].as_f64().expect("a number"))
        .collect()
}

struct Server<'a> {
    app: &'a TestApp,
    device: String,
    token: String,
    dir: &'a Path,
}

impl Server<'_> {
    /// `command` with the test server's CA put in; panics on a port or host it does not know.
    /// The ports are `$MQTT_PORT` and `$MQTTS_PORT`, which `bash` sets to the test server's.
    fn localize(&self, command: &str) -> String {
        let ca = self.app.tls_ca.as_ref().expect("a generated CA");
        let local = command.replace("./gantry-data/tls/ca.pem", &ca.display().to_string());
        let words: Vec<&str> = local.split_whitespace().collect();
        for pair in words.windows(2) {
            match pair[0] {
                "-p" | "--port" => assert!(
                    ["$MQTT_PORT", "$MQTTS_PORT"].contains(&pair[1]),
                    "a command names its port other than by $MQTT_PORT or $MQTTS_PORT: {command}"
                ),
                "-h" => assert!(
                    ["127.0.0.1", "localhost"].contains(&pair[1]),
                    "a command uses a host this test does not know: {command}"
                ),
                _ => {}
            }
        }
        local
    }

    fn bash(&self, command: &str) -> Command {
        let mqtts = self.app.mqtts.expect("MQTT over TLS is on").port();
        let mut child = Command::new("bash");
        child
            .arg("-c")
            .arg(command)
            .current_dir(self.dir)
            .env("DEVICE", &self.device)
            .env("DEVICE_TOKEN", &self.token)
            .env("MQTT_PORT", self.app.mqtt.port().to_string())
            .env("MQTTS_PORT", mqtts.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        child
    }

    /// Runs a command to its end; its standard output. Panics when it fails.
    async fn run(&self, command: &str) -> String {
        let output = tokio::time::timeout(COMMAND_BOUND, self.bash(command).output())
            .await
            .unwrap_or_else(|_| panic!("no end within {COMMAND_BOUND:?}: {command}"))
            .expect("bash runs");
        assert!(
            output.status.success(),
            "{command}\nexited {}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// The load values stored for the device.
    async fn stored_loads(&self) -> Vec<f64> {
        let listed = self
            .app
            .get(
                format!("/api/v1/devices/{}/events?pageSize=1000", self.device),
                &self.app.admin,
            )
            .await
            .result();
        listed["results"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["attributeCode"] == "load")
            .map(|e| e["attributeData"].as_f64().unwrap())
            .collect()
    }

    /// A control to the device, as the README's walk-through sends it.
    async fn send_control(&self) {
        self.app
            .put(
                format!("/api/v1/devices/{}/shadows", self.device),
                &self.app.admin,
                json!({"needack": true, "contextId": "demo", "payload": {"attrs": [{"code": "limit", "value": 8.5}]}}),
            )
            .await
            .result();
    }

    /// Runs `mosquitto_sub` until it prints a control sent to the device's inbox; the line.
    async fn watch_inbox(&self, command: &str) -> String {
        let mut child = self.bash(command).spawn().expect("bash runs");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        // The subscription is made some time after the start: controls go until one arrives.
        let seen = tokio::time::timeout(COMMAND_BOUND, async {
            loop {
                self.send_control().await;
                if let Ok(line) = tokio::time::timeout(Duration::from_millis(500), lines.next_line()).await {
                    break line
                        .expect("reading mosquitto_sub")
                        .expect("mosquitto_sub printed a line");
                }
            }
        })
        .await;
        let _ = child.kill().await;
        seen.unwrap_or_else(|_| panic!("no control reached the inbox: {command}"))
    }
}

/// A CA for device certificates, as the operator would have it: `devices-ca.pem` and
/// `devices-ca.key` in `dir`.
async fn make_devices_ca(dir: &Path) {
    let status = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
        ])
        .args(["-keyout", "devices-ca.key", "-out", "devices-ca.pem", "-days", "30"])
        .args([
            "-subj",
            "/CN=Fleet devices",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
        ])
        .args(["-addext", "keyUsage=critical,keyCertSign,cRLSign"])
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await
        .expect("openssl runs (apt-get install openssl)");
    assert!(status.success(), "openssl made no CA");
}

/// Whether `tool` runs here.
fn installed(tool: &str) -> bool {
    std::process::Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Runs wherever mosquitto's clients and openssl are installed (CI installs them); elsewhere it
/// says it skipped, and why, instead of passing untested.
#[tokio::test]
async fn the_readme_mqtt_examples_work_as_written() {
    let missing: Vec<&str> = ["mosquitto_pub", "mosquitto_sub", "mosquitto_rr", "openssl"]
        .into_iter()
        .filter(|tool| !installed(tool))
        .collect();
    if !missing.is_empty() {
        crate::helpers::say_skipped(
            "readme::the_readme_mqtt_examples_work_as_written",
            &format!("needs mosquitto-clients and openssl: {} not found", missing.join(", ")),
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    make_devices_ca(dir.path()).await;
    let ca = dir.path().join("devices-ca.pem");
    let app = spawn_app_with(|c| c.mqtt_client_ca = Some(ca)).await;
    let project = app.create_project(&app.admin).await;
    let model = app
        .post(
            "/api/v1/deviceModels",
            &app.admin,
            json!({"name": unique("TC-7052"), "deviceType": "TowerCrane", "attributesMap": {
                "load":  {"name": "Load (t)", "code": "load", "dataType": "Float", "readable": "R", "channel": "m"},
                "limit": {"name": "Load limit", "code": "limit", "dataType": "Float", "readable": "RW", "channel": "m"}
            }}),
        )
        .await
        .result();
    let device = app.create_device(&app.admin, &project, &model).await;
    let server = Server {
        app: &app,
        device: device["id"].as_str().unwrap().to_owned(),
        token: device["accessToken"].as_str().unwrap().to_owned(),
        dir: dir.path(),
    };

    let blocks = mqtt_blocks();
    let (mut published, mut over_tls, mut with_certificate, mut watched, mut requested) = (0, 0, 0, 0, 0);
    let mut expected_loads = Vec::new();
    for command in blocks.iter().flatten() {
        let local = server.localize(command);
        let program = command.split_whitespace().next().unwrap();
        match program {
            "mosquitto_pub" => {
                server.run(&local).await;
                // QoS 1: the client ends after the PUBACK, which comes once the events are stored.
                expected_loads.extend(values_of(&message_of(command)));
                let mut stored = server.stored_loads().await;
                stored.sort_by(f64::total_cmp);
                expected_loads.sort_by(f64::total_cmp);
                assert_eq!(stored, expected_loads, "after {command}");
                published += 1;
                over_tls += usize::from(command.contains("--cafile"));
                with_certificate += usize::from(command.contains("--cert"));
            }
            "mosquitto_sub" => {
                let line = server.watch_inbox(&local).await;
                let (topic, payload) = line.split_once(' ').expect("-v prints the topic first");
                assert_eq!(topic, format!("gantry/out/json/{}", server.device));
                let control: Value = serde_json::from_str(payload).expect("a Message");
                assert_eq!(control["payload"]["attrs"][0]["code"], "limit", "{line}");
                watched += 1;
            }
            "mosquitto_rr" => {
                let sent = message_of(command);
                let printed = server.run(&local).await;
                let ack: Value = serde_json::from_str(printed.trim()).expect("the ack, a Message");
                assert_eq!(ack["meta"]["type"], "ack", "{printed}");
                assert_eq!(ack["meta"]["correlationId"], sent["meta"]["id"], "{printed}");
                let refused = ack["payload"]["refused"].as_array().map_or(0, Vec::len);
                assert_eq!(refused, 0, "every entry is taken: {printed}");
                expected_loads.extend(values_of(&sent));
                let mut stored = server.stored_loads().await;
                stored.sort_by(f64::total_cmp);
                expected_loads.sort_by(f64::total_cmp);
                assert_eq!(stored, expected_loads, "after {command}");
                requested += 1;
            }
            "openssl" => {
                server.run(&local).await;
            }
            // The REST calls beside the MQTT lines (reading back over HTTPS) are not this test's.
            "curl" => {}
            other => panic!("the MQTT examples hold a command this test does not run: {other}"),
        }
    }
    assert_eq!(
        (published > 0, over_tls, with_certificate, watched, requested),
        (true, 2, 1, 2, 1),
        "the MQTT examples: publishes, two over TLS (one with a device certificate), a subscribe in the README and one in the guide, a request-response"
    );
    app.stop().await;
}

#[tokio::test]
async fn the_sample_model_file_is_a_model_the_api_takes() {
    let app = spawn_app().await;
    let body: Value = serde_norway::from_str(TOWER_CRANE).expect("docs/examples/tower-crane.yaml is YAML");
    let model = app.post("/api/v1/deviceModels", &app.admin, body).await.result();
    let angle = &model["actionsMap"]["slew"]["paramsMap"]["angle"];
    assert_eq!(angle["type"], "Float", "{model}");
    assert_eq!(angle["required"], true, "{model}");
    app.stop().await;
}

#[test]
fn sh_blocks_join_continuation_lines() {
    let markdown = "text\n```sh\n# a comment\nmosquitto_pub -h a \\\n  -m 'x'\nls\n```\n```json\n{}\n```\n";
    assert_eq!(
        sh_blocks(markdown),
        vec![vec!["mosquitto_pub -h a -m 'x'".to_owned(), "ls".to_owned()]]
    );
}
