//! `gantry admin` and `gantry completions`: the real binary against a server on port 0, each
//! command's success and its refusal as a user sees them (exit status, stdout, stderr).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use futures::StreamExt;
use serde_json::{Value, json};

use crate::events::{at_plus8, event};
use crate::helpers::{TestApp, model_body, spawn_app, unique};

/// What a run of the binary printed.
struct Run {
    ok: bool,
    stdout: String,
    stderr: String,
}

impl Run {
    /// The JSON a `--json` run printed; panics with the output when it failed.
    fn json(&self) -> Value {
        assert!(self.ok, "failed: {}\n{}", self.stdout, self.stderr);
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("{e}: {}", self.stdout))
    }

    /// Asserts success and returns stdout.
    fn out(&self) -> &str {
        assert!(self.ok, "failed: {}\n{}", self.stdout, self.stderr);
        &self.stdout
    }

    /// Asserts failure and returns stderr.
    fn err(&self) -> &str {
        assert!(!self.ok, "succeeded: {}\n{}", self.stdout, self.stderr);
        &self.stderr
    }
}

/// `gantry <args>` with none of the caller's `GANTRY_*` variables, no admin config file and an
/// empty data dir, plus the `env` given.
async fn gantry(args: &[&str], env: &[(&str, &str)]) -> Run {
    let home = tempfile::tempdir().expect("temp dir");
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_gantry"));
    for (name, _) in std::env::vars().filter(|(n, _)| n.starts_with("GANTRY_")) {
        command.env_remove(name);
    }
    command
        .env("HOME", home.path())
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("COLUMNS")
        .env("GANTRY_DATA_DIR", home.path().join("no-data"))
        .envs(env.iter().copied())
        .args(args);
    let output = command.output().await.expect("gantry runs");
    Run {
        ok: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Runs `gantry <args>` with its stdout a pipe whose reader is closed at once, as `| head`
/// leaves it; asserts success and returns stderr.
async fn closed_stdout(args: &[&str]) -> String {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_gantry"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("gantry runs");
    drop(child.stdout.take());
    let output = child.wait_with_output().await.unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "gantry {args:?}: {:?}\n{stderr}",
        output.status
    );
    stderr
}

/// `gantry admin --url <app> --token <token> <args>`.
async fn admin(app: &TestApp, token: &str, args: &[&str]) -> Run {
    let mut all = vec!["admin", "--url", &app.base, "--token", token];
    all.extend_from_slice(args);
    gantry(&all, &[]).await
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("writing a test file");
    path.to_str().expect("utf-8 path").to_owned()
}

#[tokio::test]
async fn projects_are_created_listed_read_and_their_token_rotated() {
    let app = spawn_app().await;
    let name = unique("site");
    let project = admin(
        &app,
        &app.admin,
        &["--json", "projects", "create", &name, "--description", "north yard"],
    )
    .await
    .json();
    let id = project["id"].as_str().unwrap();
    let token = project["applicationAccessToken"].as_str().unwrap();
    assert_eq!(project["description"], "north yard");

    let table = admin(&app, &app.admin, &["projects", "list"]).await;
    assert!(
        table.out().contains(&name) && table.out().contains(id),
        "{}",
        table.stdout
    );
    let listed = admin(
        &app,
        &app.admin,
        &["projects", "list", "--json", "--status", "development"],
    )
    .await
    .json();
    assert!(listed.as_array().unwrap().iter().any(|p| p["id"] == id), "{listed}");
    let by_name = admin(&app, &app.admin, &["projects", "get", &name, "--json"])
        .await
        .json();
    assert_eq!(by_name["id"], id);
    let shown = admin(&app, &app.admin, &["projects", "get", id]).await;
    assert!(shown.out().contains("applicationAccessToken") && shown.out().contains(token));

    let rotated = admin(&app, &app.admin, &["--json", "projects", "rotate-token", id])
        .await
        .json();
    let new_token = rotated["applicationAccessToken"].as_str().unwrap();
    assert_ne!(new_token, token);
    app.get(format!("/api/v1/projects/{id}"), token).await.error(401);
    app.get(format!("/api/v1/projects/{id}"), new_token).await.result();

    // refusals: the API's message and returnCode, a non-zero exit
    let duplicate = admin(&app, &app.admin, &["projects", "create", &name]).await;
    assert!(
        duplicate.err().contains("returnCode 40900") && duplicate.err().contains("HTTP 409"),
        "{}",
        duplicate.stderr
    );
    let bad_status = admin(
        &app,
        &app.admin,
        &["projects", "create", &unique("p"), "--status", "finished"],
    )
    .await;
    assert!(
        bad_status.err().contains("status") && bad_status.err().contains("returnCode 40000"),
        "{}",
        bad_status.stderr
    );
    let unknown = admin(
        &app,
        &app.admin,
        &["projects", "get", &uuid::Uuid::new_v4().to_string()],
    )
    .await;
    assert!(unknown.err().contains("returnCode 40400"), "{}", unknown.stderr);
    let unknown_name = admin(&app, &app.admin, &["projects", "get", "no-such-project"]).await;
    assert!(
        unknown_name.err().contains("no project named `no-such-project`"),
        "{}",
        unknown_name.stderr
    );
    let wrong_token = admin(&app, "not-a-token", &["projects", "list"]).await;
    assert!(wrong_token.err().contains("HTTP 401"), "{}", wrong_token.stderr);
}

#[tokio::test]
async fn a_model_file_creates_the_model_then_updates_it() {
    let app = spawn_app().await;
    let dir = tempfile::tempdir().unwrap();
    let name = unique("crane");
    let mut body = model_body(&name);
    let yaml = write(dir.path(), "model.yaml", &serde_norway::to_string(&body).unwrap());
    let created = admin(&app, &app.admin, &["models", "apply", &yaml]).await;
    assert!(
        created.out().starts_with(&format!("created model {name} (")),
        "{}",
        created.stdout
    );

    body["description"] = json!("revised");
    body["attributesMap"]["wind"] =
        json!({"name": "Wind", "code": "wind", "dataType": "Float", "readable": "R", "channel": "m"});
    let json_file = write(dir.path(), "model.json", &body.to_string());
    let updated = admin(&app, &app.admin, &["models", "apply", &json_file, "--json"])
        .await
        .json();
    let id = updated["id"].as_str().unwrap();
    assert!(
        created.stdout.contains(id),
        "the update kept the model: {}",
        created.stdout
    );
    assert_eq!(updated["description"], "revised");
    assert!(updated["attributesMap"]["wind"].is_object());
    let again = admin(&app, &app.admin, &["models", "apply", &json_file]).await;
    assert!(again.out().starts_with("updated model"), "{}", again.stdout);

    let listed = admin(&app, &app.admin, &["models", "list"]).await;
    assert!(
        listed.out().contains(&name) && listed.out().contains("TowerCrane"),
        "{}",
        listed.stdout
    );
    assert!(
        listed.out().contains("count, label, on, setpoint, temp, wind"),
        "{}",
        listed.stdout
    );
    let by_name = admin(&app, &app.admin, &["models", "get", &name, "--json"])
        .await
        .json();
    assert_eq!(by_name["id"], id);
    assert_eq!(
        app.get(format!("/api/v1/deviceModels/{id}"), &app.admin).await.result()["description"],
        "revised"
    );

    let empty = write(
        dir.path(),
        "empty.yaml",
        &format!(
            "name: {}\ndeviceType: ROOT\nattributesMap: {{}}\nactionsMap: {{}}\n",
            unique("e")
        ),
    );
    let refused = admin(&app, &app.admin, &["models", "apply", &empty]).await;
    assert!(
        refused.err().contains("returnCode 40000") && refused.err().contains("attributesMap"),
        "{}",
        refused.stderr
    );
    let broken = write(dir.path(), "broken.yaml", "name: [unclosed\n");
    assert!(
        admin(&app, &app.admin, &["models", "apply", &broken])
            .await
            .err()
            .contains("not valid YAML")
    );
    let nameless = write(dir.path(), "nameless.json", "{\"deviceType\": \"ROOT\"}");
    assert!(
        admin(&app, &app.admin, &["models", "apply", &nameless])
            .await
            .err()
            .contains("no `name`")
    );
    let unknown = admin(&app, &app.admin, &["models", "get", &uuid::Uuid::new_v4().to_string()]).await;
    assert!(unknown.err().contains("HTTP 404"), "{}", unknown.stderr);
}

#[tokio::test]
async fn devices_are_created_listed_locked_rotated_and_deleted() {
    let app = spawn_app().await;
    let project = app.create_project(&app.admin).await;
    let model = app.create_model(&app.admin).await;
    let (project_name, model_name) = (project["name"].as_str().unwrap(), model["name"].as_str().unwrap());
    let name = unique("crane");
    let device = admin(
        &app,
        &app.admin,
        &[
            "--json",
            "devices",
            "create",
            &name,
            "--project",
            project_name,
            "--model",
            model_name,
            "--comments",
            "gate 3",
        ],
    )
    .await
    .json();
    let id = device["id"].as_str().unwrap().to_owned();
    let token = device["accessToken"].as_str().unwrap().to_owned();
    assert_eq!(
        (device["projectId"].clone(), device["comments"].clone()),
        (project["id"].clone(), json!("gate 3"))
    );
    app.get(format!("/api/v1/devices/{id}"), &token).await.result();
    let virtual_one = admin(
        &app,
        &app.admin,
        &[
            "devices",
            "create",
            &unique("sim"),
            "--project",
            project_name,
            "--model",
            model_name,
            "--virtual",
        ],
    )
    .await;
    assert!(virtual_one.out().contains("accessToken"), "{}", virtual_one.stdout);

    let shown = admin(&app, &app.admin, &["devices", "get", &id]).await;
    assert!(
        shown.out().contains(&name) && shown.out().contains("gate 3"),
        "{}",
        shown.stdout
    );
    let locked = admin(&app, &app.admin, &["devices", "lock", &id]).await;
    assert_eq!(locked.out().trim(), format!("locked device {name} ({id})"));
    let project_id = project["id"].as_str().unwrap();
    let list = |status: &'static str| {
        let app = &app;
        async move {
            admin(
                app,
                &app.admin,
                &["devices", "list", "--project", project_id, "--status", status, "--json"],
            )
            .await
            .json()
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["deviceName"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
        }
    };
    assert_eq!(list("Locked").await, [name.as_str()]);
    assert_eq!(list("Active").await.len(), 1);
    let real = admin(
        &app,
        &app.admin,
        &["devices", "list", "--project", project_name, "--virtual", "false"],
    )
    .await;
    assert!(
        real.out().contains(&name) && real.out().contains("1 record\n"),
        "{}",
        real.stdout
    );
    let of_model = admin(&app, &app.admin, &["devices", "list", "--model", model_name, "--json"])
        .await
        .json();
    assert_eq!(of_model.as_array().unwrap().len(), 2);
    let limited = admin(
        &app,
        &app.admin,
        &["devices", "list", "--project", project_name, "--limit", "1", "--json"],
    )
    .await
    .json();
    assert_eq!(limited.as_array().unwrap().len(), 1);
    admin(&app, &app.admin, &["devices", "unlock", &id]).await.out();
    assert_eq!(list("Locked").await, Vec::<String>::new());

    let rotated = admin(&app, &app.admin, &["devices", "rotate-token", &id, "--json"])
        .await
        .json();
    let new_token = rotated["accessToken"].as_str().unwrap();
    assert_ne!(new_token, token);
    app.get(format!("/api/v1/devices/{id}"), &token).await.error(401);
    app.get(format!("/api/v1/devices/{id}"), new_token).await.result();

    let duplicate = admin(
        &app,
        &app.admin,
        &[
            "devices",
            "create",
            &name,
            "--project",
            project_name,
            "--model",
            model_name,
        ],
    )
    .await;
    assert!(duplicate.err().contains("returnCode 40900"), "{}", duplicate.stderr);
    let no_model = admin(
        &app,
        &app.admin,
        &[
            "devices",
            "create",
            &unique("d"),
            "--project",
            project_name,
            "--model",
            "nope",
        ],
    )
    .await;
    assert!(no_model.err().contains("no model named `nope`"), "{}", no_model.stderr);
    let bad_filter = admin(
        &app,
        &app.admin,
        &["devices", "list", "--project", project_name, "--status", "Sleeping"],
    )
    .await;
    assert!(
        bad_filter.err().contains("status") && bad_filter.err().contains("HTTP 400"),
        "{}",
        bad_filter.stderr
    );

    assert_eq!(
        admin(&app, &app.admin, &["devices", "delete", &id]).await.out().trim(),
        format!("deleted device {id}")
    );
    let gone = admin(&app, &app.admin, &["devices", "get", &id]).await;
    assert!(gone.err().contains("HTTP 404"), "{}", gone.stderr);
    assert!(
        admin(&app, &app.admin, &["devices", "delete", &id])
            .await
            .err()
            .contains("returnCode 40400")
    );
    assert!(
        admin(&app, &app.admin, &["devices", "lock", &id])
            .await
            .err()
            .contains("HTTP 404")
    );
}

#[tokio::test]
async fn tenants_are_created_by_the_system_administrator_and_listed_per_administrator() {
    let app = spawn_app().await;
    let name = unique("acme");
    let tenant = admin(&app, &app.admin, &["--json", "tenants", "create", &name])
        .await
        .json();
    let tenant_admin = tenant["adminToken"].as_str().unwrap();
    assert_eq!(tenant["name"], name.as_str());
    // the new tenant's administrator works in its own tenant, and may not create tenants
    admin(&app, tenant_admin, &["projects", "create", &unique("p")])
        .await
        .out();
    let refused = admin(&app, tenant_admin, &["tenants", "create", &unique("t")]).await;
    assert!(
        refused.err().contains("HTTP 403") && refused.err().contains("returnCode 40300"),
        "{}",
        refused.stderr
    );
    let taken = admin(&app, &app.admin, &["tenants", "create", &name]).await;
    assert!(taken.err().contains("HTTP 409"), "{}", taken.stderr);
    let other = app
        .post("/api/v1/tenants", &app.admin, json!({"name": unique("other")}))
        .await
        .result();

    // the system administrator lists every tenant, oldest first, without tokens
    let names = |listing: Value| -> Vec<String> {
        listing
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let all = admin(&app, &app.admin, &["tenants", "list", "--json"]).await.json();
    assert_eq!(
        names(all.clone()),
        ["default", name.as_str(), other["name"].as_str().unwrap()]
    );
    assert!(
        all.as_array().unwrap().iter().all(|t| t.get("adminToken").is_none()),
        "{all}"
    );
    let table = admin(&app, &app.admin, &["tenants", "list"]).await;
    assert!(
        table.out().contains(&name) && table.out().contains("3 records"),
        "{}",
        table.stdout
    );
    // a tenant administrator sees its own tenant only
    let own = admin(&app, tenant_admin, &["tenants", "list", "--json"]).await.json();
    assert_eq!(names(own.clone()), [name.as_str()]);
    assert_eq!(own[0]["id"], tenant["id"]);
    let paged = app
        .get("/api/v1/tenants?pageSize=1&pageNo=2", &app.admin)
        .await
        .result();
    assert_eq!(
        (paged["totalResults"].clone(), paged["results"][0]["name"].clone()),
        (json!(3), json!(name))
    );
    app.get("/api/v1/tenants?pageSize=0", &app.admin).await.error(400);
    // application and device tokens administer no tenant
    let world = app.world().await;
    for token in [&world.project["applicationAccessToken"], &world.device["accessToken"]] {
        let refused = admin(&app, token.as_str().unwrap(), &["tenants", "list"]).await;
        assert!(refused.err().contains("HTTP 403"), "{}", refused.stderr);
    }
    app.get("/api/v1/tenants", "no-such-token").await.error(401);
}

#[tokio::test]
async fn an_application_token_lists_its_devices_but_cannot_write_models() {
    let app = spawn_app().await;
    let world = app.world().await;
    let application = world.project["applicationAccessToken"].as_str().unwrap();
    let project_id = world.project["id"].as_str().unwrap();
    let devices = admin(
        &app,
        application,
        &["devices", "list", "--project", project_id, "--json"],
    )
    .await
    .json();
    assert_eq!(devices.as_array().unwrap().len(), 1);
    assert_eq!(devices[0]["id"], world.device["id"]);

    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "model.json", &model_body(&unique("m")).to_string());
    let refused = admin(&app, application, &["models", "apply", &file]).await;
    let expected = app
        .post("/api/v1/deviceModels", application, model_body(&unique("m")))
        .await
        .error(403);
    assert!(
        refused.err().contains(&expected) && refused.err().contains("returnCode 40300"),
        "{}",
        refused.stderr
    );
    // another project is not the token's
    let other = app.create_project(&app.admin).await;
    let hidden = admin(
        &app,
        application,
        &["devices", "list", "--project", other["id"].as_str().unwrap()],
    )
    .await;
    assert!(hidden.err().contains("HTTP 40"), "{}", hidden.stderr);
}

#[tokio::test]
async fn import_of_2000_devices_writes_owner_only_tokens_and_a_rerun_skips_them() {
    let app = spawn_app().await;
    let project = app.create_project(&app.admin).await;
    let model = app.create_model(&app.admin).await;
    let (project_name, model_id) = (project["name"].as_str().unwrap(), model["id"].as_str().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let prefix = unique("meter");
    let mut csv = String::from("deviceName,comments,virtual\n");
    for i in 0..2000 {
        csv.push_str(&format!("{prefix}-{i:04},row {i},{}\n", i % 2 == 0));
    }
    let input = write(dir.path(), "devices.csv", &csv);
    let tokens = dir.path().join("tokens.csv");
    let tokens_arg = tokens.to_str().unwrap();
    let args = [
        "devices",
        "import",
        &input,
        "--project",
        project_name,
        "--model",
        model_id,
        "--output",
        tokens_arg,
    ];

    let first = admin(&app, &app.admin, &args).await;
    assert!(
        first
            .out()
            .contains("created 2000, skipped 0 (already in the project), failed 0"),
        "{}",
        first.stdout
    );
    assert_eq!(std::fs::metadata(&tokens).unwrap().permissions().mode() & 0o777, 0o600);
    let mut reader = csv::Reader::from_path(&tokens).unwrap();
    assert_eq!(reader.headers().unwrap(), vec!["deviceName", "id", "accessToken"]);
    let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), 2000);
    let names: std::collections::HashSet<_> = rows.iter().map(|r| r[0].to_owned()).collect();
    assert_eq!(names.len(), 2000);
    // each token is its device's: every device reads itself with its own token
    futures::stream::iter(&rows)
        .for_each_concurrent(16, |row| async {
            let device = app.get(format!("/api/v1/devices/{}", &row[1]), &row[2]).await.result();
            assert_eq!(device["deviceName"], &row[0]);
        })
        .await;
    // and logs the device in over MQTT
    gantry::device::DeviceClient::connect(app.mqtt, "gantry", &rows[1999][1], &rows[1999][2])
        .await
        .expect("an imported device logs in with its token");
    let sample = app
        .get(format!("/api/v1/devices/{}", &rows[0][1]), &app.admin)
        .await
        .result();
    let line: usize = sample["deviceName"]
        .as_str()
        .unwrap()
        .rsplit('-')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        (
            sample["comments"].clone(),
            sample["virtual"].clone(),
            sample["projectId"].clone()
        ),
        (
            json!(format!("row {line}")),
            json!(line.is_multiple_of(2)),
            project["id"].clone()
        )
    );

    // the tokens file is never overwritten by accident: nothing is created then
    let refused = admin(&app, &app.admin, &args).await;
    assert!(refused.err().contains("--force"), "{}", refused.stderr);
    assert_eq!(csv::Reader::from_path(&tokens).unwrap().records().count(), 2000);

    let again = dir.path().join("again.csv");
    let mut rerun_args = args.to_vec();
    rerun_args[8] = again.to_str().unwrap();
    let rerun = admin(&app, &app.admin, &[&["--json"][..], &rerun_args[..]].concat())
        .await
        .json();
    assert_eq!(
        rerun,
        json!({"created": 0, "skipped": 2000, "failed": [], "notAttempted": 0, "output": again})
    );
    assert_eq!(csv::Reader::from_path(&again).unwrap().records().count(), 0);
    let listed = app
        .get(
            format!(
                "/api/v1/projects/{}/devices?pageSize=1",
                project["id"].as_str().unwrap()
            ),
            &app.admin,
        )
        .await
        .result();
    assert_eq!(listed["totalResults"], 2000);

    // with --force the file is replaced; bad rows fail with their reasons, good ones are created
    let mixed = write(
        dir.path(),
        "mixed.csv",
        &format!("deviceName,status\n{prefix}-0000,\n{prefix}-new,Active\n{prefix}-bad,Asleep\n,\n"),
    );
    std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mixed_run = admin(
        &app,
        &app.admin,
        &[
            "devices",
            "import",
            &mixed,
            "--project",
            project_name,
            "--model",
            model_id,
            "-o",
            tokens_arg,
            "--force",
        ],
    )
    .await;
    assert!(!mixed_run.ok);
    assert!(
        mixed_run
            .stdout
            .contains("created 1, skipped 1 (already in the project), failed 2"),
        "{}",
        mixed_run.stdout
    );
    assert!(
        mixed_run.stdout.contains(&format!("line 4 ({prefix}-bad): ")) && mixed_run.stdout.contains("status"),
        "{}",
        mixed_run.stdout
    );
    assert!(
        mixed_run.stdout.contains("line 5 (): deviceName is empty"),
        "{}",
        mixed_run.stdout
    );
    assert!(
        mixed_run.stderr.contains("2 of the file's devices were not created"),
        "{}",
        mixed_run.stderr
    );
    assert_eq!(std::fs::metadata(&tokens).unwrap().permissions().mode() & 0o777, 0o600);
    let replaced: Vec<_> = csv::Reader::from_path(&tokens)
        .unwrap()
        .records()
        .map(Result::unwrap)
        .collect();
    assert_eq!((replaced.len(), &replaced[0][0]), (1, format!("{prefix}-new").as_str()));

    let unused = dir.path().join("unused.csv");
    let unknown = admin(
        &app,
        &app.admin,
        &[
            "devices",
            "import",
            &input,
            "--project",
            "nope",
            "--model",
            model_id,
            "-o",
            unused.to_str().unwrap(),
        ],
    )
    .await;
    assert!(unknown.err().contains("no project named `nope`"), "{}", unknown.stderr);
    assert!(!unused.exists());
}

