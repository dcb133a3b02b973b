//! Group commit for the small writes that many callers make at once (a burst of devices
//! connecting: their presence, the deltas' event logs, the desired states marked delivered,
//! then their acks). Each caller hands its write to one task, which writes everything waiting
//! in one transaction, and is answered once that transaction is durable, as it would be by a
//! write of its own. A write that comes alone is written at once; under load each transaction
//! carries as many writes as came in meanwhile, so the commits (each a sync to disk) no longer
//! grow with the number of callers.
//!
//! A write that finds nothing queued and nothing being written is written by its caller, in
//! its own task: at one caller at a time the hops to the writer task and back are most of what
//! the group costs.
//!
//! Invariants: a caller's write is answered only by the transaction that holds it; writes are
//! taken in the order they were handed in (one writer at a time, `Shared::turn`, and a caller
//! writes its own only when no write handed in before it waits); a batch that fails is written
//! again one write at a time, so that a write's failure is its own. The task runs to the end of
//! what it took, so a caller that gives up (an HTTP client gone) takes nobody's write with it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::{Error, Result};

/// The writes one transaction carries at most.
pub const MAX_BATCH: usize = 512;

/// Writes `ops` in one transaction: one answer per op, in their order.
type WriteBatch<Op, Out> = Box<dyn Fn(Vec<Op>) -> Pin<Box<dyn Future<Output = Result<Vec<Out>>> + Send>> + Send + Sync>;

/// The way in to one writer task.
pub struct GroupCommit<Op, Out> {
    queue: mpsc::UnboundedSender<Waiting<Op, Out>>,
    shared: Arc<Shared<Op, Out>>,
}

/// What the task and the callers writing their own share.
struct Shared<Op, Out> {
    write: WriteBatch<Op, Out>,
    /// Held by whoever writes: the task for a batch, a caller for its own write.
    turn: tokio::sync::Mutex<()>,
    /// Writes handed to the task and not answered yet.
    queued: AtomicUsize,
    stop: CancellationToken,
}

struct Waiting<Op, Out> {
    op: Op,
    done: oneshot::Sender<Result<Out>>,
}

