//! `gantry admin users ...` and `gantry admin login`: the real binary against a server on port 0.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde_json::Value;
use tokio::io::AsyncWriteExt;

use crate::helpers::{spawn_app, unique};

/// `gantry admin <args>` with `stdin` on its standard input, HOME in `home` and no `GANTRY_*`
/// variable of the caller's; (success, stdout, stderr).
async fn admin(home: &Path, args: &[&str], stdin: &str) -> (bool, String, String) {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_gantry"));
    for (name, _) in std::env::vars().filter(|(n, _)| n.starts_with("GANTRY_")) {
        command.env_remove(name);
    }
    let mut child = command
        .env("HOME", home)
        .env_remove("XDG_CONFIG_HOME")
        .env("GANTRY_DATA_DIR", home.join("no-data"))
        .arg("admin")
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("gantry runs");
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.as_bytes()).await.unwrap();
    drop(input);
    let output = child.wait_with_output().await.unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (output.status.success(), text(&output.stdout), text(&output.stderr))
}

fn json(run: &(bool, String, String)) -> Value {
    assert!(run.0, "failed: {}\n{}", run.1, run.2);
    serde_json::from_str(&run.1).unwrap_or_else(|e| panic!("{e}: {}", run.1))
}

#[tokio::test]
async fn users_are_managed_and_a_login_is_kept_in_a_private_profile() {
    let app = spawn_app().await;
    let home = tempfile::tempdir().unwrap();
    let as_admin = |args: &[&str]| {
        let mut all = vec!["--url", app.base.as_str(), "--token", app.admin.as_str(), "--json"];
        all.extend_from_slice(args);
        all.into_iter().map(str::to_owned).collect::<Vec<_>>()
    };
    let name = unique("ops");
    let args = as_admin(&["users", "create", &name, "--role", "operator", "--password-stdin"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let created = json(&admin(home.path(), &args, "first-pass-123\n").await);
    assert_eq!(
        (created["role"].as_str(), created.get("password")),
        (Some("OPERATOR"), None)
    );
    let generated = {
        let args = as_admin(&["users", "create", &unique("gen"), "--role", "VIEWER"]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        json(&admin(home.path(), &args, "").await)
    };
    assert_eq!(generated["password"].as_str().map(str::len), Some(20));
    let listed = {
        let args = as_admin(&["users", "list", "--role", "OPERATOR"]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        json(&admin(home.path(), &args, "").await)
    };
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");

    // `login` keeps the session in the profile file, readable by its owner only.
    let login = ["--url", app.base.as_str(), "login", "--username", name.as_str()];
    let wrong = admin(home.path(), &login, "not-the-password\n").await;
    assert!(!wrong.0 && wrong.2.contains("40100"), "{}", wrong.2);
    let signed = admin(home.path(), &login, "first-pass-123\n").await;
    assert!(signed.0, "{}", signed.2);
    let profile = home.path().join(".config/gantry/admin.toml");
    let mode = std::fs::metadata(&profile).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let projects = json(&admin(home.path(), &["--json", "projects", "list"], "").await);
    assert!(projects.is_array(), "the session from the profile is used: {projects}");
    let refused = admin(home.path(), &["users", "list"], "").await;
    assert!(
        !refused.0 && refused.2.contains("40300"),
        "an operator manages no users: {}",
        refused.2
    );

    // Lock, unlock, set a password and delete, by username.
    for (command, stdin) in [("lock", ""), ("unlock", ""), ("set-password", "second-pass-45\n")] {
        let args = as_admin(&["users", command, &name]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        json(&admin(home.path(), &args, stdin).await);
    }
    let ended = admin(home.path(), &["projects", "list"], "").await;
    assert!(
        !ended.0 && ended.2.contains("40100"),
        "the new password ended the session: {}",
        ended.2
    );
    assert!(admin(home.path(), &login, "second-pass-45\n").await.0);
    let args = as_admin(&["users", "delete", &name]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    assert!(admin(home.path(), &args, "").await.0);
    let audit = app
        .get("/api/v1/auditLogs?resourceType=user&pageSize=100", &app.admin)
        .await
        .result();
    let actions: Vec<&str> = audit["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["action"].as_str())
        .collect();
    for action in ["create", "lock", "unlock", "update", "delete", "login"] {
        assert!(actions.contains(&action), "{action} in {actions:?}");
    }
    app.stop().await;
}
