//! Which events are in the staging table, in memory. The staging table (table.rs) has no
//! index but its arrival number (`seq`), so that an ingest commit appends to the end of one
//! table; this index finds a device's staged events (by their numbers) and an event's number by
//! its id for the reads, and the events a round moves.
//!
//! Why it can be stale without a read going wrong: a read passes the numbers to SQL and reads the
//! rows in the same statement as device_events, in one snapshot. A move inserts a device's staged
//! rows into device_events and records them as moved in one transaction (they are deleted from
//! staging at the end of the mover's round), and reads skip recorded rows, so a row is found in one
//! table or the other, never both. A number that names no row any more (moved or deleted) finds
//! nothing; numbers are never reused (AUTOINCREMENT). What must hold is the other way: an event
//! whose commit has been acknowledged is here until it has left the staging table. `add` runs
//! after the commit is on disk (flush.rs) and before the acknowledgement; `moved_through` runs after a round's delete
//! has committed and removes numbers no higher than the highest it deleted, and numbers rise in
//! commit order (one writer of the staging file, the stager).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use super::table::json_array;

#[derive(Debug, Default)]
pub(crate) struct Staged {
    inner: Mutex<Inner>,
    /// Woken when numbers leave the index (`moved_through`), for ingest waiting for room.
    room: tokio::sync::Notify,
    /// Held by ingest from its transaction's start until it has handed the commit to the flusher
    /// (flush.rs), which calls `add` in the order it was handed them: numbers enter the index in
    /// commit order, so a round that takes every held number up to the highest leaves none
    /// committed before it behind (`by_device`). One connection commits ingest anyway.
    pub(crate) committing: tokio::sync::Mutex<()>,
    /// The highest number whose commit is on disk (`add`, and the store's opening): alarm keeps
    /// numbered no higher may be folded (keeps.rs).
    flushed_through: std::sync::atomic::AtomicI64,
}

/// The most events waiting for a move before ingest waits for the rounds (back-pressure): a bound
/// on a round's size and on the index (at most this many waiting and a round's worth moved and not
/// yet deleted). Without it an ingest faster than the moves (a bulk load, MQTT offered beyond
/// what the rounds move) grows both without end. It leaves room for about a round's period
/// (`mover::MOVE_EVERY`) of events at the highest rate the targets ask for.
pub(crate) const MAX_STAGED: usize = 100_000;

#[derive(Debug, Default)]
struct Inner {
    /// Each staged event by number: its device and id.
    by_seq: BTreeMap<i64, (String, String)>,
    /// Each device's staged events, by number, ascending: `add` is told in commit order.
    by_device: HashMap<String, Vec<i64>>,
    /// Each staged event's number, by id.
    by_id: HashMap<String, i64>,
    /// The highest number moved so far: an event numbered no higher was moved (or deleted) before
    /// `add` was told of it.
    moved_through: i64,
    /// How many held events a move has put into device_events (their delete comes a round later),
    /// about: deletes by id and retention are not counted.
    moved: usize,
}

impl Staged {
    /// Events committed into the staging table: (number, device, id).
    pub(crate) fn add(&self, events: impl IntoIterator<Item = (i64, String, String)>) {
        let mut inner = self.inner.lock().expect("the staged index is never poisoned");
        for (seq, device, id) in events {
            self.flushed(seq);
            if seq <= inner.moved_through {
                continue;
            }
            // The device's key is copied only for its first staged event.
            match inner.by_device.get_mut(&device) {
                Some(seqs) => {
                    debug_assert!(seqs.last() < Some(&seq), "told out of commit order");
                    seqs.push(seq);
                }
                None => {
                    inner.by_device.insert(device.clone(), vec![seq]);
                }
            }
            inner.by_id.insert(id.clone(), seq);
            inner.by_seq.insert(seq, (device, id));
        }
    }

    /// Every commit numbered `seq` or lower is on disk.
    pub(crate) fn flushed(&self, seq: i64) {
        self.flushed_through
            .fetch_max(seq, std::sync::atomic::Ordering::Relaxed);
    }

