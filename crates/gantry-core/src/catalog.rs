//! Use cases of the catalog: tenants, device models, projects and devices. Every change drops
//! what this process cached of the record (and of the tokens it owns), so a change is seen at
//! once here and within the caches' time limit on other processes sharing the database.

use std::sync::Arc;

use crate::auth::TokenCache;
use crate::cache::TtlCache;
use crate::downlink::Downlink;
use crate::enums::{DeviceStatus, DeviceType, ProjectStatus};
use crate::fields::{DeviceFields, ModelFields, ProjectFields, parse_actions, parse_attributes};
use crate::ids::{DeviceId, ModelId, ProjectId, TenantId};
use crate::names::Name;
use crate::paging::{Page, PageRequest};
use crate::principal::{Principal, ProjectScope, TokenSubject};
use crate::query::{DeviceQuery, ProjectQuery};
use crate::records::{Device, DeviceCounts, DeviceModel, Project, RecordMeta, Tenant};
use crate::store::Store;
use crate::time::now_ms;
use crate::token::{generate_token, grace_ms, hash_token};
use crate::{Error, Result};

/// A tenant just created, with its administrator's token (shown this once).
#[derive(Debug, Clone)]
pub struct TenantAdmin {
    pub tenant: Tenant,
    pub admin_token: String,
}

/// Addresses that projects advertise to their applications.
#[derive(Debug, Clone)]
pub struct PublicAddrs {
    /// `restfulApiAddr` of every project.
    pub rest: String,
    /// `mqApiAddr` of every project.
    pub mq: String,
}

pub struct CatalogService {
    store: Arc<dyn Store>,
    addrs: PublicAddrs,
    downlink: Arc<dyn Downlink>,
    tokens: Arc<TokenCache>,
    /// Shared, not copied, on every read: ingest loads a device and its model per message.
    devices: TtlCache<DeviceId, Arc<Device>>,
    models: TtlCache<ModelId, Arc<DeviceModel>>,
}

impl CatalogService {
    pub fn new(
        store: Arc<dyn Store>,
        addrs: PublicAddrs,
        downlink: Arc<dyn Downlink>,
        tokens: Arc<TokenCache>,
    ) -> Self {
        Self {
            store,
            addrs,
            downlink,
            devices: TtlCache::new(tokens.ttl()),
            models: TtlCache::new(tokens.ttl()),
            tokens,
        }
    }

    /// A device changed or is gone: drop its cached record and token.
    fn forget_device(&self, id: &DeviceId) {
        self.devices.remove(id);
        self.forget_tokens(&TokenSubject::Device(id.clone()));
    }

    /// Drops the cached principals of every token of `subject`.
    fn forget_tokens(&self, subject: &TokenSubject) {
        self.tokens.forget(|_, owner| subject.owns(&owner.principal));
    }

    // ---- tenants ---------------------------------------------------------------------------

    pub async fn create_tenant(&self, who: &Principal, name: &str) -> Result<TenantAdmin> {
        who.require_system()?;
        let name = Name::parse("name", name)?.into_inner();
        let tenant = Tenant {
            id: TenantId::generate(),
            name,
            record: RecordMeta::created(who.tenant().clone(), &who.actor(), now_ms()),
        };
        let tenant = Tenant {
            record: RecordMeta {
                tenant_id: tenant.id.clone(),
                ..tenant.record
            },
            ..tenant
        };
        let admin_token = generate_token();
        self.store.insert_tenant(&tenant, &hash_token(&admin_token)).await?;
        Ok(TenantAdmin { tenant, admin_token })
    }

    /// The tenants the caller administers: every tenant for the system administrator, its own
    /// for a tenant administrator. Application and device tokens administer none.
    pub async fn list_tenants(&self, who: &Principal, page: PageRequest) -> Result<Page<Tenant>> {
        let only = match who {
            Principal::Admin { system: true, .. } => None,
            Principal::Admin { tenant, .. } => Some(tenant),
            _ => return Err(Error::forbidden("listing tenants needs an administrator token")),
        };
        self.store.list_tenants(only, page).await
    }

