//! An operator's walk through the console: sign in as a user (an ADMIN account), create a
//! project, a model (an attribute, a position, an action, an alarm rule) and a device, watch the
//! device page follow its telemetry, a control's ack and a desired value live, see an alarm
//! raised by telemetry appear on the alarms page live and acknowledge it there, see it on the
//! devices listing and shaded on the device's chart, look at the users (changing one's role and
//! projects) and the audit log, sign out and be refused; then a VIEWER signs in, sees the device
//! with no control form and no token, and changes its own password.

use std::time::Duration;

use fantoccini::Locator;
use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::browser::Browser;
use crate::eventually;

const LIVE: Duration = Duration::from_secs(15);

pub async fn operator_walk(b: &Browser) {
    sign_in(b).await;
    let project = create_project(b).await;
    create_model(b).await;
    let (device, token) = create_device(b, &project).await;
    let mut mqtt = Device::connect(b, &device, &token).await;
    watch_device(b, &device, &mut mqtt).await;
    control_device(b, &mut mqtt).await;
    desired_state(b, &mut mqtt).await;
    alarms_live(b, &project, &mqtt).await;
    alarm_marks(b, &project, &device).await;
    other_pages(b, &project).await;
    let viewer = admin_pages(b).await;
    sign_out(b, &device).await;
    viewer_reads_only(b, &device, &token, &viewer).await;
    own_password(b, &viewer).await;
}

/// A user account made through the REST API with the administrator's token; its password.
async fn create_user(b: &Browser, username: &str, role: &str) -> String {
    let password = format!("pw-{}", uuid::Uuid::new_v4().simple());
    let answer: Value = reqwest::Client::new()
        .post(format!("{}/api/v1/users", b.base))
        .bearer_auth(&b.admin)
        .json(&json!({"username": username, "password": password, "role": role}))
        .send()
        .await
        .expect("the API answers")
        .json()
        .await
        .expect("JSON");
    assert_eq!(answer["returnCode"], 0, "{answer}");
    password
}

/// Signs in with a user account's username and password.
async fn sign_in_as(b: &Browser, username: &str, password: &str) {
    b.open("/console/").await;
    b.fill("username", username).await;
    b.fill("password", password).await;
    b.press("Sign in").await;
}

async fn sign_in(b: &Browser) {
    b.open("/console/").await;
    assert_eq!(
        b.text("h1").await,
        "Sign in",
        "an anonymous visitor is sent to the sign-in form"
    );
    b.fill("token", "not-a-token").await;
    b.press("Sign in").await;
    assert!(
        b.text("#f-token-error").await.contains("is not a valid token"),
        "a wrong token is refused next to its field"
    );
    b.check_and_shoot("sign-in").await;
    let password = create_user(b, "site.manager", "ADMIN").await;
    sign_in_as(b, "site.manager", "not the password").await;
    assert!(
        b.text("#f-password-error").await.contains("wrong"),
        "a wrong password is refused next to its field"
    );
    sign_in_as(b, "site.manager", &password).await;
    assert_eq!(b.text("h1").await, "Projects");
}

/// A VIEWER reads the device page but is offered no control form, and sees no token; it reads
/// the model's alarm rules and is offered no form for them.
async fn viewer_reads_only(b: &Browser, device: &str, token: &str, password: &str) {
    sign_in_as(b, "site.viewer", password).await;
    assert_eq!(b.text("h1").await, "Projects");
    b.open(&format!("/console/devices/{device}")).await;
    let page = b.text("main").await;
    assert!(page.contains("crane-07"), "the viewer reads the device: {page}");
    assert!(
        b.client
            .find(fantoccini::Locator::XPath("//button[normalize-space(.)='Send']"))
            .await
            .is_err(),
        "no control form for a viewer"
    );
    assert!(!page.contains("Rotate"), "no token rotation for a viewer: {page}");
    assert!(
        page.contains("Desired state") && !page.contains("Set desired"),
        "the viewer reads the desired state and cannot set it: {page}"
    );
    assert!(!b.text("body").await.contains(token), "the viewer sees no device token");
    b.check_and_shoot("device-viewer").await;
    b.open("/console/models").await;
    b.client
        .find(Locator::LinkText("Tower crane T1"))
        .await
        .expect("model link")
        .click()
        .await
        .expect("open");
    let rules = b.text("#alarm-rules").await;
    assert!(
        rules.contains("Overload") && !rules.contains("Add an alarm rule") && !rules.contains("Disable"),
        "the viewer reads the rules and is offered no form: {rules}"
    );
}

