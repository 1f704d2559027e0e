//! `/search?q=…`: the search box on every page. Support staff type an order id
//! (`A-88214` or `order:A-88214`), a key, or the beginning of a key; this finds out
//! which and redirects to the page that answers it.

use super::params::Params;
use crate::store::KeyFilter;
use crate::web::links::link;
use crate::web::{AppState, Error};
use axum::Router;
use axum::extract::{Query, State};
use axum::response::Redirect;
use axum::routing::get;

pub fn router() -> Router<AppState> {
    Router::new().route("/search", get(search))
}

async fn search(
    State(state): State<AppState>,
    Query(pairs): Query<Vec<(String, String)>>,
) -> Result<Redirect, Error> {
    let p = Params(pairs);
    let Some(q) = p.text("q")? else {
        return Ok(Redirect::to("/keys"));
    };
    let hex = q.bytes().all(|b| b.is_ascii_hexdigit());
    if hex && q.len() == 64 {
        return Ok(Redirect::to(&format!("/keys/{}", q.to_ascii_lowercase())));
    }
    if hex && q.len() >= 4 {
        // `88214` is both a possible key prefix and a possible order id: an order
        // wins when one is recorded (both lookups use an index).
        let by_ref = KeyFilter {
            business_ref: Some(q.clone()),
            ..KeyFilter::default()
        };
        if state
            .store
            .list_keys(&by_ref, None, 1)
            .await?
            .keys
            .is_empty()
        {
            let prefix = q.to_ascii_lowercase();
            return Ok(Redirect::to(&link("/keys", &[("key", Some(&prefix))])));
        }
    }
    Ok(Redirect::to(&link("/keys", &[("business_ref", Some(&q))])))
}
