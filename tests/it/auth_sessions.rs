//! Server-side sessions (issue 14): sign-out, a changed password and a removed user end
//! sessions in the database, so a copied cookie stops working; idle and absolute
//! timeouts; a new session id and CSRF cookie at every sign-in; CSRF tokens bound to
//! the session and expiring; API tokens expiring. Each through `web::app` on both
//! backends, with the real sign-in.

use crate::both_backends;
use crate::support::TestDb;
use crate::support::as_key;
use crate::support::auth::*;
use crate::ui_seed::seed;
use axum::Router;
use axum::http::{Method, StatusCode};
use chrono::{TimeDelta, Utc};
use idemwatch::auth::sessions::{SessionSettings, Sessions, id_hash};
use idemwatch::auth::{AuthFile, Authenticator, secrets};
use idemwatch::guard::ManualClock;
use idemwatch::store::Store;
use idemwatch::web::{self, AppState};
use std::sync::Arc;

/// The built-in app over `db`, its sessions on `clock` with `settings`.
fn app_with(
    db: &TestDb,
    auth: Authenticator,
    clock: &ManualClock,
    settings: SessionSettings,
) -> Router {
    let sessions = Sessions::new(db.store.clone(), settings).with_clock(Arc::new(clock.clone()));
    web::app(
        AppState::new(db.store.clone())
            .with_auth(auth, false)
            .with_sessions(sessions),
    )
}

/// A browser's cookies after signing in: (session, CSRF) values.
struct Browser {
    session: String,
    csrf: String,
}

impl Browser {
    fn cookie(&self) -> String {
        format!(
            "idemwatch_session={}; idemwatch_csrf={}",
            self.session, self.csrf
        )
    }
}

fn set_cookie(a: &Answer, name: &str) -> Option<String> {
    a.set_cookies().into_iter().find_map(|c| {
        c.strip_prefix(&format!("{name}="))
            .and_then(|rest| rest.split(';').next())
            .map(str::to_string)
    })
}

/// Signs `name` in from a browser carrying `cookie` (the test CSRF cookie and maybe
/// an old session) with the form's CSRF `token`.
async fn sign_in_with(app: &Router, name: &str, cookie: &str, token: &str) -> Browser {
    let mut r = request(
        Method::POST,
        "/login",
        Who::Anonymous,
        Some(form(&[
            ("name", name),
            ("password", PASSWORD),
            ("csrf_token", token),
        ])),
    );
    r.headers_mut().insert("cookie", cookie.parse().unwrap());
    let a = send(app, r).await;
    assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.body);
    Browser {
        session: set_cookie(&a, "idemwatch_session").expect("a session cookie"),
        csrf: set_cookie(&a, "idemwatch_csrf").expect("a new CSRF cookie"),
    }
}

async fn sign_in(app: &Router, name: &str) -> Browser {
    sign_in_with(
        app,
        name,
        &format!("idemwatch_csrf={CSRF_COOKIE}"),
        &csrf_token(),
    )
    .await
}

async fn get(app: &Router, uri: &str, cookie: &str) -> Answer {
    let mut r = request(Method::GET, uri, Who::Anonymous, None);
    r.headers_mut().insert("cookie", cookie.parse().unwrap());
    send(app, r).await
}

/// The CSRF token a page rendered for this browser carries.
async fn page_token(app: &Router, b: &Browser) -> String {
    let page = get(app, "/backlog", &b.cookie()).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let at = page.body.find("name=\"csrf_token\" value=\"").unwrap() + 25;
    page.body[at..].split('"').next().unwrap().to_string()
}

/// No row left for the browser's session: it ended in the database, not only in a cookie.
async fn session_gone(store: &Store, b: &Browser) -> bool {
    store.session(&id_hash(&b.session)).await.unwrap().is_none()
}

fn signed_in(a: &Answer) -> bool {
    a.status == StatusCode::OK
}

async fn post_form(app: &Router, uri: &str, cookie: &str, pairs: &[(&str, &str)]) -> Answer {
    let mut r = request(Method::POST, uri, Who::Anonymous, Some(form(pairs)));
    r.headers_mut().insert("cookie", cookie.parse().unwrap());
    send(app, r).await
}

