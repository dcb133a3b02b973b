//! Who is logged in to the embedded broker, and when each session whose credential ends must
//! be closed: a route identity's at its route's expiry, a device's at the end of the grace
//! period of the token it logged in with. The hooks write it at login; the downlink and a
//! sweeper task close sessions from it.

use std::collections::HashMap;
use std::sync::{Mutex, RwLock};
use std::time::Duration;

use gantry_core::ids::DeviceId;
use rmqtt::context::ServerContext;
use rmqtt::types::{ClientId, Id};

use crate::policy::{Identity, Login, Policy};

/// How often the sweeper looks for sessions past their end: they are closed within this.
pub(crate) const SWEEP_PERIOD: Duration = Duration::from_millis(250);

#[derive(Default)]
pub(crate) struct Sessions {
    /// Who each client that logged in is: the ACL hooks see only the client id.
    identities: RwLock<HashMap<String, Identity>>,
    /// When the session of a client must end (epoch ms). Only sessions whose credential ends
    /// have one, so the sweeper looks at route identities and rotated devices alone.
    ends: Mutex<HashMap<String, i64>>,
}

impl Sessions {
    /// Records a login; it replaces the client's earlier session and that session's end.
    pub(crate) fn logged_in(&self, client_id: String, login: Login) {
        let mut ends = self.ends.lock().expect("session ends lock");
        match login.until {
            Some(end) => ends.insert(client_id.clone(), end),
            None => ends.remove(&client_id),
        };
        drop(ends);
        self.identities
            .write()
            .expect("identities lock")
            .insert(client_id, login.identity);
    }

    pub(crate) fn identity(&self, client_id: &str) -> Option<Identity> {
        self.identities.read().expect("identities lock").get(client_id).cloned()
    }

    pub(crate) fn is_known(&self, client_id: &str) -> bool {
        self.identities.read().expect("identities lock").contains_key(client_id)
    }

    /// Brings the end of the client's current session forward to `at` (a later end is kept
    /// later only by a new login). Whether it has passed already.
    pub(crate) fn end_at(&self, client_id: &str, at: i64) -> bool {
        if at <= gantry_core::time::now_ms() {
            return true;
        }
        let mut ends = self.ends.lock().expect("session ends lock");
        let end = ends.entry(client_id.to_owned()).or_insert(at);
        *end = (*end).min(at);
        false
    }

    /// The route identities whose route targets `device`.
    pub(crate) fn routed_to(&self, device: &DeviceId) -> Vec<String> {
        self.identities
            .read()
            .expect("identities lock")
            .iter()
            .filter(|(_, identity)| matches!(identity, Identity::Route(grant) if &grant.target == device))
            .map(|(client, _)| client.clone())
            .collect()
    }

    /// Takes the sessions whose end is at or before `now`.
    fn take_due(&self, now: i64) -> Vec<String> {
        let mut ends = self.ends.lock().expect("session ends lock");
        let due: Vec<String> = ends
            .iter()
            .filter(|(_, end)| **end <= now)
            .map(|(client, _)| client.clone())
            .collect();
        for client in &due {
            ends.remove(client);
        }
        due
    }

    /// Closes the client's session, if it has one, and forgets who it was.
    pub(crate) async fn kick(&self, scx: &ServerContext, client_id: &str) {
        self.identities.write().expect("identities lock").remove(client_id);
        self.ends.lock().expect("session ends lock").remove(client_id);
        let id = Id::from(scx.node.id(), ClientId::from(client_id));
        let mut entry = scx.extends.shared().await.entry(id);
        if entry.exist()
            && let Err(e) = entry.kick(true, true, true).await
        {
            tracing::warn!(client_id, error = %e, "could not disconnect the client");
        }
    }

    /// Closes the sessions past their end. A route identity whose route was refreshed since
    /// its login gets the route's new end instead.
    pub(crate) async fn sweep(&self, scx: &ServerContext, policy: &Policy) {
        let now = gantry_core::time::now_ms();
        for client in self.take_due(now) {
            if let Some(Identity::Route(grant)) = self.identity(&client)
                && let Some(services) = policy.services()
            {
                match services.routes.current(&grant).await {
                    Ok(Some(current)) if current.expires > now => {
                        let end = current.expires;
                        self.logged_in(
                            client,
                            Login {
                                identity: Identity::Route(Box::new(current)),
                                until: Some(end),
                            },
                        );
                        continue;
                    }
                    Ok(_) => {}
                    Err(e) => {
                        // Looked at again on the next sweep rather than closed on a store failure.
                        tracing::warn!(client, error = %e, "could not check a route identity's route");
                        self.ends.lock().expect("session ends lock").insert(client, now);
                        continue;
                    }
                }
            }
            tracing::info!(client, "session ended: its credential expired or was revoked");
            self.kick(scx, &client).await;
        }
    }
}
