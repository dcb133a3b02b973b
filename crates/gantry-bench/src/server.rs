//! The Gantry under test: started as its own process (the `gantry` binary), on ports the kernel
//! picks, stopped with SIGTERM; and what it costs, read from /proc (resident memory, CPU time).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The line gantry prints once it takes requests; the rest of it is the base URL.
const LISTENING: &str = "gantry listening on ";
/// The line after it: `gantry mqtt on mqtt://<addr> and ws://<addr>` with the embedded broker.
const MQTT_ON: &str = "gantry mqtt on ";
/// Then `gantry mqtt tls on mqtts://<addr> and wss://<addr>`, and last a `gantry tls: ...` line.
const MQTT_TLS_ON: &str = "gantry mqtt tls on ";
const TLS_SAYS: &str = "gantry tls:";

/// The server's log filter: `GANTRY_BENCH_SERVER_LOG` when set (say `info,gantry_store=debug`
/// for the walks' timings), else warnings only (a log line per request or walk would cost the
/// server what it measures).
fn server_log() -> String {
    std::env::var("GANTRY_BENCH_SERVER_LOG").unwrap_or_else(|_| "warn".to_owned())
}

/// A line of the server's stdout into its log file, written through at once (the log is read
/// while the server runs, and after a failed start).
async fn copy_line(log: &mut tokio::fs::File, line: &str) -> std::io::Result<()> {
    log.write_all(format!("{line}\n").as_bytes()).await?;
    log.flush().await
}

pub struct ServerOptions<'a> {
    pub bin: &'a Path,
    pub data_dir: &'a Path,
    pub admin_token: &'a str,
    /// None: the embedded SQLite in the data dir.
    pub database_url: Option<&'a str>,
    /// Where the server's stderr (its log) goes.
    pub log: &'a Path,
}

pub struct Server {
    child: Child,
    pid: u32,
    pub base: String,
    /// The embedded broker's MQTT-over-TCP listener.
    pub mqtt: Option<SocketAddr>,
    /// Its MQTT/TLS listener.
    pub mqtts: Option<SocketAddr>,
    /// The generated CA that signs the TLS listeners' certificate.
    pub ca: PathBuf,
    log: PathBuf,
    drain: JoinHandle<()>,
}

/// How the server ended.
#[derive(Debug, Clone, Serialize)]
pub struct Stopped {
    /// The exit status as the OS tells it ("exit status: 0").
    pub exit: String,
    /// Peak resident memory over the server's life (VmHWM), MiB.
    pub peak_rss_mib: Option<f64>,
    /// CPU seconds (user + system) over the server's life.
    pub cpu_seconds: Option<f64>,
    /// Seconds from SIGTERM to exit.
    pub stop_seconds: f64,
}

