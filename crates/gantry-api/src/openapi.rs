//! The OpenAPI 3.1 document, generated from the handlers and types.

use utoipa::Modify;
use utoipa::OpenApi;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};

use crate::{control, devices, events, health, models, projects, routes, tenants};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Gantry",
        description = "IoT device management: device models, projects, devices, shadows, events, event logs and routes.\n\n\
Every response body is `{\"returnCode\": 0, \"result\": ...}` on success. Errors are \
`{\"returnCode\": <non-zero>, \"message\": \"...\"}` with the HTTP status: 400 (40000 invalid field or \
parameter, 40001 malformed body), 401 (40100), 403 (40300), 404 (40400), 409 (40900 duplicate name, \
40901 state conflict), 413 (41300), 415 (41500 body not sent as application/json), 429 (42900), \
500 (50000), 503 (50300 shutting down, 50301 store unavailable: retry). Text holding a NUL character \
is refused with 400 on every store.\n\n\
Every request carries `Authorization: Bearer <token>`: a tenant administrator token, a project's \
`applicationAccessToken` or a device's `accessToken`."
    ),
    paths(
        tenants::create, tenants::rotate,
        models::create, models::update, models::read, models::list, models::devices, models::delete,
        projects::create, projects::update, projects::read, projects::list, projects::models, projects::devices, projects::delete, projects::rotate,
        devices::create, devices::update, devices::read, devices::delete, devices::rotate,
        events::create, events::read, events::delete, events::list, events::list_attribute, events::shadow,
        control::send, control::logs,
        routes::create, routes::list, routes::refresh, routes::revoke,
        health::healthz, health::metrics,
    ),
    components(schemas(crate::error::ErrorBody)),
    modifiers(&BearerAuth),
    security(("bearer" = []))
)]
pub struct ApiDoc;

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
