//! The HTML shell of every console page: the head (assets by their hashed URLs, htmx's
//! configuration) and the page without navigation that sign-in and error pages use.

use maud::{DOCTYPE, Markup, html};

use crate::assets::{HTMX, HTMX_SSE, ICON, STYLE};

pub fn head(title: &str) -> Markup {
    html! {
        head {
            meta charset="utf-8";
            meta name="viewport" content="width=device-width, initial-scale=1";
            // htmx would add an inline <style> and may evaluate attributes: both off under the CSP.
            meta name="htmx-config" content=r#"{"includeIndicatorStyles":false,"allowEval":false,"allowScriptTags":false}"#;
            title { (title) " · Gantry" }
            link rel="icon" href=(ICON.url());
            link rel="stylesheet" href=(STYLE.url());
            script src=(HTMX.url()) defer {}
            script src=(HTMX_SSE.url()) defer {}
        }
    }
}

/// A page without navigation (sign-in, errors).
pub fn bare(title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            (head(title))
            body {
                header.top { a.brand href="/console/" { "Gantry" } }
                main.narrow { (body) }
            }
        }
    }
}
