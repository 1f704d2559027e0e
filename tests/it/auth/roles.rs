//! The role matrix: each role x each page and endpoint, by session and by bearer token; no
//! session; resolve controls only for resolvers.

use super::setup;
use crate::support::TestDb;
use crate::support::auth::*;
use crate::ui_seed::Seeded;
use axum::http::{Method, StatusCode};

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