    /// Replaces the tenant's administrator token (the system administrator's for the default
    /// tenant): the system administrator for any tenant, a tenant administrator for its own.
    /// The old token keeps working for the grace period; it only ever served HTTP.
    pub async fn rotate_admin_token(
        &self,
        who: &Principal,
        id: &TenantId,
        grace_seconds: Option<i64>,
    ) -> Result<TenantAdmin> {
        let grace = grace_ms(grace_seconds)?;
        match who {
            Principal::Admin { system: true, .. } => {}
            Principal::Admin { tenant, .. } if tenant == id => {}
            Principal::Admin { .. } => return Err(Error::not_found("tenant", id)),
            _ => return Err(Error::forbidden("this operation needs a tenant administrator token")),
        }
        let tenant = self
            .store
            .get_tenant(id)
            .await?
            .ok_or_else(|| Error::not_found("tenant", id))?;
        let system = id == &TenantId::default_tenant();
        let admin_token = generate_token();
        let now = now_ms();
        self.store
            .rotate_admin_token(id, system, &hash_token(&admin_token), now + grace, now)
            .await?;
        self.forget_tokens(&if system {
            TokenSubject::System
        } else {
            TokenSubject::Admin(id.clone())
        });
        Ok(TenantAdmin { tenant, admin_token })
    }

    // ---- device models ---------------------------------------------------------------------

    pub async fn create_model(&self, who: &Principal, input: ModelFields) -> Result<DeviceModel> {
        let tenant = who.require_admin()?.clone();
        let name = Name::parse(
            "name",
            input
                .name
                .as_deref()
                .ok_or_else(|| Error::invalid("name", "is required"))?,
        )?;
        let model = DeviceModel {
            id: ModelId::generate(),
            name: name.into_inner(),
            description: input.description,
            device_type: input.device_type.unwrap_or(DeviceType::Root),
            image_url: input.image_url,
            attributes_map: parse_attributes(input.attributes_map.unwrap_or_default())?,
            actions_map: parse_actions(input.actions_map.unwrap_or_default())?,
            metadata: input.metadata.unwrap_or_default(),
            gateway_id: input.gateway_id,
            record: RecordMeta::created(tenant, &who.actor(), now_ms()),
        };
        require_attributes_or_actions(&model)?;
        self.store.insert_model(&model).await?;
        Ok(model)
    }

    pub async fn update_model(&self, who: &Principal, id: &ModelId, input: ModelFields) -> Result<DeviceModel> {
        let tenant = who.require_admin()?;
        let mut model = Arc::unwrap_or_clone(self.load_model(tenant, id).await?);
        if let Some(name) = input.name {
            model.name = Name::parse("name", &name)?.into_inner();
        }
        set_if_some(&mut model.description, input.description);
        set_if_some(&mut model.image_url, input.image_url);
        set_if_some(&mut model.gateway_id, input.gateway_id);
        if let Some(device_type) = input.device_type {
            model.device_type = device_type;
        }
        if let Some(attributes) = input.attributes_map {
            model.attributes_map = parse_attributes(attributes)?;
        }
        if let Some(actions) = input.actions_map {
            model.actions_map = parse_actions(actions)?;
        }
        if let Some(metadata) = input.metadata {
            model.metadata = metadata;
        }
        require_attributes_or_actions(&model)?;
        model.record.touch(&who.actor(), now_ms());
        self.store.update_model(&model).await?;
        self.forget_model(&model.id);
        Ok(model)
    }

    pub async fn get_model(&self, who: &Principal, id: &ModelId) -> Result<DeviceModel> {
        if let Principal::Device { .. } = who {
            return Err(Error::forbidden("a device token cannot read models"));
        }
        self.load_model(who.tenant(), id).await.map(Arc::unwrap_or_clone)
    }

    pub async fn list_models(&self, who: &Principal, page: PageRequest) -> Result<Page<DeviceModel>> {
        if let Principal::Device { .. } = who {
            return Err(Error::forbidden("a device token cannot list models"));
        }
        self.store.list_models(who.tenant(), page).await
    }

    pub async fn model_devices(&self, who: &Principal, id: &ModelId, page: PageRequest) -> Result<Page<Device>> {
        if let Principal::Device { .. } = who {
            return Err(Error::forbidden("a device token cannot list devices"));
        }
        let query = DeviceQuery {
            model: Some(id.clone()),
            within: scope_list(who.project_scope()),
            ..DeviceQuery::default()
        };
        self.load_model(who.tenant(), id).await?;
        let page = self.store.list_devices(who.tenant(), &query, page).await?;
        Ok(page.map(|d| redact_device(who, d)))
    }