both_backends!(
    async fn a_copied_cookie_stops_working_once_its_session_signs_out(db: TestDb) {
        seed(&db.store, Utc::now(), 0).await;
        let clock = ManualClock::new(Utc::now());
        let app = app_with(&db, BUILTIN.clone(), &clock, SessionSettings::default());
        let b = sign_in(&app, "sam").await;
        let stolen = b.cookie();
        assert!(signed_in(&get(&app, "/keys", &stolen).await));
        let token = page_token(&app, &b).await;
        let out = post_form(&app, "/logout", &b.cookie(), &[("csrf_token", &token)]).await;
        assert_eq!(out.status, StatusCode::SEE_OTHER, "{}", out.body);
        // The copy taken before sign-out: no longer a session, on any replica.
        let after = get(&app, "/keys", &stolen).await;
        assert_eq!(after.status, StatusCode::SEE_OTHER);
        assert!(
            after.location().starts_with("/login"),
            "{}",
            after.location()
        );
        let other_replica = app_with(&db, BUILTIN.clone(), &clock, SessionSettings::default());
        assert!(!signed_in(&get(&other_replica, "/keys", &stolen).await));
        assert!(session_gone(&db.store, &b).await);
    }
);

both_backends!(
    async fn every_sign_in_makes_a_new_session_and_csrf_cookie(db: TestDb) {
        seed(&db.store, Utc::now(), 0).await;
        let clock = ManualClock::new(Utc::now());
        let app = app_with(&db, BUILTIN.clone(), &clock, SessionSettings::default());
        let first = sign_in(&app, "sam").await;
        assert_ne!(first.csrf, CSRF_COOKIE, "the CSRF cookie is rotated");
        // Signing in again from the same browser: a new id, and the old one ended
        // (a session id planted before sign-in is never the one signed in).
        let token = page_token(&app, &first).await;
        let second = sign_in_with(&app, "sam", &first.cookie(), &token).await;
        assert_ne!(first.session, second.session);
        assert_ne!(first.csrf, second.csrf);
        assert!(!signed_in(&get(&app, "/keys", &first.cookie()).await));
        assert!(signed_in(&get(&app, "/keys", &second.cookie()).await));
    }
);

both_backends!(
    async fn a_changed_password_or_a_removed_user_ends_their_sessions(db: TestDb) {
        seed(&db.store, Utc::now(), 0).await;
        let clock = ManualClock::new(Utc::now());
        let app = app_with(&db, BUILTIN.clone(), &clock, SessionSettings::default());
        let sam = sign_in(&app, "sam").await;
        let vic = sign_in(&app, "vic").await;
        // The auth file after an admin gave sam a new password hash (a restart or a
        // rolling deploy of the new file).
        let new_hash = secrets::hash_password("a new password").unwrap();
        let text = auth_file_text(&HASH).replacen(
            &format!("name = \"sam\"\npassword_hash = \"{}\"", *HASH),
            &format!("name = \"sam\"\npassword_hash = \"{new_hash}\""),
            1,
        );
        let changed = Authenticator::new(Some(AuthFile::parse(&text).unwrap()), Some(SECRET));
        let app = app_with(&db, changed, &clock, SessionSettings::default());
        assert!(
            !signed_in(&get(&app, "/keys", &sam.cookie()).await),
            "password changed"
        );
        assert!(session_gone(&db.store, &sam).await);
        assert!(
            signed_in(&get(&app, "/keys", &vic.cookie()).await),
            "others stay"
        );
        // And then vic leaves the file.
        let without_vic = auth_file_text(&HASH).replacen(
            &format!(
                "[[users]]\nname = \"vic\"\npassword_hash = \"{}\"\nroles = [\"viewer\"]\n",
                *HASH
            ),
            "",
            1,
        );
        assert!(!without_vic.contains("name = \"vic\""));
        let removed =
            Authenticator::new(Some(AuthFile::parse(&without_vic).unwrap()), Some(SECRET));
        let app = app_with(&db, removed, &clock, SessionSettings::default());
        assert!(
            !signed_in(&get(&app, "/keys", &vic.cookie()).await),
            "user removed"
        );
        // An admin can end a user's sessions at once, too (a stolen laptop).
        let app = app_with(&db, BUILTIN.clone(), &clock, SessionSettings::default());
        let ada = sign_in(&app, "ada").await;
        let sessions = Sessions::new(db.store.clone(), SessionSettings::default());
        assert_eq!(sessions.end_user("ada").await.unwrap(), 1);
        assert!(!signed_in(&get(&app, "/keys", &ada.cookie()).await));
    }
);

