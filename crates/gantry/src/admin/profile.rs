//! Where `gantry admin` finds the server and its token: flags, then `GANTRY_*` variables, then a
//! profile of the admin config file, then the local data dir of `gantry serve`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::Args;
use serde::Deserialize;

/// The server `gantry serve` listens on by default.
const DEFAULT_URL: &str = "http://127.0.0.1:8080";

/// How to reach the server (flags win over variables, variables over the config file).
#[derive(Debug, Clone, Args)]
pub struct ConnectionArgs {
    /// Gantry's base URL, e.g. https://gantry.example.com:8443 [default: the profile's, else
    /// http://127.0.0.1:8080]
    #[arg(long, env = "GANTRY_URL", global = true)]
    pub url: Option<String>,
    /// Bearer token: an administrator token or a project's applicationAccessToken [default: the
    /// profile's, else <data-dir>/admin-token]
    #[arg(long, env = "GANTRY_TOKEN", global = true, hide_env_values = true)]
    pub token: Option<String>,
    /// A CA certificate (PEM) to trust besides the system's, e.g. Gantry's generated
    /// <data-dir>/tls/ca.pem (used by default for https URLs when that file exists)
    #[arg(long, env = "GANTRY_CACERT", global = true)]
    pub cacert: Option<PathBuf>,
    /// The profile (a table) of the admin config file [default: `default`, when present]
    #[arg(long, env = "GANTRY_PROFILE", global = true)]
    pub profile: Option<String>,
    /// The admin config file [default: $XDG_CONFIG_HOME/gantry/admin.toml, else
    /// ~/.config/gantry/admin.toml]
    #[arg(long, env = "GANTRY_ADMIN_CONFIG", global = true)]
    pub admin_config: Option<PathBuf>,
    /// The data dir of a `gantry serve` on this machine: its admin-token and tls/ca.pem are the
    /// last fallbacks
    #[arg(long, env = "GANTRY_DATA_DIR", global = true, default_value = "./gantry-data")]
    pub data_dir: PathBuf,
}

/// One profile of the admin config file.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Profile {
    url: Option<String>,
    token: Option<String>,
    cacert: Option<PathBuf>,
}

/// What the client connects with.
#[derive(Debug)]
pub struct Connection {
    pub url: String,
    pub token: String,
    pub cacert: Option<PathBuf>,
}

impl ConnectionArgs {
    pub fn resolve(&self) -> anyhow::Result<Connection> {
        let profile = self.profile()?;
        let url = self
            .url
            .clone()
            .or(profile.url)
            .unwrap_or_else(|| DEFAULT_URL.to_owned());
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            bail!("the URL `{url}` must start with http:// or https://");
        }
        let token_file = self.data_dir.join("admin-token");
        let token = match self.token.clone().or(profile.token) {
            Some(token) => token,
            None if token_file.is_file() => std::fs::read_to_string(&token_file)
                .with_context(|| format!("reading {}", token_file.display()))?
                .trim()
                .to_owned(),
            None => bail!(
                "no token: pass --token, set GANTRY_TOKEN, put `token` in the admin config file, \
                 or run where {} exists",
                token_file.display()
            ),
        };
        if token.is_empty() {
            bail!("the token is empty");
        }
        let generated_ca = self.data_dir.join("tls").join("ca.pem");
        let cacert = self
            .cacert
            .clone()
            .or(profile.cacert)
            .or_else(|| (url.starts_with("https://") && generated_ca.is_file()).then_some(generated_ca));
        Ok(Connection { url, token, cacert })
    }

    /// Where `gantry admin login` signs in: the URL and CA as `resolve` finds them, no token.
    pub fn resolve_for_login(&self) -> anyhow::Result<Connection> {
        let profile = self.profile()?;
        let url = self
            .url
            .clone()
            .or(profile.url)
            .unwrap_or_else(|| DEFAULT_URL.to_owned());
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            bail!("the URL `{url}` must start with http:// or https://");
        }
        let generated_ca = self.data_dir.join("tls").join("ca.pem");
        let cacert = self
            .cacert
            .clone()
            .or(profile.cacert)
            .or_else(|| (url.starts_with("https://") && generated_ca.is_file()).then_some(generated_ca));
        Ok(Connection {
            url,
            token: String::new(),
            cacert,
        })
    }

    /// Keeps a session's token (and the URL it is for) in the chosen profile of the admin config
    /// file, which is written with mode 0600: it holds tokens. The file is rewritten whole, its
    /// profiles kept (comments are not). Returns the file's path.
    pub fn store_session(&self, connection: &Connection, token: &str) -> anyhow::Result<PathBuf> {
        use std::io::Write;
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        let path = match &self.admin_config {
            Some(path) => path.clone(),
            None => default_config_path().context("no admin config file path: set HOME or --admin-config")?,
        };
        let mut profiles = if path.is_file() {
            read_profiles(&path)?
        } else {
            BTreeMap::new()
        };
        let name = self.profile.clone().unwrap_or_else(|| "default".to_owned());
        let profile = profiles.entry(name).or_default();
        profile.url = Some(connection.url.clone());
        profile.token = Some(token.to_owned());
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&path)
            .with_context(|| format!("writing {}", path.display()))?;
        // An existing file keeps its mode on open: make it private too.
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        file.write_all(render_profiles(&profiles).as_bytes())
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(path)
    }

    /// The chosen profile; an empty one when there is no config file and none was asked for.
    fn profile(&self) -> anyhow::Result<Profile> {
        let path = match &self.admin_config {
            Some(path) => Some(path.clone()),
            None => default_config_path(),
        };
        let Some(path) = path.filter(|p| p.is_file()) else {
            if let Some(name) = &self.profile {
                bail!("profile `{name}` asked for, but there is no admin config file");
            }
            return Ok(Profile::default());
        };
        let mut profiles = read_profiles(&path)?;
        let name = self.profile.as_deref().unwrap_or("default");
        match profiles.remove(name) {
            Some(profile) => Ok(profile),
            None if self.profile.is_none() => Ok(Profile::default()),
            None => bail!("{} has no profile `[{name}]`", path.display()),
        }
    }
}