    pub async fn delete_model(&self, who: &Principal, id: &ModelId) -> Result<()> {
        let tenant = who.require_admin()?;
        self.store.delete_model(tenant, id, &who.actor(), now_ms()).await?;
        self.forget_model(id);
        Ok(())
    }

    /// A model changed or is gone: drop it, and the devices whose derived fields it feeds.
    fn forget_model(&self, id: &ModelId) {
        self.models.remove(id);
        self.devices.forget(|_, d| &d.model_id == id);
    }

    /// A model of the tenant, from the cache when this process read it lately.
    pub async fn load_model(&self, tenant: &TenantId, id: &ModelId) -> Result<Arc<DeviceModel>> {
        if let Some(model) = self.models.get_or_reload(id).filter(|m| &m.record.tenant_id == tenant) {
            return Ok(model);
        }
        let Some(model) = self.store.get_model(tenant, id).await? else {
            // Gone: the readers still given the expired entry stop getting it.
            self.models.remove(id);
            return Err(Error::not_found("device model", id));
        };
        let model = Arc::new(model);
        self.models.put(id.clone(), model.clone());
        Ok(model)
    }

    // ---- projects --------------------------------------------------------------------------

    pub async fn create_project(&self, who: &Principal, input: ProjectFields) -> Result<Project> {
        let tenant = who.require_admin()?.clone();
        let name = Name::parse(
            "name",
            input
                .name
                .as_deref()
                .ok_or_else(|| Error::invalid("name", "is required"))?,
        )?;
        let token = generate_token();
        let project = Project {
            id: ProjectId::generate(),
            name: name.into_inner(),
            description: input.description,
            image_url: input.image_url,
            status: input.status.unwrap_or(ProjectStatus::Development),
            address: input.address,
            map_info: input.map_info,
            application_access_token: token.clone(),
            restful_api_addr: self.addrs.rest.clone(),
            mq_api_addr: self.addrs.mq.clone(),
            template_id: input.template_id,
            metadata: input.metadata.unwrap_or_default(),
            record: RecordMeta::created(tenant, &who.actor(), now_ms()),
        };
        self.store.insert_project(&project, &hash_token(&token)).await?;
        Ok(project)
    }

    pub async fn update_project(&self, who: &Principal, id: &ProjectId, input: ProjectFields) -> Result<Project> {
        who.require_project_manage(id)?;
        let mut project = self.get_project(who, id).await?;
        if let Some(name) = input.name {
            project.name = Name::parse("name", &name)?.into_inner();
        }
        set_if_some(&mut project.description, input.description);
        set_if_some(&mut project.image_url, input.image_url);
        set_if_some(&mut project.address, input.address);
        set_if_some(&mut project.map_info, input.map_info);
        set_if_some(&mut project.template_id, input.template_id);
        if let Some(status) = input.status {
            project.status = status;
        }
        if let Some(metadata) = input.metadata {
            project.metadata = metadata;
        }
        project.record.touch(&who.actor(), now_ms());
        self.store.update_project(&project).await?;
        self.devices.forget(|_, d| d.project_id == project.id);
        Ok(project)
    }

    pub async fn get_project(&self, who: &Principal, id: &ProjectId) -> Result<Project> {
        let project = self
            .store
            .get_project(who.tenant(), id)
            .await?
            .ok_or_else(|| Error::not_found("project", id))?;
        who.require_project(id)?;
        Ok(redact_project(who, self.with_addrs(project)))
    }

    pub async fn list_projects(
        &self,
        who: &Principal,
        status: Option<ProjectStatus>,
        page: PageRequest,
    ) -> Result<Page<Project>> {
        if let Principal::Device { .. } = who {
            return Err(Error::forbidden("a device token cannot list projects"));
        }
        let only = scope_list(who.project_scope());
        let page = self
            .store
            .list_projects(who.tenant(), &ProjectQuery { status, only }, page)
            .await?;
        Ok(page.map(|p| redact_project(who, self.with_addrs(p))))
    }

    pub async fn project_models(&self, who: &Principal, id: &ProjectId) -> Result<Vec<DeviceModel>> {
        self.get_project(who, id).await?;
        self.store.project_models(who.tenant(), id).await
    }