    /// The highest number whose commit is known to be on disk.
    pub(crate) fn flushed_through(&self) -> i64 {
        self.flushed_through.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Returns once fewer than `max` held events wait for a move: ingest's back-pressure.
    /// Waiting holds no connection, so nothing the round needs is kept from it.
    pub(crate) async fn wait_for_room(&self, max: usize) {
        loop {
            let room = self.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            if self.waiting() < max {
                return;
            }
            room.await;
        }
    }

    /// A move has committed `count` held events into device_events.
    pub(crate) fn moved(&self, count: usize) {
        self.inner.lock().expect("the staged index is never poisoned").moved += count;
        self.room.notify_waiters();
    }

    /// Every event numbered `through` or lower has left the staging table.
    pub(crate) fn moved_through(&self, through: i64) {
        self.forget_through(through);
        self.room.notify_waiters();
    }

    /// Held events no move has taken yet.
    pub(crate) fn waiting(&self) -> usize {
        let inner = self.inner.lock().expect("the staged index is never poisoned");
        inner.by_seq.len().saturating_sub(inner.moved)
    }

    fn forget_through(&self, through: i64) {
        let mut inner = self.inner.lock().expect("the staged index is never poisoned");
        if through <= inner.moved_through {
            return;
        }
        inner.moved_through = through;
        let kept = inner.by_seq.split_off(&(through + 1));
        let gone = std::mem::replace(&mut inner.by_seq, kept);
        inner.moved = inner.moved.saturating_sub(gone.len());
        let mut devices: Vec<String> = Vec::with_capacity(gone.len());
        for (_, (device, id)) in gone {
            inner.by_id.remove(&id);
            devices.push(device);
        }
        devices.sort_unstable();
        devices.dedup();
        for device in devices {
            if let Some(seqs) = inner.by_device.get_mut(&device) {
                // Ascending: the forgotten numbers are a prefix.
                let gone = seqs.partition_point(|seq| *seq <= through);
                seqs.drain(..gone);
                if seqs.is_empty() {
                    inner.by_device.remove(&device);
                }
            }
        }
    }

    /// Every held event's number by device, in device order, and the highest number held; None
    /// when none is held. Every event numbered up to that has been committed and told (`add`),
    /// including those moved and not yet deleted and those deleted by id or by retention (a move
    /// finds no row for these).
    pub(crate) fn by_device(&self) -> Option<(i64, BTreeMap<String, Vec<i64>>)> {
        let inner = self.inner.lock().expect("the staged index is never poisoned");
        let (&through, _) = inner.by_seq.last_key_value()?;
        let devices = inner
            .by_device
            .iter()
            .map(|(device, seqs)| (device.clone(), seqs.clone()))
            .collect();
        Some((through, devices))
    }

    /// The ends of stretches of `rows` held numbers, the last stretch ending at `through`: every
    /// `rows`th number held up to `through`, then `through`.
    pub(crate) fn stretches(&self, through: i64, rows: usize) -> Vec<i64> {
        let inner = self.inner.lock().expect("the staged index is never poisoned");
        let mut ends: Vec<i64> = inner
            .by_seq
            .range(..=through)
            .map(|(seq, _)| *seq)
            .skip(rows - 1)
            .step_by(rows)
            .collect();
        if ends.last() != Some(&through) {
            ends.push(through);
        }
        ends
    }

    /// The numbers of `device`'s staged events as a JSON array for `json_each`, or None when it
    /// has none.
    pub(crate) fn of_device(&self, device: &str) -> Option<String> {
        let inner = self.inner.lock().expect("the staged index is never poisoned");
        inner.by_device.get(device).map(|seqs| json_array(seqs))
    }

    /// The lowest and the highest number held, or None when none is: every staged event whose
    /// commit has been acknowledged and that has not left the staging table is numbered in
    /// between, and no event whose commit is not yet on disk (it is told later) is numbered lower
    /// than the highest.
    pub(crate) fn held(&self) -> Option<(i64, i64)> {
        let inner = self.inner.lock().expect("the staged index is never poisoned");
        let (&lowest, _) = inner.by_seq.first_key_value()?;
        let (&highest, _) = inner.by_seq.last_key_value()?;
        Some((lowest, highest))
    }

    /// The number of the staged event `id`.
    pub(crate) fn seq_of(&self, id: &str) -> Option<i64> {
        let inner = self.inner.lock().expect("the staged index is never poisoned");
        inner.by_id.get(id).copied()
    }

    /// How many events are held.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.inner
            .lock()
            .expect("the staged index is never poisoned")
            .by_seq
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(seq: i64, device: &str) -> (i64, String, String) {
        (seq, device.to_owned(), format!("e{seq}"))
    }

    #[test]
    fn moves_remove_what_they_moved_and_nothing_after() {
        let staged = Staged::default();
        staged.add([event(1, "a"), event(2, "b"), event(3, "a")]);
        assert_eq!(staged.of_device("a").as_deref(), Some("[1,3]"));
        staged.moved_through(2);
        assert_eq!(staged.of_device("a").as_deref(), Some("[3]"));
        assert_eq!(staged.of_device("b"), None);
        assert_eq!((staged.seq_of("e2"), staged.seq_of("e3")), (None, Some(3)));
        assert_eq!(staged.len(), 1);
    }

    /// Asserts that ingest waits for room in `staged` (at most 3 waiting) until `make_room` runs.
    async fn waits_until(staged: &std::sync::Arc<Staged>, make_room: impl FnOnce(), what: &str) {
        let waiting = tokio::spawn({
            let staged = staged.clone();
            async move { staged.wait_for_room(3).await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "no room before {what}");
        make_room();
        tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
            .await
            .unwrap_or_else(|_| panic!("room after {what}"))
            .unwrap();
    }

    #[tokio::test]
    async fn ingest_waits_for_room_until_a_move() {
        let staged = std::sync::Arc::new(Staged::default());
        staged.add([event(1, "a"), event(2, "b")]);
        staged.wait_for_room(3).await;
        staged.add([event(3, "a")]);
        waits_until(&staged, || staged.moved(2), "the move").await;
        // Moved, deleted: the moved count goes with them.
        staged.moved_through(2);
        assert_eq!((staged.len(), staged.waiting()), (1, 1));
        staged.add([event(4, "b"), event(5, "b")]);
        waits_until(&staged, || staged.moved_through(3), "a delete").await;
    }

    #[test]
    fn stretches_cut_the_held_numbers() {
        let staged = Staged::default();
        staged.add((1..=7).map(|seq| event(seq * 2, "a")));
        assert_eq!(staged.stretches(14, 3), vec![6, 12, 14]);
        assert_eq!(staged.stretches(12, 3), vec![6, 12]);
        assert_eq!(staged.stretches(11, 3), vec![6, 11]);
        staged.moved_through(6);
        assert_eq!(staged.stretches(20, 2), vec![10, 14, 20]);
    }

    #[test]
    fn an_event_told_after_its_move_is_not_held() {
        let staged = Staged::default();
        staged.moved_through(5);
        staged.add([event(4, "a"), event(6, "a")]);
        assert_eq!(staged.of_device("a").as_deref(), Some("[6]"));
        staged.moved_through(3);
        assert_eq!(
            staged.of_device("a").as_deref(),
            Some("[6]"),
            "an older move changes nothing"
        );
    }
}
