//! The medium and low findings of issue 14 (docs/AUTH.md, "Security"), one test each,
//! through `web::app`: what an attacker sends, and the 3xx/4xx that must answer it.

use crate::both_backends;
use crate::support::TestDb;
use crate::support::as_key;
use crate::support::auth::*;
use crate::ui_seed::seed;
use axum::Router;
use axum::http::{Method, StatusCode};
use chrono::Utc;
use std::sync::Arc;

async fn setup(db: &TestDb) -> Router {
    let s = seed(&db.store, Utc::now(), 0).await;
    builtin_app(&db.store, Arc::new(s.clock.clone())).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_sign_in_next_never_leaves_the_site_and_never_fails() {
    let db = TestDb::sqlite().await;
    let app = setup(&db).await;
    // Signed in, `/login?next=…` goes straight to `next`: the same check as after a
    // sign-in. `%09` is a tab, which browsers drop: `/\t/evil.example` is `//evil.example`.
    for (next, to) in [
        ("%2F%09%2Fevil.example", "/"),
        ("%2F%0A%2Fevil.example", "/"),
        ("%2F%5Cevil.example", "/"),
        ("%2F.%2F%2Fevil.example", "/"),
        ("https%3A%2F%2Fevil.example", "/"),
        ("javascript%3Aalert(1)", "/"),
        ("%2F%252F%252Fevil.example", "/%2F%2Fevil.example"),
        ("%2Fkeys%01x", "/keys%01x"),
        ("%2Fkeys%3Ftool%3Da", "/keys?tool=a"),
    ] {
        let r = call(
            &app,
            Method::GET,
            &format!("/login?next={next}"),
            Who::Session("vic"),
            None,
        )
        .await;
        assert_eq!(r.status, StatusCode::SEE_OTHER, "{next}: {}", r.body);
        assert_eq!(r.location(), to, "{next}");
    }
    // Anonymous, the form keeps only the safe value.
    let r = call(
        &app,
        Method::GET,
        "/login?next=%2F%09%2Fevil.example",
        Who::Anonymous,
        None,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.body.contains("name=\"next\" value=\"/\""), "{}", r.body);
}

both_backends!(
    async fn malformed_filters_are_a_400_naming_the_field_never_a_500(db: TestDb) {
        let app = setup(&db).await;
        // Pages: an HTML 400 naming the parameter.
        for (uri, field) in [
            ("/keys?from=now%C3%A9", "from"),
            ("/keys?from=now-400000w", "from"),
            ("/keys?to=-5000-01-01", "to"),
        ] {
            let r = call(&app, Method::GET, uri, Who::Session("ada"), None).await;
            assert_eq!(r.status, StatusCode::BAD_REQUEST, "{uri}: {}", r.body);
            assert!(r.body.contains(field), "{uri}: {}", r.body);
        }
        // Scripts: the JSON error shape with the field, including what axum's own
        // extractors would have refused in plain text.
        for (uri, field) in [
            ("/export/attempts.csv?since=-5000-01-01", "since"),
            ("/export/attempts.ndjson?until=-5000-01-01", "until"),
            ("/export/attempts.manifest?since=-5000-01-01", "since"),
            (
                "/export/attempts.csv?since=2026-01-01&since=2026-01-02",
                "since",
            ),
            ("/api/v1/keys/%FF", "key"),
        ] {
            let r = call(&app, Method::GET, uri, Who::Session("ada"), None).await;
            assert_eq!(r.status, StatusCode::BAD_REQUEST, "{uri}: {}", r.body);
            let v: serde_json::Value = serde_json::from_str(&r.body)
                .unwrap_or_else(|e| panic!("{uri}: not JSON ({e}): {}", r.body));
            let named = v["field"] == field || v["error"]["field"] == field;
            assert!(named, "{uri}: {v}");
        }
    }
);

/// Everything logged while the guard lives (this thread only: a current-thread test).
struct Captured(Arc<std::sync::Mutex<Vec<u8>>>);

impl Captured {
    fn start() -> (Self, tracing::subscriber::DefaultGuard) {
        let buf = Arc::new(std::sync::Mutex::new(Vec::new()));
        let writer = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .with_writer(move || Writer(writer.clone()))
            .finish();
        (Captured(buf), tracing::subscriber::set_default(subscriber))
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).to_string()
    }
}

