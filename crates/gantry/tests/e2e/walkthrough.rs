//! The REST walk-throughs of the README and of the user guide run as written: their `sh` blocks,
//! taken from the files themselves, run in order in one bash against a server on port 0, as a
//! newcomer pastes them into one terminal. Only what a test server changes is put in: the values
//! of the settings block (`GANTRY=`, `MQTT_PORT=`, `MQTTS_PORT=`), which the docs tell the reader
//! to change when a listener moved, and the folder the commands run in, which holds
//! `gantry-data/admin-token` as `gantry serve` writes it. Every answer the commands print must be
//! a success (`returnCode` 0), and every value they read out of an answer must be there (the
//! script runs with `set -euo pipefail`).
//!
//! Blocks that start the service, build, install or follow a stream for ever are not run here:
//! `readme.rs` runs the MQTT commands, the README's test command is CI's own, and the rest are
//! deployment steps.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use tokio::process::Command;

use crate::helpers::{TestApp, spawn_app};
use crate::readme::sh_texts;

const README: &str = include_str!("../../../../README.md");
const GETTING_STARTED: &str = include_str!("../../../../docs/book/src/getting-started.md");
const CONTROLS: &str = include_str!("../../../../docs/book/src/controls.md");
const LIVE_DATA: &str = include_str!("../../../../docs/book/src/live-data.md");
const ADMIN_CLI: &str = include_str!("../../../../docs/book/src/admin-cli.md");

/// How long a whole walk-through may take (a bound, not a measurement).
const SCRIPT_BOUND: Duration = Duration::from_secs(120);

/// Whether a block is one a reader runs against the service in a second terminal.
fn runs_against_the_service(block: &str) -> bool {
    const NOT_HERE: [&str; 9] = [
        "cargo ",
        "mosquitto_",
        "openssl ",
        "podman ",
        "install ",
        "alias ",
        "curl -N",
        ".ci/",
        "GANTRY_TEST_",
    ];
    !block.trim().is_empty() && !NOT_HERE.iter().any(|skip| block.contains(skip))
}

/// One shell script of the `documents`' blocks that run against the service, settings put in.
fn script_of(documents: &[&str], app: &TestApp) -> String {
    let mut script = String::from(
        "set -euo pipefail\n\
         # Each answer on a line of its own, so that the test can read them one by one.\n\
         curl() { command curl -w '\\n' \"$@\"; }\n",
    );
    for block in documents.iter().flat_map(|doc| sh_texts(doc)) {
        if !runs_against_the_service(&block) {
            continue;
        }
        for line in block.lines() {
            script.push_str(&localize(line, app));
            script.push('\n');
        }
    }
    script
}

/// The settings block's values for the test server (a comment after one goes with it); every
/// other line as written.
fn localize(line: &str, app: &TestApp) -> String {
    let setting = |name: &str| line.starts_with(&format!("{name}="));
    let value = if setting("GANTRY") {
        app.base.clone()
    } else if setting("MQTT_PORT") {
        app.mqtt.port().to_string()
    } else if setting("MQTTS_PORT") {
        app.mqtts.map_or(0, |a| a.port()).to_string()
    } else {
        return line.to_owned();
    };
    let (name, _) = line.split_once('=').expect("a setting");
    format!("{name}={value}")
}

/// Runs `script` in a folder like the repository's root a reader runs `gantry serve` in: the
/// administrator's token where `gantry serve` writes it, and the repository's `docs/`; its
/// standard output. Panics when it fails.
async fn run(script: &str, app: &TestApp, dir: &Path) -> String {
    std::fs::create_dir_all(dir.join("gantry-data")).unwrap();
    std::fs::write(dir.join("gantry-data/admin-token"), &app.admin).unwrap();
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs");
    std::os::unix::fs::symlink(docs.canonicalize().unwrap(), dir.join("docs")).unwrap();
    let output = tokio::time::timeout(
        SCRIPT_BOUND,
        Command::new("bash")
            .arg("-c")
            .arg(script)
            .current_dir(dir)
            // The admin CLI's server: the one setting it takes from the environment.
            .env("GANTRY_URL", &app.base)
            .env("PATH", with_gantry_on_path())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the walk-through ends")
    .expect("bash runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "the walk-through failed ({}):\n{script}\n--- stdout\n{stdout}\n--- stderr\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// PATH with the `gantry` binary this test run built in front, as `alias gantry=...` puts it.
fn with_gantry_on_path() -> String {
    let bin = Path::new(env!("CARGO_BIN_EXE_gantry"))
        .parent()
        .unwrap()
        .display()
        .to_string();
    format!("{bin}:{}", std::env::var("PATH").unwrap_or_default())
}

/// The API answers among `stdout`'s lines: every line that is a JSON object with a returnCode.
fn answers(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|answer| answer.get("returnCode").is_some())
        .collect()
}

fn assert_all_succeeded(answers: &[Value], stdout: &str) {
    for answer in answers {
        assert_eq!(
            answer["returnCode"], 0,
            "an answer of the walk-through failed: {answer}\n{stdout}"
        );
    }
}

#[tokio::test]
async fn the_readme_walk_through_runs_as_written() {
    let app = spawn_app().await;
    let dir = tempfile::tempdir().unwrap();
    let script = script_of(&[README], &app);
    assert!(
        script.contains("/deviceModels"),
        "the README creates a model:\n{script}"
    );
    let stdout = run(&script, &app, dir.path()).await;
    let answers = answers(&stdout);
    assert_all_succeeded(&answers, &stdout);
    // The events and shadow reads, then the control and its event log.
    assert!(
        answers.len() >= 4,
        "the README's reads and its control answer: {stdout}"
    );
    let log = answers.last().unwrap();
    assert_eq!(log["result"]["results"][0]["classification"], "DeviceControll", "{log}");
}

#[tokio::test]
async fn the_guides_walk_through_runs_as_written() {
    let app = spawn_app().await;
    let dir = tempfile::tempdir().unwrap();
    // The chapters go on from Getting started's settings, project, model and device; Controls
    // asks for the sample model applied with the admin CLI first.
    let script = script_of(&[GETTING_STARTED, ADMIN_CLI, CONTROLS, LIVE_DATA], &app);
    for expected in [
        "/deviceEvents",
        "series?",
        "PUT $API/devices/$DEVICE/shadows",
        "gantry admin models apply",
    ] {
        assert!(
            script.contains(expected),
            "the guide's walk-through shows {expected}:\n{script}"
        );
    }
    let stdout = run(&script, &app, dir.path()).await;
    let answers = answers(&stdout);
    assert_all_succeeded(&answers, &stdout);
    let series = answers
        .iter()
        .find(|a| a["result"]["points"].is_array())
        .unwrap_or_else(|| panic!("a series answer: {stdout}"));
    assert_eq!(
        series["result"]["points"][0]["count"], 1,
        "the posted event in its hour: {series}"
    );
    assert!(
        stdout.contains("TC-7052"),
        "the admin CLI shows the model it applied: {stdout}"
    );
}
