//! The guard's routes make no CSRF cookie or token (workers never use one), and lose
//! none of the other checks for it: the Host and Origin checks and the roles still
//! apply. A page of the same app still issues the cookie, so the test can tell.

use crate::support::TestDb;
use crate::support::fixture::refund;
use crate::support::guard_api::{GuardApi, Reply};
use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use serde_json::json;
use tower::ServiceExt;

/// Every `Set-Cookie` of a reply, as text.
fn cookies(headers: &axum::http::HeaderMap) -> Vec<String> {
    headers
        .get_all(header::SET_COOKIE)
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect()
}

fn no_cookie(what: &str, r: &Reply) {
    assert_eq!(cookies(&r.headers), Vec::<String>::new(), "{what}: {r:?}");
}

async fn send(api: &GuardApi, request: Request<Body>) -> axum::response::Response {
    api.http.app.clone().oneshot(request).await.unwrap()
}

#[tokio::test]
async fn guard_answers_and_refusals_set_no_csrf_cookie() {
    let db = TestDb::sqlite().await;
    let api = GuardApi::new(&db);
    let admitted = api.admit(&refund("C-1", 4500, "1")).await;
    assert_eq!(admitted.status, StatusCode::OK, "{admitted:?}");
    no_cookie("admit", &admitted);
    let key = admitted.key();
    let settled = api
        .settle(
            &key,
            admitted.token(),
            json!({"outcome": "done", "result": {"id": 1}}),
        )
        .await;
    assert_eq!(settled.status, StatusCode::OK, "{settled:?}");
    no_cookie("settle", &settled);
    no_cookie("key state", &api.key_state(&key, "").await);
    let refused = api.post("admit", json!({"args": {}})).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    no_cookie("a 400", &refused);

    // The same app still gives a browser reading a page its CSRF cookie.
    let page = send(&api, Request::get("/").body(Body::empty()).unwrap()).await;
    assert!(
        cookies(page.headers())
            .iter()
            .any(|c| c.starts_with("idemwatch_csrf=")),
        "{:?}",
        page.headers()
    );
}

#[tokio::test]
async fn the_guard_keeps_its_host_origin_and_role_checks() {
    let db = TestDb::sqlite().await;
    let api = GuardApi::new(&db);
    let call = refund("C-2", 4500, "1");
    let admit = |extra: (&'static str, &'static str)| {
        Request::post("/api/v1/guard/admit")
            .header("content-type", "application/json")
            .header(extra.0, extra.1)
            .body(Body::from(
                json!({"intent": call.intent, "args": call.args}).to_string(),
            ))
            .unwrap()
    };
    // Without an auth file: another host name (DNS rebinding) and another site's page.
    let r = send(&api, admit(("host", "rebind.attacker.example"))).await;
    assert_eq!(r.status(), StatusCode::MISDIRECTED_REQUEST);
    let r = send(&api, admit(("origin", "http://evil.example"))).await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let r = send(&api, admit(("host", "127.0.0.1:8080"))).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert!(cookies(r.headers()).is_empty());

    // With an auth file: a viewer's token is refused, a session never reaches it.
    let api = GuardApi::with_auth(&db, Some(crate::support::auth::BUILTIN.clone()));
    let viewer = api
        .as_token(&crate::support::auth::token("vic"))
        .admit(&call)
        .await;
    assert_eq!(viewer.status, StatusCode::FORBIDDEN, "{viewer:?}");
    no_cookie("a 403", &viewer);
    let admin = api
        .as_token(&crate::support::auth::token("root"))
        .admit(&refund("C-3", 4500, "1"))
        .await;
    assert_eq!(admin.status, StatusCode::OK, "{admin:?}");
    no_cookie("admin's admit", &admin);
    let r = send(
        &api,
        Request::builder()
            .method(Method::GET)
            .uri(format!("/api/v1/guard/keys/{}", admin.key()))
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert!(cookies(r.headers()).is_empty());
}