struct Writer(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Writer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn a_failed_sign_in_logs_no_forged_line_and_no_password_typed_as_a_name() {
    let db = TestDb::sqlite().await;
    let app = setup(&db).await;
    let (log, _guard) = Captured::start();
    let forged = "eve\n2026-11-30T00:00:00Z  INFO idemwatch: signed in user=root \u{1b}[2J";
    for name in [forged, "Tr0ub4dor&3-typed-as-a-name", "sam"] {
        let body = form(&[
            ("name", name),
            ("password", "wrong"),
            ("csrf_token", &csrf_token()),
        ]);
        let r = call(&app, Method::POST, "/login", Who::Anonymous, Some(body)).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}", r.body);
    }
    let text = log.text();
    let refusals: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("login refused"))
        .collect();
    assert_eq!(refusals.len(), 3, "{text}");
    assert_eq!(
        text.lines().count(),
        3,
        "one line each, none forged: {text}"
    );
    assert!(!text.contains('\u{1b}'), "{text:?}");
    assert!(
        !text.contains("eve") && !text.contains("Tr0ub4dor"),
        "{text}"
    );
    assert!(refusals[0].contains("user=unknown#"), "{text}");
    assert!(refusals[2].contains("user=\"sam\""), "{text}");
}

both_backends!(
    async fn a_key_listed_many_times_in_a_bulk_resolve_is_resolved_once(db: TestDb) {
        let s = seed(&db.store, Utc::now(), 0).await;
        let app = builtin_app(&db.store, Arc::new(s.clock.clone())).await;
        let before = db.store.attempts(&as_key(&s.unknown)).await.unwrap().len();
        let item = format!("{}.1", s.unknown);
        let csrf = csrf_token();
        let post = |items: Vec<String>| {
            let mut f: Vec<(&str, &str)> = vec![
                ("scope", "selected"),
                ("resolution", "release"),
                ("reason", "provider outage: nothing was executed"),
                ("csrf_token", csrf.as_str()),
                ("confirm", "yes"),
            ];
            for i in &items {
                f.push(("key", i.as_str()));
            }
            form(&f)
        };
        let r = call(
            &app,
            Method::POST,
            "/backlog/resolve",
            Who::Session("sam"),
            Some(post(vec![item.clone(); 200])),
        )
        .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        assert!(r.body.contains(": 1 resolved</h1>"), "{}", r.body);
        let after = db.store.attempts(&as_key(&s.unknown)).await.unwrap().len();
        assert_eq!(after, before + 1, "one resolution, no stale-write rows");

        // The same key under two tokens, and more keys than a batch holds: 400.
        let two = vec![format!("{}.2", s.unknown), format!("{}.3", s.unknown)];
        let too_many = vec![format!("{}.2", s.unknown); 1001];
        for items in [two, too_many] {
            let r = call(
                &app,
                Method::POST,
                "/backlog/resolve",
                Who::Session("sam"),
                Some(post(items)),
            )
            .await;
            assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
        }
        assert_eq!(
            db.store.attempts(&as_key(&s.unknown)).await.unwrap().len(),
            after
        );
    }
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_leaks_and_refusals_of_issue_14_are_closed() {
    let db = TestDb::sqlite().await;
    let app = setup(&db).await;

    // Signed-in pages are not cached; public ones keep their own rules.
    let page = call(&app, Method::GET, "/keys", Who::Session("vic"), None).await;
    assert_eq!(page.status, StatusCode::OK);
    assert_eq!(page.headers["cache-control"], "no-store");

    // `Bearer` in any case (RFC 9110: the scheme is case-insensitive).
    for scheme in ["bearer", "BEARER", "Bearer"] {
        let r = axum::http::Request::get("/api/v1/csrf")
            .header("authorization", format!("{scheme} {}", token("vic")))
            .body(axum::body::Body::empty())
            .unwrap();
        assert_eq!(send(&app, r).await.status, StatusCode::OK, "{scheme}");
    }

    // A user with no role can still sign out.
    let out = call(
        &app,
        Method::POST,
        "/logout",
        Who::Session("nobody"),
        Some(form(&[("csrf_token", &csrf_token())])),
    )
    .await;
    assert_eq!(out.status, StatusCode::SEE_OTHER, "{}", out.body);
    assert!(
        out.set_cookies()
            .iter()
            .any(|c| c.starts_with("idemwatch_session=;")),
        "{:?}",
        out.set_cookies()
    );

    // `/readyz` is public: the store's error text stays in the log.
    db.store.close().await;
    let r = call(&app, Method::GET, "/readyz", Who::Anonymous, None).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(
        v["reason"],
        "the database cannot be used; the error is in the server's log"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extra_routes_such_as_demo_stats_sit_behind_auth_and_the_security_headers() {
    let db = TestDb::sqlite().await;
    let s = seed(&db.store, Utc::now(), 0).await;
    sign_in_all(&db.store).await;
    let state = idemwatch::web::AppState::new(db.store.clone())
        .with_clock(Arc::new(s.clock.clone()))
        .with_auth(BUILTIN.clone(), false);
    let extra = Router::new().route("/demo/stats", axum::routing::get(|| async { "{}" }));
    let app = idemwatch::web::app_with(state, extra);
    let anonymous = call(&app, Method::GET, "/demo/stats", Who::Anonymous, None).await;
    assert_eq!(
        anonymous.status,
        StatusCode::SEE_OTHER,
        "{}",
        anonymous.body
    );
    assert!(anonymous.headers.contains_key("content-security-policy"));
    let viewer = call(&app, Method::GET, "/demo/stats", Who::Session("vic"), None).await;
    assert_eq!(viewer.status, StatusCode::OK);
    assert!(viewer.headers.contains_key("content-security-policy"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn downloads_beyond_the_cap_are_refused_with_429_while_pages_answer() {
    use tower::ServiceExt;
    let db = TestDb::sqlite().await;
    let s = seed(&db.store, Utc::now(), 0).await;
    sign_in_all(&db.store).await;
    let state = idemwatch::web::AppState::new(db.store.clone())
        .with_clock(Arc::new(s.clock.clone()))
        .with_auth(BUILTIN.clone(), false)
        .with_max_exports(2);
    let app = idemwatch::web::app(state);
    let download = || {
        request(
            Method::GET,
            "/export/attempts.csv",
            Who::Session("ada"),
            None,
        )
    };
    // Two clients that never read their downloads.
    let mut stalled = Vec::new();
    for _ in 0..2 {
        let r = app.clone().oneshot(download()).await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        stalled.push(r);
    }
    let busy = send(&app, download()).await;
    assert_eq!(busy.status, StatusCode::TOO_MANY_REQUESTS, "{}", busy.body);
    assert_eq!(busy.headers["retry-after"], "60");
    // A manifest is the same work without the file (every row read and hashed, a
    // proof per key in memory): it waits for a slot too. Until 2026-12-02 it took
    // none, so any number of them ran at once.
    let manifest = || {
        request(
            Method::GET,
            "/export/attempts.manifest?format=csv",
            Who::Session("ada"),
            None,
        )
    };
    let busy = send(&app, manifest()).await;
    assert_eq!(busy.status, StatusCode::TOO_MANY_REQUESTS, "{}", busy.body);
    assert_eq!(busy.headers["retry-after"], "60");
    let page = call(&app, Method::GET, "/keys", Who::Session("ada"), None).await;
    assert_eq!(page.status, StatusCode::OK);
    // A client that goes away frees its slot.
    stalled.pop();
    assert_eq!(send(&app, download()).await.status, StatusCode::OK);
    let answered = send(&app, manifest()).await;
    assert_eq!(answered.status, StatusCode::OK, "{}", answered.body);
    assert!(answered.body.contains("\"row_count\""), "{}", answered.body);
}