#[tokio::test]
async fn export_writes_the_posted_events_as_csv_and_json_lines() {
    let app = spawn_app().await;
    let world = app.world().await;
    const BASE_MS: i64 = 1_714_492_800_000;
    // more than one page of 1000, values of every type
    let posted: Vec<(String, Value, i64)> = (0..1203)
        .map(|i: i64| match i % 4 {
            0 => ("temp".to_owned(), json!(i as f64 + 0.5), BASE_MS + i * 1000),
            1 => ("count".to_owned(), json!(i), BASE_MS + i * 1000),
            2 => ("label".to_owned(), json!(format!("l,\"{i}\"")), BASE_MS + i * 1000),
            _ => ("on".to_owned(), json!(i % 8 == 3), BASE_MS + i * 1000),
        })
        .collect();
    futures::stream::iter(&posted)
        .for_each_concurrent(16, |(code, value, ms)| async {
            let data_type = match code.as_str() {
                "temp" => "Float",
                "count" => "Integer",
                "label" => "String",
                _ => "Boolean",
            };
            app.post(
                "/api/v1/deviceEvents",
                &app.admin,
                event(&world.device, code, value.clone(), data_type, *ms),
            )
            .await
            .result();
        })
        .await;
    let device = world.device["id"].as_str().unwrap();
    let mut expected: Vec<(String, String, i64)> = posted
        .iter()
        .map(|(c, v, ms)| (c.clone(), v.to_string(), *ms))
        .collect();
    expected.sort();

    let jsonl = admin(
        &app,
        &app.admin,
        &["events", "export", "--device", device, "--format", "jsonl"],
    )
    .await;
    let lines: Vec<Value> = jsonl.out().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let mut exported: Vec<(String, String, i64)> = lines
        .iter()
        .map(|e| {
            (
                e["attributeCode"].as_str().unwrap().to_owned(),
                e["attributeData"].to_string(),
                e["deviceTimestamp"].as_i64().unwrap(),
            )
        })
        .collect();
    assert!(
        lines
            .windows(2)
            .all(|w| w[0]["deviceTimestamp"].as_i64() >= w[1]["deviceTimestamp"].as_i64()),
        "newest first"
    );
    exported.sort();
    assert_eq!(exported, expected);
    assert_eq!(lines[0]["context"], json!({"site": "north"}));
    // Into a pipe whose reader is gone (`| head`): a quiet success, as for any Unix filter.
    for format in ["jsonl", "csv"] {
        let args = [
            "admin", "--url", &app.base, "--token", &app.admin, "events", "export", "--device", device, "--format",
            format,
        ];
        let stderr = closed_stdout(&args).await;
        assert!(stderr.is_empty(), "{format}: {stderr}");
    }

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("events.csv");
    let csv_run = admin(
        &app,
        &app.admin,
        &[
            "events",
            "export",
            "--device",
            device,
            "--format",
            "csv",
            "-o",
            file.to_str().unwrap(),
        ],
    )
    .await;
    assert!(
        csv_run.ok && csv_run.stdout.is_empty(),
        "{}\n{}",
        csv_run.stdout,
        csv_run.stderr
    );
    assert!(csv_run.stderr.contains("wrote 1203 events"), "{}", csv_run.stderr);
    let mut reader = csv::Reader::from_path(&file).unwrap();
    let headers = reader.headers().unwrap().clone();
    let column = |name: &str| headers.iter().position(|h| h == name).unwrap();
    let (code, data, ms, kind) = (
        column("attributeCode"),
        column("attributeData"),
        column("deviceTimestamp"),
        column("attributeType"),
    );
    let mut from_csv: Vec<(String, String, i64)> = reader
        .records()
        .map(|r| {
            let r = r.unwrap();
            // strings are written bare, other values as JSON
            let value = if &r[kind] == "String" {
                json!(&r[data]).to_string()
            } else {
                r[data].to_owned()
            };
            (r[code].to_owned(), value, r[ms].parse().unwrap())
        })
        .collect();
    from_csv.sort();
    assert_eq!(from_csv, expected);

    // a range, in the API's format and in RFC 3339: inclusive at both ends
    let (start, end) = (at_plus8(BASE_MS + 10_000), "2024-04-30T16:00:20Z");
    let ranged = admin(
        &app,
        &app.admin,
        &[
            "events", "export", "--device", device, "--format", "jsonl", "--start", &start, "--end", end,
        ],
    )
    .await;
    let times: Vec<i64> = ranged
        .out()
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["deviceTimestamp"]
                .as_i64()
                .unwrap()
        })
        .collect();
    assert_eq!(times, (10..=20).rev().map(|i| BASE_MS + i * 1000).collect::<Vec<_>>());

    let unknown = admin(
        &app,
        &app.admin,
        &["events", "export", "--device", &uuid::Uuid::new_v4().to_string()],
    )
    .await;
    assert!(unknown.err().contains("HTTP 404"), "{}", unknown.stderr);
    let bad_time = admin(
        &app,
        &app.admin,
        &["events", "export", "--device", device, "--start", "yesterday"],
    )
    .await;
    assert!(
        bad_time.err().contains("`yesterday` is not a time"),
        "{}",
        bad_time.stderr
    );
    let reversed = admin(
        &app,
        &app.admin,
        &[
            "events",
            "export",
            "--device",
            device,
            "--start",
            "2025-01-01",
            "--end",
            "2024-01-01",
        ],
    )
    .await;
    assert!(reversed.err().contains("is after --end"), "{}", reversed.stderr);
}

