//! The projects' push streams: a replay buffer and a broadcast per project that someone follows.
//!
//! A project's feed exists from its first subscriber until `REPLAY_WINDOW` after its last one
//! left; events of a project without a feed cost one map lookup. The buffer keeps the events of
//! the last `REPLAY_WINDOW`, and at least the last `REPLAY_EVENTS`, so that a client that
//! reconnects with `Last-Event-ID` gets what it missed, or is told to reload (`reset`) when
//! that is gone. A subscriber of one device listens on that device's channel, so a project with
//! many devices followed one by one (a dashboard per machine) wakes each subscriber only for its
//! own device's events. Ids start at the feed's creation time in ms × 1000, so they keep increasing
//! across restarts of Gantry (unless a feed averaged over 1000 events per ms) and an id from an
//! earlier feed is never taken for one of this feed's.
//!
//! What the feeds hold is bounded (`FeedLimits`): subscribers per project and per caller, and the
//! replay buffers' memory in total, where the oldest feeds give way first (their subscribers' streams
//! end, and a reconnect with `Last-Event-ID` is told `reset`). `sweep`, run by a background task,
//! drops the feeds whose last subscriber left over `REPLAY_WINDOW` ago, also in a project that
//! went quiet.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::broadcast;

use crate::error::within_bound;
use crate::ids::{DeviceId, ProjectId};
use crate::stream::{StreamEvent, StreamType};

/// How long events stay replayable, and a feed without subscribers lives.
pub const REPLAY_WINDOW: Duration = Duration::from_secs(60);
/// Events kept whatever their age.
pub const REPLAY_EVENTS: usize = 100_000;
/// Events a subscriber may fall behind by before it is sent `reset`.
const LIVE_BUFFER: usize = 8192;
/// The same for a subscriber of one device (one such channel per device followed).
const DEVICE_BUFFER: usize = 1024;

impl Feed {
    /// Whether a stream follows it now (a project's or a device's).
    fn followed_now(&self) -> bool {
        self.subscribers > 0 || self.live.receiver_count() > 0 || !self.devices.is_empty()
    }
}

/// What the feeds may hold.
#[derive(Debug, Clone, Copy)]
pub struct FeedLimits {
    /// Bytes of buffered events in all feeds together.
    pub replay_bytes: usize,
    /// Streams open at once on one project.
    pub per_project: usize,
    /// Streams open at once by one caller (a token's principal).
    pub per_caller: usize,
}

impl Default for FeedLimits {
    fn default() -> Self {
        Self {
            replay_bytes: 256 << 20,
            per_project: 1000,
            per_caller: 100,
        }
    }
}

/// What an event costs the buffer besides its data: the entry, the `Arc`, the ids.
const EVENT_OVERHEAD: usize = 96;

fn cost(event: &StreamEvent) -> usize {
    EVENT_OVERHEAD + event.data.len()
}

struct Feed {
    /// When it was made: the oldest give way first when the buffers' memory is over its bound.
    created: Instant,
    /// Bytes its buffer holds (`cost` of each event).
    bytes: usize,
    /// Streams open on it.
    subscribers: usize,
    next: u64,
    buffer: VecDeque<(Instant, Arc<StreamEvent>)>,
    live: broadcast::Sender<Arc<StreamEvent>>,
    /// The channels of subscribers to one device; one goes with its device's last subscriber.
    devices: HashMap<DeviceId, broadcast::Sender<Arc<StreamEvent>>>,
    /// When it last had a subscriber (set at each subscribe, each publish to one, and each
    /// unsubscribe), so that a feed lives `REPLAY_WINDOW` past its last subscriber's leaving.
    followed: Instant,
}

/// What a new subscriber gets.
pub struct Subscription {
    /// The client's cursor is gone from the buffer (or never was in it): it should reload.
    pub reset: bool,
    /// The buffered events after its cursor, oldest first.
    pub replay: Vec<Arc<StreamEvent>>,
    /// Events from now on (those in `replay` may come again: skip ids already sent).
    pub live: broadcast::Receiver<Arc<StreamEvent>>,
}

#[derive(Default)]
struct State {
    projects: HashMap<ProjectId, Feed>,
    /// Bytes all buffers hold.
    bytes: usize,
    /// Streams open per caller.
    callers: HashMap<String, usize>,
}

impl State {
    /// Removes a feed: its senders go, so its subscribers' streams end.
    fn remove(&mut self, project: &ProjectId) {
        if let Some(feed) = self.projects.remove(project) {
            self.bytes -= feed.bytes;
        }
    }