impl Server {
    pub async fn start(options: ServerOptions<'_>) -> anyhow::Result<Server> {
        if !options.bin.is_file() {
            bail!(
                "no gantry binary at {} (build it with `cargo build --release -p gantry`, or pass --gantry-bin)",
                options.bin.display()
            );
        }
        // The server logs to stdout (and panics to stderr): both go to the log file, appended
        // through two handles so that neither writes over the other.
        let append = || {
            std::fs::OpenOptions::new()
                .append(true)
                .open(options.log)
                .with_context(|| format!("opening {}", options.log.display()))
        };
        std::fs::File::create(options.log).with_context(|| format!("creating {}", options.log.display()))?;
        let log = append()?;
        let mut copy = tokio::fs::File::from_std(append()?);
        let mut command = Command::new(options.bin);
        command
            .arg("serve")
            .env("GANTRY_DATA_DIR", options.data_dir)
            .env("GANTRY_HTTP_ADDR", "127.0.0.1:0")
            .env("GANTRY_MQTT_ADDR", "127.0.0.1:0")
            .env("GANTRY_MQTT_WS_ADDR", "127.0.0.1:0")
            .env("GANTRY_MQTTS_ADDR", "127.0.0.1:0")
            .env("GANTRY_MQTT_WSS_ADDR", "127.0.0.1:0")
            .env("GANTRY_HTTPS_ADDR", "127.0.0.1:0")
            .env("GANTRY_ADMIN_TOKEN", options.admin_token)
            // The benchmark is one client sending as fast as it can; a per-token limit would
            // measure the limiter. The same for MQTT: the control device acks one control after
            // another, and the burst's devices publish faster than a device's default allowance.
            .env("GANTRY_RATE_LIMIT", "0")
            .env("GANTRY_MQTT_PUBLISH_RATE", "0")
            // The stream scenario opens up to 1,000 streams on one project, all with the
            // administrators' token: past the per-token default the server answers 429.
            .env("GANTRY_STREAM_SUBSCRIBERS_PER_TOKEN", "1000")
            .env("GANTRY_STREAM_SUBSCRIBERS_PER_PROJECT", "1000")
            // The webhooks scenario's receivers are on this machine (and down).
            .env("GANTRY_WEBHOOK_ALLOW_PRIVATE", "true")
            .env("RUST_LOG", server_log())
            // The log is a file: no colour codes.
            .env("NO_COLOR", "1")
            .env_remove("GANTRY_DATABASE_URL")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            // Should the bench itself fail, no server is left behind.
            .kill_on_drop(true);
        if let Some(url) = options.database_url {
            command.env("GANTRY_DATABASE_URL", url);
        }
        let mut child = command
            .spawn()
            .with_context(|| format!("starting {}", options.bin.display()))?;
        let pid = child.id().context("the server exited at once")?;
        let stdout = child.stdout.take().context("server stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let found = tokio::time::timeout(Duration::from_secs(120), async {
            let (mut base, mut mqtt, mut mqtts) = (None, None, None);
            while let Some(line) = lines.next_line().await? {
                copy_line(&mut copy, &line).await?;
                let line = line.trim();
                if let Some(url) = line.strip_prefix(LISTENING) {
                    base = Some(url.to_owned());
                } else if let Some(rest) = line.strip_prefix(MQTT_ON) {
                    mqtt = mqtt_addr(rest);
                } else if let Some(rest) = line.strip_prefix(MQTT_TLS_ON) {
                    mqtts = rest
                        .strip_prefix("mqtts://")
                        .and_then(|r| r.split_whitespace().next()?.parse().ok());
                } else if line.starts_with(TLS_SAYS) {
                    // The last start-up line: the TLS listeners are always on here.
                    return Ok::<_, std::io::Error>(base.map(|b| (b, mqtt, mqtts)));
                }
            }
            Ok(base.map(|b| (b, mqtt, mqtts)))
        })
        .await;
        let (base, mqtt, mqtts) = match found {
            Ok(Ok(Some(found))) => found,
            Ok(Ok(None)) | Ok(Err(_)) => bail!(
                "gantry exited before listening; its log ({}) ends with:\n{}",
                options.log.display(),
                tail(options.log)
            ),
            Err(_) => bail!(
                "gantry did not start listening within 120 s; see {}",
                options.log.display()
            ),
        };
        // Keep reading stdout so that the server never blocks on a full pipe.
        let drain = tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                if copy_line(&mut copy, &line).await.is_err() {
                    break;
                }
            }
            // Lines the server writes after a failed copy are read and dropped.
            while let Ok(Some(_)) = lines.next_line().await {}
        });
        Ok(Server {
            child,
            pid,
            base,
            mqtt,
            mqtts,
            ca: options.data_dir.join("tls").join("ca.pem"),
            log: options.log.to_path_buf(),
            drain,
        })
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn log(&self) -> &Path {
        &self.log
    }

    /// SIGTERM, then waits for the drain and exit (killed after 120 s).
    pub async fn stop(mut self) -> anyhow::Result<Stopped> {
        let last = sample(Some(self.pid));
        let asked = std::time::Instant::now();
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(self.pid.to_string())
            .status()
            .await
            .context("running kill -TERM")?;
        if !status.success() {
            bail!("kill -TERM {} failed", self.pid);
        }
        let exit = match tokio::time::timeout(Duration::from_secs(120), self.child.wait()).await {
            Ok(status) => status?.to_string(),
            Err(_) => {
                self.child.kill().await?;
                "killed after 120 s without exiting on SIGTERM".to_owned()
            }
        };
        self.drain.abort();
        Ok(Stopped {
            exit,
            peak_rss_mib: last.map(|s| kib_to_mib(s.hwm_kib)),
            cpu_seconds: last.map(|s| s.cpu_seconds),
            stop_seconds: asked.elapsed().as_secs_f64(),
        })
    }
}

