//! The audit log's service: one way to record a change, whoever makes it (the HTTP layer for
//! every change through the API, the user service for sign-ins), and the administrators' reads.
//!
//! Invariant: a record is committed before the change it describes is answered to its caller,
//! so an acknowledged change has its record, also after a crash. A change whose record cannot
//! be written is answered with the store's error instead of its success.

use std::sync::Arc;

use crate::audit::{Actor, AuditChange, AuditQuery, AuditRecord};
use crate::paging::{Page, PageRequest};
use crate::principal::Principal;
use crate::store::Store;
use crate::time::now_ms;
use crate::{Error, Result};

/// The longest a listing's field filter may be.
const FILTER_MAX: usize = 256;

pub struct AuditService {
    store: Arc<dyn Store>,
}

impl AuditService {
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self { store }
    }

    /// Commits the record of a change made by `actor`.
    pub async fn record(&self, actor: &Actor, change: AuditChange) -> Result<()> {
        self.store.insert_audit(&AuditRecord::of(actor, change)).await
    }

    /// Commits the record of a change made by `who`.
    pub async fn record_for(&self, who: &Principal, change: AuditChange) -> Result<()> {
        self.record(&Actor::of(who), change).await
    }

    /// The records of the caller's tenant, newest first: for its administrators only.
    pub async fn list(&self, who: &Principal, query: AuditQuery, page: PageRequest) -> Result<Page<AuditRecord>> {
        let tenant = who.require_admin()?;
        for (field, value) in [
            ("principalId", &query.principal_id),
            ("resourceType", &query.resource_type),
            ("resourceId", &query.resource_id),
            ("action", &query.action),
        ] {
            if value.as_ref().is_some_and(|v| v.len() > FILTER_MAX) {
                return Err(Error::invalid(field, format!("must be at most {FILTER_MAX} bytes")));
            }
        }
        if let (Some(start), Some(end)) = (query.start, query.end)
            && start > end
        {
            return Err(Error::invalid("startDate", "must not be after endDate"));
        }
        self.store.list_audit(tenant, &query, page).await
    }

    /// Deletes the records older than `days`; returns how many.
    pub async fn purge(&self, days: u32) -> Result<u64> {
        let cutoff = now_ms() - i64::from(days) * 86_400_000;
        self.store.delete_audit_before(cutoff).await
    }
}
