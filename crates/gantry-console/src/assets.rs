//! The console's static files, compiled into the binary and served under names that carry a
//! hash of their content, so a browser may keep them for a year: a new release has new names.

use std::sync::LazyLock;

use axum::extract::Path;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

/// One file: its served name (`stem.<hash>.ext`), its type and its bytes.
pub struct Asset {
    pub name: String,
    content_type: &'static str,
    bytes: &'static [u8],
}

impl Asset {
    fn new(stem: &str, ext: &str, content_type: &'static str, bytes: &'static [u8]) -> Self {
        let hash = hex::encode(&Sha256::digest(bytes)[..6]);
        Self {
            name: format!("{stem}.{hash}.{ext}"),
            content_type,
            bytes,
        }
    }

    /// The URL pages link to.
    pub fn url(&self) -> String {
        format!("/console/assets/{}", self.name)
    }
}

/// htmx 2.0.11 (BSD Zero Clause, `assets/vendor/LICENSE-htmx`).
pub static HTMX: LazyLock<Asset> = LazyLock::new(|| {
    Asset::new(
        "htmx",
        "js",
        "text/javascript; charset=utf-8",
        include_bytes!("../assets/vendor/htmx-2.0.11.min.js"),
    )
});

/// htmx's SSE extension 2.2.4 (BSD Zero Clause, `assets/vendor/LICENSE-htmx-ext-sse`).
pub static HTMX_SSE: LazyLock<Asset> = LazyLock::new(|| {
    Asset::new(
        "htmx-sse",
        "js",
        "text/javascript; charset=utf-8",
        include_bytes!("../assets/vendor/htmx-ext-sse-2.2.4.js"),
    )
});

/// The console's own style sheet.
pub static STYLE: LazyLock<Asset> = LazyLock::new(|| {
    Asset::new(
        "console",
        "css",
        "text/css; charset=utf-8",
        include_bytes!("../assets/console.css"),
    )
});

/// The favicon, so a browser's request for one is not a 404 on every page.
pub static ICON: LazyLock<Asset> =
    LazyLock::new(|| Asset::new("icon", "svg", "image/svg+xml", include_bytes!("../assets/icon.svg")));

/// Every asset, and the bytes of a first load (what a page pulls in besides its HTML).
pub fn all() -> [&'static Asset; 4] {
    [&HTMX, &HTMX_SSE, &STYLE, &ICON]
}

/// `GET /console/assets/{file}`: a known name, with a year's cache; anything else is 404.
pub async fn serve(Path(file): Path<String>) -> Response {
    match all().into_iter().find(|a| a.name == file) {
        Some(asset) => (
            [
                (CONTENT_TYPE, asset.content_type),
                (CACHE_CONTROL, "public, max-age=31536000, immutable"),
            ],
            asset.bytes,
        )
            .into_response(),
        None => (axum::http::StatusCode::NOT_FOUND, "no such asset").into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_carry_the_content_hash() {
        assert!(HTMX.name.starts_with("htmx.") && HTMX.name.ends_with(".js"));
        assert_eq!(HTMX.name.len(), "htmx..js".len() + 12);
        assert_ne!(HTMX.name, HTMX_SSE.name);
    }
}
