//! Extractors that reject in the API's error shape: the bearer principal, JSON bodies and
//! query strings, with messages that name the offending field.

use axum::body::Bytes;
use std::net::SocketAddr;

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE};
use axum::http::request::Parts;
use gantry_core::Error;
use gantry_core::paging::PageRequest;
use gantry_core::principal::Principal;
use serde::de::DeserializeOwned;

use crate::AppState;
use crate::error::ApiError;

/// The TCP peer of a request, as a request extension: the server that accepted the connection
/// puts it there (each listener has its own connect-info type; see the binary's `serve`).
#[derive(Debug, Clone, Copy)]
pub struct PeerAddr(pub SocketAddr);

/// The caller, from `Authorization: Bearer <token>`; 401 when missing or unknown.
pub struct Auth(pub Principal);

impl FromRequestParts<AppState> for Auth {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        // No token is no login attempt: 401, neither counted nor banned.
        let token = parts
            .headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
            .map(str::trim)
            .ok_or(Error::Unauthorized)?;
        // The TCP peer: a banned address is refused before its token is looked at.
        let peer = parts.extensions.get::<PeerAddr>().map(|p| p.0.ip());
        let guard = &state.services.login_guard;
        if let Some(ip) = peer
            && guard.is_banned(ip)
        {
            return Err(ApiError::Banned);
        }
        let principal = state.services.auth.authenticate(token).await;
        if let (Err(Error::Unauthorized), Some(ip)) = (&principal, peer)
            && guard.failed(ip)
        {
            tracing::warn!(address = %ip, "too many failed logins: address banned");
        }
        let principal = principal?;
        if let Some(caller) = parts.extensions.get::<crate::request_log::Caller>() {
            caller.set(&principal);
        }
        if let Some(caller) = parts.extensions.get::<crate::request_log::AuditCaller>() {
            caller.set(&principal);
        }
        if let Some(limiter) = &state.limiter
            && !limiter.allow(token)
        {
            return Err(Error::Busy("this token is over its rate limit; retry later".to_owned()).into());
        }
        Ok(Auth(principal))
    }
}

/// What a body does with a field its type does not read.
#[derive(Debug, Clone, Copy)]
pub enum UnknownFields {
    /// Refused with 400 naming it (a misspelled field would otherwise be lost unnoticed), but
    /// for `echoed`: the output-only fields of the record, which a client sends back when it
    /// PUTs a GET's body; those are ignored.
    Refused { echoed: &'static [&'static str] },
    /// Ignored: bodies another program writes (a broker's auth plugin adds fields of its own).
    Ignored,
}

/// A request body type.
pub trait Body: DeserializeOwned {
    const UNKNOWN_FIELDS: UnknownFields;
}

/// A JSON body; malformed JSON, a wrong shape or a wrong field type is 400 naming the field, so
/// is a field the body does not have (`Body::UNKNOWN_FIELDS`); a body over the limit 413.
pub struct AppJson<T>(pub T);

impl<T: Body, S: Send + Sync> FromRequest<S> for AppJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let (declared_json, bytes) = read_body(req, state).await?;
        if !declared_json && !bytes.is_empty() {
            return Err(ApiError::NotJson);
        }
        parse_json(&bytes).map(AppJson)
    }
}

/// The body's bytes (413 over the limit), and whether `Content-Type` declares it JSON.
async fn read_body<S: Send + Sync>(req: Request, state: &S) -> Result<(bool, Bytes), ApiError> {
    let declared_json = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(is_json_media_type);
    let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::TooLarge
        } else {
            ApiError::MalformedBody(rejection.body_text())
        }
    })?;
    Ok((declared_json, bytes))
}

/// `application/json`, or a `+json` type, with or without parameters such as a charset.
fn is_json_media_type(value: &str) -> bool {
    let essence = value.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    essence == "application/json" || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// A JSON body that may be left out: an empty body is `T::default()`; otherwise as `AppJson`.
pub struct OptionalJson<T>(pub T);

impl<T: Body + Default, S: Send + Sync> FromRequest<S> for OptionalJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let (declared_json, bytes) = read_body(req, state).await?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(OptionalJson(T::default()));
        }
        if !declared_json {
            return Err(ApiError::NotJson);
        }
        parse_json(&bytes).map(OptionalJson)
    }
}

/// Parses a request body: `parse_document`, then its fields checked against `T`'s.
pub fn parse_json<T: Body>(bytes: &[u8]) -> Result<T, ApiError> {
    let value = parse_document(bytes)?;
    if let UnknownFields::Refused { echoed } = T::UNKNOWN_FIELDS {
        check_fields(bytes, fields_of::<T>(), echoed)?;
    }
    Ok(value)
}

/// Refuses the top-level fields of `bytes` (a JSON object that parsed) that are neither in
/// `fields` nor in `echoed`, naming them and the fields there are.
fn check_fields(bytes: &[u8], fields: &[&str], echoed: &[&str]) -> Result<(), ApiError> {
    let keys: std::collections::BTreeMap<String, serde::de::IgnoredAny> = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::MalformedBody(format!("the body is not valid JSON: {e}")))?;
    let unknown: Vec<&str> = keys
        .keys()
        .map(String::as_str)
        .filter(|k| !fields.contains(k) && !echoed.contains(k))
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    let reason = format!(
        "{} not a field of this body, which has: {}",
        if unknown.len() == 1 { "is" } else { "are" },
        fields.join(", ")
    );
    Err(Error::invalid(unknown.join(", "), reason).into())
}

