//! The console in a real browser: headless Chromium driven over WebDriver (Debian's `chromium`
//! and `chromium-driver`) against the whole application on port 0, at desktop width and at a
//! phone's 390 px. The tests assert what the pages show, and write a screenshot of each page
//! into docs/console/. Without chromedriver on the PATH they say so and skip. They are marked
//! ignored; `.ci/run` installs Chromium and runs them with `--include-ignored`.

mod browser;
mod walk;

use std::time::Duration;

use browser::Browser;

/// Desktop and phone widths, and the screenshot names' suffix.
const DESKTOP: (u32, u32, &str) = (1280, 900, "desktop");
const PHONE: (u32, u32, &str) = (390, 844, "phone");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs chromium and chromium-driver: .ci/run's browser stage runs it"]
async fn console_at_desktop_width() {
    let Some(browser) = Browser::start("console_at_desktop_width", DESKTOP).await else {
        return;
    };
    walk::operator_walk(&browser).await;
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs chromium and chromium-driver: .ci/run's browser stage runs it"]
async fn console_at_phone_width() {
    let Some(browser) = Browser::start("console_at_phone_width", PHONE).await else {
        return;
    };
    walk::operator_walk(&browser).await;
    browser.close().await;
}

/// Polls `check` until it holds or `timeout` passes.
pub async fn eventually(timeout: Duration, mut check: impl AsyncFnMut() -> bool) -> bool {
    let end = tokio::time::Instant::now() + timeout;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() > end {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
