//! Webhook delivery: a task owned by the application, and a worker per enabled webhook (a task of
//! the same owner), so a slow or dead receiver delays its own webhook alone. With several nodes on one database, the
//! node that holds the webhook's lease works it (`LEASE`), the others wait for the lease to end.
//! A worker has at most one delivery pending:
//! it takes the oldest waiting events into a delivery (stored before they leave the outbox), POSTs
//! it until a 2xx (retrying with backoff, `RetryPolicy`) or until it gives up, and only then takes
//! the next. So a webhook gets a device's events of one type in the order they were committed, at
//! least once: a crash between a POST and its record sends it again, with the same body and
//! `X-Gantry-Delivery`. At shutdown a worker finishes the attempt it has in flight and records
//! its outcome, so a receiver that answered is not sent the delivery again.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::enums::DeliveryStatus;
use crate::ids::{DeliveryId, WebhookId};
use crate::outbound::Outbound;
use crate::time::now_ms;
use crate::webhook::{Delivery, Webhook, WebhookUrl, delivery_body, signature};
use crate::webhooks::{Outcome, WebhookService};

/// Runs until `stop` is cancelled: every `poll`, starts a worker for each enabled webhook that
/// has none (a task of `tasks`), hands changed webhooks to theirs, and stops the workers of
/// webhooks disabled or deleted. A worker told to stop finishes the attempt it has in flight
/// and records its outcome; the owner of `tasks` waits for that.
pub async fn run(
    webhooks: Arc<WebhookService>,
    outbound: Arc<dyn Outbound>,
    tasks: TaskTracker,
    stop: CancellationToken,
) {
    let mut workers: HashMap<WebhookId, Worker> = HashMap::new();
    let poll = webhooks.config().poll;
    loop {
        match webhooks.store().enabled_webhooks().await {
            Ok(enabled) => {
                let live: std::collections::HashSet<WebhookId> = enabled.iter().map(|w| w.id.clone()).collect();
                workers.retain(|id, worker| {
                    let keep = live.contains(id) && !worker.task.is_finished();
                    if !keep {
                        worker.stop.cancel();
                    }
                    keep
                });
                for webhook in enabled {
                    match workers.get(&webhook.id) {
                        Some(worker) => {
                            worker.hook.send_if_modified(|current| {
                                let changed = *current != webhook;
                                if changed {
                                    *current = webhook.clone();
                                }
                                changed
                            });
                        }
                        None => {
                            let (hook, rx) = watch::channel(webhook.clone());
                            let worker_stop = stop.child_token();
                            let task = tasks.spawn(work(webhooks.clone(), outbound.clone(), rx, worker_stop.clone()));
                            let worker = Worker {
                                hook,
                                stop: worker_stop,
                                task,
                            };
                            workers.insert(webhook.id, worker);
                        }
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "webhooks not read; deliveries wait"),
        }
        tokio::select! {
            _ = tokio::time::sleep(poll) => {}
            _ = stop.cancelled() => break,
        }
    }
}

/// A webhook's worker, as `run` holds it.
struct Worker {
    /// The webhook as last read: a change reaches the worker at once.
    hook: watch::Sender<Webhook>,
    /// Cancelled when the webhook is disabled or deleted, or the deliveries stop.
    stop: CancellationToken,
    task: JoinHandle<()>,
}

/// How long a node's lease on a webhook lasts: longer than a POST may take (`Outbound`'s 10 s
/// timeout) and its record, since the worker renews it before each delivery's attempt and each
/// look at the outbox; a node that stops holds the webhook this long at most.
const LEASE: Duration = Duration::from_secs(30);

/// One webhook's deliveries, in order, one at a time, while this node holds its lease, until
/// `stop` is cancelled: every wait ends then, an attempt in flight does not.
#[tracing::instrument(skip_all, fields(webhook = %hook.borrow().id))]
async fn work(
    webhooks: Arc<WebhookService>,
    outbound: Arc<dyn Outbound>,
    mut hook: watch::Receiver<Webhook>,
    stop: CancellationToken,
) {
    let store = webhooks.store().clone();
    let config = webhooks.config().clone();
    let pause = async |wait: Duration| {
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.cancelled() => {}
        }
    };
    // A changed webhook (a fixed URL, say) is tried at once, not at its pending delivery's time.
    let mut at_once = false;
    while !stop.is_cancelled() {
        let webhook = hook.borrow_and_update().clone();
        let now = now_ms();
        let until = now + LEASE.as_millis() as i64;
        match store.lease_webhook(&webhook.id, &config.node, now, until).await {
            Ok(true) => {}
            Ok(false) => {
                // Another node works it; look again after the poll.
                tokio::select! {
                    _ = pause(config.poll) => {}
                    _ = hook.changed() => {}
                }
                continue;
            }
            Err(e) => {
                tracing::warn!(error = %e, "webhook lease not taken");
                pause(config.poll).await;
                continue;
            }
        }
        let pending = match store.pending_delivery(&webhook.id).await {
            Ok(pending) => pending,
            Err(e) => {
                tracing::warn!(error = %e, "pending delivery not read");
                pause(config.poll).await;
                continue;
            }
        };
        let Some(delivery) = pending else {
            // Registered before the outbox is read, so a write after the read wakes it.
            let written = webhooks.written.notified();
            match open_delivery(&webhooks, &webhook).await {
                Ok(true) => {}
                Ok(false) => {
                    tokio::select! {
                        _ = written => {}
                        _ = pause(config.poll) => {}
                        _ = hook.changed() => {}
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "webhook events not taken into a delivery");
                    pause(config.poll).await;
                }
            }
            continue;
        };
        let due = delivery.next_attempt_time.unwrap_or(0) - now_ms();
        if due > 0 && !at_once {
            // Waits a poll at most, then renews the lease before the attempt.
            let nap = Duration::from_millis(due as u64).min(config.poll);
            tokio::select! {
                _ = pause(nap) => {}
                _ = hook.changed() => at_once = true,
            }
            continue;
        }
        at_once = false;
        if !attempt(&webhooks, &*outbound, &webhook, delivery).await {
            pause(config.poll).await;
        }
    }
}

/// Takes the oldest waiting events into a new pending delivery; false when none wait.
async fn open_delivery(webhooks: &WebhookService, webhook: &Webhook) -> crate::Result<bool> {
    let store = webhooks.store();
    let waiting = store.waiting_events(webhook, webhooks.config().batch).await?;
    if waiting.is_empty() {
        return Ok(false);
    }
    let (keys, events): (Vec<_>, Vec<_>) = waiting.into_iter().unzip();
    let now = now_ms();
    let delivery = Delivery {
        id: DeliveryId::generate(),
        webhook_id: webhook.id.clone(),
        tenant_id: webhook.tenant_id.clone(),
        status: DeliveryStatus::Pending,
        event_count: events.len() as u32,
        attempts: 0,
        last_http_status: None,
        last_error: None,
        created_time: now,
        first_attempt_time: None,
        last_attempt_time: None,
        next_attempt_time: Some(now),
        finished_time: None,
        body: delivery_body(&webhook.id, &events),
    };
    match store.insert_delivery(&delivery, &keys).await {
        // Another node holds them in its delivery now: look again.
        Ok(()) | Err(crate::Error::Conflict(_)) => Ok(true),
        Err(e) => Err(e),
    }
}

/// POSTs the delivery once and records what came of it; false when the record failed.
async fn attempt(
    webhooks: &WebhookService,
    outbound: &dyn Outbound,
    webhook: &Webhook,
    mut delivery: Delivery,
) -> bool {
    let config = webhooks.config();
    let now = now_ms();
    let result = match WebhookUrl::parse(&webhook.url, config.allow_private) {
        Err(e) => Err(e.to_string()),
        Ok(url) => {
            let headers = [
                ("content-type", "application/json".to_owned()),
                (
                    "x-gantry-signature",
                    signature(&webhook.secret, delivery.body.as_bytes()),
                ),
                ("x-gantry-delivery", delivery.id.to_string()),
            ];
            outbound.post(url.as_str(), &headers, delivery.body.clone()).await
        }
    };
    let first = *delivery.first_attempt_time.get_or_insert(now);
    delivery.attempts += 1;
    delivery.last_attempt_time = Some(now);
    let outcome = match result {
        Ok(status) if (200..300).contains(&status) => {
            delivery.last_http_status = Some(status);
            delivery.last_error = None;
            Outcome::Delivered
        }
        Ok(status) => {
            delivery.last_http_status = Some(status);
            delivery.last_error = Some(format!("the receiver answered {status}"));
            Outcome::Retried
        }
        Err(error) => {
            delivery.last_http_status = None;
            delivery.last_error = Some(error);
            Outcome::Retried
        }
    };
    let outcome = match outcome {
        Outcome::Delivered => {
            delivery.status = DeliveryStatus::Delivered;
            delivery.next_attempt_time = None;
            delivery.finished_time = Some(now_ms());
            Outcome::Delivered
        }
        _ => match config.retry.next_attempt(delivery.attempts, first, now_ms()) {
            Some(next) => {
                delivery.next_attempt_time = Some(next);
                Outcome::Retried
            }
            None => {
                delivery.status = DeliveryStatus::Failed;
                delivery.next_attempt_time = None;
                delivery.finished_time = Some(now_ms());
                Outcome::Failed
            }
        },
    };
    webhooks.count(outcome);
    tracing::debug!(delivery = %delivery.id, attempts = delivery.attempts, ?outcome, error = ?delivery.last_error, "webhook delivery attempted");
    if outcome == Outcome::Failed {
        tracing::warn!(delivery = %delivery.id, attempts = delivery.attempts, error = ?delivery.last_error, "webhook delivery given up");
    }
    if let Err(e) = webhooks.store().update_delivery(&delivery).await {
        // Still pending in the store: it is sent again.
        tracing::warn!(delivery = %delivery.id, error = %e, "delivery outcome not recorded");
        return false;
    }
    true
}