#[tokio::test]
async fn the_server_and_token_come_from_env_a_profile_or_the_data_dir() {
    let app = spawn_app().await;
    let name = unique("p");
    app.post("/api/v1/projects", &app.admin, json!({"name": name}))
        .await
        .result();
    let names = |run: Run| {
        run.json()
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };

    let from_env = gantry(
        &["admin", "projects", "list", "--json"],
        &[("GANTRY_URL", &app.base), ("GANTRY_TOKEN", &app.admin)],
    )
    .await;
    assert_eq!(names(from_env), [name.as_str()]);

    let dir = tempfile::tempdir().unwrap();
    let config = write(
        dir.path(),
        "admin.toml",
        &format!(
            "[default]\nurl = \"http://127.0.0.1:9\"\n\n[local]\nurl = \"{}\"\ntoken = \"{}\"\n",
            app.base, app.admin
        ),
    );
    let profile = gantry(
        &["admin", "--profile", "local", "projects", "list", "--json"],
        &[("GANTRY_ADMIN_CONFIG", &config)],
    )
    .await;
    assert!(
        profile.stderr.contains("holds tokens and others may read it"),
        "{}",
        profile.stderr
    );
    assert_eq!(names(profile), [name.as_str()]);
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o600)).unwrap();
    // a flag wins over the profile
    let flag = gantry(
        &[
            "admin", "--url", &app.base, "--token", &app.admin, "projects", "list", "--json",
        ],
        &[("GANTRY_ADMIN_CONFIG", &config)],
    )
    .await;
    assert!(flag.stderr.is_empty(), "{}", flag.stderr);
    assert_eq!(names(flag), [name.as_str()]);
    let unreachable = gantry(
        &["admin", "--token", "t", "projects", "list"],
        &[("GANTRY_ADMIN_CONFIG", &config)],
    )
    .await;
    assert!(
        unreachable.err().contains("cannot reach http://127.0.0.1:9"),
        "{}",
        unreachable.stderr
    );
    let missing = gantry(
        &["admin", "--profile", "prod", "projects", "list"],
        &[("GANTRY_ADMIN_CONFIG", &config)],
    )
    .await;
    assert!(missing.err().contains("no profile `[prod]`"), "{}", missing.stderr);

    let data_dir = tempfile::tempdir().unwrap();
    write(data_dir.path(), "admin-token", &format!("{}\n", app.admin));
    let local = gantry(
        &["admin", "--url", &app.base, "projects", "list", "--json"],
        &[("GANTRY_DATA_DIR", data_dir.path().to_str().unwrap())],
    )
    .await;
    assert_eq!(names(local), [name.as_str()]);
    let none = gantry(&["admin", "--url", &app.base, "projects", "list"], &[]).await;
    assert!(none.err().contains("no token: pass --token"), "{}", none.stderr);
}