both_backends!(
    async fn a_session_ends_when_idle_and_at_its_lifetime_however_busy(db: TestDb) {
        seed(&db.store, Utc::now(), 0).await;
        let clock = ManualClock::new(Utc::now());
        let settings = SessionSettings {
            idle: TimeDelta::minutes(10),
            lifetime: TimeDelta::minutes(30),
        };
        let app = app_with(&db, BUILTIN.clone(), &clock, settings);
        let b = sign_in(&app, "sam").await;
        // Used every 9 minutes: alive until the lifetime, then ended.
        for _ in 0..3 {
            clock.advance(TimeDelta::minutes(9));
            assert!(signed_in(&get(&app, "/keys", &b.cookie()).await));
        }
        clock.advance(TimeDelta::minutes(3));
        assert!(
            !signed_in(&get(&app, "/keys", &b.cookie()).await),
            "past 30 min"
        );
        // Idle for 10 minutes: ended.
        let b = sign_in(&app, "sam").await;
        clock.advance(TimeDelta::minutes(5));
        assert!(signed_in(&get(&app, "/keys", &b.cookie()).await));
        clock.advance(TimeDelta::minutes(10));
        assert!(!signed_in(&get(&app, "/keys", &b.cookie()).await), "idle");
        assert!(session_gone(&db.store, &b).await);
    }
);

