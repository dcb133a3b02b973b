//! The console's sessions and refusals over plain HTTP (the browser tests in tests/console drive
//! the pages themselves): cookies, CSRF, what each kind of token may see and do, another tenant's
//! records, and the security headers and assets of a first load.

use reqwest::StatusCode;
use reqwest::header::{CACHE_CONTROL, CONTENT_SECURITY_POLICY, COOKIE, LOCATION, SET_COOKIE};
use serde_json::json;

use crate::helpers::{TestApp, spawn_app, unique};

/// A browser's part of a console session: its cookie and the page's CSRF token.
pub struct Console {
    base: String,
    http: reqwest::Client,
    cookie: String,
}

/// The value of `name="csrf" value="..."` in a page.
pub fn csrf_of(page: &str) -> String {
    let at = page.find(r#"name="csrf" value=""#).expect("a form with a CSRF token") + r#"name="csrf" value=""#.len();
    page[at..].split('"').next().unwrap_or_default().to_owned()
}

fn cookie_pair(set_cookie: &str) -> String {
    set_cookie.split(';').next().unwrap_or_default().to_owned()
}

impl Console {
    fn client() -> reqwest::Client {
        reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap()
    }

    /// Signs in with `token`; Err(the sign-in page's status and body) when refused.
    pub async fn sign_in(app: &TestApp, token: &str) -> Result<Console, (StatusCode, String)> {
        Self::sign_in_with(app, &[("token", token)]).await
    }

    /// Signs in with a user account's username and password.
    pub async fn sign_in_user(app: &TestApp, username: &str, password: &str) -> Console {
        Self::sign_in_with(app, &[("username", username), ("password", password)])
            .await
            .unwrap_or_else(|(status, page)| panic!("{username} signs in: {status} {page}"))
    }

    async fn sign_in_with(app: &TestApp, fields: &[(&str, &str)]) -> Result<Console, (StatusCode, String)> {
        let http = Self::client();
        let form = http.get(format!("{}/console/sign-in", app.base)).send().await.unwrap();
        let pre = cookie_pair(form.headers()[SET_COOKIE].to_str().unwrap());
        let csrf = csrf_of(&form.text().await.unwrap());
        let mut form = vec![("csrf", csrf.as_str())];
        form.extend_from_slice(fields);
        let answer = http
            .post(format!("{}/console/session", app.base))
            .header(COOKIE, &pre)
            .form(&form)
            .send()
            .await
            .unwrap();
        if answer.status() != StatusCode::SEE_OTHER {
            return Err((answer.status(), answer.text().await.unwrap()));
        }
        let session = answer
            .headers()
            .get_all(SET_COOKIE)
            .iter()
            .map(|v| v.to_str().unwrap().to_owned())
            .find(|v| v.starts_with("gantry_console="))
            .expect("a session cookie");
        assert!(
            session.contains("HttpOnly") && session.contains("SameSite=Strict"),
            "{session}"
        );
        assert!(!session.contains("Secure"), "not Secure over plain HTTP: {session}");
        Ok(Console {
            base: app.base.clone(),
            http,
            cookie: cookie_pair(&session),
        })
    }

    pub async fn get(&self, path: &str) -> (StatusCode, String) {
        let r = self
            .http
            .get(format!("{}{path}", self.base))
            .header(COOKIE, &self.cookie)
            .send()
            .await
            .unwrap();
        (r.status(), r.text().await.unwrap())
    }

    /// Posts `fields` with the CSRF token of the page at `from`.
    pub async fn post(&self, from: &str, path: &str, fields: &[(&str, &str)]) -> (StatusCode, String) {
        let (_, page) = self.get(from).await;
        let csrf = csrf_of(&page);
        let mut form: Vec<(&str, &str)> = vec![("csrf", &csrf)];
        form.extend_from_slice(fields);
        self.post_raw(path, &form).await
    }

    /// Posts `fields` with the CSRF token of the page at `from`; the status and where a 303
    /// sends the browser.
    pub async fn post_sent_to(&self, from: &str, path: &str, fields: &[(&str, &str)]) -> (StatusCode, String) {
        let (_, page) = self.get(from).await;
        let csrf = csrf_of(&page);
        let mut form: Vec<(&str, &str)> = vec![("csrf", &csrf)];
        form.extend_from_slice(fields);
        let r = self
            .http
            .post(format!("{}{path}", self.base))
            .header(COOKIE, &self.cookie)
            .form(&form)
            .send()
            .await
            .unwrap();
        let location = r.headers().get(LOCATION).map(|l| l.to_str().unwrap().to_owned());
        (r.status(), location.unwrap_or_default())
    }

    pub async fn post_raw(&self, path: &str, form: &[(&str, &str)]) -> (StatusCode, String) {
        let r = self
            .http
            .post(format!("{}{path}", self.base))
            .header(COOKIE, &self.cookie)
            .form(form)
            .send()
            .await
            .unwrap();
        (r.status(), r.text().await.unwrap())
    }
}

#[tokio::test]
async fn a_session_is_a_cookie_and_every_form_needs_its_csrf_token() {
    let app = spawn_app().await;
    let world = app.world().await;
    let (project, device) = (
        world.project["id"].as_str().unwrap(),
        world.device["id"].as_str().unwrap(),
    );
    let console = Console::sign_in(&app, &app.admin)
        .await
        .expect("the administrator signs in");
    let (status, page) = console.get(&format!("/console/devices/{device}")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains(world.device["deviceName"].as_str().unwrap()));
    assert!(!page.contains(&app.admin), "the token is never in a page");

    // Without the token, or with another, a form changes nothing.
    let path = format!("/console/devices/{device}/status");
    for form in [
        vec![("status", "Locked")],
        vec![("csrf", "forged"), ("status", "Locked")],
    ] {
        let (status, page) = console.post_raw(&path, &form).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{page}");
    }
    let stored = app.get(format!("/api/v1/devices/{device}"), &app.admin).await.result();
    assert_eq!(stored["status"], "Active", "a refused form changed nothing");
    let (status, _) = console
        .post(&format!("/console/devices/{device}"), &path, &[("status", "Locked")])
        .await;
    assert_eq!(status, StatusCode::OK);
    let stored = app.get(format!("/api/v1/devices/{device}"), &app.admin).await.result();
    assert_eq!(stored["status"], "Locked");

    // A field the service refuses is named next to its input.
    let (status, page) = console
        .post(
            &format!("/console/projects/{project}/devices"),
            &format!("/console/projects/{project}/devices"),
            &[("deviceName", ""), ("modelId", world.model["id"].as_str().unwrap())],
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(page.contains(r#"id="f-deviceName-error""#), "{page}");

    // Signed out, the session is gone: pages send to the sign-in form, forms are refused.
    let (status, _) = console
        .post(&format!("/console/devices/{device}"), "/console/session/end", &[])
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = console.get(&format!("/console/devices/{device}")).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let (status, _) = console.post_raw(&path, &[("csrf", "any"), ("status", "Active")]).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "no session, no form");
}

#[tokio::test]
async fn sign_in_refuses_wrong_and_device_tokens_and_a_rotated_token_ends_the_session() {
    let app = spawn_app().await;
    let world = app.world().await;
    let (status, page) = Console::sign_in(&app, "no-such-token").await.err().expect("refused");
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(page.contains("is not a valid token"));
    let device_token = world.device["accessToken"].as_str().unwrap();
    let (status, page) = Console::sign_in(&app, device_token).await.err().expect("refused");
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(page.contains("a device token cannot sign in"));

    let project = world.project["id"].as_str().unwrap();
    let app_token = world.project["applicationAccessToken"].as_str().unwrap();
    let console = Console::sign_in(&app, app_token)
        .await
        .expect("an application signs in");
    assert_eq!(
        console.get(&format!("/console/projects/{project}")).await.0,
        StatusCode::OK
    );
    app.post(
        format!("/api/v1/projects/{project}/applicationAccessToken/rotate"),
        &app.admin,
        json!({}),
    )
    .await;
    let (status, _) = console.get(&format!("/console/projects/{project}")).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "the rotated token's session is over");
}

#[tokio::test]
async fn an_application_sees_its_project_alone_and_cannot_do_what_its_token_cannot() {
    let app = spawn_app().await;
    let world = app.world().await;
    let other = app.world().await;
    let project = world.project["id"].as_str().unwrap();
    let app_token = world.project["applicationAccessToken"].as_str().unwrap();
    let console = Console::sign_in(&app, app_token).await.expect("signed in");

    let (status, page) = console.get("/console/projects").await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains(world.project["name"].as_str().unwrap()));
    assert!(
        !page.contains(other.project["name"].as_str().unwrap()),
        "another project is not listed"
    );
    assert!(!page.contains("Create project"), "no form for what it may not do");
    let (status, _) = console
        .get(&format!("/console/projects/{}", other.project["id"].as_str().unwrap()))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = console
        .get(&format!("/console/devices/{}", other.device["id"].as_str().unwrap()))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // The server refuses what the page does not offer.
    let name = unique("p");
    let (status, _) = console
        .post(
            &format!("/console/projects/{project}"),
            "/console/projects",
            &[("name", &name)],
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = console
        .post(
            &format!("/console/projects/{project}"),
            "/console/models",
            &[
                ("name", &name),
                ("deviceType", "ROOT"),
                ("code", "t"),
                ("dataType", "Float"),
                ("readable", "R"),
                ("channel", "m"),
            ],
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let listed = app.get("/api/v1/projects?pageSize=100", &app.admin).await.result();
    assert!(!listed.to_string().contains(&name), "nothing was created");
    // Its own devices it manages: the control form is there.
    let (_, page) = console
        .get(&format!("/console/devices/{}", world.device["id"].as_str().unwrap()))
        .await;
    assert!(page.contains("Control"));
}

#[tokio::test]
async fn another_tenants_records_are_not_found() {
    let app = spawn_app().await;
    let world = app.world().await;
    let tenant = app
        .post("/api/v1/tenants", &app.admin, json!({"name": unique("tenant")}))
        .await
        .result();
    let console = Console::sign_in(&app, tenant["adminToken"].as_str().unwrap())
        .await
        .expect("signed in");
    for path in [
        format!("/console/projects/{}", world.project["id"].as_str().unwrap()),
        format!("/console/projects/{}/devices", world.project["id"].as_str().unwrap()),
        format!("/console/devices/{}", world.device["id"].as_str().unwrap()),
        format!("/console/models/{}", world.model["id"].as_str().unwrap()),
    ] {
        let (status, page) = console.get(&path).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {page}");
    }
    let (_, page) = console.get("/console/projects").await;
    assert!(!page.contains(world.project["name"].as_str().unwrap()));
    let device = world.device["id"].as_str().unwrap();
    let (status, _) = console
        .post(
            "/console/projects",
            &format!("/console/devices/{device}/status"),
            &[("status", "Locked")],
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn pages_carry_a_strict_policy_and_a_first_load_is_small() {
    let app = spawn_app().await;
    let http = Console::client();
    let page = http.get(format!("{}/console/sign-in", app.base)).send().await.unwrap();
    let csp = page.headers()[CONTENT_SECURITY_POLICY].to_str().unwrap().to_owned();
    assert!(
        csp.contains("default-src 'self'") && csp.contains("script-src 'self';") && csp.contains("style-src 'self';"),
        "{csp}"
    );
    assert_eq!(page.headers()["x-frame-options"], "DENY");
    let html = page.text().await.unwrap();
    assert!(!html.contains("style=") && !html.contains("<style"), "no inline style");
    let mut bytes = html.len();
    let assets: Vec<String> = html
        .split(['"', '\''])
        .filter(|s| s.starts_with("/console/assets/"))
        .map(str::to_owned)
        .collect();
    assert_eq!(assets.len(), 4, "{assets:?}");
    for asset in assets {
        let answer = http.get(format!("{}{asset}", app.base)).send().await.unwrap();
        assert_eq!(answer.status(), StatusCode::OK, "{asset}");
        assert_eq!(answer.headers()[CACHE_CONTROL], "public, max-age=31536000, immutable");
        bytes += answer.bytes().await.unwrap().len();
    }
    assert!(bytes < 150 * 1024, "a first load is {bytes} bytes");
    let stale = http
        .get(format!("{}/console/assets/htmx.000000000000.js", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(stale.status(), StatusCode::NOT_FOUND);
    let anonymous = http.get(format!("{}/console/projects", app.base)).send().await.unwrap();
    assert_eq!(anonymous.status(), StatusCode::SEE_OTHER);
    assert_eq!(anonymous.headers()[LOCATION], "/console/sign-in");
}

#[tokio::test]
async fn over_https_the_cookies_are_secure() {
    let app = spawn_app().await;
    let (Some(https), Some(ca)) = (app.https, app.tls_ca.as_ref()) else {
        panic!("spawn_app serves HTTPS with a generated CA");
    };
    let client = crate::helpers::https_client(ca);
    let page = client
        .get(format!("https://localhost:{}/console/sign-in", https.port()))
        .send()
        .await
        .unwrap();
    let cookie = page.headers()[SET_COOKIE].to_str().unwrap().to_owned();
    assert!(cookie.contains("; Secure") && cookie.contains("HttpOnly"), "{cookie}");
    let plain = Console::client()
        .get(format!("{}/console/sign-in", app.base))
        .send()
        .await
        .unwrap();
    assert!(!plain.headers()[SET_COOKIE].to_str().unwrap().contains("Secure"));
}