    /// The oldest feeds give way while the buffers hold more than `budget`.
    fn within(&mut self, budget: usize) {
        while self.bytes > budget {
            let Some(oldest) = self
                .projects
                .iter()
                .min_by_key(|(_, f)| f.created)
                .map(|(p, _)| p.clone())
            else {
                break;
            };
            tracing::info!(project = %oldest, "push stream feed dropped: the feeds' replay memory is at its bound");
            self.remove(&oldest);
        }
    }
}

/// A stream's hold on its feed: counted against the limits until dropped.
pub struct Hold {
    feeds: std::sync::Weak<Feeds>,
    project: ProjectId,
    caller: String,
}

impl Drop for Hold {
    fn drop(&mut self) {
        if let Some(feeds) = self.feeds.upgrade() {
            feeds.unsubscribed(&self.project, &self.caller);
        }
    }
}

pub struct Feeds {
    state: Mutex<State>,
    limits: FeedLimits,
}

impl Default for Feeds {
    fn default() -> Self {
        Self::new(FeedLimits::default())
    }
}

impl Feeds {
    pub fn new(limits: FeedLimits) -> Self {
        Self {
            state: Mutex::new(State::default()),
            limits,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("feeds lock")
    }

    /// Ends every stream (Gantry is stopping): the feeds' senders go, so their subscribers see
    /// the end. A later subscriber starts a new feed.
    pub fn close(&self) {
        let mut state = self.lock();
        state.projects.clear();
        state.bytes = 0;
    }

    /// A subscriber of the project left: its feed lives on for `REPLAY_WINDOW` from now, for
    /// the client to come back with its `Last-Event-ID`.
    fn unsubscribed(&self, project: &ProjectId, caller: &str) {
        let mut state = self.lock();
        if let Some(count) = state.callers.get_mut(caller) {
            *count -= 1;
            if *count == 0 {
                state.callers.remove(caller);
            }
        }
        if let Some(feed) = state.projects.get_mut(project) {
            feed.subscribers = feed.subscribers.saturating_sub(1);
            feed.followed = Instant::now();
        }
    }

    /// Whether the project has a feed: its events are wanted.
    pub fn follows(&self, project: &ProjectId) -> bool {
        self.lock().projects.contains_key(project)
    }

    /// Drops the feeds nobody followed for `REPLAY_WINDOW`, and the device channels nobody
    /// listens on; what they held is freed. Run every few seconds, so a feed goes also when
    /// its project sends nothing more.
    pub fn sweep(&self) {
        let now = Instant::now();
        let mut state = self.lock();
        let gone: Vec<ProjectId> = state
            .projects
            .iter_mut()
            .filter_map(|(project, feed)| {
                feed.devices.retain(|_, channel| channel.receiver_count() > 0);
                let followed = feed.followed_now();
                if followed {
                    feed.followed = now;
                }
                (!followed && now.duration_since(feed.followed) > REPLAY_WINDOW).then(|| project.clone())
            })
            .collect();
        for project in &gone {
            state.remove(project);
        }
    }

    /// Bytes the feeds' buffers hold now, and how many feeds there are.
    pub fn held(&self) -> (usize, usize) {
        let state = self.lock();
        (state.bytes, state.projects.len())
    }

    /// Adds an event to the project's feed, if it has one; `data` is its JSON, made only then.
    pub fn publish(&self, project: &ProjectId, kind: StreamType, device: &DeviceId, data: impl FnOnce() -> String) {
        let mut guard = self.lock();
        let state = &mut *guard;
        let Some(feed) = state.projects.get_mut(project) else {
            return;
        };
        let now = Instant::now();
        if feed.followed_now() {
            feed.followed = now;
        } else if now.duration_since(feed.followed) > REPLAY_WINDOW {
            state.remove(project);
            return;
        }
        let event = Arc::new(StreamEvent {
            id: feed.next,
            kind,
            device_id: device.clone(),
            data: data().into(),
        });
        feed.next += 1;
        let added = cost(&event);
        feed.buffer.push_back((now, event.clone()));
        feed.bytes += added;
        state.bytes += added;
        while feed.buffer.len() > REPLAY_EVENTS
            && feed
                .buffer
                .front()
                .is_some_and(|(at, _)| now.duration_since(*at) > REPLAY_WINDOW)
        {
            if let Some((_, old)) = feed.buffer.pop_front() {
                feed.bytes -= cost(&old);
                state.bytes -= cost(&old);
            }
        }
        if let Some(channel) = feed.devices.get(device)
            && channel.send(event.clone()).is_err()
        {
            feed.devices.remove(device);
        }
        if feed.live.receiver_count() > 0 {
            let _ = feed.live.send(event);
        }
        if state.bytes > self.limits.replay_bytes {
            state.within(self.limits.replay_bytes);
        }
    }

    /// Follows the project, or only `device` of it, from `last_id` (the client's
    /// `Last-Event-ID`), or from now, for `caller` (who holds the stream, counted against
    /// `FeedLimits::per_caller`). The replay holds every device's events either way. The stream
    /// keeps the returned `Hold` while it lives.
    pub fn subscribe(
        self: &Arc<Self>,
        project: &ProjectId,
        device: Option<&DeviceId>,
        last_id: Option<&str>,
        caller: &str,
    ) -> crate::Result<(Subscription, Hold)> {
        let mut guard = self.lock();
        let state = &mut *guard;
        let subscribers = state.projects.get(project).map_or(0, |f| f.subscribers);
        within_bound(
            subscribers as u64,
            self.limits.per_project as u64,
            "push stream subscribers per project",
            "stream-subscribers-per-project",
        )?;
        let held = state.callers.get(caller).copied().unwrap_or(0);
        within_bound(
            held as u64,
            self.limits.per_caller as u64,
            "push streams per token",
            "stream-subscribers-per-token",
        )?;
        *state.callers.entry(caller.to_owned()).or_default() += 1;
        let hold = Hold {
            feeds: Arc::downgrade(self),
            project: project.clone(),
            caller: caller.to_owned(),
        };
        let feed = state.projects.entry(project.clone()).or_insert_with(|| Feed {
            created: Instant::now(),
            bytes: 0,
            subscribers: 0,
            next: u64::try_from(crate::time::now_ms()).unwrap_or(0) * 1000,
            buffer: VecDeque::new(),
            live: broadcast::channel(LIVE_BUFFER).0,
            devices: HashMap::new(),
            followed: Instant::now(),
        });
        feed.followed = Instant::now();
        feed.subscribers += 1;
        let live = match device {
            Some(device) => feed
                .devices
                .entry(device.clone())
                .or_insert_with(|| broadcast::channel(DEVICE_BUFFER).0)
                .subscribe(),
            None => feed.live.subscribe(),
        };
        let Some(last_id) = last_id else {
            let subscription = Subscription {
                reset: false,
                replay: Vec::new(),
                live,
            };
            return Ok((subscription, hold));
        };
        let oldest = feed.buffer.front().map_or(feed.next, |(_, e)| e.id);
        let subscription = match last_id.trim().parse::<u64>() {
            Ok(last) if last.saturating_add(1) >= oldest && last < feed.next => Subscription {
                reset: false,
                replay: feed
                    .buffer
                    .iter()
                    .filter(|(_, e)| e.id > last)
                    .map(|(_, e)| e.clone())
                    .collect(),
                live,
            },
            _ => Subscription {
                reset: true,
                replay: Vec::new(),
                live,
            },
        };
        Ok((subscription, hold))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    /// A subscription whose hold is kept for the test's length.
    fn sub(feeds: &Arc<Feeds>, project: &ProjectId, device: Option<&DeviceId>, last: Option<&str>) -> Subscription {
        let (subscription, hold) = feeds.subscribe(project, device, last, "caller").unwrap();
        std::mem::forget(hold);
        subscription
    }

    fn publish(feeds: &Feeds, project: &ProjectId, n: u32) {
        for i in 0..n {
            feeds.publish(project, StreamType::Telemetry, &DeviceId::from_string("d"), || {
                i.to_string()
            });
        }
    }

    #[test]
    fn replays_after_the_cursor_or_resets() {
        let feeds = Arc::new(Feeds::default());
        let project = ProjectId::from_string("p");
        publish(&feeds, &project, 3);
        // No feed yet: nothing was kept.
        let first = sub(&feeds, &project, None, None);
        assert!(!first.reset && first.replay.is_empty());
        publish(&feeds, &project, 3);
        let all = sub(&feeds, &project, None, Some("0"));
        assert!(all.reset, "an id this feed never gave");
        let ids: Vec<u64> = {
            let mut live = first.live;
            (0..3).map(|_| live.try_recv().unwrap().id).collect()
        };
        assert_eq!(ids[1], ids[0] + 1);
        let after_first = sub(&feeds, &project, None, Some(&ids[0].to_string()));
        assert!(!after_first.reset);
        assert_eq!(after_first.replay.iter().map(|e| e.id).collect::<Vec<_>>(), ids[1..]);
        assert_eq!(&*after_first.replay[1].data, "2");
        let before_first = sub(&feeds, &project, None, Some(&(ids[0] - 1).to_string()));
        assert_eq!(before_first.replay.len(), 3, "the cursor just before the oldest kept");
        assert!(sub(&feeds, &project, None, Some(&(ids[0] - 2).to_string())).reset);
        assert!(sub(&feeds, &project, None, Some(&(ids[2] + 1).to_string())).reset);
        assert!(sub(&feeds, &project, None, Some("x")).reset);
        let latest = sub(&feeds, &project, None, Some(&ids[2].to_string()));
        assert!(!latest.reset && latest.replay.is_empty());
    }

    #[test]
    fn a_device_subscriber_hears_its_device_alone() {
        let feeds = Arc::new(Feeds::default());
        let project = ProjectId::from_string("p");
        let (one, two) = (DeviceId::from_string("one"), DeviceId::from_string("two"));
        let mut of_one = sub(&feeds, &project, Some(&one), None).live;
        let mut of_all = sub(&feeds, &project, None, None).live;
        for device in [&one, &two, &one] {
            feeds.publish(&project, StreamType::Telemetry, device, || device.to_string());
        }
        let heard = |live: &mut broadcast::Receiver<Arc<StreamEvent>>| {
            std::iter::from_fn(|| live.try_recv().ok())
                .map(|e| e.device_id.to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(heard(&mut of_one), ["one", "one"]);
        assert_eq!(heard(&mut of_all), ["one", "two", "one"]);
        // A device channel without subscribers goes; the project's subscribers hear on.
        drop(of_one);
        feeds.publish(&project, StreamType::Telemetry, &one, || "again".to_owned());
        assert_eq!(heard(&mut of_all), ["one"]);
    }

    #[test]
    fn a_quiet_feed_goes_at_the_sweep_after_its_window() {
        let feeds = Arc::new(Feeds::default());
        let project = ProjectId::from_string("p");
        let (subscription, hold) = feeds.subscribe(&project, None, None, "c").unwrap();
        publish(&feeds, &project, 100);
        drop(subscription);
        drop(hold);
        feeds.sweep();
        assert_eq!(feeds.held().1, 1, "kept for the replay window");
        // The window passed with no event since: the sweep frees it.
        feeds.lock().projects.get_mut(&project).unwrap().followed =
            Instant::now() - REPLAY_WINDOW - Duration::from_secs(1);
        feeds.sweep();
        assert_eq!(feeds.held(), (0, 0));
    }

    #[test]
    fn the_oldest_feeds_give_way_to_the_memory_bound() {
        let feeds = Arc::new(Feeds::new(FeedLimits {
            replay_bytes: 100 * (EVENT_OVERHEAD + 10),
            ..FeedLimits::default()
        }));
        let (old, new) = (ProjectId::from_string("old"), ProjectId::from_string("new"));
        let mut of_old = sub(&feeds, &old, None, None).live;
        std::thread::sleep(Duration::from_millis(2));
        let _of_new = sub(&feeds, &new, None, None);
        for _ in 0..60 {
            feeds.publish(&old, StreamType::Telemetry, &DeviceId::from_string("d"), || {
                "0123456789".into()
            });
        }
        for _ in 0..60 {
            feeds.publish(&new, StreamType::Telemetry, &DeviceId::from_string("d"), || {
                "0123456789".into()
            });
        }
        assert!(!feeds.follows(&old), "the oldest feed gave way");
        assert!(feeds.follows(&new));
        assert!(feeds.held().0 <= 100 * (EVENT_OVERHEAD + 10));
        // Its subscriber's stream ends once it has read what it was sent.
        while of_old.try_recv().is_ok() {}
        assert!(matches!(of_old.try_recv(), Err(broadcast::error::TryRecvError::Closed)));
    }

    #[test]
    fn subscribers_are_bounded_per_project_and_per_caller() {
        let feeds = Arc::new(Feeds::new(FeedLimits {
            per_project: 2,
            per_caller: 1,
            ..FeedLimits::default()
        }));
        let (p, q) = (ProjectId::from_string("p"), ProjectId::from_string("q"));
        let one = feeds.subscribe(&p, None, None, "a").unwrap();
        let Err(Error::LimitReached { limit, .. }) = feeds.subscribe(&q, None, None, "a") else {
            panic!("a second stream of caller a");
        };
        assert_eq!(limit, "stream-subscribers-per-token");
        let _two = feeds.subscribe(&p, None, None, "b").unwrap();
        let Err(Error::LimitReached { limit, .. }) = feeds.subscribe(&p, None, None, "c") else {
            panic!("a third stream on p");
        };
        assert_eq!(limit, "stream-subscribers-per-project");
        drop(one);
        feeds
            .subscribe(&p, None, None, "c")
            .expect("room again once a stream ended");
    }
}