/// A signed-in user changes its own password from the account page its header links to: every
/// session of its ends, it is shown the sign-in form, and signs in with the new password.
async fn own_password(b: &Browser, old: &str) {
    b.client
        .find(Locator::Css("header.top a.account"))
        .await
        .expect("the header links to the account")
        .click()
        .await
        .expect("open");
    assert_eq!(b.text("h1").await, "Your account");
    assert_eq!(b.text("#account-role").await, "VIEWER");
    b.fill("currentPassword", "not my password").await;
    b.fill("newPassword", "a new long passphrase").await;
    b.fill("confirmPassword", "a new long passphrase").await;
    b.press("Change password").await;
    assert!(
        !b.text("#f-currentPassword-error").await.is_empty(),
        "a wrong current password is refused next to its field: {}",
        b.text("main").await
    );
    b.check_and_shoot("account").await;
    b.fill("currentPassword", old).await;
    b.fill("newPassword", "a new long passphrase").await;
    b.fill("confirmPassword", "a new long passphrase").await;
    b.press("Change password").await;
    assert_eq!(b.text("h1").await, "Sign in");
    assert!(
        b.text("main").await.contains("sign in with the new password"),
        "{}",
        b.text("main").await
    );
    b.open("/console/projects").await;
    assert_eq!(b.text("h1").await, "Sign in", "the old session has ended");
    sign_in_as(b, "site.viewer", old).await;
    assert!(
        !b.text("#f-password-error").await.is_empty(),
        "the old password no longer works"
    );
    sign_in_as(b, "site.viewer", "a new long passphrase").await;
    assert_eq!(b.text("h1").await, "Projects");
    b.press("Sign out").await;
}

async fn create_project(b: &Browser) -> String {
    b.press("Create project").await;
    assert!(
        b.text("#f-name-error").await.contains("required"),
        "a project needs a name: {}",
        b.text("main").await
    );
    b.fill("name", "Harbour site").await;
    b.fill("address", "Pier 4").await;
    b.fill("mapInfo.lat", "31.2304").await;
    b.fill("mapInfo.lng", "121.4737").await;
    b.fill("mapInfo.zoom", "14").await;
    b.press("Create project").await;
    assert_eq!(b.text("h1").await, "Harbour site");
    let url = b.client.current_url().await.expect("url");
    let id = url.path().rsplit('/').next().expect("project id").to_owned();
    b.open("/console/projects").await;
    assert!(b.text("table").await.contains("Harbour site"));
    b.check_and_shoot("projects").await;
    id
}

async fn create_model(b: &Browser) {
    b.open("/console/models").await;
    b.fill("name", "Tower crane T1").await;
    b.choose("deviceType", "TowerCrane").await;
    let attributes = [
        ("load", "Load (t)", "Float", "RW", "m"),
        ("pos", "Position", "String", "R", "g"),
    ];
    for (i, (code, name, data_type, readable, channel)) in attributes.into_iter().enumerate() {
        b.fill("code", code).await;
        b.fill("attributeName", name).await;
        b.choose("dataType", data_type).await;
        b.choose("readable", readable).await;
        b.choose("channel", channel).await;
        b.press(if i == 0 { "Create model" } else { "Add attribute" }).await;
        assert_eq!(b.text("h1").await, "Tower crane T1", "{}", b.text("main").await);
    }
    b.fill("code", "bad code").await;
    b.press("Add attribute").await;
    assert!(
        !b.text("#f-code-error").await.is_empty(),
        "a bad code is refused next to its field"
    );
    b.open("/console/models").await;
    b.client
        .find(Locator::LinkText("Tower crane T1"))
        .await
        .expect("model link")
        .click()
        .await
        .expect("open");
    b.fill("actionCode", "slew").await;
    b.fill("params", "angle:Integer:required").await;
    b.press("Add action").await;
    let page = b.text("main").await;
    assert!(
        page.contains("load") && page.contains("pos") && page.contains("angle:Integer (required)"),
        "{page}"
    );
    create_alarm_rule(b).await;
    b.check_and_shoot("model").await;
}

