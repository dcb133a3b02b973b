//! `gantry admin users ...` and `gantry admin login`: user accounts over the REST API, and a
//! sign-in whose session the admin profile keeps.

use std::io::BufRead;

use anyhow::{Context, bail};
use serde_json::{Value, json};

use super::client::{Client, segment};
use super::output::{Output, USER_COLUMNS};
use super::profile::ConnectionArgs;
use super::{LoginArgs, UserCommand};

pub async fn users(client: &Client, out: Output, command: UserCommand) -> anyhow::Result<()> {
    match command {
        UserCommand::Create {
            username,
            role,
            projects,
            display_name,
            email,
            password_stdin,
        } => {
            let mut body = json!({"username": username, "role": role.to_uppercase(), "projectIds": projects});
            if let Some(name) = display_name {
                body["displayName"] = Value::String(name);
            }
            if let Some(email) = email {
                body["email"] = Value::String(email);
            }
            if password_stdin {
                body["password"] = Value::String(read_password()?);
            }
            out.record(&client.post("/users", &body).await?);
        }
        UserCommand::List {
            role,
            project,
            name,
            limit,
        } => {
            let mut query = Vec::new();
            query.extend(role.map(|r| ("role", r.to_uppercase())));
            query.extend(project.map(|p| ("projectId", p)));
            query.extend(name.map(|n| ("username", n)));
            out.list(&client.all("/users", &query, limit).await?, USER_COLUMNS);
        }
        UserCommand::Lock { user } => {
            let id = user_id(client, &user).await?;
            out.record(
                &client
                    .post(&format!("/users/{}/lock", segment(&id)), &json!({}))
                    .await?,
            );
        }
        UserCommand::Unlock { user } => {
            let id = user_id(client, &user).await?;
            out.record(
                &client
                    .post(&format!("/users/{}/unlock", segment(&id)), &json!({}))
                    .await?,
            );
        }
        UserCommand::Delete { user } => {
            let id = user_id(client, &user).await?;
            client.delete(&format!("/users/{}", segment(&id))).await?;
            out.done(&format!("deleted user {id}"), &json!({"id": id}));
        }
        UserCommand::SetPassword { user } => {
            let id = user_id(client, &user).await?;
            let body = json!({"password": read_password()?});
            out.record(&client.put(&format!("/users/{}", segment(&id)), &body).await?);
        }
    }
    Ok(())
}

/// Signs in and keeps the session's token in the admin profile, for the commands that follow.
pub async fn login(connection: &ConnectionArgs, out: Output, args: LoginArgs) -> anyhow::Result<()> {
    let target = connection.resolve_for_login()?;
    let client = Client::new(&target)?;
    let password = read_password()?;
    let session = client
        .post("/auth/login", &json!({"username": args.username, "password": password}))
        .await?;
    let Some(token) = session["token"].as_str() else {
        bail!("the server's answer holds no session token");
    };
    let path = connection.store_session(&target, token)?;
    let user = &session["user"];
    let line = format!(
        "signed in as {} ({}) until {}; the session is kept in {}",
        user["username"].as_str().unwrap_or("?"),
        user["role"].as_str().unwrap_or("?"),
        session["expiresTime"],
        path.display()
    );
    out.done(&line, user);
    Ok(())
}

/// A password from the first line of standard input (so that it is in no command line).
fn read_password() -> anyhow::Result<String> {
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .context("reading the password from standard input")?;
    let password = line.trim_end_matches(['\r', '\n']).to_owned();
    if password.is_empty() {
        bail!("no password on standard input (pipe it in: `echo \"$PASSWORD\" | gantry admin ...`)");
    }
    Ok(password)
}

/// A user's id, from its id or its username (compared case-insensitively).
async fn user_id(client: &Client, user: &str) -> anyhow::Result<String> {
    let listed = client.all("/users", &[("username", user.to_owned())], None).await?;
    let found = listed
        .iter()
        .find(|u| u["username"].as_str().is_some_and(|n| n.eq_ignore_ascii_case(user)))
        .and_then(|u| u["id"].as_str());
    Ok(found.unwrap_or(user).to_owned())
}