#[tokio::test]
async fn https_needs_the_generated_ca_given_with_cacert() {
    let app = spawn_app().await;
    let (Some(https), Some(ca)) = (app.https, app.tls_ca.clone()) else {
        panic!("the local configuration has an HTTPS listener with a generated CA");
    };
    let url = format!("https://localhost:{}", https.port());
    let trusted = gantry(
        &[
            "admin",
            "--url",
            &url,
            "--token",
            &app.admin,
            "--cacert",
            ca.to_str().unwrap(),
            "projects",
            "list",
        ],
        &[],
    )
    .await;
    assert!(trusted.out().contains("0 records"), "{}", trusted.stdout);
    // the data dir's tls/ca.pem is trusted without the flag
    let by_data_dir = gantry(
        &["admin", "--url", &url, "--token", &app.admin, "projects", "list"],
        &[("GANTRY_DATA_DIR", app.data_dir.to_str().unwrap())],
    )
    .await;
    assert!(by_data_dir.out().contains("0 records"), "{}", by_data_dir.stdout);
    let untrusted = gantry(
        &["admin", "--url", &url, "--token", &app.admin, "projects", "list"],
        &[],
    )
    .await;
    assert!(untrusted.err().contains("cannot reach"), "{}", untrusted.stderr);
}

/// `gantry completions bash | head -3`: the reader leaves early, and that is no error (no
/// panic, no backtrace, nothing on stderr).
#[tokio::test]
async fn completions_into_a_closed_pipe_succeed_quietly() {
    for shell in ["bash", "zsh", "fish"] {
        let stderr = closed_stdout(&["completions", shell]).await;
        assert!(stderr.is_empty(), "{shell}: {stderr}");
    }
}

