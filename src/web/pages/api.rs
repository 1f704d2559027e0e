//! `GET /api/v1/keys/{key}`: one key's record and attempts as JSON, for scripts. Read
//! only; the resolve workflow adds `POST /api/v1/keys/{key}/resolve` beside it.
//! Errors come back as JSON (see `web::error::json_under_api`).

use crate::guard::{Attempt, Record};
use crate::web::{AppState, Error};
use axum::extract::{Path, State};
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;

pub fn router() -> Router<AppState> {
    Router::new().route("/api/v1/keys/{key}", get(key))
}

#[derive(Serialize)]
struct KeyView {
    record: Record,
    attempts: Vec<Attempt>,
}

async fn key(
    State(state): State<AppState>,
    Path(key): Path<String>,
) -> Result<Json<KeyView>, Error> {
    let ok = key.len() == 64 && key.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    if !ok {
        return Err(Error::bad_request(
            "key",
            "expected 64 lowercase hexadecimal characters (a SHA-256 key)",
        ));
    }
    let record = state
        .store
        .record(&key)
        .await?
        .ok_or_else(|| Error::NotFound(format!("No key {key} is recorded.")))?;
    let attempts = state.store.attempts(&key).await?;
    Ok(Json(KeyView { record, attempts }))
}