/// `mqtt://127.0.0.1:1883 and ws://...` → 127.0.0.1:1883; None for an external broker.
fn mqtt_addr(rest: &str) -> Option<SocketAddr> {
    rest.strip_prefix("mqtt://")?.split_whitespace().next()?.parse().ok()
}

/// The pid of a running process with this command name (the first found), e.g. a local broker.
pub fn pid_of(name: &str) -> Option<u32> {
    processes_named(name).next().map(|(pid, _)| pid)
}

/// Every running process with this command name: its pid and its /proc/<pid>/stat.
fn processes_named(name: &str) -> impl Iterator<Item = (u32, String)> + '_ {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| Some((pid, std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)))
        .filter(move |(_, stat)| command_name(stat) == Some(name))
}

/// The soft limit on open files of this process (inherited by the server it starts).
pub fn open_file_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    parse_open_file_limit(&limits)
}

/// "Max open files            20000                20000                files" → 20000.
pub fn parse_open_file_limit(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..].split_whitespace().next()?.parse().ok()
}

fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

pub fn kib_to_mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// One reading of a process.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProcSample {
    pub rss_kib: u64,
    pub hwm_kib: u64,
    pub cpu_seconds: f64,
    /// Bytes handed to write calls so far (`wchar` of /proc/<pid>/io): files (WAL, checkpoints,
    /// log) and sockets (answers, queries to PostgreSQL) alike.
    pub written_bytes: Option<u64>,
}

/// The longest a measurement of a pair (without, then with a feature) waits for the server to
/// settle first (`wait_until_idle`): the second does not start while the first's events are
/// still being moved into the database, so both start from a settled store.
pub const SETTLE: std::time::Duration = std::time::Duration::from_secs(30);

/// Waits until the server at `pid` has used under 5 % of a core for a second, at most `limit`;
/// returns how long it waited (None: no process to watch). A scenario that measures an idle
/// server runs after one that overloaded it on purpose (ingest-mqtt's overload leaves a backlog
/// that the server goes on storing for a while).
pub async fn wait_until_idle(pid: Option<u32>, limit: std::time::Duration) -> Option<std::time::Duration> {
    let pid = pid?;
    let started = std::time::Instant::now();
    let mut last = sample(Some(pid))?.cpu_seconds;
    while started.elapsed() < limit {
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        let now = sample(Some(pid))?.cpu_seconds;
        if now - last < 0.05 {
            break;
        }
        last = now;
    }
    Some(started.elapsed())
}

/// Reads /proc/<pid> (or /proc/self); None when the process is gone or this is not Linux.
pub fn sample(pid: Option<u32>) -> Option<ProcSample> {
    let dir = match pid {
        Some(pid) => format!("/proc/{pid}"),
        None => "/proc/self".to_owned(),
    };
    let status = std::fs::read_to_string(format!("{dir}/status")).ok()?;
    let stat = std::fs::read_to_string(format!("{dir}/stat")).ok()?;
    let (rss_kib, hwm_kib) = parse_status(&status);
    Some(ProcSample {
        rss_kib,
        hwm_kib,
        cpu_seconds: parse_cpu_ticks(&stat)? as f64 / clock_ticks(),
        written_bytes: std::fs::read_to_string(format!("{dir}/io"))
            .ok()
            .and_then(|io| io_field(&io, "wchar:")),
    })
}

/// A field of /proc/<pid>/io.
pub fn io_field(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix(name))
        .and_then(|rest| rest.trim().parse().ok())
}

