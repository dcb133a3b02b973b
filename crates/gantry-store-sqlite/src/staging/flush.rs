//! The staging file's flushes to disk, apart from its commits. The stager connection
//! commits the staging file with `synchronous=NORMAL` (its commits write the WAL file and return
//! without waiting for the disk), and the flusher puts them on disk: one `fdatasync` of the WAL
//! file covers every commit written before it began. Ingest commits its next batch while the last
//! is flushed (gantry-core's ingest.rs), and commits that end during a flush share the next one,
//! so a slow disk costs latency, not throughput. An ingest commit is acknowledged only after its
//! flush, and its staged events enter the index (staged.rs) only then, in commit order: reads and
//! rounds see nothing that could vanish in a power cut.
//!
//! Why the WAL file alone: a commit in WAL mode appends its pages to the WAL file and nothing
//! else; the database file is written by checkpoints, which flush the WAL first and the database
//! file after, whatever the durability setting. The WAL file is opened by its path for each
//! flush: when every connection to the staging file closes, SQLite checkpoints it (a synced
//! copy into the database file) and deletes it, and a later connection creates a new one. A
//! missing WAL file has nothing left to flush. (SQLite flushes the directory itself when it
//! creates a WAL file.)

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::staged::Staged;

/// The sending side; its task ends once the store lets it go or its stop signal comes.
#[derive(Debug)]
pub(crate) struct Flusher {
    requests: mpsc::UnboundedSender<Request>,
    stats: Arc<FlushStats>,
}

/// What the stager's ingest commits and the flushes did, for the round's log.
#[derive(Debug, Default)]
pub(crate) struct FlushStats {
    flushes: AtomicU64,
    requests: AtomicU64,
    committing_us: AtomicU64,
}

#[derive(Debug)]
struct Request {
    /// The staged events of an ingest commit (number, device, id), for the index; empty for
    /// another write of the stager (a round's deletes, the adoption of old staged rows).
    staged: Vec<(i64, String, String)>,
    done: oneshot::Sender<Result<(), String>>,
}

impl Flusher {
    /// Flushes `wal` (the staging file's WAL file) on request, telling `staged` of the events of
    /// each flushed commit; the task that does so is the caller's to run. Once `stop` is
    /// cancelled, it answers the requests waiting and ends; later ones are told the store is
    /// closed.
    pub(crate) fn new(
        wal: PathBuf,
        staged: Arc<Staged>,
        stop: CancellationToken,
    ) -> (Flusher, impl Future<Output = ()> + Send + 'static) {
        let (requests, received) = mpsc::unbounded_channel();
        let stats = Arc::new(FlushStats::default());
        let task = flush_requested(wal, staged, (received, stop), stats.clone());
        (Flusher { requests, stats }, task)
    }

    /// Everything the stager committed so far on disk: resolves once a flush that began after
    /// this call has ended. `staged` (an ingest commit's events) enters the index then, before
    /// the future resolves; calls must come in commit order (ingest holds `Staged::committing`).
    pub(crate) fn after_commit(
        &self,
        staged: Vec<(i64, String, String)>,
    ) -> impl Future<Output = io::Result<()>> + Send + 'static {
        let (done, flushed) = oneshot::channel();
        let sent = self.requests.send(Request { staged, done });
        async move {
            sent.map_err(|_| io::Error::other("the store is closed"))?;
            match flushed.await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(io::Error::other(e)),
                Err(_) => Err(io::Error::other("the store is closed")),
            }
        }
    }

    /// Every write the stager committed so far, on disk.
    pub(crate) async fn flush(&self) -> io::Result<()> {
        self.after_commit(Vec::new()).await
    }

    pub(crate) fn stats(&self) -> &FlushStats {
        &self.stats
    }
}

/// `FlushStats` since the last look.
#[derive(Debug, PartialEq)]
pub(crate) struct Taken {
    pub(crate) flushes: u64,
    /// Flush requests answered: ingest commits, and the rounds' flushes.
    pub(crate) requests: u64,
    /// The ingest commits' time on the stager (from their transaction's start to its commit).
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
async fn flush_requested(
    wal: PathBuf,
    staged: Arc<Staged>,
    (mut received, stop): (mpsc::UnboundedReceiver<Request>, CancellationToken),
    stats: Arc<FlushStats>,
) {
    let mut waiting = Vec::new();
    loop {
        let taken = tokio::select! {
            taken = received.recv_many(&mut waiting, usize::MAX) => taken,
            // No request after this one's: those already sent are still taken (and answered).
            _ = stop.cancelled(), if !received.is_closed() => {
                received.close();
                continue;
            }
        };
        if taken == 0 {
            return;
        }
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
                    staged.add(request.staged);
                    let _ = request.done.send(Ok(()));
                }
            }
            Err(e) => {
                // The commits may not be on disk: their callers are told so, and their events
                // stay out of the index (their rows go with the next round's deletes, unmoved).
                tracing::error!(error = %e, wal = %wal.display(), "flushing the staging file failed");
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

    /// A flusher with its task running.
    fn started(wal: PathBuf, staged: Arc<Staged>) -> Flusher {
        let (flusher, task) = Flusher::new(wal, staged, CancellationToken::new());
        tokio::spawn(task);
        flusher
    }

    /// Once told to stop, the flusher answers what was asked before and nothing after.
    #[tokio::test]
    async fn a_stopped_flusher_answers_what_waits_and_refuses_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let stop = CancellationToken::new();
        let (flusher, task) = Flusher::new(dir.path().join("staging-wal"), Arc::default(), stop.clone());
        let asked = flusher.after_commit(Vec::new());
        stop.cancel();
        let task = tokio::spawn(task);
        asked.await.expect("asked before the stop");
        task.await.unwrap();
        let refused = flusher.flush().await.unwrap_err();
        assert!(refused.to_string().contains("the store is closed"), "{refused}");
    }

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

    #[tokio::test]
    async fn flushed_commits_enter_the_index_in_order_before_they_are_answered() {
        let dir = tempfile::tempdir().unwrap();
        let staged = Arc::new(Staged::default());
        let flusher = started(dir.path().join("staging-wal"), staged.clone());
        let first = flusher.after_commit(vec![(1, "dev-a".into(), "e1".into())]);
        let second = flusher.after_commit(vec![(2, "dev-a".into(), "e2".into())]);
        second.await.unwrap();
        // Answered in order: the first was flushed with the second or before it.
        assert_eq!(staged.seq_of("e1"), Some(1));
        assert_eq!(staged.seq_of("e2"), Some(2));
        first.await.unwrap();
        flusher.flush().await.unwrap();
        let taken = flusher.stats().taken();
        assert_eq!(taken.requests, 3);
        assert!((1..=3).contains(&taken.flushes), "{taken:?}");
        assert_eq!(flusher.stats().taken().requests, 0);
    }

    #[tokio::test]
    async fn a_failed_flush_tells_the_caller_and_leaves_the_index_alone() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("file"), b"").unwrap();
        let staged = Arc::new(Staged::default());
        let flusher = started(dir.path().join("file").join("wal"), staged.clone());
        let error = flusher
            .after_commit(vec![(1, "dev-a".into(), "e1".into())])
            .await
            .unwrap_err();
        assert!(error.to_string().contains("Not a directory"), "{error}");
        assert_eq!(staged.seq_of("e1"), None);
    }
}
