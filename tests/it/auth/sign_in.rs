//! Signing in and out: who the page says you are, and what the login refuses.

use crate::support::TestDb;
use crate::support::app::{TestApp, get};
use crate::support::auth::*;
use axum::http::{Method, StatusCode};
use idemwatch::web::{self, AppState};
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_signs_in_sees_who_they_are_and_signs_out() {
    let db = TestDb::sqlite().await;
    let (app, s) = TestApp::builtin(&db).await;
    // A first visit gets a CSRF cookie, and the form the matching token.
    let page = get(&app.router, "/login?next=%2Fbacklog").await;
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

    let wrong = app.sign_in("sam", "nope", "/backlog").await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    assert!(wrong.body.contains("Wrong user name or password."));
    assert!(wrong.body.contains("value=\"sam\""), "the name is kept");
    let forged = app
        .as_(Who::Anonymous)
        .post_form(
            "/login",
            &[
                ("name", "sam"),
                ("password", PASSWORD),
                ("next", "/backlog"),
                ("csrf_token", "forged"),
            ],
        )
        .await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN);
    assert!(
        forged
            .set_cookies()
            .iter()
            .all(|c| !c.starts_with("idemwatch_session="))
    );

    let ok = app.sign_in("sam", PASSWORD, "/backlog").await;
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
    let backlog = send(&app.router, r).await;
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

    let out = app.call(Method::POST, "/logout", Some(form(&[]))).await;
    assert_eq!(
        out.status,
        StatusCode::FORBIDDEN,
        "sign-out needs the CSRF token too"
    );

    let out = app.post_form("/logout", &[]).await;
    assert_eq!(out.status, StatusCode::SEE_OTHER);
    assert_eq!(out.location(), "/login");
    assert!(
        out.set_cookies()
            .iter()
            .any(|c| c.starts_with("idemwatch_session=;") && c.contains("Max-Age=0"))
    );
    // Behind an HTTPS proxy, or with --cookie-secure, cookies are Secure.
    let csrf = csrf_token();
    let login = form(&[
        ("name", "sam"),
        ("password", PASSWORD),
        ("next", "/backlog"),
        ("csrf_token", &csrf),
    ]);
    let over_https = || {
        let mut r = request(Method::POST, "/login", Who::Anonymous, Some(login.clone()));
        r.headers_mut()
            .insert("x-forwarded-proto", "https".parse().unwrap());
        r
    };
    // Over HTTPS only `__Host-` cookies are read: the plain-named one is ignored.
    let plain = send(&app.router, over_https()).await;
    assert_eq!(plain.status, StatusCode::FORBIDDEN, "{}", plain.body);
    let mut r = over_https();
    r.headers_mut().insert(
        "cookie",
        format!("__Host-idemwatch_csrf={CSRF_COOKIE}")
            .parse()
            .unwrap(),
    );
    let ok = send(&app.router, r).await;
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
    let fresh = get(&secure, "/login").await;
    assert!(
        fresh.set_cookies().iter().all(|c| c.ends_with("; Secure")),
        "{:?}",
        fresh.set_cookies()
    );
}