/// The field names `T`'s derived `Deserialize` reads (renames and aliases included), which it
/// hands to `deserialize_struct`. A type that is not a plain struct gives none.
fn fields_of<T: DeserializeOwned>() -> &'static [&'static str] {
    let mut fields: &'static [&'static str] = &[];
    let _ = T::deserialize(FieldNames(&mut fields));
    fields
}

/// A deserializer that reads no value: it keeps the field names a struct asks for.
struct FieldNames<'a>(&'a mut &'static [&'static str]);

impl<'de> serde::Deserializer<'de> for FieldNames<'_> {
    type Error = serde::de::value::Error;

    fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(serde::de::Error::custom("not a struct"))
    }

    fn deserialize_struct<V: serde::de::Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Self::Error> {
        *self.0 = fields;
        Err(serde::de::Error::custom("field names taken"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option
        unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
    }
}

/// Parses a JSON document, naming the path of a field whose type or value is wrong.
/// Every body of the API is a JSON object: serde would also read a struct from an array
/// (`[null]` as every field left out), so anything else is refused before it is parsed.
pub fn parse_document<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(ApiError::MalformedBody("the body must be a JSON object".to_owned()));
    }
    if gantry_core::text::json_has_nul(bytes) {
        return Err(ApiError::Core(gantry_core::text::nul_error(bytes)));
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            ApiError::MalformedBody(format!("the body is not valid JSON: {inner}"))
        } else if path == "." {
            ApiError::MalformedBody(format!("the body does not have the expected shape: {inner}"))
        } else {
            ApiError::Core(Error::invalid(path, strip_position(&inner.to_string())))
        }
    })?;
    de.end()
        .map_err(|e| ApiError::MalformedBody(format!("the body is not valid JSON: {e}")))?;
    Ok(value)
}

fn strip_position(message: &str) -> String {
    match message.find(" at line ") {
        Some(at) => message[..at].to_owned(),
        None => message.to_owned(),
    }
}

/// Query parameters; a value of the wrong type is 400 naming the parameter.
pub struct AppQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for AppQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parse_query(parts.uri.query().unwrap_or_default()).map(AppQuery)
    }
}

/// Parses a query string into `T`: a NUL character or a value of the wrong type is 400 naming
/// the parameter.
pub fn parse_query<T: DeserializeOwned>(query: &str) -> Result<T, ApiError> {
    if let Some((name, _)) =
        form_urlencoded::parse(query.as_bytes()).find(|(k, v)| k.contains('\0') || v.contains('\0'))
    {
        return Err(Error::invalid(
            name.replace('\0', "\\u0000"),
            "holds a NUL character, which no name or value contains",
        )
        .into());
    }
    let de = serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()));
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        ApiError::Core(Error::invalid(path, e.into_inner().to_string()))
    })
}

/// Checks `pageNo` and `pageSize` of a listing. (Listing parameters are not flattened into a
/// shared struct: serde's flatten would hand numbers to serde_urlencoded as strings.)
pub fn page(page_no: Option<i64>, page_size: Option<i64>, default_size: u32) -> Result<PageRequest, ApiError> {
    Ok(PageRequest::parse(page_no, page_size, default_size)?)
}

/// A request path is refused when, percent-decoded, it holds a NUL or is not UTF-8.
pub fn check_path(path: &str) -> Result<(), Error> {
    if path.contains('%') {
        let decoded: Vec<u8> = percent_decode(path.as_bytes());
        if decoded.contains(&0) {
            return Err(Error::invalid("path", "holds a NUL character (%00)"));
        }
        if std::str::from_utf8(&decoded).is_err() {
            return Err(Error::invalid("path", "is not UTF-8 once percent-decoded"));
        }
    }
    Ok(())
}

fn percent_decode(bytes: &[u8]) -> Vec<u8> {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match (
            bytes[i],
            bytes.get(i + 1).copied().and_then(hex),
            bytes.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(high), Some(low)) => {
                out.push(high << 4 | low);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A misspelled field is refused, naming it; the output-only fields of a GET's body are not.
    #[test]
    fn unknown_fields_are_named_and_echoed_ones_ignored() {
        use crate::wire::{DeviceInput, EventInput};
        let refused: [(&[u8], &str); 3] = [
            (br#"{"deviceName": "d", "virtal": true}"#, "virtal"),
            (br#"{"deviceId": "x", "devicetime": "2024"}"#, "devicetime"),
            (br#"{"deviceId": "x", "a": 1, "b": 2}"#, "a, b"),
        ];
        for (body, named) in refused {
            let error = match std::str::from_utf8(body).unwrap().contains("deviceName") {
                true => parse_json::<DeviceInput>(body).err(),
                false => parse_json::<EventInput>(body).err(),
            };
            match error {
                Some(ApiError::Core(Error::Invalid { field, .. })) => assert_eq!(field, named),
                other => panic!("{body:?}: {other:?}"),
            }
        }
        let echoed = br#"{"deviceName": "d", "id": "i", "isVirtual": true, "virtual": true, "accessToken": "t",
            "createdTime": 1, "updatedBy": "u", "hasActions": false}"#;
        let device = parse_json::<DeviceInput>(echoed).expect("a GET's body is accepted");
        assert_eq!((device.virtual_, device.is_virtual), (Some(true), Some(true)));
    }

    #[test]
    fn json_media_types() {
        for yes in [
            "application/json",
            "application/json; charset=utf-8",
            "Application/JSON",
            "application/merge-patch+json",
        ] {
            assert!(is_json_media_type(yes), "{yes}");
        }
        for no in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "",
            "application/jsonx",
        ] {
            assert!(!is_json_media_type(no), "{no}");
        }
    }

    #[test]
    fn paths_decode() {
        assert_eq!(percent_decode(b"/a%20b%00%zz%f"), b"/a b\0%zz%f".to_vec());
    }
}