/// The alarm rule `load > 40` (CRITICAL), made with the model page's form.
async fn create_alarm_rule(b: &Browser) {
    assert!(b.text("#alarm-rules").await.contains("No alarm rules."));
    b.fill("name", "Overload").await;
    b.choose("attributeCode", "load").await;
    b.choose("severity", "CRITICAL").await;
    b.choose("condition.op", ">").await;
    b.fill("condition.value", "forty").await;
    b.press("Add alarm rule").await;
    assert!(
        b.text("#f-condition\\.value-error").await.contains("not a number"),
        "a value that is not a number is refused next to its input: {}",
        b.text("#alarm-rules").await
    );
    b.fill("condition.value", "40").await;
    b.fill("description", "Load over the crane's rating").await;
    b.press("Add alarm rule").await;
    let rules = b.text("table.rules").await;
    for shown in [
        "Overload",
        "load",
        "CRITICAL",
        "> 40",
        "enabled",
        "0 of 0 devices evaluated",
    ] {
        assert!(rules.contains(shown), "the rule shows {shown}: {rules}");
    }
}

async fn create_device(b: &Browser, project: &str) -> (String, String) {
    b.open(&format!("/console/projects/{project}/devices")).await;
    b.fill("deviceName", "crane-07").await;
    b.press("Create device").await;
    let token = b.text("#new-token").await;
    assert!(
        token.len() >= 32 && token.chars().all(|c| c.is_ascii_hexdigit()),
        "the new token is shown: {}",
        b.text("main").await
    );
    assert!(b.text("table").await.contains("crane-07"));
    b.check_and_shoot("devices").await;
    b.client
        .find(Locator::LinkText("Open the device"))
        .await
        .expect("link")
        .click()
        .await
        .expect("open");
    let url = b.client.current_url().await.expect("url");
    let device = url.path().rsplit('/').next().expect("device id").to_owned();
    assert_eq!(b.text("h1").await, "crane-07");
    assert!(
        !b.text("main").await.contains(&token),
        "the device page does not show the token"
    );
    (device, token)
}

/// The device over MQTT: its publishes, and the messages to its inbox.
struct Device {
    client: AsyncClient,
    id: String,
    inbox: mpsc::UnboundedReceiver<Value>,
}

impl Device {
    async fn connect(b: &Browser, id: &str, token: &str) -> Device {
        let mut options = MqttOptions::new(id, b.mqtt.ip().to_string(), b.mqtt.port());
        options.set_credentials(id, token);
        let (client, mut events) = AsyncClient::new(options, 10);
        let (tx, inbox) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok(event) = events.poll().await {
                if let Event::Incoming(Packet::Publish(p)) = event
                    && let Ok(v) = serde_json::from_slice(&p.payload)
                {
                    let _ = tx.send(v);
                }
            }
        });
        client
            .subscribe(format!("gantry/out/json/{id}"), QoS::AtLeastOnce)
            .await
            .expect("subscribe");
        Device {
            client,
            id: id.to_owned(),
            inbox,
        }
    }

    async fn publish(&self, message: Value) {
        let topic = format!("gantry/in/json/{}", self.id);
        self.client
            .publish(topic, QoS::AtLeastOnce, false, message.to_string())
            .await
            .expect("publish");
    }
}

async fn watch_device(b: &Browser, device: &str, mqtt: &mut Device) {
    let online = eventually(LIVE, async || b.text("#presence").await == "online").await;
    assert!(
        online,
        "the open page shows the device online: {}",
        b.text("#presence").await
    );
    b.publish_and_wait(mqtt, "load", json!(12.5), "12.5").await;
    b.publish_and_wait(mqtt, "load", json!(17.25), "17.25").await;
    b.publish_and_wait(mqtt, "pos", json!("31.2310,121.4740"), "31.2310,121.4740")
        .await;
    b.open(&format!("/console/devices/{device}?window=hour")).await;
    assert!(
        b.client.find(Locator::Css("svg.chart polyline")).await.is_ok(),
        "the chart draws the values"
    );
}

impl Browser {
    /// Publishes a value of `code` and waits for the open page's shadow to show `shown`.
    async fn publish_and_wait(&self, mqtt: &Device, code: &str, value: Value, shown: &str) {
        let before = self.client.current_url().await.expect("url");
        mqtt.publish(json!({"meta": {"type": "m"}, "payload": {"attrs": [{"code": code, "value": value}]}}))
            .await;
        let cell = format!("#shadow-{code} .value");
        let live = eventually(LIVE, async || self.text(&cell).await == shown).await;
        assert!(
            live,
            "the shadow of {code} shows {shown} live: {}",
            self.text(&cell).await
        );
        assert_eq!(
            self.client.current_url().await.expect("url"),
            before,
            "without a reload"
        );
    }
}

