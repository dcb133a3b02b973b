//! `gantry admin`: a command-line client of the REST API (never the database) for operators:
//! tenants, projects, models, devices, bulk device import and event export; and `gantry
//! completions`. See the README's "Admin CLI" section.

mod catalog;
mod client;
mod export;
mod import;
mod output;
mod profile;
mod users;

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};

pub use profile::ConnectionArgs;

use client::Client;
use output::Output;

#[derive(Debug, Args)]
pub struct AdminArgs {
    #[command(flatten, next_help_heading = "Connection")]
    pub connection: ConnectionArgs,
    /// Print the API's JSON instead of tables
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: AdminCommand,
}

#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Tenants (created by the system administrator)
    #[command(subcommand)]
    Tenants(TenantCommand),
    /// Projects and their application tokens
    #[command(subcommand)]
    Projects(ProjectCommand),
    /// Device models
    #[command(subcommand)]
    Models(ModelCommand),
    /// Devices, one at a time or imported in bulk
    #[command(subcommand)]
    Devices(DeviceCommand),
    /// Device events
    #[command(subcommand)]
    Events(EventCommand),
    /// User accounts (tenant administrators)
    #[command(subcommand)]
    Users(UserCommand),
    /// Sign in as a user; the session is kept in the admin profile file (mode 0600) and used
    /// by the commands that follow. The password is read from standard input.
    Login(LoginArgs),
}

#[derive(Debug, Args)]
pub struct LoginArgs {
    #[arg(long)]
    pub username: String,
}

#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Create a user; without --password-stdin a password is generated and printed (this once)
    Create {
        username: String,
        /// ADMIN, OPERATOR or VIEWER
        #[arg(long)]
        role: String,
        /// A project id the user works on (repeat it; none: all of the tenant's)
        #[arg(long = "project")]
        projects: Vec<String>,
        #[arg(long)]
        display_name: Option<String>,
        #[arg(long)]
        email: Option<String>,
        /// Read the password from the first line of standard input
        #[arg(long)]
        password_stdin: bool,
    },
    /// List the tenant's users
    List {
        /// ADMIN, OPERATOR or VIEWER
        #[arg(long)]
        role: Option<String>,
        /// Users of this project id
        #[arg(long)]
        project: Option<String>,
        /// Usernames containing this (case-insensitive)
        #[arg(long)]
        name: Option<String>,
        #[arg(long)]
        limit: Option<u64>,
    },
    /// Lock a user (by id or username): it cannot sign in, its sessions end
    Lock { user: String },
    /// Unlock a user
    Unlock { user: String },
    /// Delete a user; its sessions end
    Delete { user: String },
    /// Set a user's password, read from the first line of standard input; its sessions end
    SetPassword { user: String },
}

#[derive(Debug, Subcommand)]
pub enum TenantCommand {
    /// Create a tenant; prints its administrator token (shown this once)
    Create { name: String },
    /// List tenants: all for the system administrator, its own for a tenant administrator
    List {
        #[arg(long)]
        limit: Option<u64>,
    },
}

#[derive(Debug, Subcommand)]
pub enum ProjectCommand {
    /// Create a project; prints its applicationAccessToken
    Create {
        name: String,
        #[arg(long)]
        description: Option<String>,
        /// development, product or closed [server default: development]
        #[arg(long)]
        status: Option<String>,
    },
    /// List the projects the token can see
    List {
        /// Only projects in this status: development, product or closed
        #[arg(long)]
        status: Option<String>,
        /// At most this many
        #[arg(long)]
        limit: Option<u64>,
    },
    /// Show one project (by id or name)
    Get { project: String },
    /// Replace the project's applicationAccessToken; prints the new one
    RotateToken {
        project: String,
        /// Seconds the old token keeps working (0 to 86400)
        #[arg(long, default_value_t = 0)]
        grace: u32,
    },
}

#[derive(Debug, Subcommand)]
pub enum ModelCommand {
    /// Create a model from a JSON or YAML file, or update the model of that name
    Apply {
        /// The model as the API takes it (name, deviceType, attributesMap, actionsMap, ...);
        /// YAML unless the name ends in .json
        file: PathBuf,
    },
    /// List the tenant's models
    List {
        #[arg(long)]
        limit: Option<u64>,
    },
    /// Show one model (by id or name)
    Get { model: String },
}

