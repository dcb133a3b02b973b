//! Flushes of a WAL file to disk, apart from the commits that wrote it (group commit). The
//! engine's ingest connection commits with `synchronous=NORMAL` (its commits write the WAL file
//! and return without waiting for the disk), and the flusher puts them on disk: one `fdatasync`
//! of the WAL file covers every commit written before it began. Ingest commits its next batch
//! while the last is flushed (gantry-core's ingest.rs), and commits that end during a flush share
//! the next one, so a slow disk costs latency, not throughput. An ingest commit is acknowledged
//! only after its flush. A commit may hand the flusher a step to run once it is on disk, before
//! it is answered, in commit order: the staging engine puts its staged events into its index
//! there (staging/staged.rs), so that its reads and walks see nothing that could vanish in a
//! power cut.
//!
//! Why the WAL file alone: a commit in WAL mode appends its pages to the WAL file and nothing
//! else; the database file is written by checkpoints, which flush the WAL first and the database
//! file after, whatever the durability setting. The WAL file is opened by its path for each
//! flush: when every connection to the staging file closes, SQLite checkpoints it (a synced
//! copy into the database file) and deletes it, and a later connection creates a new one. A
//! missing WAL file has nothing left to flush. (SQLite flushes the directory itself when it
//! creates a WAL file.)
//!
//! What the flushes apart buy on a slow disk: docs/PERFORMANCE.md, "Sustainable MQTT rates"
//! (d29d892's rows).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

/// The sending side; the task ends with the last store holding it.
#[derive(Debug)]
pub(crate) struct Flusher {
    requests: mpsc::UnboundedSender<Request>,
    stats: Arc<FlushStats>,
}

/// What the ingest commits and the flushes did, for the engine's log.
#[derive(Debug, Default)]
pub(crate) struct FlushStats {
    flushes: AtomicU64,
    requests: AtomicU64,
    committing_us: AtomicU64,
}

/// What runs once a commit is on disk, before it is answered.
pub(crate) type OnDisk = Box<dyn FnOnce() + Send>;

struct Request {
    /// The commit's step once on disk (the staging engine's index of staged events).
    on_disk: Option<OnDisk>,
    done: oneshot::Sender<Result<(), String>>,
}

impl Flusher {
    /// Flushes `wal` (a WAL file) on request.
    pub(crate) fn start(wal: PathBuf) -> Flusher {
        let (requests, received) = mpsc::unbounded_channel();
        let stats = Arc::new(FlushStats::default());
        tokio::spawn(flush_requested(wal, received, stats.clone()));
        Flusher { requests, stats }
    }

    /// Everything committed to the WAL file so far on disk: resolves once a flush that began
    /// after this call has ended. `on_disk` runs then, before the future resolves, and the steps
    /// of calls run in the order of the calls (the staging engine calls in commit order).
    pub(crate) fn after_commit(
        &self,
        on_disk: Option<OnDisk>,
    ) -> impl Future<Output = io::Result<()>> + Send + 'static {
        let (done, flushed) = oneshot::channel();
        let sent = self.requests.send(Request { on_disk, done });
        async move {
            sent.map_err(|_| io::Error::other("the store is closed"))?;
            match flushed.await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(io::Error::other(e)),
                Err(_) => Err(io::Error::other("the store is closed")),
            }
        }
    }

    /// Every write committed to the WAL file so far, on disk.
    pub(crate) async fn flush(&self) -> io::Result<()> {
        self.after_commit(None).await
    }

    pub(crate) fn stats(&self) -> &FlushStats {
        &self.stats
    }
}

/// `FlushStats` since the last look.
#[derive(Debug, PartialEq)]
pub(crate) struct Taken {
    pub(crate) flushes: u64,
    /// Flush requests answered: ingest commits, and other writes' flushes (the staging engine's
    /// walks).
    pub(crate) requests: u64,
    /// The ingest commits' time on their connection (from their transaction's start to its
    /// commit).
    pub(crate) committing: Duration,
}

impl FlushStats {
    pub(crate) fn committed(&self, took: Duration) {
        self.committing_us.fetch_add(took.as_micros() as u64, Ordering::Relaxed);
    }

