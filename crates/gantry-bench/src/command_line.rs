//! The command line as the report records it: as the user would type it again, with secrets
//! hidden.

use std::path::Path;

/// The command as the user would type it again: through cargo when cargo ran it, with secrets
/// (the token, a database password) hidden.
pub fn command_line() -> String {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args = redact(&args).join(" ");
    if std::env::var_os("CARGO").is_some() {
        let exe = std::env::current_exe().ok();
        let profile = exe
            .as_deref()
            .and_then(Path::parent)
            .and_then(Path::file_name)
            .and_then(|n| n.to_str())
            .unwrap_or("debug");
        let flag = match profile {
            "debug" => String::new(),
            "release" => " --release".to_owned(),
            other => format!(" --profile {other}"),
        };
        format!("cargo run{flag} -p gantry-bench -- {args}")
    } else {
        format!("gantry-bench {args}")
    }
}

/// The arguments with the value of --token and the password of a URL replaced by `***`.
fn redact(args: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut hide_next = false;
    for arg in args {
        if hide_next {
            out.push("***".to_owned());
            hide_next = false;
        } else if arg == "--token" {
            out.push(arg.clone());
            hide_next = true;
        } else if arg.starts_with("--token=") {
            out.push("--token=***".to_owned());
        } else {
            out.push(hide_password(arg));
        }
    }
    out
}

/// `postgres://user:secret@host/db` → `postgres://user:***@host/db`.
fn hide_password(arg: &str) -> String {
    let Some(scheme_end) = arg.find("://") else {
        return arg.to_owned();
    };
    let rest = &arg[scheme_end + 3..];
    let Some(at) = rest.find('@') else {
        return arg.to_owned();
    };
    match rest[..at].find(':') {
        Some(colon) => format!("{}{}:***{}", &arg[..scheme_end + 3], &rest[..colon], &rest[at..]),
        None => arg.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_stay_out_of_the_report() {
        let args: Vec<String> = [
            "all",
            "--token",
            "abc",
            "--url=http://h:1",
            "--token=def",
            "--database-url",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain(["postgres://u:pw@h:5432/db".to_owned()])
        .collect();
        assert_eq!(
            redact(&args),
            [
                "all",
                "--token",
                "***",
                "--url=http://h:1",
                "--token=***",
                "--database-url",
                "postgres://u:***@h:5432/db"
            ]
        );
        assert_eq!(
            hide_password("postgres://postgres@127.0.0.1/x"),
            "postgres://postgres@127.0.0.1/x"
        );
    }
}