#[derive(Debug, Subcommand)]
pub enum DeviceCommand {
    /// Create a device; prints its accessToken
    Create {
        name: String,
        /// Project id or name
        #[arg(long)]
        project: String,
        /// Model id or name
        #[arg(long)]
        model: String,
        #[arg(long)]
        comments: Option<String>,
        /// Mark the device virtual
        #[arg(long)]
        r#virtual: bool,
        /// Create it Locked
        #[arg(long)]
        locked: bool,
    },
    /// Show one device
    Get { id: String },
    /// List a project's devices (or a model's, with --model alone)
    List(DeviceListArgs),
    /// Lock a device: its token is refused for writes, it cannot log in over MQTT
    Lock { id: String },
    /// Unlock a device
    Unlock { id: String },
    /// Replace a device's accessToken; prints the new one
    RotateToken {
        id: String,
        /// Seconds the old token keeps working (0 to 86400)
        #[arg(long, default_value_t = 0)]
        grace: u32,
    },
    /// Delete a device (its token stops working, its name is free again)
    Delete { id: String },
    /// Create devices from a CSV file (header `deviceName`, optional `comments`, `virtual`,
    /// `status`, `metadata`); names that exist in the project are skipped
    Import(import::ImportArgs),
}

#[derive(Debug, Args)]
pub struct DeviceListArgs {
    /// Project id or name
    #[arg(long, required_unless_present = "model")]
    pub project: Option<String>,
    /// Model id or name: with --project a filter, alone the model's devices
    #[arg(long)]
    pub model: Option<String>,
    /// Devices whose name contains this (case-insensitive)
    #[arg(long)]
    pub name: Option<String>,
    /// Devices of models of this deviceType
    #[arg(long = "type")]
    pub device_type: Option<String>,
    /// Active or Locked
    #[arg(long)]
    pub status: Option<String>,
    /// Only virtual (true) or only real (false) devices
    #[arg(long)]
    pub r#virtual: Option<bool>,
    /// updatedTime (default), createdTime, deviceName or status
    #[arg(long)]
    pub sort_by: Option<String>,
    /// ASC or DESC (default DESC)
    #[arg(long)]
    pub sort_order: Option<String>,
    /// At most this many
    #[arg(long)]
    pub limit: Option<u64>,
}

#[derive(Debug, Subcommand)]
pub enum EventCommand {
    /// Write a device's events as CSV or JSON lines, newest first, page by page
    Export(export::ExportArgs),
}

/// `gantry completions <shell>`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    #[arg(value_enum)]
    pub shell: Shell,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

/// Prints the completion script of `command` (the whole `gantry` command, which the binary holds)
/// for `shell`. Made in memory first: clap_complete panics on a failed write, and a closed pipe
/// is no failure of ours.
pub fn completions(args: &CompletionsArgs, mut command: clap::Command) -> std::io::Result<()> {
    use std::io::Write;
    let shell = match args.shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
    };
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "gantry", &mut script);
    let mut out = std::io::stdout().lock();
    out.write_all(&script)?;
    out.flush()
}

/// Runs one admin command; a failure is printed as one line with its causes (the API's
/// `message` and `returnCode` among them) and the process exits with status 1.
pub async fn main(args: AdminArgs) -> ! {
    let code = match run(args).await {
        Ok(()) => 0,
        // The reader of stdout stopped (`events export | head`): nothing is wrong.
        Err(error) if closed_pipe(&error) => 0,
        Err(error) => {
            eprintln!("error: {error:#}");
            1
        }
    };
    std::process::exit(code)
}

/// Whether `e` comes from writing to a pipe whose reader has gone.
pub fn closed_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        let io = cause.downcast_ref::<std::io::Error>().map(std::io::Error::kind);
        let csv = cause.downcast_ref::<csv::Error>().and_then(|c| match c.kind() {
            csv::ErrorKind::Io(io) => Some(io.kind()),
            _ => None,
        });
        let json = cause
            .downcast_ref::<serde_json::Error>()
            .and_then(serde_json::Error::io_error_kind);
        io.or(csv).or(json) == Some(std::io::ErrorKind::BrokenPipe)
    })
}

async fn run(args: AdminArgs) -> anyhow::Result<()> {
    let out = Output { json: args.json };
    if let AdminCommand::Login(login) = args.command {
        return users::login(&args.connection, out, login).await;
    }
    let client = Client::new(&args.connection.resolve()?)?;
    match args.command {
        AdminCommand::Tenants(command) => catalog::tenants(&client, out, command).await,
        AdminCommand::Projects(command) => catalog::projects(&client, out, command).await,
        AdminCommand::Models(command) => catalog::models(&client, out, command).await,
        AdminCommand::Devices(DeviceCommand::Import(import)) => import::run(&client, out, import).await,
        AdminCommand::Devices(command) => catalog::devices(&client, out, command).await,
        AdminCommand::Events(EventCommand::Export(export)) => export::run(&client, export).await,
        AdminCommand::Users(command) => users::users(&client, out, command).await,
        AdminCommand::Login(_) => unreachable!("signed in above"),
    }
}