    /// What happened since the last call.
    pub(crate) fn taken(&self) -> Taken {
        Taken {
            flushes: self.flushes.swap(0, Ordering::Relaxed),
            requests: self.requests.swap(0, Ordering::Relaxed),
            committing: Duration::from_micros(self.committing_us.swap(0, Ordering::Relaxed)),
        }
    }
}

/// The flusher's task: takes every request waiting, flushes once for all of them, answers them in
/// order; requests arriving meanwhile wait for the next flush.
async fn flush_requested(wal: PathBuf, mut received: mpsc::UnboundedReceiver<Request>, stats: Arc<FlushStats>) {
    let mut waiting = Vec::new();
    while received.recv_many(&mut waiting, usize::MAX).await > 0 {
        let path = wal.clone();
        let flushed = match tokio::task::spawn_blocking(move || sync_wal(&path)).await {
            Ok(flushed) => flushed,
            Err(e) => Err(io::Error::other(e)),
        };
        stats.flushes.fetch_add(1, Ordering::Relaxed);
        stats.requests.fetch_add(waiting.len() as u64, Ordering::Relaxed);
        match flushed {
            Ok(()) => {
                for request in waiting.drain(..) {
                    if let Some(on_disk) = request.on_disk {
                        on_disk();
                    }
                    let _ = request.done.send(Ok(()));
                }
            }
            Err(e) => {
                // The commits may not be on disk: their callers are told so, and their steps do
                // not run (the staging engine's events stay out of its index; their rows go with
                // the next walk's deletes, unmoved).
                tracing::error!(error = %e, wal = %wal.display(), "flushing a WAL file failed");
                for request in waiting.drain(..) {
                    let _ = request.done.send(Err(e.to_string()));
                }
            }
        }
    }
}

/// `fdatasync` of the WAL file at `path`, if there is one.
fn sync_wal(path: &Path) -> io::Result<()> {
    match std::fs::File::open(path) {
        Ok(file) => file.sync_data(),
        // Checkpointed into the database file with a flush and deleted by the last connection
        // that closed (see the module's doc).
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_wal_file_has_nothing_to_flush() {
        let dir = tempfile::tempdir().unwrap();
        sync_wal(&dir.path().join("gantry-staging.db-wal")).unwrap();
        let wal = dir.path().join("present-wal");
        std::fs::write(&wal, b"frames").unwrap();
        sync_wal(&wal).unwrap();
        // Anything else that keeps the file from being opened is an error.
        std::fs::write(dir.path().join("file"), b"").unwrap();
        assert!(sync_wal(&dir.path().join("file").join("x")).is_err());
    }

    /// A step that records `n` in `ran`.
    fn record(ran: &Arc<std::sync::Mutex<Vec<u32>>>, n: u32) -> Option<OnDisk> {
        let ran = ran.clone();
        Some(Box::new(move || ran.lock().unwrap().push(n)))
    }

    #[tokio::test]
    async fn flushed_commits_run_their_steps_in_order_before_they_are_answered() {
        let dir = tempfile::tempdir().unwrap();
        let ran = Arc::new(std::sync::Mutex::new(Vec::new()));
        let flusher = Flusher::start(dir.path().join("staging-wal"));
        let first = flusher.after_commit(record(&ran, 1));
        let second = flusher.after_commit(record(&ran, 2));
        second.await.unwrap();
        // Answered in order: the first was flushed with the second or before it.
        assert_eq!(*ran.lock().unwrap(), vec![1, 2]);
        first.await.unwrap();
        flusher.flush().await.unwrap();
        let taken = flusher.stats().taken();
        assert_eq!(taken.requests, 3);
        assert!((1..=3).contains(&taken.flushes), "{taken:?}");
        assert_eq!(flusher.stats().taken().requests, 0);
    }

    #[tokio::test]
    async fn a_failed_flush_tells_the_caller_and_runs_no_step() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("file"), b"").unwrap();
        let ran = Arc::new(std::sync::Mutex::new(Vec::new()));
        let flusher = Flusher::start(dir.path().join("file").join("wal"));
        let error = flusher.after_commit(record(&ran, 1)).await.unwrap_err();
        assert!(error.to_string().contains("Not a directory"), "{error}");
        assert!(ran.lock().unwrap().is_empty());
    }
}