both_backends!(
    async fn a_csrf_cookie_planted_by_a_sibling_subdomain_forges_nothing(db: TestDb) {
        let s = seed(&db.store, Utc::now(), 0).await;
        let clock = ManualClock::new(Utc::now());
        let app = app_with(&db, BUILTIN.clone(), &clock, SessionSettings::default());
        let victim = sign_in(&app, "sam").await;
        // The attacker's own CSRF cookie and the token the login page gives for it.
        let planted = "plantedplantedplantedplantedplantedplanted";
        let login = get(&app, "/login", &format!("idemwatch_csrf={planted}")).await;
        let at = login.body.find("name=\"csrf_token\" value=\"").unwrap() + 25;
        let attacker_token = login.body[at..].split('"').next().unwrap().to_string();
        // The victim's browser, the planted cookie in place of its own.
        let record = db.store.record(&as_key(&s.unknown)).await.unwrap().unwrap();
        let expected = record.fencing_token.to_string();
        let resolve = |token: &str| {
            vec![
                ("resolution", "failed"),
                ("reason", "forged"),
                ("expected_token", expected.as_str()),
                ("confirm", "yes"),
                ("csrf_token", token),
            ]
            .into_iter()
            .map(|(k, v)| (k, v.to_string()))
            .collect::<Vec<_>>()
        };
        let before = db.store.attempts(&as_key(&s.unknown)).await.unwrap().len();
        let cookie = format!(
            "idemwatch_session={}; idemwatch_csrf={planted}",
            victim.session
        );
        let pairs = resolve(&attacker_token);
        let pairs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let uri = format!("/keys/{}/resolve", s.unknown);
        let forged = post_form(&app, &uri, &cookie, &pairs).await;
        assert_eq!(forged.status, StatusCode::FORBIDDEN, "{}", forged.body);
        assert_eq!(
            db.store.attempts(&as_key(&s.unknown)).await.unwrap().len(),
            before
        );
        // The token of a page the session itself rendered works.
        let token = page_token(&app, &victim).await;
        let pairs = resolve(&token);
        let pairs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let ok = post_form(&app, &uri, &victim.cookie(), &pairs).await;
        assert_ne!(ok.status, StatusCode::FORBIDDEN, "{}", ok.body);
        assert!(db.store.attempts(&as_key(&s.unknown)).await.unwrap().len() > before);
    }
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn csrf_tokens_expire_after_twelve_hours() {
    let db = TestDb::sqlite().await;
    let clock = ManualClock::new(Utc::now());
    let app = app_with(&db, BUILTIN.clone(), &clock, SessionSettings::default());
    let page = get(&app, "/login", &format!("idemwatch_csrf={CSRF_COOKIE}")).await;
    let at = page.body.find("name=\"csrf_token\" value=\"").unwrap() + 25;
    let token = page.body[at..].split('"').next().unwrap().to_string();
    clock.advance(TimeDelta::hours(12) + TimeDelta::seconds(1));
    let late = post_form(
        &app,
        "/login",
        &format!("idemwatch_csrf={CSRF_COOKIE}"),
        &[
            ("name", "sam"),
            ("password", PASSWORD),
            ("csrf_token", &token),
        ],
    )
    .await;
    assert_eq!(late.status, StatusCode::FORBIDDEN, "{}", late.body);
    assert!(late.body.contains("CSRF"), "{}", late.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_token_past_its_expiry_is_refused_and_says_so() {
    let db = TestDb::sqlite().await;
    let clock = ManualClock::new("2027-02-28T23:59:00Z".parse().unwrap());
    let text = format!(
        "mode = \"builtin\"\n[[tokens]]\nname = \"quarterly\"\nsha256 = \"{}\"\nroles = [\"viewer\"]\nexpires = \"2027-03-01T00:00:00Z\"\n",
        secrets::hash_token("iw_quarterly")
    );
    let auth = Authenticator::new(Some(AuthFile::parse(&text).unwrap()), Some(SECRET));
    let app = app_with(&db, auth, &clock, SessionSettings::default());
    let call = || {
        axum::http::Request::get("/api/v1/csrf")
            .header("authorization", "Bearer iw_quarterly")
            .body(axum::body::Body::empty())
            .unwrap()
    };
    assert_eq!(send(&app, call()).await.status, StatusCode::OK);
    clock.advance(TimeDelta::minutes(1));
    let late = send(&app, call()).await;
    assert_eq!(late.status, StatusCode::UNAUTHORIZED, "{}", late.body);
    assert!(
        late.body.contains("quarterly") && late.body.contains("expired"),
        "{}",
        late.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hsts_is_sent_only_when_asked_for() {
    let db = TestDb::sqlite().await;
    let plain = web::app(AppState::new(db.store.clone()));
    let hsts = web::app(AppState::new(db.store.clone()).with_hsts(true));
    let probe = || {
        axum::http::Request::get("/healthz")
            .header("host", "127.0.0.1")
            .body(axum::body::Body::empty())
            .unwrap()
    };
    assert!(
        !send(&plain, probe())
            .await
            .headers
            .contains_key("strict-transport-security")
    );
    let a = send(&hsts, probe()).await;
    assert_eq!(a.headers["strict-transport-security"], "max-age=31536000");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn end_sessions_ends_a_users_sessions_from_the_command_line() {
    let db = TestDb::sqlite().await;
    let clock = ManualClock::new(Utc::now());
    let app = app_with(&db, BUILTIN.clone(), &clock, SessionSettings::default());
    let laptop = sign_in(&app, "sam").await;
    let phone = sign_in(&app, "sam").await;
    let other = sign_in(&app, "vic").await;
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_idemwatch"))
        .args(["end-sessions", "--user", "sam", "--database-url", &db.url])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("ended 2 session(s) of \"sam\""), "{stdout}");
    for b in [&laptop, &phone] {
        assert!(!signed_in(&get(&app, "/keys", &b.cookie()).await));
    }
    assert!(signed_in(&get(&app, "/keys", &other.cookie()).await));
}