#[tokio::test]
async fn completions_are_generated_for_bash_zsh_and_fish() {
    for (shell, marker) in [
        ("bash", "complete -F"),
        ("zsh", "#compdef gantry"),
        ("fish", "complete -c gantry"),
    ] {
        let run = gantry(&["completions", shell], &[]).await;
        assert!(run.out().contains(marker), "{shell}: {}", run.stdout);
        assert!(
            run.out().contains("rotate-token") && run.out().contains("import"),
            "{shell}"
        );
    }
    let unknown = gantry(&["completions", "tcsh"], &[]).await;
    assert!(unknown.err().contains("tcsh"), "{}", unknown.stderr);
}

#[tokio::test]
async fn an_interrupted_import_keeps_every_token_and_a_rerun_finishes_it() {
    let app = spawn_app().await;
    let project = app.create_project(&app.admin).await;
    let model = app.create_model(&app.admin).await;
    let (project_id, model_id) = (project["id"].as_str().unwrap(), model["id"].as_str().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let csv: String = std::iter::once("deviceName\n".to_owned())
        .chain((0..2000).map(|i| format!("unit-{i:04}\n")))
        .collect();
    let input = write(dir.path(), "devices.csv", &csv);
    let tokens = dir.path().join("tokens.csv");
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_gantry"))
        .args([
            "admin", "--url", &app.base, "--token", &app.admin, "devices", "import", &input,
        ])
        .args([
            "--project",
            project_id,
            "--model",
            model_id,
            "--concurrency",
            "1",
            "-o",
            tokens.to_str().unwrap(),
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let rows = || std::fs::read_to_string(&tokens).map_or(0, |t| t.lines().count().saturating_sub(1));
    assert!(
        crate::helpers::wait_for(std::time::Duration::from_secs(60), async || rows() >= 20).await,
        "the import started"
    );
    let pid = child.id().unwrap().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap()
            .success()
    );
    let output = child.wait_with_output().await.unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(
        !output.status.success() && stderr.contains("interrupted"),
        "{stdout}\n{stderr}"
    );

    // every device the server created has its token in the file
    let written = rows();
    let total = app
        .get(format!("/api/v1/projects/{project_id}/devices?pageSize=1"), &app.admin)
        .await
        .result()["totalResults"]
        .clone();
    assert_eq!(total, json!(written), "{stdout}");
    assert!(written < 2000, "{stdout}");
    assert!(stdout.contains(&format!("created {written}, skipped 0")), "{stdout}");
    assert!(
        stdout.contains(&format!("interrupted: {} not attempted", 2000 - written)),
        "{stdout}"
    );

    let rest = dir.path().join("rest.csv");
    let rerun = admin(
        &app,
        &app.admin,
        &[
            "devices",
            "import",
            &input,
            "--project",
            project_id,
            "--model",
            model_id,
            "-o",
            rest.to_str().unwrap(),
        ],
    )
    .await;
    assert!(
        rerun
            .out()
            .contains(&format!("created {}, skipped {written} ", 2000 - written)),
        "{}",
        rerun.stdout
    );
    let listed = app
        .get(format!("/api/v1/projects/{project_id}/devices?pageSize=1"), &app.admin)
        .await
        .result();
    assert_eq!(listed["totalResults"], 2000);
}
