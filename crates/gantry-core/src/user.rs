//! People who sign in: usernames, passwords, roles and the user record. A user's role decides
//! what its sessions may do (`principal.rs` holds the matrix); its password is kept only as an
//! Argon2id hash, which no record here carries.

use serde::{Deserialize, Serialize};

use crate::ids::{ProjectId, TenantId};
use crate::{Error, Result};

/// How long sessions last.
#[derive(Debug, Clone, Copy)]
pub struct SessionConfig {
    /// A session ends this long after its last use (`--session-ttl`).
    pub ttl: std::time::Duration,
    /// ... and never later than this after its sign-in (`--session-max-age`).
    pub max_age: std::time::Duration,
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self {
            ttl: std::time::Duration::from_secs(12 * 3600),
            max_age: std::time::Duration::from_secs(7 * 86_400),
        }
    }
}

/// A user's identifier.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(transparent)]
#[cfg_attr(feature = "openapi", schema(value_type = String))]
pub struct UserId(String);

impl UserId {
    pub fn generate() -> Self {
        Self(uuid::Uuid::now_v7().to_string())
    }
    pub fn from_string(s: impl Into<String>) -> Self {
        Self(s.into())
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for UserId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A username: 3 to 64 characters, letters, digits and `.`, `_`, `-`, `@`. Unique in the
/// installation compared case-insensitively (`key`), shown as it was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Username(String);

impl Username {
    pub fn parse(s: &str) -> Result<Self> {
        let count = s.chars().count();
        if !(3..=64).contains(&count) {
            return Err(Error::invalid("username", "must be 3 to 64 characters long"));
        }
        if !s
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '.' | '_' | '-' | '@'))
        {
            return Err(Error::invalid(
                "username",
                "may hold letters, digits and the characters . _ - @ only",
            ));
        }
        Ok(Self(s.to_owned()))
    }

    /// What uniqueness compares: the lower-case form.
    pub fn key(&self) -> String {
        self.0.to_lowercase()
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A password as a person chose it: at least 10 characters, at most 256, not the username.
pub struct Password(String);

impl Password {
    pub fn parse(field: &'static str, s: &str, username: &str) -> Result<Self> {
        let count = s.chars().count();
        if count < 10 {
            return Err(Error::invalid(field, "must be at least 10 characters long"));
        }
        if count > 256 {
            return Err(Error::invalid(field, "must be at most 256 characters long"));
        }
        if s.to_lowercase() == username.to_lowercase() {
            return Err(Error::invalid(field, "must not be the username"));
        }
        Ok(Self(s.to_owned()))
    }

    /// A random initial password: 20 characters from an alphabet without look-alikes.
    pub fn generate() -> Self {
        use rand::Rng;
        const ALPHABET: &[u8] = b"abcdefghijkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789";
        let mut rng = rand::rng();
        let text = (0..20)
            .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
            .collect();
        Self(text)
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Password(..)")
    }
}

/// What a user may do; the matrix is in `principal.rs` and the user guide.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "UPPERCASE")]
pub enum Role {
    /// What the tenant's administrator token may do, in its tenant.
    Admin,
    /// Reads everything of its projects; manages their devices, controls, routes, alarms and
    /// desired values. Not models, projects, webhooks, users or application tokens.
    Operator,
    /// Reads its projects, never a secret.
    Viewer,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "ADMIN",
            Role::Operator => "OPERATOR",
            Role::Viewer => "VIEWER",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "ADMIN" => Some(Role::Admin),
            "OPERATOR" => Some(Role::Operator),
            "VIEWER" => Some(Role::Viewer),
            _ => None,
        }
    }
}

/// Whether a user may sign in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "UPPERCASE")]
pub enum UserStatus {
    Active,
    /// Signs in no more; its sessions ended when it was locked.
    Locked,
}

impl UserStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            UserStatus::Active => "ACTIVE",
            UserStatus::Locked => "LOCKED",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "ACTIVE" => Some(UserStatus::Active),
            "LOCKED" => Some(UserStatus::Locked),
            _ => None,
        }
    }
}

/// A user as the API shows it: never its password or hash.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct User {
    pub id: UserId,
    pub tenant_id: TenantId,
    pub username: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub email: Option<String>,
    pub role: Role,
    /// The projects an OPERATOR or VIEWER works on; empty means all of the tenant's.
    pub project_ids: Vec<ProjectId>,
    pub status: UserStatus,
    pub created_by: String,
    /// Epoch milliseconds.
    pub created_time: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_by: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_time: Option<i64>,
    /// The last successful sign-in, epoch milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_login_time: Option<i64>,
}

/// Filters of a user listing.
#[derive(Debug, Clone, Default)]
pub struct UserQuery {
    pub role: Option<Role>,
    /// Users whose project list holds this project (users of all projects are not listed).
    pub project: Option<ProjectId>,
    /// Case-insensitive substring of the username.
    pub username: Option<String>,
}

/// A signed-in session as the store keeps it: the token's hash, never the token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserSession {
    pub token_hash: String,
    pub user: UserId,
    pub tenant: TenantId,
    pub created_time: i64,
    /// When it ends unless used: moved forward by use, never past `max_expires_time`.
    pub expires_time: i64,
    pub max_expires_time: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usernames() {
        for ok in ["abc", "Site.Manager-1", "a_b@c", &"x".repeat(64)] {
            assert!(Username::parse(ok).is_ok(), "{ok}");
        }
        for bad in ["ab", "", "with space", "semi;colon", &"x".repeat(65)] {
            assert!(Username::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(Username::parse("Alice").unwrap().key(), "alice");
    }

    #[test]
    fn passwords() {
        assert!(Password::parse("password", "long enough!", "alice").is_ok());
        assert!(Password::parse("password", "short", "alice").is_err());
        assert!(Password::parse("password", "Alice.Smith", "alice.smith").is_err());
        let generated = Password::generate();
        assert_eq!(generated.expose().len(), 20);
        assert!(Password::parse("password", generated.expose(), "alice").is_ok());
        assert_eq!(format!("{generated:?}"), "Password(..)");
    }

    #[test]
    fn roles_round_trip() {
        for role in [Role::Admin, Role::Operator, Role::Viewer] {
            assert_eq!(Role::parse(role.as_str()), Some(role));
        }
        assert_eq!(Role::parse("admin"), None);
    }
}