fn read_profiles(path: &Path) -> anyhow::Result<BTreeMap<String, Profile>> {
    use std::os::unix::fs::PermissionsExt;
    // It holds tokens: say so when others may read it, as ssh does for its keys.
    if let Ok(meta) = std::fs::metadata(path)
        && meta.permissions().mode() & 0o077 != 0
    {
        eprintln!(
            "warning: {} holds tokens and others may read it (chmod 600 it)",
            path.display()
        );
    }
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    toml::from_str(&text).with_context(|| format!("{} is not a valid admin config file", path.display()))
}

/// The profiles as TOML: a table each, with its url, token and cacert.
fn render_profiles(profiles: &BTreeMap<String, Profile>) -> String {
    let quoted = |s: &str| {
        let escaped: String = s
            .chars()
            .flat_map(|c| match c {
                '"' => vec!['\\', '"'],
                '\\' => vec!['\\', '\\'],
                c if c.is_control() => format!("\\u{:04X}", c as u32).chars().collect(),
                c => vec![c],
            })
            .collect();
        format!("\"{escaped}\"")
    };
    let mut text = String::new();
    for (name, profile) in profiles {
        text.push_str(&format!("[{}]\n", quoted(name)));
        if let Some(url) = &profile.url {
            text.push_str(&format!("url = {}\n", quoted(url)));
        }
        if let Some(token) = &profile.token {
            text.push_str(&format!("token = {}\n", quoted(token)));
        }
        if let Some(cacert) = &profile.cacert {
            text.push_str(&format!("cacert = {}\n", quoted(&cacert.to_string_lossy())));
        }
        text.push('\n');
    }
    text
}

fn default_config_path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".config")))?;
    Some(base.join("gantry").join("admin.toml"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_are_tables_of_url_token_and_cacert() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("admin.toml");
        std::fs::write(
            &path,
            "[default]\nurl = \"http://a:1\"\ntoken = \"t1\"\n[prod]\nurl = \"https://b\"\ncacert = \"/ca.pem\"\n",
        )
        .unwrap();
        let profiles = read_profiles(&path).unwrap();
        assert_eq!(profiles["default"].token.as_deref(), Some("t1"));
        assert_eq!(profiles["prod"].cacert.as_deref(), Some(Path::new("/ca.pem")));
        let rendered = render_profiles(&profiles);
        std::fs::write(&path, &rendered).unwrap();
        let again = read_profiles(&path).unwrap();
        assert_eq!(again["default"].url.as_deref(), Some("http://a:1"));
        assert_eq!(again["prod"].cacert.as_deref(), Some(Path::new("/ca.pem")));
        let mut odd = BTreeMap::new();
        odd.insert(
            "a b".to_owned(),
            Profile {
                token: Some("q\"\\t".into()),
                ..Profile::default()
            },
        );
        std::fs::write(&path, render_profiles(&odd)).unwrap();
        assert_eq!(read_profiles(&path).unwrap()["a b"].token.as_deref(), Some("q\"\\t"));
        std::fs::write(&path, "[default]\nurll = \"x\"\n").unwrap();
        let error = format!("{:#}", read_profiles(&path).unwrap_err());
        assert!(error.contains("urll"), "{error}");
    }
}
