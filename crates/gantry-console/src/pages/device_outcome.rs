//! What a form on a device's page just did: a notice to show once, or a refusal to show at the
//! form it belongs to.

use maud::Markup;

use crate::error::PageResult;
use crate::form::Problem;

/// What a form on the page just did, shown at its place.
#[derive(Default)]
pub struct Outcome {
    /// A refusal, and which form it belongs to (`control`, `routes`, `manage`, `desired`).
    pub problem: Option<(&'static str, Problem)>,
    /// Shown once at the top: a new token, a route's temporary identity, a sent control.
    pub notice: Option<Markup>,
}

impl Outcome {
    pub fn problem_of(&self, form: &str) -> Option<&Problem> {
        self.problem.as_ref().filter(|(f, _)| *f == form).map(|(_, p)| p)
    }
}

/// A form's result as the page shows it: a notice, or a refusal at its form. What the caller may
/// not do, and failures of the service, are error pages.
pub fn outcome_of<T>(
    result: gantry_core::Result<T>,
    form: &'static str,
    notice: impl FnOnce(T) -> Markup,
) -> PageResult<Outcome> {
    match result {
        Ok(value) => Ok(Outcome {
            notice: Some(notice(value)),
            problem: None,
        }),
        Err(
            e @ (gantry_core::Error::Invalid { .. }
            | gantry_core::Error::Conflict(_)
            | gantry_core::Error::VersionMismatch { .. }
            | gantry_core::Error::Duplicate(_)),
        ) => Ok(Outcome {
            problem: Some((form, Problem::of(&e))),
            notice: None,
        }),
        Err(e) => Err(e.into()),
    }
}
