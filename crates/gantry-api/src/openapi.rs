//! The OpenAPI 3.1 document, generated from the handlers and types.

use utoipa::Modify;
use utoipa::OpenApi;
use utoipa::openapi::path::Operation;
use utoipa::openapi::schema::{Schema, SchemaType, Type};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, Response, ResponseBuilder};

use crate::{
    alarms, audit, control, desired, devices, events, health, models, projects, routes, series, sign_in, stream,
    tenants, users, webhooks,
};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Gantry",
        description = "IoT device management: device models, projects, devices, shadows, events, event logs, routes, webhooks and alarms.\n\n\
Every response body is `{\"returnCode\": 0, \"result\": ...}` on success. Errors are \
`{\"returnCode\": <non-zero>, \"message\": \"...\"}` with the HTTP status: 400 (40000 invalid field or \
parameter, 40001 malformed body, 40002 not valid HTTP/1.1), 401 (40100), 403 (40300), 404 (40400), \
409 (40900 duplicate name, 40901 state conflict), 412 (41200 If-Match names another version), 413 (41300), 414 (41400 URI over 65,534 bytes), \
415 (41500 body not sent as application/json), 429 (42900 rate or queue, 42901 address banned, \
42902 a bound on what one tenant may hold, named in the message), 431 (43100 headers too large), \
500 (50000), 503 (50300 shutting down, 50301 store unavailable: retry, 50302 a message to a device not \
published, 50303 a change made but its audit record not written). Text holding a NUL character \
is refused with 400 on every store.\n\n\
Every request carries `Authorization: Bearer <token>`: a tenant administrator token, a project's \
`applicationAccessToken`, a device's `accessToken`, or the token of a user's sign-in session \
(`POST /api/v1/auth/login`). A user's role (ADMIN, OPERATOR, VIEWER) limits what its session may do; \
the matrix is in the user guide's chapter \"Users, roles and the audit log\"."
    ),
    paths(
        tenants::create, tenants::list, tenants::rotate,
        models::create, models::update, models::read, models::list, models::devices, models::delete,
        projects::create, projects::update, projects::read, projects::list, projects::models, projects::devices, projects::delete, projects::rotate,
        devices::create, devices::update, devices::read, devices::delete, devices::rotate, devices::connection,
        events::create, events::read, events::delete, events::list, events::list_attribute, events::shadow,
        series::series,
        control::send, control::logs,
        desired::read, desired::update, desired::pending, desired::cancel,
        routes::create, routes::list, routes::refresh, routes::revoke,
        stream::stream,
        webhooks::create, webhooks::list, webhooks::read, webhooks::update, webhooks::delete, webhooks::deliveries,
        alarms::create_rule, alarms::list_rules, alarms::read_rule, alarms::update_rule, alarms::delete_rule,
        alarms::list, alarms::read, alarms::acknowledge, alarms::clear, alarms::comment, alarms::history,
        users::create, users::list, users::read, users::update, users::delete, users::lock, users::unlock,
        sign_in::login, sign_in::logout, sign_in::me, sign_in::password,
        audit::list,
        health::healthz, health::metrics,
    ),
    components(schemas(
        crate::error::ErrorBody,
        gantry_core::enums::DeviceType, gantry_core::enums::DataType, gantry_core::enums::Readable,
        gantry_core::enums::Channel, gantry_core::enums::DeviceStatus, gantry_core::enums::ProjectStatus,
        gantry_core::enums::SortOrder, gantry_core::enums::EventSource, gantry_core::enums::MessageType,
        gantry_core::enums::EventLogStatus, gantry_core::enums::Classification, gantry_core::enums::SourceType,
        gantry_core::enums::DeliveryStatus, gantry_core::stream::StreamType, gantry_core::enums::DesiredStatus,
        gantry_core::enums::Severity, gantry_core::enums::AlarmStatus, gantry_core::enums::AlarmSource,
        gantry_core::enums::AlarmTransition,
        gantry_core::user::Role, gantry_core::user::UserStatus, gantry_core::audit::PrincipalType,
        gantry_core::audit::AuditOutcome,
    )),
    modifiers(&BearerAuth, &CommonResponses, &CreateBodies),
    security(("bearer" = []))
)]
pub struct ApiDoc;

/// Paths served without a token.
const PUBLIC_PATHS: &[&str] = &["/healthz", "/metrics", "/api/v1/auth/login"];

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// Adds the answers every operation of a kind can give, so no handler's attribute has to repeat
/// them: a token-checked operation can answer 401, 403, 429, 500 and 503; one with parameters or
/// a body 400 (NUL characters, malformed values); one with a path parameter 404; one with a body
/// 413 and 415. Public paths get an empty security requirement.
struct CommonResponses;

