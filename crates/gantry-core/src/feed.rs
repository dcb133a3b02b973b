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

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::broadcast;

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

struct Feed {
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
pub struct Feeds {
    projects: Mutex<HashMap<ProjectId, Feed>>,
}

impl Feeds {
    /// Ends every stream (Gantry is stopping): the feeds' senders go, so their subscribers see
    /// the end. A later subscriber starts a new feed.
    pub fn close(&self) {
        self.projects.lock().expect("feeds lock").clear();
    }

    /// A subscriber of the project left: its feed lives on for `REPLAY_WINDOW` from now, for
    /// the client to come back with its `Last-Event-ID`.
    pub fn unsubscribed(&self, project: &ProjectId) {
        if let Some(feed) = self.projects.lock().expect("feeds lock").get_mut(project) {
            feed.followed = Instant::now();
        }
    }

    /// Whether the project has a feed: its events are wanted.
    pub fn follows(&self, project: &ProjectId) -> bool {
        self.projects.lock().expect("feeds lock").contains_key(project)
    }

    /// Adds an event to the project's feed, if it has one; `data` is its JSON, made only then.
    pub fn publish(&self, project: &ProjectId, kind: StreamType, device: &DeviceId, data: impl FnOnce() -> String) {
        let mut projects = self.projects.lock().expect("feeds lock");
        let Some(feed) = projects.get_mut(project) else {
            return;
        };
        let now = Instant::now();
        if feed.live.receiver_count() > 0 || !feed.devices.is_empty() {
            feed.followed = now;
        } else if now.duration_since(feed.followed) > REPLAY_WINDOW {
            projects.remove(project);
            return;
        }
        let event = Arc::new(StreamEvent {
            id: feed.next,
            kind,
            device_id: device.clone(),
            data: data().into(),
        });
        feed.next += 1;
        feed.buffer.push_back((now, event.clone()));
        while feed.buffer.len() > REPLAY_EVENTS
            && feed
                .buffer
                .front()
                .is_some_and(|(at, _)| now.duration_since(*at) > REPLAY_WINDOW)
        {
            feed.buffer.pop_front();
        }
        if let Some(channel) = feed.devices.get(device)
            && channel.send(event.clone()).is_err()
        {
            feed.devices.remove(device);
        }
        if feed.live.receiver_count() > 0 {
            let _ = feed.live.send(event);
        }
    }

    /// Follows the project, or only `device` of it, from `last_id` (the client's
    /// `Last-Event-ID`), or from now. The replay holds every device's events either way.
    pub fn subscribe(&self, project: &ProjectId, device: Option<&DeviceId>, last_id: Option<&str>) -> Subscription {
        let mut projects = self.projects.lock().expect("feeds lock");
        let feed = projects.entry(project.clone()).or_insert_with(|| Feed {
            next: u64::try_from(crate::time::now_ms()).unwrap_or(0) * 1000,
            buffer: VecDeque::new(),
            live: broadcast::channel(LIVE_BUFFER).0,
            devices: HashMap::new(),
            followed: Instant::now(),
        });
        feed.followed = Instant::now();
        let live = match device {
            Some(device) => feed
                .devices
                .entry(device.clone())
                .or_insert_with(|| broadcast::channel(DEVICE_BUFFER).0)
                .subscribe(),
            None => feed.live.subscribe(),
        };
        let Some(last_id) = last_id else {
            return Subscription {
                reset: false,
                replay: Vec::new(),
                live,
            };
        };
        let oldest = feed.buffer.front().map_or(feed.next, |(_, e)| e.id);
        match last_id.trim().parse::<u64>() {
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
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn publish(feeds: &Feeds, project: &ProjectId, n: u32) {
        for i in 0..n {
            feeds.publish(project, StreamType::Telemetry, &DeviceId::from_string("d"), || {
                i.to_string()
            });
        }
    }

    #[test]
    fn replays_after_the_cursor_or_resets() {
        let feeds = Feeds::default();
        let project = ProjectId::from_string("p");
        publish(&feeds, &project, 3);
        // No feed yet: nothing was kept.
        let first = feeds.subscribe(&project, None, None);
        assert!(!first.reset && first.replay.is_empty());
        publish(&feeds, &project, 3);
        let all = feeds.subscribe(&project, None, Some("0"));
        assert!(all.reset, "an id this feed never gave");
        let ids: Vec<u64> = {
            let mut live = first.live;
            (0..3).map(|_| live.try_recv().unwrap().id).collect()
        };
        assert_eq!(ids[1], ids[0] + 1);
        let after_first = feeds.subscribe(&project, None, Some(&ids[0].to_string()));
        assert!(!after_first.reset);
        assert_eq!(after_first.replay.iter().map(|e| e.id).collect::<Vec<_>>(), ids[1..]);
        assert_eq!(&*after_first.replay[1].data, "2");
        let before_first = feeds.subscribe(&project, None, Some(&(ids[0] - 1).to_string()));
        assert_eq!(before_first.replay.len(), 3, "the cursor just before the oldest kept");
        assert!(feeds.subscribe(&project, None, Some(&(ids[0] - 2).to_string())).reset);
        assert!(feeds.subscribe(&project, None, Some(&(ids[2] + 1).to_string())).reset);
        assert!(feeds.subscribe(&project, None, Some("x")).reset);
        let latest = feeds.subscribe(&project, None, Some(&ids[2].to_string()));
        assert!(!latest.reset && latest.replay.is_empty());
    }

    #[test]
    fn a_device_subscriber_hears_its_device_alone() {
        let feeds = Feeds::default();
        let project = ProjectId::from_string("p");
        let (one, two) = (DeviceId::from_string("one"), DeviceId::from_string("two"));
        let mut of_one = feeds.subscribe(&project, Some(&one), None).live;
        let mut of_all = feeds.subscribe(&project, None, None).live;
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
}