impl<Op: Clone + Send + 'static, Out: Send + 'static> GroupCommit<Op, Out> {
    /// Starts the writer, `write`, as a task of `tasks`. Once `stop` is cancelled it takes no
    /// new write, writes those waiting, and ends.
    pub fn start<F, Fut>((tasks, stop): (&TaskTracker, &CancellationToken), write: F) -> Self
    where
        F: Fn(Vec<Op>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<Out>>> + Send + 'static,
    {
        let shared = Arc::new(Shared {
            write: Box::new(move |ops| Box::pin(write(ops))),
            turn: tokio::sync::Mutex::new(()),
            queued: AtomicUsize::new(0),
            stop: stop.clone(),
        });
        let (queue, waiting) = mpsc::unbounded_channel();
        tasks.spawn(run(waiting, shared.clone()));
        Self { queue, shared }
    }

    /// Writes `op` with whatever else waits; returns once it is durable.
    pub async fn write(&self, op: Op) -> Result<Out> {
        let shared = &self.shared;
        // Alone: written here. `queued` is read again once the turn is held, so a write handed
        // to the task before this one is never passed.
        if shared.queued.load(Ordering::Acquire) == 0
            && !shared.stop.is_cancelled()
            && let Ok(_turn) = shared.turn.try_lock()
            && shared.queued.load(Ordering::Acquire) == 0
        {
            let mut answer = answers(&shared.write, vec![op]).await;
            return answer.pop().unwrap_or(Err(Error::Unavailable));
        }
        let (done, answer) = oneshot::channel();
        shared.queued.fetch_add(1, Ordering::AcqRel);
        if self.queue.send(Waiting { op, done }).is_err() {
            shared.queued.fetch_sub(1, Ordering::AcqRel);
            return Err(Error::Unavailable);
        }
        answer.await.map_err(|_| Error::Unavailable)?
    }
}

async fn run<Op: Clone, Out>(mut waiting: mpsc::UnboundedReceiver<Waiting<Op, Out>>, shared: Arc<Shared<Op, Out>>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    let mut stopping = false;
    let stop = shared.stop.clone();
    loop {
        tokio::select! {
            biased;
            () = stop.cancelled(), if !stopping => {
                // What was handed in before is still taken below: `recv_many` drains it.
                waiting.close();
                stopping = true;
                continue;
            }
            taken = waiting.recv_many(&mut batch, MAX_BATCH) => if taken == 0 {
                return;
            }
        }
        // A caller's own write may hold the turn: what is handed in meanwhile goes along.
        let turn = shared.turn.lock().await;
        while batch.len() < MAX_BATCH
            && let Ok(more) = waiting.try_recv()
        {
            batch.push(more);
        }
        let taken = batch.len();
        let (ops, dones): (Vec<Op>, Vec<_>) = batch.drain(..).map(|w| (w.op, w.done)).unzip();
        for (done, answer) in dones.into_iter().zip(answers(&shared.write, ops).await) {
            // A caller that gave up has nobody to answer.
            let _ = done.send(answer);
        }
        shared.queued.fetch_sub(taken, Ordering::AcqRel);
        drop(turn);
    }
}

/// One answer per op: the batch's, or, when the batch failed, each op's own.
async fn answers<Op: Clone, Out>(write: &WriteBatch<Op, Out>, ops: Vec<Op>) -> Vec<Result<Out>> {
    let count = ops.len();
    let retry = if count > 1 { Some(ops.clone()) } else { None };
    let failure = match write(ops).await {
        Ok(outs) if outs.len() == count => return outs.into_iter().map(Ok).collect(),
        Ok(outs) => Error::store(std::io::Error::other(format!(
            "a batch of {count} writes answered {}",
            outs.len()
        ))),
        Err(e) => e,
    };
    let Some(ops) = retry else {
        return vec![Err(failure)];
    };
    tracing::debug!(error = %failure, writes = count, "a batch failed; writing each alone");
    let mut each = Vec::with_capacity(count);
    for op in ops {
        each.push(match write(vec![op]).await {
            Ok(mut outs) if outs.len() == 1 => Ok(outs.remove(0)),
            Ok(_) => Err(failure.duplicate_for_waiter()),
            Err(e) => Err(e),
        });
    }
    each
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Records each batch's ops; an op of 0 fails the batch it is in.
    async fn record(batches: Arc<Mutex<Vec<Vec<u32>>>>, ops: Vec<u32>) -> Result<Vec<u32>> {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        batches.lock().unwrap().push(ops.clone());
        if ops.contains(&0) {
            return Err(Error::Conflict("zero".into()));
        }
        Ok(ops.iter().map(|op| op * 10).collect())
    }

    /// Writes handed in while one is written go together in the next transaction, each caller
    /// gets its own answer, and a failing write fails alone.
    #[tokio::test]
    async fn writes_that_wait_go_together_and_fail_alone() {
        let batches = Arc::new(Mutex::new(Vec::new()));
        let tasks = TaskTracker::new();
        let stop = CancellationToken::new();
        let seen = batches.clone();
        let commit = Arc::new(GroupCommit::start((&tasks, &stop), move |ops| {
            record(seen.clone(), ops)
        }));
        let first = tokio::spawn({
            let commit = commit.clone();
            async move { commit.write(1).await }
        });
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        let rest: Vec<_> = [2, 0, 3]
            .into_iter()
            .map(|op| {
                let commit = commit.clone();
                tokio::spawn(async move { commit.write(op).await })
            })
            .collect();
        assert_eq!(first.await.unwrap().unwrap(), 10);
        let mut answers = Vec::new();
        for task in rest {
            answers.push(task.await.unwrap().ok());
        }
        assert_eq!(answers, [Some(20), None, Some(30)]);
        assert_eq!(
            *batches.lock().unwrap(),
            [vec![1], vec![2, 0, 3], vec![2], vec![0], vec![3]]
        );
        stop.cancel();
        tasks.close();
        tasks.wait().await;
        assert!(matches!(commit.write(4).await, Err(Error::Unavailable)));
    }

    /// A write that comes alone is written in its caller's task; one that comes while another
    /// is written goes to the writer task, and is written after it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_alone_is_written_by_its_caller() {
        let tasks = TaskTracker::new();
        let stop = CancellationToken::new();
        let order = Arc::new(Mutex::new(Vec::new()));
        let seen = order.clone();
        let commit = Arc::new(GroupCommit::start((&tasks, &stop), move |ops: Vec<u32>| {
            let seen = seen.clone();
            async move {
                let writer = tokio::task::id();
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                seen.lock().unwrap().extend(ops.iter().copied());
                Ok(ops.iter().map(|_| writer).collect())
            }
        }));
        let write = |op: u32| {
            let commit = commit.clone();
            tokio::spawn(async move { (tokio::task::id(), commit.write(op).await.unwrap()) })
        };
        let alone = write(1);
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        let behind = write(2);
        let (caller, writer) = alone.await.unwrap();
        assert_eq!(caller, writer, "the write alone is its caller's");
        let (caller, writer) = behind.await.unwrap();
        assert_ne!(caller, writer, "the write behind it is the task's");
        assert_eq!(*order.lock().unwrap(), [1, 2]);
        stop.cancel();
        tasks.close();
        tasks.wait().await;
    }
}
