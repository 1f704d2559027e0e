//! `/search?q=…`: the search box on every page. Support staff type whatever id they
//! have: an order (`A-28261`, `a-28261`, `28261`, `order:A-28261`), a ticket from the
//! intent (`ticket-1934`), the provider's id from the result (`rf_002202`), a key or
//! the beginning of one. This finds out which and redirects to the page that answers
//! it: the key itself when one key matches, else the list of those that do.

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
    // One probe of the search terms' index, two rows: is it one key, several, none?
    let by_term = KeyFilter {
        search: Some(q.clone()),
        ..KeyFilter::default()
    };
    let found = state.store.list_keys(&by_term, None, 2).await?.keys;
    match found.as_slice() {
        [one] => return Ok(Redirect::to(&format!("/keys/{}", one.key))),
        // `88214` is both a possible key prefix and a possible order number: an id
        // wins when one is recorded; the list offers the other reading when none is.
        [] if hex && q.len() >= 4 => {
            let prefix = q.to_ascii_lowercase();
            return Ok(Redirect::to(&link("/keys", &[("key", Some(&prefix))])));
        }
        _ => {}
    }
    Ok(Redirect::to(&link("/keys", &[("q", Some(&q))])))
}