async fn control_device(b: &Browser, mqtt: &mut Device) {
    b.fill("attr.load", "not a number").await;
    b.press("Send").await;
    assert!(
        !b.text("#f-attr\\.load-error").await.is_empty(),
        "a bad value is refused next to its input"
    );
    b.fill("attr.load", "30").await;
    b.press("Send").await;
    let sent = tokio::time::timeout(LIVE, mqtt.inbox.recv())
        .await
        .expect("a control")
        .expect("inbox open");
    assert_eq!(sent["payload"]["attrs"][0]["value"], json!(30.0), "{sent}");
    let id = sent["meta"]["id"].as_str().expect("meta.id").to_owned();
    let row = format!("#log-{id} .log-status");
    assert_eq!(b.text(&row).await, "processing", "the control's log awaits the ack");
    mqtt.publish(json!({"meta": {"type": "ack", "correlationId": id}}))
        .await;
    let completed = eventually(LIVE, async || b.text(&row).await == "completed").await;
    assert!(
        completed,
        "the log turns completed on the open page: {}",
        b.text(&row).await
    );
}

/// A desired value set from the device page is sent to the connected device, and turns
/// `applied` on the open page when the device acks it.
async fn desired_state(b: &Browser, mqtt: &mut Device) {
    b.fill("attributes.load", "35").await;
    b.press("Set desired").await;
    assert!(
        b.text("main").await.contains("Desired state saved"),
        "{}",
        b.text("main").await
    );
    let sent = tokio::time::timeout(LIVE, mqtt.inbox.recv())
        .await
        .expect("a desired delta")
        .expect("inbox open");
    assert_eq!(sent["meta"]["type"], "c", "{sent}");
    let attr = &sent["payload"]["attrs"][0];
    assert_eq!(
        (&attr["code"], &attr["value"]),
        (&json!("load"), &json!(35.0)),
        "{sent}"
    );
    let id = sent["meta"]["id"].as_str().expect("meta.id").to_owned();
    mqtt.publish(json!({"meta": {"type": "ack", "correlationId": id}}))
        .await;
    let status = "#desired-load .desired-status";
    let applied = eventually(LIVE, async || b.text(status).await == "applied").await;
    assert!(
        applied,
        "the desired value turns applied live: {}",
        b.text(status).await
    );
}

/// Telemetry over MQTT raises the model's rule's alarm, which the open alarms page shows without
/// a reload; it is acknowledged from the page, and commented on its own page.
async fn alarms_live(b: &Browser, project: &str, mqtt: &Device) {
    b.open(&format!("/console/projects/{project}/alarms")).await;
    assert!(b.text("#alarm-list").await.contains("No alarms match."));
    b.wait_for_stream().await;
    b.client
        .execute("window.gantryNotReloaded = true;", vec![])
        .await
        .expect("script runs");
    mqtt.publish(json!({"meta": {"type": "m"}, "payload": {"attrs": [{"code": "load", "value": 47.5}]}}))
        .await;
    let row = "table.alarms tbody tr";
    let shown = eventually(LIVE, async || b.text(row).await.contains("Overload")).await;
    assert!(shown, "the alarm appears live: {}", b.text("#alarm-list").await);
    let same_page = b
        .client
        .execute("return window.gantryNotReloaded === true;", vec![])
        .await
        .expect("script runs");
    assert_eq!(same_page, json!(true), "without a reload");
    let text = b.text(row).await;
    assert!(
        text.contains("CRITICAL") && text.contains("ACTIVE") && text.contains("crane-07") && text.contains("47.5"),
        "{text}"
    );
    b.check_and_shoot("alarms").await;

    b.press("Acknowledge").await;
    assert_eq!(b.text(&format!("{row} .alarm-status")).await, "ACKNOWLEDGED");
    b.client
        .find(Locator::LinkText("Overload"))
        .await
        .expect("the alarm's link")
        .click()
        .await
        .expect("open");
    assert_eq!(b.text("h1").await, "Overload");
    b.fill("text", "Load reduced, crew informed").await;
    b.press("Add comment").await;
    let history = b.text("table.history").await;
    for shown in [
        "RAISED",
        "ACKNOWLEDGED",
        "COMMENTED",
        "Load reduced, crew informed",
        "site.manager",
    ] {
        assert!(history.contains(shown), "the history shows {shown}: {history}");
    }
    b.check_and_shoot("alarm").await;
}

