//! The data directory's files: private to their owner at every start, whatever the umask.

use std::path::Path;

use anyhow::Context;

/// The data directory holds the database (every token in it) and generated secrets: it is
/// created 0700 whatever the umask, and an existing one with looser modes is tightened.
pub(crate) fn secure_data_dir(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("creating data dir {}", dir.display()))?;
    let mode = std::fs::metadata(dir)?.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("restricting {} to its owner", dir.display()))?;
        tracing::info!(dir = %dir.display(), from = format!("{mode:o}"), "data dir tightened to 0700");
    }
    tighten_files(dir)
}

/// Every file of the data dir (database, WAL, staging, tokens) readable by its owner alone, and
/// so every file of its folders (`tls/`: the CA's and the server's keys), except certificates
/// (`*.pem`), which are public but may be written by the owner alone. A folder is 0700.
pub(crate) fn tighten_files(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        let mode = meta.permissions().mode() & 0o777;
        let path = entry.path();
        let wanted = if meta.is_dir() {
            tighten_files(&path)?;
            0o700
        } else if !meta.is_file() {
            continue;
        } else if path.extension().is_some_and(|e| e == "pem") {
            mode & 0o744
        } else {
            mode & 0o700
        };
        if mode != wanted {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(wanted))
                .with_context(|| format!("restricting {} to its owner", path.display()))?;
            tracing::info!(file = %path.display(), from = format!("{mode:o}"), to = format!("{wanted:o}"), "permissions tightened");
        }
    }
    Ok(())
}

pub(crate) fn write_admin_token(data_dir: &Path, token: &str) -> anyhow::Result<()> {
    write_private(&data_dir.join("admin-token"), &format!("{token}\n"))
}

/// Writes `text` to a file of the data dir that only its owner may read, whatever the umask.
pub(crate) fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    file.write_all(text.as_bytes())?;
    Ok(())
}