    pub async fn project_devices(
        &self,
        who: &Principal,
        id: &ProjectId,
        mut query: DeviceQuery,
        page: PageRequest,
    ) -> Result<Page<Device>> {
        self.get_project(who, id).await?;
        query.project = Some(id.clone());
        let page = self.store.list_devices(who.tenant(), &query, page).await?;
        Ok(page.map(|d| redact_device(who, d)))
    }

    /// The project's live devices, connected and locked (`DeviceStore::count_project_devices`).
    pub async fn project_device_counts(&self, who: &Principal, id: &ProjectId) -> Result<DeviceCounts> {
        self.get_project(who, id).await?;
        self.store.count_project_devices(who.tenant(), id).await
    }

    pub async fn delete_project(&self, who: &Principal, id: &ProjectId) -> Result<()> {
        let tenant = who.require_admin()?;
        self.store.delete_project(tenant, id, &who.actor(), now_ms()).await?;
        self.forget_tokens(&TokenSubject::Application(id.clone()));
        Ok(())
    }

    /// Replaces the project's `applicationAccessToken`; the old one keeps working for the grace
    /// period. Applications use it over HTTP only, so no MQTT session depends on it.
    pub async fn rotate_application_token(
        &self,
        who: &Principal,
        id: &ProjectId,
        grace_seconds: Option<i64>,
    ) -> Result<Project> {
        let grace = grace_ms(grace_seconds)?;
        who.require_project_manage(id)?;
        let mut project = self.get_project(who, id).await?;
        let token = generate_token();
        let now = now_ms();
        project.application_access_token = token.clone();
        project.record.touch(&who.actor(), now);
        self.store
            .rotate_application_token(&project, &hash_token(&token), now + grace)
            .await?;
        self.forget_tokens(&TokenSubject::Application(id.clone()));
        Ok(project)
    }

    /// The advertised addresses are configuration, so they follow the running service.
    fn with_addrs(&self, mut project: Project) -> Project {
        project.restful_api_addr.clone_from(&self.addrs.rest);
        project.mq_api_addr.clone_from(&self.addrs.mq);
        project
    }

    // ---- devices ---------------------------------------------------------------------------

    pub async fn create_device(&self, who: &Principal, input: DeviceFields) -> Result<Device> {
        let name = Name::parse(
            "deviceName",
            input
                .device_name
                .as_deref()
                .ok_or_else(|| Error::invalid("deviceName", "is required"))?,
        )?;
        let project_id = input
            .project_id
            .ok_or_else(|| Error::invalid("projectId", "is required"))?;
        let model_id = input.model_id.ok_or_else(|| Error::invalid("modelId", "is required"))?;
        who.require_device_manage(&project_id)?;
        let project = self.get_project(who, &project_id).await?;
        let model = self.load_model(who.tenant(), &model_id).await?;
        let token = generate_token();
        let is_virtual = input.is_virtual.unwrap_or(false);
        let device = Device {
            id: DeviceId::generate(),
            device_name: name.into_inner(),
            project_id,
            model_id,
            status: input.status.unwrap_or(DeviceStatus::Active),
            access_token: token.clone(),
            is_virtual,
            virtual_: is_virtual,
            comments: input.comments,
            metadata: input.metadata.unwrap_or_default(),
            device_model_type: model.device_type,
            device_model_name: model.name.clone(),
            project_name: project.name,
            has_actions: !model.actions_map.is_empty(),
            device_model_url: model.image_url.clone(),
            record: RecordMeta::created(who.tenant().clone(), &who.actor(), now_ms()),
        };
        self.store.insert_device(&device, &hash_token(&token)).await?;
        Ok(device)
    }

