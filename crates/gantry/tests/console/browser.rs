//! A browser session against a fresh Gantry: chromedriver on a free port, the application on
//! port 0, and the page checks every test makes (no sideways scroll, every input labelled).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use gantry::Application;
use gantry::config::ServeConfig;
use tokio::sync::oneshot;

pub struct Browser {
    pub client: Client,
    pub base: String,
    pub mqtt: SocketAddr,
    pub admin: String,
    /// `desktop` or `phone`: the screenshots' suffix.
    pub width_name: &'static str,
    pub width: u32,
    driver: Driver,
    stop: oneshot::Sender<()>,
    server: tokio::task::JoinHandle<anyhow::Result<()>>,
    _dir: tempfile::TempDir,
}

/// chromedriver, ended when dropped: a test that fails before `close` leaves no driver (and no
/// Chromium) running after it.
struct Driver(Child);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A port that was free a moment ago (bound to 0, then released), for chromedriver.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 0");
    listener.local_addr().expect("address").port()
}

/// Says on the terminal that a test skipped its checks.
fn say_skipped(test: &str, reason: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {reason}");
}

fn chromedriver() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("chromedriver"))
        .find(|p| p.is_file())
}

impl Browser {
    /// A browser of `(width, height)` on a new application; None (after saying so) when
    /// chromedriver is not installed.
    pub async fn start(test: &str, (width, height, name): (u32, u32, &'static str)) -> Option<Browser> {
        let Some(driver_path) = chromedriver() else {
            say_skipped(
                test,
                "chromedriver is not on the PATH (apt-get install chromium chromium-driver)",
            );
            return None;
        };
        let port = free_port();
        let driver = Command::new(driver_path)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let driver = Driver(driver);
        let dir = tempfile::tempdir().expect("temp dir");
        let admin = format!("console-admin-{}", uuid::Uuid::new_v4().simple());
        let mut config = ServeConfig::local(dir.path().to_path_buf());
        config.admin_token = Some(admin.clone());
        config.https_addr = gantry::config::Listen(None);
        config.mqtts_addr = gantry::config::Listen(None);
        config.mqtt_wss_addr = gantry::config::Listen(None);
        let app = Application::build(config).await.expect("application builds");
        let base = format!("http://{}", app.http_addr().expect("http"));
        let mqtt = app.mqtt_addr().expect("mqtt");
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tokio::spawn(app.run_until(async {
            let _ = stopped.await;
        }));
        let client = connect(port, width, height).await;
        Some(Browser {
            client,
            base,
            mqtt,
            admin,
            width_name: name,
            width,
            driver,
            stop,
            server,
            _dir: dir,
        })
    }

    /// Opens a console path.
    pub async fn open(&self, path: &str) {
        self.client
            .goto(&format!("{}{path}", self.base))
            .await
            .expect("page loads");
    }

    /// The visible text of the first element `css` selects.
    pub async fn text(&self, css: &str) -> String {
        match self.client.find(Locator::Css(css)).await {
            Ok(e) => e.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    }

    /// Types `value` into the input named `name`.
    pub async fn fill(&self, name: &str, value: &str) {
        let input = self
            .client
            .find(Locator::Css(&format!("[name='{name}']:not([type=hidden])")))
            .await
            .unwrap_or_else(|e| panic!("an input named {name}: {e}"));
        input.clear().await.ok();
        input.send_keys(value).await.expect("typed");
    }

    /// Picks `value` in the select named `name`.
    pub async fn choose(&self, name: &str, value: &str) {
        let select = self
            .client
            .find(Locator::Css(&format!("select[name='{name}']")))
            .await
            .unwrap_or_else(|e| panic!("a select named {name}: {e}"));
        select.select_by_value(value).await.expect("chosen");
    }

    /// Clicks the first button whose text is `label` and waits for the page it loads.
    pub async fn press(&self, label: &str) {
        let button = self
            .client
            .find(Locator::XPath(&format!("//button[normalize-space(.)='{label}']")))
            .await
            .unwrap_or_else(|e| panic!("a button {label}: {e}"));
        // Every console form loads a new page: mark this one, and wait until it is gone.
        self.client
            .execute("window.gantryOldPage = true;", vec![])
            .await
            .expect("script runs");
        button.click().await.expect("clicked");
        let loaded = crate::eventually(Duration::from_secs(15), async || {
            let state = self
                .client
                .execute(
                    "return !window.gantryOldPage && document.readyState === 'complete';",
                    vec![],
                )
                .await;
            state.ok().and_then(|v| v.as_bool()) == Some(true)
        })
        .await;
        assert!(loaded, "pressing {label} loads a page");
    }

    /// Waits until the page's live stream is open, so that what happens next reaches it.
    pub async fn wait_for_stream(&self) {
        let open = crate::eventually(Duration::from_secs(15), async || {
            let state = self
                .client
                .execute(
                    "const e = document.querySelector('[sse-connect]'); \
                     const s = e && e['htmx-internal-data'] && e['htmx-internal-data'].sseEventSource; \
                     return !!s && s.readyState === 1;",
                    vec![],
                )
                .await;
            state.ok().and_then(|v| v.as_bool()) == Some(true)
        })
        .await;
        assert!(open, "the page's live stream opens");
    }

    /// The checks every page must pass, then its screenshot as docs/console/<name>-<width>.png.
    pub async fn check_and_shoot(&self, name: &str) {
        let overflow = self
            .client
            .execute(
                "return document.documentElement.scrollWidth - document.documentElement.clientWidth;",
                vec![],
            )
            .await
            .expect("script runs");
        assert!(
            overflow.as_i64().unwrap_or(0) <= 0,
            "{name} at {} px scrolls sideways by {overflow} px",
            self.width
        );
        let unlabelled = self
            .client
            .execute(
                "return [...document.querySelectorAll('input:not([type=hidden]), select, textarea')]\
                 .filter(e => !(e.id && document.querySelector('label[for=\"' + e.id + '\"]')) && !e.getAttribute('aria-label'))\
                 .map(e => e.name);",
                vec![],
            )
            .await
            .expect("script runs");
        assert_eq!(unlabelled, serde_json::json!([]), "{name}: inputs without a label");
        let small = self
            .client
            .execute(
                "return [...document.querySelectorAll('button, a.button, input:not([type=hidden]):not([type=checkbox]), select')]\
                 .filter(e => e.offsetParent !== null && e.getBoundingClientRect().height < 44)\
                 .map(e => e.outerHTML.slice(0, 80));",
                vec![],
            )
            .await
            .expect("script runs");
        assert_eq!(small, serde_json::json!([]), "{name}: touch targets under 44 px");
        // The whole page in one picture: the window grows to the page's height for the shot.
        let height = self
            .client
            .execute("return document.documentElement.scrollHeight;", vec![])
            .await
            .expect("script runs");
        let (_, _, w, h) = self.client.get_window_rect().await.expect("window");
        let full = height.as_u64().unwrap_or(h).clamp(h, 4000) as u32;
        self.client.set_window_size(w as u32, full).await.ok();
        let png = self.client.screenshot().await.expect("screenshot");
        self.client.set_window_size(w as u32, h as u32).await.ok();
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/console");
        std::fs::create_dir_all(&dir).expect("docs/console");
        std::fs::write(dir.join(format!("{name}-{}.png", self.width_name)), png).expect("screenshot written");
    }

    pub async fn close(mut self) {
        let _ = self.client.clone().close().await;
        drop(self.driver);
        let _ = self.stop.send(());
        let _ = tokio::time::timeout(Duration::from_secs(30), &mut self.server).await;
    }
}

/// A WebDriver session of headless Chromium at the given window size; chromedriver may take a
/// moment to listen.
async fn connect(port: u16, width: u32, height: u32) -> Client {
    let mut caps = serde_json::Map::new();
    let args = vec![
        "--headless=new".to_owned(),
        "--no-sandbox".to_owned(),
        "--disable-gpu".to_owned(),
        "--disable-dev-shm-usage".to_owned(),
        "--hide-scrollbars".to_owned(),
        format!("--window-size={width},{height}"),
    ];
    caps.insert("goog:chromeOptions".to_owned(), serde_json::json!({ "args": args }));
    let url = format!("http://127.0.0.1:{port}");
    // fantoccini's HTTPS client needs a process-wide provider: ring, as everywhere in Gantry.
    let _ = rustls::crypto::ring::default_provider().install_default();
    for _ in 0..100 {
        if let Ok(client) = ClientBuilder::rustls()
            .expect("rustls")
            .capabilities(caps.clone())
            .connect(&url)
            .await
        {
            client.set_window_size(width, height).await.ok();
            return client;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("chromedriver did not answer on port {port}");
}
