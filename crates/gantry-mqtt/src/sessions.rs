//! Who is logged in to the embedded broker, and when each session whose credential ends must
//! be closed: a route identity's at its route's expiry, a device's at the end of the grace
//! period of the token it logged in with. The hooks write it at login and forget a client when
//! its session ends; the downlink and a sweeper task close sessions from it.
//!
//! Invariant: a client is known from its login until its session is over (after its Last Will,
//! which the publish ACL checks when it is sent, and its offline queue), and no longer: every
//! route creates a client id of its own, so what is never forgotten would grow with every route.

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
    /// Who each client that logged in is, and when the connection it logged in on started
    /// (rmqtt's `Id::create_time`, which the session keeps): the ACL hooks see only the client
    /// id, and a session that ends forgets its client only if no later login replaced it.
    identities: RwLock<HashMap<String, (Identity, i64)>>,
    /// When the session of a client must end (epoch ms). Only sessions whose credential ends
    /// have one, so the sweeper looks at route identities and rotated devices alone.
    ends: Mutex<HashMap<String, i64>>,
}

impl Sessions {
    /// Records a login on a connection started at `connected`; it replaces the client's earlier
    /// session and that session's end.
    pub(crate) fn logged_in(&self, client_id: String, login: Login, connected: i64) {
        let mut ends = self.ends.lock().expect("session ends lock");
        match login.until {
            Some(end) => ends.insert(client_id.clone(), end),
            None => ends.remove(&client_id),
        };
        drop(ends);
        self.identities
            .write()
            .expect("identities lock")
            .insert(client_id, (login.identity, connected));
    }

    /// The session of the client that logged in on a connection started at `connected` is over:
    /// it is forgotten, with its end, unless the client has logged in again since. Whether it was.
    pub(crate) fn ended(&self, client_id: &str, connected: i64) -> bool {
        let mut identities = self.identities.write().expect("identities lock");
        if identities.get(client_id).is_none_or(|(_, at)| *at != connected) {
            return false;
        }
        identities.remove(client_id);
        self.ends.lock().expect("session ends lock").remove(client_id);
        true
    }

    pub(crate) fn identity(&self, client_id: &str) -> Option<Identity> {
        self.identities
            .read()
            .expect("identities lock")
            .get(client_id)
            .map(|(identity, _)| identity.clone())
    }

    /// When the connection of the client's current login started.
    fn connected(&self, client_id: &str) -> Option<i64> {
        self.identities
            .read()
            .expect("identities lock")
            .get(client_id)
            .map(|(_, at)| *at)
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
            .filter(|(_, (identity, _))| matches!(identity, Identity::Route(grant) if &grant.target == device))
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
                        // The same session, with the route's new end.
                        let connected = self.connected(&client).unwrap_or_default();
                        let login = Login {
                            identity: Identity::Route(Box::new(current)),
                            until: Some(end),
                        };
                        self.logged_in(client, login, connected);
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

#[cfg(test)]
mod tests {
    use gantry_core::ids::{DeviceId, TenantId};
    use gantry_core::route::RouteGrant;

    use super::*;

    fn route(target: &str, until: i64) -> Login {
        Login {
            identity: Identity::Route(Box::new(RouteGrant {
                route_id: "r".to_owned(),
                tenant: TenantId::from_string("t"),
                target: DeviceId::from_string(target),
                reply_to: None,
                expires: until,
            })),
            until: Some(until),
        }
    }

    /// A session that ends forgets its client and the client's end; one that ends after its
    /// client logged in again (a takeover, a reconnect) leaves the new login alone.
    #[test]
    fn an_ended_session_forgets_its_client_unless_it_logged_in_again() {
        let sessions = Sessions::default();
        let far = i64::MAX;
        sessions.logged_in("app-1".to_owned(), route("d", far), 100);
        sessions.logged_in("app-1".to_owned(), route("d", far), 200);
        assert!(
            !sessions.ended("app-1", 100),
            "the first connection's session ends after the second login"
        );
        assert!(sessions.is_known("app-1"));
        assert_eq!(sessions.routed_to(&DeviceId::from_string("d")), ["app-1"]);
        assert!(sessions.ended("app-1", 200));
        assert!(!sessions.is_known("app-1"));
        assert!(sessions.routed_to(&DeviceId::from_string("d")).is_empty());
        assert!(sessions.ends.lock().unwrap().is_empty(), "its end goes with it");
        assert!(!sessions.ended("app-1", 200), "nothing left to forget");

        sessions.logged_in(
            "crane".to_owned(),
            Login {
                identity: Identity::Device(TenantId::from_string("t")),
                until: None,
            },
            300,
        );
        assert!(!sessions.ended("crane", 299));
        assert!(sessions.identity("crane").is_some());
    }
}