/// `VmRSS` and `VmHWM` of /proc/<pid>/status, in KiB.
pub fn parse_status(text: &str) -> (u64, u64) {
    let field = |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// utime + stime (fields 14 and 15) of /proc/<pid>/stat, in clock ticks. The command name
/// (field 2) may hold spaces and parentheses, so fields are counted after its last `)`.
pub fn parse_cpu_ticks(text: &str) -> Option<u64> {
    let after = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // `after` starts at field 3 (state): utime is field 14, index 11.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// Clock ticks per second (`getconf CLK_TCK`; 100 on every Linux we know).
fn clock_ticks() -> f64 {
    static TICKS: OnceLock<f64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|out| String::from_utf8(out.stdout).ok())
            .and_then(|text| text.trim().parse().ok())
            .filter(|t: &f64| *t > 0.0)
            .unwrap_or(100.0)
    })
}

/// What one measurement cost: server CPU and peak resident memory while it ran, the
/// benchmark's own CPU (the load generator shares the machine with the server), and the CPU
/// every other process took meanwhile (a shared machine's noise).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Usage {
    pub server_cpu_seconds: Option<f64>,
    pub server_rss_max_mib: Option<f64>,
    pub client_cpu_seconds: Option<f64>,
    pub other_cpu_seconds: Option<f64>,
    /// Bytes the server handed to write calls during the measurement.
    pub server_written_bytes: Option<u64>,
    /// CPU of the local PostgreSQL's processes, when the run uses PostgreSQL: the store's work,
    /// not noise.
    pub postgres_cpu_seconds: Option<f64>,
}

/// CPU seconds so far of every process named `postgres` (a local PostgreSQL's backends).
pub fn postgres_cpu_seconds() -> f64 {
    let ticks: u64 = processes_named("postgres")
        .filter_map(|(_, stat)| parse_cpu_ticks(&stat))
        .sum();
    ticks as f64 / clock_ticks()
}

/// Field 2 of /proc/<pid>/stat, without its parentheses.
pub fn command_name(stat: &str) -> Option<&str> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    stat.get(open + 1..close)
}

/// CPU seconds all processors spent busy since boot (/proc/stat: everything but idle and iowait).
pub fn machine_busy_seconds() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    Some(parse_busy_ticks(&text)? as f64 / clock_ticks())
}

/// Busy ticks of the `cpu` line: user nice system idle iowait irq softirq steal, less idle and iowait.
pub fn parse_busy_ticks(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let ticks: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .filter_map(|t| t.parse().ok())
        .collect();
    if ticks.len() < 5 {
        return None;
    }
    Some(ticks.iter().sum::<u64>() - ticks[3] - ticks[4])
}