impl Modify for CommonResponses {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        for (path, item) in openapi.paths.paths.iter_mut() {
            let public = PUBLIC_PATHS.contains(&path.as_str());
            for operation in operations(item) {
                if public {
                    operation.security = Some(Vec::new());
                    continue;
                }
                let has_params = operation.parameters.as_ref().is_some_and(|p| !p.is_empty());
                let has_path_param = operation
                    .parameters
                    .iter()
                    .flatten()
                    .any(|p| matches!(p.parameter_in, utoipa::openapi::path::ParameterIn::Path));
                let has_body = operation.request_body.is_some();
                let mut add = |status: &str, description: &str| {
                    if !operation.responses.responses.contains_key(status) {
                        operation
                            .responses
                            .responses
                            .insert(status.to_owned(), error_response(description));
                    }
                };
                if has_params || has_body {
                    add(
                        "400",
                        "a parameter or field is invalid, or holds a NUL character (40000, 40001)",
                    );
                }
                add("401", "missing or unknown bearer token (40100)");
                add("403", "the token's scope does not cover this action (40300)");
                if has_path_param {
                    add("404", "no such resource in the caller's tenant (40400)");
                }
                if has_body {
                    add("413", "the body exceeds the size limit (41300)");
                    add("415", "the body is not sent as application/json (41500)");
                }
                add(
                    "429",
                    "over the token's rate limit, or the ingest queue is full (42900)",
                );
                add("500", "internal error; the cause is logged, not returned (50000)");
                add(
                    "503",
                    "shutting down (50300) or the store is unavailable (50301): retry",
                );
            }
        }
    }
}

/// Create and update share an input type (on update, absent fields keep their stored values),
/// but a create needs some of its fields. Each create operation gets a copy of the type's schema,
/// `<Type>Create`, that declares them required and not null, so that a client generated from the
/// document cannot leave them out.
const CREATE_BODIES: &[(&str, &str, &[&str])] = &[
    ("createDeviceModel", "ModelInput", &["name"]),
    ("createProject", "ProjectInput", &["name"]),
    ("createDevice", "DeviceInput", &["deviceName", "projectId", "modelId"]),
    ("createWebhook", "WebhookInput", &["url", "types"]),
];

struct CreateBodies;

impl Modify for CreateBodies {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let Some(components) = openapi.components.as_mut() else {
            return;
        };
        for &(operation_id, input, required) in CREATE_BODIES {
            let Some(RefOr::T(Schema::Object(shared))) = components.schemas.get(input) else {
                panic!("the OpenAPI document has no object schema {input}");
            };
            let mut create = shared.clone();
            for field in required {
                let property = create
                    .properties
                    .get_mut(*field)
                    .unwrap_or_else(|| panic!("{input} has no field {field}"));
                not_null(property);
                if !create.required.iter().any(|r| r == field) {
                    create.required.push((*field).to_owned());
                }
            }
            let name = format!("{input}Create");
            components
                .schemas
                .insert(name.clone(), RefOr::T(Schema::Object(create)));
            let operation = openapi
                .paths
                .paths
                .values_mut()
                .flat_map(operations)
                .find(|o| o.operation_id.as_deref() == Some(operation_id))
                .unwrap_or_else(|| panic!("no operation {operation_id}"));
            if let Some(body) = operation.request_body.as_mut() {
                for content in body.content.values_mut() {
                    content.schema = Some(Ref::from_schema_name(name.clone()).into());
                }
            }
        }
    }
}

/// Takes `null` out of what a property's schema allows.
fn not_null(property: &mut RefOr<Schema>) {
    fn drop_null(schema_type: &mut SchemaType) {
        if let SchemaType::Array(types) = schema_type {
            let kept: Vec<Type> = types.iter().filter(|t| **t != Type::Null).cloned().collect();
            *schema_type = match kept.as_slice() {
                [one] => SchemaType::Type(one.clone()),
                _ => SchemaType::Array(kept),
            };
        }
    }
    match property {
        RefOr::T(Schema::Object(object)) => drop_null(&mut object.schema_type),
        RefOr::T(Schema::Array(array)) => drop_null(&mut array.schema_type),
        RefOr::T(Schema::OneOf(one_of)) => {
            let is_null = |s: &RefOr<Schema>| matches!(s, RefOr::T(Schema::Object(o)) if o.schema_type == SchemaType::Type(Type::Null));
            one_of.items.retain(|s| !is_null(s));
            if one_of.items.len() == 1 {
                *property = one_of.items.remove(0);
            }
        }
        _ => {}
    }
}

fn operations(item: &mut utoipa::openapi::path::PathItem) -> impl Iterator<Item = &mut Operation> {
    [
        &mut item.get,
        &mut item.put,
        &mut item.post,
        &mut item.delete,
        &mut item.patch,
        &mut item.head,
        &mut item.options,
        &mut item.trace,
    ]
    .into_iter()
    .filter_map(Option::as_mut)
}

fn error_response(description: &str) -> RefOr<Response> {
    ResponseBuilder::new()
        .description(description)
        .content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("ErrorBody")))
                .build(),
        )
        .into()
}
