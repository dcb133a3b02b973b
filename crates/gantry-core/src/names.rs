//! Parsed names and codes: once a value has one of these types it follows the specification's rules.

use crate::{Error, Result};

/// A display name of a model, project or device: at most 128 characters as sent, no control
/// characters, trimmed and then not empty. The OpenAPI document declares the same bounds, so the
/// length is checked before trimming: a name the document calls too long is never accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Name(String);

impl Name {
    pub const MAX_CHARS: usize = 128;

    pub fn parse(field: &str, raw: &str) -> Result<Self> {
        let trimmed = raw.trim();
        if trimmed.is_empty() {
            return Err(Error::invalid(field, "must not be empty"));
        }
        if raw.chars().count() > Self::MAX_CHARS {
            return Err(Error::invalid(
                field,
                format!("must be at most {} characters", Self::MAX_CHARS),
            ));
        }
        if trimmed.chars().any(char::is_control) {
            return Err(Error::invalid(field, "must not contain control characters"));
        }
        Ok(Self(trimmed.to_owned()))
    }

    pub fn into_inner(self) -> String {
        self.0
    }
}

/// A text filter of a listing (a part of a name to look for): at most `max` characters, since
/// nothing longer can match a value of at most that length, and the store's pattern matcher is
/// given only patterns of a bounded size.
pub fn filter_text(field: &str, raw: String, max: usize) -> Result<String> {
    if raw.chars().count() > max {
        return Err(Error::invalid(field, format!("must be at most {max} characters")));
    }
    Ok(raw)
}

/// An attribute, action or parameter code: a letter or underscore, then letters, digits and
/// underscores (the naming rule of variables and functions), at most 64 characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Code(String);

impl Code {
    pub const MAX_CHARS: usize = 64;

    pub fn parse(field: &str, raw: &str) -> Result<Self> {
        let mut chars = raw.chars();
        let starts_well = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
        if !starts_well || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(Error::invalid(
                field,
                format!("`{raw}` must start with a letter or underscore and hold only letters, digits and underscores"),
            ));
        }
        if raw.len() > Self::MAX_CHARS {
            return Err(Error::invalid(
                field,
                format!("must be at most {} characters", Self::MAX_CHARS),
            ));
        }
        Ok(Self(raw.to_owned()))
    }

    pub fn into_inner(self) -> String {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_follow_variable_naming() {
        for good in ["temp", "_x", "a1_b2", "Boom_Angle"] {
            assert!(Code::parse("code", good).is_ok(), "{good}");
        }
        for bad in ["", "1bad", "has space", "dash-ed", "ünï", "a.b", &"x".repeat(65)] {
            let err = Code::parse("code", bad).unwrap_err();
            assert!(err.to_string().starts_with("code:"), "{bad}: {err}");
        }
    }

    #[test]
    fn names_are_trimmed_and_bounded() {
        assert_eq!(Name::parse("name", "  crane 7 ").unwrap().into_inner(), "crane 7");
        assert!(Name::parse("name", "   ").is_err());
        assert!(Name::parse("name", &"n".repeat(129)).is_err());
        assert!(
            Name::parse("name", &format!(" {} ", "n".repeat(127))).is_err(),
            "counted as sent"
        );
        assert!(Name::parse("name", "a\nb").is_err());
    }
}