/// Samples the server's RSS every 200 ms from `start` to `finish`.
pub struct UsageMeter {
    pid: Option<u32>,
    server_start: Option<ProcSample>,
    client_start: Option<ProcSample>,
    machine_start: Option<f64>,
    postgres_start: Option<f64>,
    max_rss_kib: Arc<AtomicU64>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl UsageMeter {
    /// `pid` None: no server to watch (a remote Gantry); only the client is measured.
    /// `postgres`: the store is a local PostgreSQL, whose CPU is measured apart.
    pub fn start(pid: Option<u32>, postgres: bool) -> Self {
        let server_start = pid.and_then(|p| sample(Some(p)));
        let max_rss_kib = Arc::new(AtomicU64::new(server_start.map(|s| s.rss_kib).unwrap_or(0)));
        let (stop, mut stopped) = oneshot::channel();
        let max = max_rss_kib.clone();
        let task = tokio::spawn(async move {
            let Some(pid) = pid else { return };
            loop {
                tokio::select! {
                    _ = &mut stopped => break,
                    _ = tokio::time::sleep(Duration::from_millis(200)) => {
                        if let Some(s) = sample(Some(pid)) {
                            max.fetch_max(s.rss_kib, Ordering::Relaxed);
                        }
                    }
                }
            }
        });
        Self {
            pid,
            server_start,
            client_start: sample(None),
            machine_start: machine_busy_seconds(),
            postgres_start: postgres.then(postgres_cpu_seconds),
            max_rss_kib,
            stop,
            task,
        }
    }

    pub async fn finish(self) -> Usage {
        let _ = self.stop.send(());
        let _ = self.task.await;
        let server_end = self.pid.and_then(|p| sample(Some(p)));
        if let Some(end) = server_end {
            self.max_rss_kib.fetch_max(end.rss_kib, Ordering::Relaxed);
        }
        let client_end = sample(None);
        let machine = self.machine_start.zip(machine_busy_seconds()).map(|(a, b)| b - a);
        // Backends that exit meanwhile take their time with them: never below zero.
        let postgres = self.postgres_start.map(|a| (postgres_cpu_seconds() - a).max(0.0));
        let server_cpu_seconds = self
            .server_start
            .zip(server_end)
            .map(|(a, b)| b.cpu_seconds - a.cpu_seconds);
        let client_cpu_seconds = self
            .client_start
            .zip(client_end)
            .map(|(a, b)| b.cpu_seconds - a.cpu_seconds);
        Usage {
            server_cpu_seconds,
            server_rss_max_mib: server_end.map(|_| kib_to_mib(self.max_rss_kib.load(Ordering::Relaxed))),
            client_cpu_seconds,
            server_written_bytes: self
                .server_start
                .and_then(|s| s.written_bytes)
                .zip(server_end.and_then(|s| s.written_bytes))
                .map(|(a, b)| b.saturating_sub(a)),
            // Tick rounding can make it slightly negative when nothing else ran.
            other_cpu_seconds: machine.map(|m| {
                (m - server_cpu_seconds.unwrap_or(0.0) - client_cpu_seconds.unwrap_or(0.0) - postgres.unwrap_or(0.0))
                    .max(0.0)
            }),
            postgres_cpu_seconds: postgres,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_fields() {
        let text = "Name:\tgantry\nVmPeak:\t  900000 kB\nVmHWM:\t   81234 kB\nVmRSS:\t   70000 kB\n";
        assert_eq!(parse_status(text), (70000, 81234));
        assert_eq!(parse_status("Name: x\n"), (0, 0));
        assert_eq!(io_field("rchar: 10\nwchar: 2048\nsyscw: 3\n", "wchar:"), Some(2048));
        assert_eq!(io_field("rchar: 10\n", "wchar:"), None);
    }

    #[test]
    fn cpu_ticks_after_an_odd_command_name() {
        // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime ...
        let text = "4242 (gan try) (x)) S 1 2 3 4 5 6 7 8 9 10 250 75 0 0 20 0 4 0";
        assert_eq!(parse_cpu_ticks(text), Some(325));
        assert_eq!(parse_cpu_ticks("garbage"), None);
        assert_eq!(command_name(text), Some("gan try) (x)"));
        assert_eq!(command_name("12 (postgres) S 1"), Some("postgres"));
    }

    #[test]
    fn busy_ticks_leave_out_idle_and_iowait() {
        let text = "cpu  100 5 50 1000 20 3 2 0 0 0\ncpu0 50 2 25 500 10 1 1 0 0 0\n";
        assert_eq!(parse_busy_ticks(text), Some(160));
        assert_eq!(parse_busy_ticks("intr 1 2 3"), None);
    }

    #[test]
    fn startup_lines() {
        assert_eq!(
            mqtt_addr("mqtt://127.0.0.1:41883 and ws://127.0.0.1:40883"),
            Some("127.0.0.1:41883".parse().unwrap())
        );
        assert_eq!(mqtt_addr("the external broker mqtt://10.0.0.1:1883"), None);
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            20000                40000                files\n";
        assert_eq!(parse_open_file_limit(limits), Some(20000));
        assert!(open_file_limit().is_some_and(|n| n > 0));
    }

    #[test]
    fn processes_are_found_by_name() {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
        let name = command_name(&stat).unwrap().to_owned();
        assert!(processes_named(&name).any(|(pid, _)| pid == std::process::id()));
        assert!(pid_of(&name).is_some());
        assert_eq!(pid_of("no-such-process-name"), None);
    }

    #[test]
    fn this_process_can_be_sampled() {
        let s = sample(None).expect("/proc/self is readable on Linux");
        assert!(s.rss_kib > 0);
        assert!(s.cpu_seconds >= 0.0);
    }
}
