//! Records the commit the binary is built from (`GANTRY_COMMIT` in the environment wins, for
//! builds outside a git checkout) for the `gantry_build_info` metric.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn main() {
    println!("cargo:rerun-if-env-changed=GANTRY_COMMIT");
    let commit = std::env::var("GANTRY_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".to_owned());
    // A new commit moves HEAD's reflog (and HEAD itself on a branch switch).
    for path in ["HEAD", "logs/HEAD"] {
        if let Some(file) = git(&["rev-parse", "--git-path", path]) {
            println!("cargo:rerun-if-changed={file}");
        }
    }
    println!("cargo:rustc-env=GANTRY_COMMIT={commit}");
}