/// The users (an OPERATOR made a VIEWER of the walk's project on its own page) and the audit
/// log, which list the walk's own doings. The VIEWER's password.
async fn admin_pages(b: &Browser) -> String {
    let password = create_user(b, "site.viewer", "OPERATOR").await;
    b.open("/console/users").await;
    assert!(b.text("table").await.contains("site.manager"));
    b.client
        .find(Locator::Css("a[aria-label='Edit site.viewer']"))
        .await
        .expect("an Edit link per user")
        .click()
        .await
        .expect("open");
    assert_eq!(b.text("h1").await, "site.viewer");
    b.choose("role", "VIEWER").await;
    b.client
        .find(Locator::XPath("//label[normalize-space(.)='Harbour site']"))
        .await
        .expect("the project's checkbox")
        .click()
        .await
        .expect("ticked");
    b.check_and_shoot("user").await;
    b.press("Save").await;
    let row = b.text("#user-site\\.viewer").await;
    assert!(
        row.contains("VIEWER") && row.contains("Harbour site"),
        "the listing shows the new role and project: {row}"
    );
    assert!(b.text("main").await.contains("Its sessions have ended"));
    b.check_and_shoot("users").await;
    b.open("/console/audit?resourceType=alarm").await;
    let records = b.text("table").await;
    assert!(
        records.contains("acknowledge") && records.contains("site.manager"),
        "the console's acknowledgement is in the audit log: {records}"
    );
    b.check_and_shoot("audit").await;
    password
}

/// The raised alarm counted on the devices listing, and shaded on the device's chart with a
/// link to it below; the device page's stream reloads the page when told to (it fell behind).
async fn alarm_marks(b: &Browser, project: &str, device: &str) {
    b.open(&format!("/console/projects/{project}/devices")).await;
    assert_eq!(
        b.text("td.open-alarms").await,
        "1",
        "the device's open alarm is counted"
    );
    b.open(&format!("/console/devices/{device}?window=hour")).await;
    assert!(
        b.client
            .find(Locator::Css("svg.chart rect.period.sev-critical"))
            .await
            .is_ok(),
        "the alarm's period is shaded on the chart"
    );
    let periods = b.text("ul.periods").await;
    assert!(
        periods.contains("Overload") && periods.contains("still open"),
        "{periods}"
    );
    b.check_and_shoot("device").await;
    b.wait_for_stream().await;
    // The event as the stream sends it when it fell behind, handed to the page's event source.
    b.client
        .execute(
            "window.gantryNotReloaded = true; \
             document.querySelector('[sse-connect]')['htmx-internal-data'].sseEventSource\
             .dispatchEvent(new MessageEvent('reload', {data: arguments[0]}));",
            vec![json!(gantry_console::RELOAD)],
        )
        .await
        .expect("script runs");
    let reloaded = eventually(LIVE, async || {
        let state = b
            .client
            .execute(
                "return window.gantryNotReloaded !== true && document.readyState === 'complete';",
                vec![],
            )
            .await;
        state.ok().and_then(|v| v.as_bool()) == Some(true)
    })
    .await;
    assert!(reloaded, "the stream's reload reloads the page");
    assert_eq!(b.text("h1").await, "crane-07");
}

async fn other_pages(b: &Browser, project: &str) {
    b.open(&format!("/console/projects/{project}")).await;
    assert_eq!(b.text("#count-online").await, "1");
    assert!(
        b.client.find(Locator::Css("svg.map circle.pin")).await.is_ok(),
        "the map shows the device"
    );
    let events: u64 = b.text("#events-hour").await.parse().unwrap_or(0);
    assert!(events > 0, "the hour's events are counted: {}", b.text("main").await);
    assert!(
        b.client.find(Locator::Css("svg.rate rect.bar")).await.is_ok(),
        "a bar per minute with events"
    );
    b.check_and_shoot("overview").await;
    b.open(&format!("/console/projects/{project}/logs")).await;
    assert!(b.text("table").await.contains("completed"));
    b.check_and_shoot("event-logs").await;
    b.open(&format!("/console/projects/{project}/webhooks")).await;
    b.fill("url", "https://hooks.example.com/gantry").await;
    b.press("Create webhook").await;
    assert!(
        b.text("table").await.contains("https://hooks.example.com/gantry"),
        "{}",
        b.text("main").await
    );
    b.check_and_shoot("webhooks").await;
}

async fn sign_out(b: &Browser, device: &str) {
    b.press("Sign out").await;
    assert!(b.text("main").await.contains("You are signed out"));
    b.open(&format!("/console/devices/{device}")).await;
    assert_eq!(b.text("h1").await, "Sign in", "a page refuses without a session");
    assert!(!b.text("body").await.contains("crane-07"));
}
