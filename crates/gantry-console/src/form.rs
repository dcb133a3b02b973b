//! Form pieces: every input with its label, and a refusal shown next to the field it names.

use gantry_core::Error;
use maud::{Markup, html};

use crate::refusal::words;
use crate::session::Signed;

/// Why a form was refused: the field the service named (the form's inputs carry the API's
/// field names), or none for the form as a whole.
#[derive(Debug, Clone, Default)]
pub struct Problem {
    pub field: Option<String>,
    pub message: String,
}

impl Problem {
    pub fn of(e: &Error) -> Self {
        match e {
            Error::Invalid { field, reason } => Self {
                field: Some(field.clone()),
                message: reason.clone(),
            },
            other => Self {
                field: None,
                message: words(other),
            },
        }
    }

    /// The message when it concerns `field` (or a part of it, like `attributesMap.t.dataType`).
    fn about(&self, field: &str) -> Option<&str> {
        let named = self.field.as_deref()?;
        let concerns =
            named == field || named.starts_with(&format!("{field}.")) || named.starts_with(&format!("{field}["));
        concerns.then_some(self.message.as_str())
    }
}

/// The hidden CSRF field every form carries.
pub fn csrf(signed: &Signed) -> Markup {
    html! { input type="hidden" name="csrf" value=(signed.csrf); }
}

/// A refusal not about any one field, at the top of a form.
pub fn general(problem: Option<&Problem>) -> Markup {
    html! {
        @if let Some(p) = problem.filter(|p| p.field.is_none()) {
            p.error role="alert" { (p.message) }
        }
        @if let Some(p) = problem.filter(|p| p.field.is_some()) {
            p.error.summary role="alert" { (p.field.as_deref().unwrap_or_default()) ": " (p.message) }
        }
    }
}

/// A labelled input named `name`, with the refusal of that field under it.
pub fn input(label: &str, name: &str, kind: &str, value: &str, problem: Option<&Problem>) -> Markup {
    let error = problem.and_then(|p| p.about(name));
    let id = format!("f-{name}");
    html! {
        div.field {
            label for=(id) { (label) }
            input id=(id) type=(kind) name=(name) value=(value)
                aria-invalid=[error.map(|_| "true")] aria-describedby=[error.map(|_| format!("{id}-error"))];
            @if let Some(error) = error {
                p.error id={ (id) "-error" } { (error) }
            }
        }
    }
}

/// A labelled select of `options` (value, label), `selected` chosen.
pub fn select(label: &str, name: &str, options: &[(&str, &str)], selected: &str, problem: Option<&Problem>) -> Markup {
    let error = problem.and_then(|p| p.about(name));
    let id = format!("f-{name}");
    html! {
        div.field {
            label for=(id) { (label) }
            select id=(id) name=(name) aria-invalid=[error.map(|_| "true")] {
                @for (value, text) in options {
                    option value=(value) selected[*value == selected] { (text) }
                }
            }
            @if let Some(error) = error {
                p.error id={ (id) "-error" } { (error) }
            }
        }
    }
}

/// A labelled text area.
pub fn textarea(label: &str, name: &str, value: &str, problem: Option<&Problem>) -> Markup {
    let error = problem.and_then(|p| p.about(name));
    let id = format!("f-{name}");
    html! {
        div.field {
            label for=(id) { (label) }
            textarea id=(id) name=(name) rows="4" aria-invalid=[error.map(|_| "true")] { (value) }
            @if let Some(error) = error {
                p.error id={ (id) "-error" } { (error) }
            }
        }
    }
}

/// A labelled checkbox.
pub fn checkbox(label: &str, name: &str, checked: bool) -> Markup {
    let id = format!("f-{name}");
    html! {
        div.field.check {
            input id=(id) type="checkbox" name=(name) value="true" checked[checked];
            label for=(id) { (label) }
        }
    }
}

/// A one-button form that posts to `action` (lock, revoke...).
pub fn button(signed: &Signed, action: &str, label: &str, class: &str) -> Markup {
    html! {
        form.inline method="post" action=(action) {
            (csrf(signed))
            button class=(class) type="submit" { (label) }
        }
    }
}

/// An empty string for None.
pub fn or_empty(v: &Option<String>) -> &str {
    v.as_deref().unwrap_or_default()
}
