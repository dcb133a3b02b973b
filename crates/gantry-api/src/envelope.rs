//! The response envelope: `returnCode` 0 and `result`, and the paged-listing shape.

use axum::Json;
use gantry_core::paging::Page;
use serde::Serialize;
use utoipa::ToSchema;

/// A successful response.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Envelope<T> {
    /// 0 on success.
    pub return_code: i32,
    pub result: T,
}

/// A successful response that carries only `returnCode`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Done {
    /// 0 on success.
    pub return_code: i32,
}

/// A page of a listing.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Paged<T> {
    /// Records the whole listing holds.
    pub total_results: u64,
    /// Records in this response.
    pub num_results: usize,
    pub page_size: u32,
    /// From 1.
    pub page_no: u32,
    pub results: Vec<T>,
}

pub fn ok<T>(result: T) -> Json<Envelope<T>> {
    Json(Envelope { return_code: 0, result })
}

pub fn done() -> Json<Done> {
    Json(Done { return_code: 0 })
}

pub fn paged<T>(page: Page<T>) -> Json<Envelope<Paged<T>>> {
    ok(Paged {
        total_results: page.total,
        num_results: page.items.len(),
        page_size: page.request.page_size,
        page_no: page.request.page_no,
        results: page.items,
    })
}
