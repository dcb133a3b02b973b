//! The machine a run measured, for the report: figures from one machine are only comparable with
//! figures from the same machine, and the load average says how busy it was with other work.

use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub cpus: usize,
    pub cpu_model: String,
    pub memory_gib: f64,
    pub kernel: String,
    /// /proc/loadavg when the run began: other work on a shared machine shows here.
    pub load_average_at_start: String,
    pub git_commit: Option<String>,
    /// Uncommitted changes in the work tree the binaries were built from.
    pub git_dirty: Option<bool>,
}

impl Machine {
    pub fn read() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        Machine {
            cpus: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            cpu_model: cpu_model(&cpuinfo).unwrap_or_else(|| "unknown".to_owned()),
            memory_gib: mem_total_kib(&meminfo)
                .map(|kib| kib as f64 / 1024.0 / 1024.0)
                .unwrap_or(0.0),
            kernel: read_trimmed("/proc/sys/kernel/osrelease"),
            load_average_at_start: read_trimmed("/proc/loadavg"),
            git_commit: git(&["rev-parse", "HEAD"]),
            git_dirty: git(&["status", "--porcelain"]).map(|out| !out.is_empty()),
        }
    }

    /// "2 × AMD EPYC, 23.4 GiB".
    pub fn summary(&self) -> String {
        format!("{} × {}, {:.1} GiB", self.cpus, self.cpu_model, self.memory_gib)
    }
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

fn git(args: &[&str]) -> Option<String> {
    let out = std::process::Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

pub fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo
        .lines()
        .find(|line| line.starts_with("model name"))
        .and_then(|line| line.split_once(':'))
        .map(|(_, model)| model.trim().to_owned())
}

pub fn mem_total_kib(meminfo: &str) -> Option<u64> {
    meminfo
        .lines()
        .find_map(|line| line.strip_prefix("MemTotal:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_files() {
        let cpuinfo = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\n";
        assert_eq!(cpu_model(cpuinfo).as_deref(), Some("AMD EPYC 7B13"));
        assert_eq!(
            mem_total_kib("MemTotal:       24576000 kB\nMemFree: 1 kB\n"),
            Some(24_576_000)
        );
        assert_eq!(cpu_model(""), None);
    }
}
