//! Authentication and roles through `web::app`: the role matrix (each role × each page
//! and endpoint, by session and by bearer token), the login, proxy headers from
//! trusted and untrusted peers, CSRF refusals that write nothing, and the security
//! headers on every kind of response.

use crate::support::TestDb;
use crate::support::auth::*;
use crate::ui_seed::{Seeded, seed};
use axum::Router;
use axum::http::{Method, StatusCode};
use chrono::Utc;
use idemwatch::auth::{AuthFile, Authenticator};
use idemwatch::web::{self, AppState};
use std::sync::Arc;

async fn setup(db: &TestDb) -> (Router, Seeded) {
    let s = seed(&db.store, Utc::now(), 0).await;
    (builtin_app(&db.store, Arc::new(s.clock.clone())).await, s)
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Needs {
    Public,
    View,
    Resolve,
    Export,
}

struct Endpoint {
    method: Method,
    uri: String,
    body: Option<String>,
    needs: Needs,
    /// The status for a caller who may.
    ok: u16,
}

fn endpoints(s: &Seeded) -> Vec<Endpoint> {
    let get = |uri: String, needs, ok| Endpoint {
        method: Method::GET,
        uri,
        body: None,
        needs,
        ok,
    };
    let post = |uri: String, body: String, ok| Endpoint {
        method: Method::POST,
        uri,
        body: Some(body),
        needs: Needs::Resolve,
        ok,
    };
    let csrf = csrf_token();
    vec![
        get("/".into(), Needs::View, 200),
        get("/keys?tool=issue_refund".into(), Needs::View, 200),
        get(format!("/keys/{}", s.unknown), Needs::View, 200),
        get("/backlog".into(), Needs::View, 200),
        get("/search?q=A-88214".into(), Needs::View, 303),
        get(format!("/api/v1/keys/{}", s.unknown), Needs::View, 200),
        get("/api/v1/csrf".into(), Needs::View, 200),
        get("/nowhere".into(), Needs::View, 404),
        get("/export/attempts.csv".into(), Needs::Export, 200),
        get("/export/attempts.ndjson".into(), Needs::Export, 200),
        get(
            "/export/attempts.manifest?format=csv".into(),
            Needs::Export,
            200,
        ),
        // A review step (nothing written) of a FAILED key: refused as not resolvable.
        post(
            format!("/keys/{}/resolve", s.failed),
            form(&[
                ("resolution", "failed"),
                ("reason", "matrix"),
                ("csrf_token", &csrf),
            ]),
            422,
        ),
        // The review step of a bulk resolve: the confirmation page.
        post(
            "/backlog/resolve".into(),
            form(&[
                ("scope", "selected"),
                ("key", &format!("{}.1", s.unknown)),
                ("resolution", "failed"),
                ("reason", "matrix"),
                ("csrf_token", &csrf),
            ]),
            200,
        ),
        post(
            format!("/api/v1/keys/{}/resolve", s.failed),
            r#"{"resolution":"failed","reason":"matrix"}"#.into(),
            422,
        ),
        get("/healthz".into(), Needs::Public, 200),
        get("/readyz".into(), Needs::Public, 200),
        get("/metrics".into(), Needs::Public, 200),
        get("/static/app.css".into(), Needs::Public, 200),
    ]
}

fn role_of(name: &str) -> [bool; 3] {
    // [resolve, export, view]
    match name {
        "vic" => [false, false, true],
        "sam" => [true, false, true],
        "ada" => [false, true, true],
        "root" => [true, true, true],
        _ => [false, false, false],
    }
}

fn expected(e: &Endpoint, who: Who<'_>) -> u16 {
    let api = e.uri.starts_with("/api/") || e.uri.starts_with("/export/");
    let name = match who {
        Who::Anonymous if e.needs == Needs::Public => return e.ok,
        Who::Anonymous if e.method == Method::GET && !api => return 303,
        Who::Anonymous => return 401,
        Who::Session(n) | Who::Token(n) => n,
    };
    let [resolve, export, view] = role_of(name);
    let may = match e.needs {
        Needs::Public => true,
        Needs::View => view,
        Needs::Resolve => view && resolve,
        Needs::Export => view && export,
    };
    if may { e.ok } else { 403 }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_role_reaches_exactly_its_pages_and_endpoints() {
    let db = TestDb::sqlite().await;
    let (app, s) = setup(&db).await;
    let mut whos = vec![Who::Anonymous];
    for (name, _) in USERS {
        whos.push(Who::Session(name));
        whos.push(Who::Token(name));
    }
    let mut wrong = Vec::new();
    let mut checked = 0;
    for e in endpoints(&s) {
        for who in &whos {
            let got = call(&app, e.method.clone(), &e.uri, *who, e.body.clone()).await;
            let want = expected(&e, *who);
            checked += 1;
            if got.status.as_u16() != want {
                wrong.push(format!(
                    "{} {} as {who:?}: got {}, want {want}: {}",
                    e.method,
                    e.uri,
                    got.status,
                    got.body.chars().take(300).collect::<String>()
                ));
            }
            if got.status == StatusCode::FORBIDDEN {
                let role = match e.needs {
                    _ if *who == Who::Session("nobody") || *who == Who::Token("nobody") => {
                        "viewer, resolver, auditor or admin"
                    }
                    Needs::Resolve => "resolver role",
                    Needs::Export => "auditor role",
                    _ => "viewer, resolver, auditor or admin",
                };
                assert!(
                    got.body.contains(role),
                    "403 names the missing role: {}",
                    got.body
                );
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {checked} wrong:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    assert_eq!(checked, 18 * 11);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_session_pages_go_to_the_login_and_scripts_get_401() {
    let db = TestDb::sqlite().await;
    let (app, s) = setup(&db).await;
    let page = format!("/keys/{}?x=1", s.unknown);
    let a = call(&app, Method::GET, &page, Who::Anonymous, None).await;
    assert_eq!(a.status, StatusCode::SEE_OTHER);
    assert_eq!(
        a.location(),
        format!("/login?next=%2Fkeys%2F{}%3Fx%3D1", s.unknown)
    );
    let a = call(
        &app,
        Method::GET,
        &format!("/api/v1/keys/{}", s.unknown),
        Who::Anonymous,
        None,
    )
    .await;
    assert_eq!(a.status, StatusCode::UNAUTHORIZED);
    assert_eq!(a.headers["www-authenticate"], "Bearer realm=\"idemwatch\"");
    let json: serde_json::Value = serde_json::from_str(&a.body).unwrap();
    assert_eq!(json["status"], 401);
    assert_eq!(json["code"], "unauthorized");
    // A token that is not in the file is refused, not treated as anonymous.
    let mut r = request(Method::GET, "/keys", Who::Anonymous, None);
    r.headers_mut()
        .insert("authorization", "Bearer iw_forged".parse().unwrap());
    assert_eq!(send(&app, r).await.status, StatusCode::UNAUTHORIZED);
    // An expired or forged session is no session.
    let mut r = request(Method::GET, "/keys", Who::Anonymous, None);
    r.headers_mut().insert(
        "cookie",
        "idemwatch_session=djF8c2FtfDk5OTk5OTk5OTk5fHg.AAAA"
            .parse()
            .unwrap(),
    );
    assert_eq!(send(&app, r).await.status, StatusCode::SEE_OTHER);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_signs_in_sees_who_they_are_and_signs_out() {
    let db = TestDb::sqlite().await;
    let (app, s) = setup(&db).await;
    // A first visit gets a CSRF cookie, and the form the matching token.
    let r = axum::http::Request::get("/login?next=%2Fbacklog")
        .body(axum::body::Body::empty())
        .unwrap();
    let page = send(&app, r).await;
    assert_eq!(page.status, StatusCode::OK);
    let issued = page.set_cookies();
    assert!(
        issued.iter().any(|c| c.starts_with("idemwatch_csrf=")
            && c.contains("HttpOnly")
            && c.contains("SameSite=Strict")),
        "{issued:?}"
    );
    assert!(page.body.contains("name=\"csrf_token\" value=\""));
    assert!(page.body.contains("name=\"next\" value=\"/backlog\""));

    let csrf = csrf_token();
    let login = |password: &str, csrf: &str| {
        form(&[
            ("name", "sam"),
            ("password", password),
            ("next", "/backlog"),
            ("csrf_token", csrf),
        ])
    };
    let wrong = call(
        &app,
        Method::POST,
        "/login",
        Who::Anonymous,
        Some(login("nope", &csrf)),
    )
    .await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    assert!(wrong.body.contains("Wrong user name or password."));
    assert!(wrong.body.contains("value=\"sam\""), "the name is kept");
    let forged = call(
        &app,
        Method::POST,
        "/login",
        Who::Anonymous,
        Some(login(PASSWORD, "forged")),
    )
    .await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN);
    assert!(
        forged
            .set_cookies()
            .iter()
            .all(|c| !c.starts_with("idemwatch_session="))
    );

    let ok = call(
        &app,
        Method::POST,
        "/login",
        Who::Anonymous,
        Some(login(PASSWORD, &csrf)),
    )
    .await;
    assert_eq!(ok.status, StatusCode::SEE_OTHER);
    assert_eq!(ok.location(), "/backlog");
    let cookie = ok
        .set_cookies()
        .into_iter()
        .find(|c| c.starts_with("idemwatch_session="))
        .unwrap();
    assert!(
        cookie.contains("; HttpOnly; SameSite=Strict; Max-Age=43200"),
        "{cookie}"
    );
    assert!(
        !cookie.contains("Secure"),
        "plain HTTP without --cookie-secure"
    );
    let value = cookie.split(';').next().unwrap();

    let mut r = request(Method::GET, "/backlog", Who::Anonymous, None);
    r.headers_mut().insert(
        "cookie",
        format!("{value}; idemwatch_csrf={CSRF_COOKIE}")
            .parse()
            .unwrap(),
    );
    let backlog = send(&app, r).await;
    assert_eq!(backlog.status, StatusCode::OK);
    assert!(
        backlog
            .body
            .contains("Signed in as <strong>sam</strong> <span class=\"roles\">(resolver)</span>")
    );
    assert!(backlog.body.contains("action=\"/logout\""));
    assert!(
        backlog.body.contains(&format!("value=\"{}.1\"", s.unknown)),
        "a checkbox per key"
    );

    let out = call(
        &app,
        Method::POST,
        "/logout",
        Who::Session("sam"),
        Some(form(&[])),
    )
    .await;
    assert_eq!(
        out.status,
        StatusCode::FORBIDDEN,
        "sign-out needs the CSRF token too"
    );

    let out = call(
        &app,
        Method::POST,
        "/logout",
        Who::Session("sam"),
        Some(form(&[("csrf_token", &csrf)])),
    )
    .await;
    assert_eq!(out.status, StatusCode::SEE_OTHER);
    assert_eq!(out.location(), "/login");
    assert!(
        out.set_cookies()
            .iter()
            .any(|c| c.starts_with("idemwatch_session=;") && c.contains("Max-Age=0"))
    );
    // Behind an HTTPS proxy, or with --cookie-secure, cookies are Secure.
    let mut r = request(
        Method::POST,
        "/login",
        Who::Anonymous,
        Some(login(PASSWORD, &csrf)),
    );
    r.headers_mut()
        .insert("x-forwarded-proto", "https".parse().unwrap());
    // Over HTTPS only `__Host-` cookies are read: the plain-named one is ignored.
    let plain = send(&app, r).await;
    assert_eq!(plain.status, StatusCode::FORBIDDEN, "{}", plain.body);
    let mut r = request(
        Method::POST,
        "/login",
        Who::Anonymous,
        Some(login(PASSWORD, &csrf)),
    );
    r.headers_mut()
        .insert("x-forwarded-proto", "https".parse().unwrap());
    r.headers_mut().insert(
        "cookie",
        format!("__Host-idemwatch_csrf={CSRF_COOKIE}")
            .parse()
            .unwrap(),
    );
    let ok = send(&app, r).await;
    assert_eq!(ok.status, StatusCode::SEE_OTHER, "{}", ok.body);
    for name in ["__Host-idemwatch_session=", "__Host-idemwatch_csrf="] {
        assert!(
            ok.set_cookies()
                .iter()
                .any(|c| c.starts_with(name) && c.contains("; Path=/;") && c.ends_with("; Secure")),
            "{name} {:?}",
            ok.set_cookies()
        );
    }
    let secure = web::app(
        AppState::new(db.store.clone())
            .with_clock(Arc::new(s.clock.clone()))
            .with_auth(BUILTIN.clone(), true),
    );
    let fresh = send(
        &secure,
        axum::http::Request::get("/login")
            .body(axum::body::Body::empty())
            .unwrap(),
    )
    .await;
    assert!(
        fresh.set_cookies().iter().all(|c| c.ends_with("; Secure")),
        "{:?}",
        fresh.set_cookies()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_resolvers_see_resolve_controls() {
    let db = TestDb::sqlite().await;
    let (app, s) = setup(&db).await;
    let key_page = format!("/keys/{}", s.unknown);
    for (who, shown) in [
        ("vic", false),
        ("ada", false),
        ("sam", true),
        ("root", true),
    ] {
        let p = call(&app, Method::GET, &key_page, Who::Session(who), None).await;
        assert_eq!(
            p.body
                .contains(&format!("action=\"/keys/{}/resolve\"", s.unknown)),
            shown,
            "{who}"
        );
        assert_eq!(p.body.contains("needs the resolver role"), !shown, "{who}");
        let b = call(&app, Method::GET, "/backlog", Who::Session(who), None).await;
        assert_eq!(b.body.contains("id=\"bulk-form\""), shown, "{who}");
        assert_eq!(b.body.contains("type=\"checkbox\""), shown, "{who}");
    }
    // Past the provider's retention, release is not offered.
    let p = call(
        &app,
        Method::GET,
        &format!("/keys/{}", s.escalated),
        Who::Session("sam"),
        None,
    )
    .await;
    assert!(p.body.contains("value=\"done\"") && p.body.contains("value=\"failed\""));
    assert!(!p.body.contains("value=\"release\""), "{}", p.body);
    assert!(
        p.body
            .contains("Release for resend is not offered: the provider forgot this key")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_headers_count_only_from_a_trusted_proxy() {
    let db = TestDb::sqlite().await;
    let s = seed(&db.store, Utc::now(), 0).await;
    let file = AuthFile::parse(
        "mode = \"proxy\"\n[proxy]\ntrusted = [\"10.0.0.0/8\"]\n[proxy.group_roles]\nsupport = \"resolver\"\naudit = \"auditor\"\n",
    )
    .unwrap();
    let app = web::app(
        AppState::new(db.store.clone())
            .with_clock(Arc::new(s.clock.clone()))
            .with_auth(Authenticator::new(Some(file), Some(SECRET)), false),
    );
    let as_ana = |uri: &str, groups: &str, peer: Option<&str>| {
        let mut r = request(Method::GET, uri, Who::Anonymous, None);
        r.headers_mut()
            .insert("x-forwarded-user", "ana@example.com".parse().unwrap());
        r.headers_mut()
            .insert("x-forwarded-groups", groups.parse().unwrap());
        match peer {
            Some(p) => from_peer(r, p),
            None => r,
        }
    };
    let trusted = Some("10.1.2.3:40000");
    let p = send(&app, as_ana("/backlog", "staff,support", trusted)).await;
    assert_eq!(p.status, StatusCode::OK);
    assert!(p.body.contains(
        "Signed in as <strong>ana@example.com</strong> <span class=\"roles\">(resolver)</span>"
    ));
    assert!(
        !p.body.contains("action=\"/logout\""),
        "the proxy owns the session"
    );
    assert_eq!(
        send(&app, as_ana("/export/attempts.csv", "support", trusted))
            .await
            .status,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        send(&app, as_ana("/export/attempts.csv", "audit", trusted))
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(
        send(&app, as_ana("/backlog", "staff", trusted))
            .await
            .status,
        StatusCode::FORBIDDEN,
        "no mapped group"
    );
    // The same headers from anyone else are an attacker's.
    let spoofed = send(
        &app,
        as_ana("/backlog", "support", Some("203.0.113.9:40000")),
    )
    .await;
    assert_eq!(spoofed.status, StatusCode::UNAUTHORIZED);
    assert!(spoofed.body.contains("company login"), "{}", spoofed.body);
    assert_eq!(
        send(&app, as_ana("/backlog", "support", None)).await.status,
        StatusCode::UNAUTHORIZED
    );

    // A proxy user's JSON resolve needs the CSRF header: the browser sends the proxy's cookie.
    let uri = format!("/api/v1/keys/{}/resolve", s.unknown);
    let body = r#"{"resolution":"failed","reason":"no refund at the provider"}"#;
    let mut r = request(Method::POST, &uri, Who::Anonymous, Some(body.into()));
    r.headers_mut()
        .insert("x-forwarded-user", "ana".parse().unwrap());
    r.headers_mut()
        .insert("x-forwarded-groups", "support".parse().unwrap());
    let no_header = send(&app, from_peer(r, "10.1.2.3:40000")).await;
    assert_eq!(no_header.status, StatusCode::FORBIDDEN);
    assert_eq!(
        db.store.attempts(&s.unknown).await.unwrap().len(),
        2,
        "nothing written"
    );
    let mut r = request(Method::POST, &uri, Who::Anonymous, Some(body.into()));
    r.headers_mut()
        .insert("x-forwarded-user", "ana".parse().unwrap());
    r.headers_mut()
        .insert("x-forwarded-groups", "support".parse().unwrap());
    r.headers_mut().insert(
        "x-csrf-token",
        Authenticator::new(None, Some(SECRET))
            .csrf_token(
                &idemwatch::auth::csrf_binding(CSRF_COOKIE),
                Utc::now().timestamp(),
            )
            .parse()
            .unwrap(),
    );
    let ok = send(&app, from_peer(r, "10.1.2.3:40000")).await;
    assert_eq!(ok.status, StatusCode::OK, "{}", ok.body);
    let attempts = db.store.attempts(&s.unknown).await.unwrap();
    assert_eq!(attempts.last().unwrap().actor, "ana");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_or_wrong_csrf_token_is_refused_and_nothing_is_written() {
    let db = TestDb::sqlite().await;
    let (app, s) = setup(&db).await;
    let before = db.store.attempts(&s.unknown).await.unwrap().len();
    let record = db.store.record(&s.unknown).await.unwrap().unwrap();
    let token = record.fencing_token.to_string();
    let resolve = |csrf: Option<&str>| {
        let mut f = vec![
            ("resolution", "failed"),
            ("reason", "no refund at the provider"),
            ("expected_token", token.as_str()),
            ("confirm", "yes"),
        ];
        if let Some(c) = csrf {
            f.push(("csrf_token", c));
        }
        form(&f)
    };
    let uri = format!("/keys/{}/resolve", s.unknown);
    let other_browser = Authenticator::new(None, Some(SECRET)).csrf_token(
        &idemwatch::auth::csrf_binding("another-browser's-cookie-value-xxxxxxxxxxx"),
        Utc::now().timestamp(),
    );
    for (what, body) in [
        ("missing", resolve(None)),
        ("forged", resolve(Some("forged"))),
        ("another browser's", resolve(Some(&other_browser))),
    ] {
        let a = call(&app, Method::POST, &uri, Who::Session("sam"), Some(body)).await;
        assert_eq!(a.status, StatusCode::FORBIDDEN, "{what}");
        assert!(a.body.contains("CSRF"), "{what}: {}", a.body);
    }
    // (A session's token is bound to the session itself, not to whatever CSRF cookie
    // comes with it: see auth_sessions.rs, a planted CSRF cookie.)
    // Bulk, and JSON by a session without the header.
    let bulk = form(&[
        ("scope", "selected"),
        ("key", &format!("{}.{token}", s.unknown)),
        ("resolution", "failed"),
        ("reason", "r"),
        ("confirm", "yes"),
    ]);
    let a = call(
        &app,
        Method::POST,
        "/backlog/resolve",
        Who::Session("sam"),
        Some(bulk),
    )
    .await;
    assert_eq!(a.status, StatusCode::FORBIDDEN);
    let mut r = request(
        Method::POST,
        &format!("/api/v1/keys/{}/resolve", s.unknown),
        Who::Session("sam"),
        Some(r#"{"resolution":"failed","reason":"r"}"#.into()),
    );
    r.headers_mut().remove("x-csrf-token");
    let a = send(&app, r).await;
    assert_eq!(a.status, StatusCode::FORBIDDEN);
    assert!(a.body.contains("X-CSRF-Token"), "{}", a.body);

    let after = db.store.attempts(&s.unknown).await.unwrap();
    assert_eq!(after.len(), before, "no attempt row: {after:#?}");
    assert_eq!(db.store.record(&s.unknown).await.unwrap().unwrap(), record);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_response_carries_the_security_headers() {
    let db = TestDb::sqlite().await;
    let (app, s) = setup(&db).await;
    let cases = [
        (Method::GET, "/".to_string(), Who::Session("vic")),
        (
            Method::GET,
            format!("/keys/{}", s.unknown),
            Who::Session("vic"),
        ),
        (Method::GET, "/nowhere".into(), Who::Session("vic")),
        (
            Method::GET,
            "/keys?from=yesterday".into(),
            Who::Session("vic"),
        ),
        (Method::GET, "/static/app.css".into(), Who::Anonymous),
        (Method::GET, "/static/nothing.css".into(), Who::Anonymous),
        (
            Method::GET,
            format!("/api/v1/keys/{}", s.unknown),
            Who::Token("vic"),
        ),
        (Method::GET, "/api/v1/keys/nope".into(), Who::Token("vic")),
        (Method::GET, "/api/v1/keys/x".into(), Who::Anonymous),
        (
            Method::GET,
            "/export/attempts.csv".into(),
            Who::Token("vic"),
        ),
        (Method::GET, "/metrics".into(), Who::Anonymous),
        (Method::GET, "/healthz".into(), Who::Anonymous),
        (Method::GET, "/login".into(), Who::Anonymous),
        (Method::GET, "/backlog".into(), Who::Anonymous),
    ];
    let mut statuses = Vec::new();
    for (method, uri, who) in cases {
        let a = call(&app, method, &uri, who, None).await;
        statuses.push(a.status.as_u16());
        let h = |name: &str| a.headers.get(name).map(|v| v.to_str().unwrap().to_string());
        assert_eq!(
            h("content-security-policy").as_deref(),
            Some(
                "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
            ),
            "{uri}"
        );
        assert_eq!(
            h("x-content-type-options").as_deref(),
            Some("nosniff"),
            "{uri}"
        );
        assert_eq!(
            h("referrer-policy").as_deref(),
            Some("same-origin"),
            "{uri}"
        );
        assert_eq!(h("x-frame-options").as_deref(), Some("DENY"), "{uri}");
    }
    assert_eq!(
        statuses,
        [
            200, 200, 404, 400, 200, 404, 200, 400, 401, 403, 200, 200, 200, 303
        ]
    );
}