    pub async fn update_device(&self, who: &Principal, id: &DeviceId, input: DeviceFields) -> Result<Device> {
        let mut device = Arc::unwrap_or_clone(self.load_device(who.tenant(), id).await?);
        who.require_device_manage(&device.project_id)?;
        if let Some(model_id) = &input.model_id
            && model_id != &device.model_id
        {
            return Err(Error::invalid("modelId", "the model of a device cannot change"));
        }
        if let Some(name) = input.device_name {
            device.device_name = Name::parse("deviceName", &name)?.into_inner();
        }
        if let Some(project_id) = input.project_id
            && project_id != device.project_id
        {
            who.require_device_manage(&project_id)?;
            self.get_project(who, &project_id).await?;
            device.project_id = project_id;
        }
        if let Some(status) = input.status {
            device.status = status;
        }
        set_if_some(&mut device.comments, input.comments);
        if let Some(is_virtual) = input.is_virtual {
            device.is_virtual = is_virtual;
            device.virtual_ = is_virtual;
        }
        if let Some(metadata) = input.metadata {
            device.metadata = metadata;
        }
        device.record.touch(&who.actor(), now_ms());
        self.store.update_device(&device).await?;
        self.forget_device(&device.id);
        if device.status == DeviceStatus::Locked {
            // A Locked device keeps no open connection.
            self.downlink.disconnect(&device.id).await;
        }
        self.load_device(who.tenant(), id).await.map(Arc::unwrap_or_clone)
    }

    pub async fn get_device(&self, who: &Principal, id: &DeviceId) -> Result<Device> {
        let device = self.load_device(who.tenant(), id).await?;
        who.require_device_read(&device.project_id, &device.id)?;
        Ok(redact_device(who, Arc::unwrap_or_clone(device)))
    }

    pub async fn delete_device(&self, who: &Principal, id: &DeviceId) -> Result<()> {
        let device = self.load_device(who.tenant(), id).await?;
        who.require_device_manage(&device.project_id)?;
        self.store
            .delete_device(who.tenant(), id, &who.actor(), now_ms())
            .await?;
        self.forget_device(&device.id);
        self.downlink.disconnect(&device.id).await;
        Ok(())
    }

    /// Replaces the device's `accessToken`. The old one keeps working for the grace period, and
    /// the device's MQTT session (logged in with it) is closed when that ends: at once without one.
    pub async fn rotate_device_token(
        &self,
        who: &Principal,
        id: &DeviceId,
        grace_seconds: Option<i64>,
    ) -> Result<Device> {
        let grace = grace_ms(grace_seconds)?;
        let mut device = Arc::unwrap_or_clone(self.load_device(who.tenant(), id).await?);
        who.require_device_manage(&device.project_id)?;
        let token = generate_token();
        let now = now_ms();
        device.access_token = token.clone();
        device.record.touch(&who.actor(), now);
        self.store
            .rotate_device_token(&device, &hash_token(&token), now + grace)
            .await?;
        self.forget_device(&device.id);
        self.downlink.expire_session(device.id.as_str(), now + grace).await;
        Ok(device)
    }

    /// A device of the tenant with its derived fields, from the cache when this process read
    /// it lately (ingest and reads look devices up on every message).
    pub async fn load_device(&self, tenant: &TenantId, id: &DeviceId) -> Result<Arc<Device>> {
        if let Some(device) = self.devices.get_or_reload(id).filter(|d| &d.record.tenant_id == tenant) {
            return Ok(device);
        }
        let Some(device) = self.store.get_device(tenant, id).await? else {
            // Gone: the readers still given the expired entry stop getting it.
            self.devices.remove(id);
            return Err(Error::not_found("device", id));
        };
        let device = Arc::new(device);
        self.devices.put(id.clone(), device.clone());
        Ok(device)
    }
}

/// The projects a listing is restricted to: none for a caller who sees them all.
fn scope_list(scope: ProjectScope) -> Option<Vec<ProjectId>> {
    match scope {
        ProjectScope::All => None,
        ProjectScope::Only(projects) => Some(projects),
    }
}

/// The project as `who` may read it: without its application token for a user who may not
/// manage it.
fn redact_project(who: &Principal, mut project: Project) -> Project {
    if !who.reads_application_secrets() {
        project.application_access_token.clear();
    }
    project
}

/// The device as `who` may read it: without its access token for a VIEWER.
fn redact_device(who: &Principal, mut device: Device) -> Device {
    if !who.reads_device_tokens() {
        device.access_token.clear();
    }
    device
}

fn set_if_some<T>(slot: &mut Option<T>, value: Option<T>) {
    if value.is_some() {
        *slot = value;
    }
}

fn require_attributes_or_actions(model: &DeviceModel) -> Result<()> {
    if model.attributes_map.is_empty() && model.actions_map.is_empty() {
        return Err(Error::invalid(
            "attributesMap",
            "attributesMap and actionsMap must not both be empty",
        ));
    }
    Ok(())
}
