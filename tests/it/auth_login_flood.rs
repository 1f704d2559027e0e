//! Sign-in under attack (docs/AUTH.md, "Security"): password checks beyond the slots
//! are refused at once with 429; failures throttle a user name from one address, and
//! then from everywhere, with a growing backoff on the app's clock, never another
//! name (a reverse proxy's address is everyone's); every refusal is counted; and a
//! real `serve` flooded with 500 concurrent bad logins stays within 100 MiB of idle.

use crate::support::TestDb;
use crate::support::auth::*;
use crate::support::server::{Server, free_port, get, send_raw};
use axum::Router;
use axum::http::{Method, StatusCode};
use chrono::{TimeDelta, Utc};
use idemwatch::auth::throttle::{LoginLimiter, Thresholds};
use idemwatch::guard::ManualClock;
use idemwatch::metrics::Metrics;
use idemwatch::web::{self, AppState};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn app(db: &TestDb, clock: &ManualClock, limiter: LoginLimiter) -> (Router, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::default());
    let state = AppState::with_metrics(db.store.clone(), metrics.clone())
        .with_clock(Arc::new(clock.clone()))
        .with_auth(BUILTIN.clone(), false)
        .with_login_limiter(limiter);
    (web::app(state), metrics)
}

fn refusals(metrics: &Metrics, reason: &str) -> u64 {
    metrics
        .families()
        .idemwatch_login_refusals_total
        .with_label_values(&[reason])
        .get()
}

async fn login(app: &Router, peer: &str, name: &str, password: &str) -> Answer {
    let body = form(&[
        ("name", name),
        ("password", password),
        ("csrf_token", &csrf_token()),
    ]);
    let request = request(Method::POST, "/login", Who::Anonymous, Some(body));
    send(app, from_peer(request, &format!("{peer}:50000"))).await
}

fn retry_after(a: &Answer) -> Option<i64> {
    a.headers
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_logins_beyond_the_password_check_slots_get_429_at_once() {
    let db = TestDb::sqlite().await;
    let clock = ManualClock::new(Utc::now());
    let lax = Thresholds {
        per_address_and_user: 1000,
        per_user: 1000,
    };
    let (app, metrics) = app(&db, &clock, LoginLimiter::new(2, lax));
    let mut set = tokio::task::JoinSet::new();
    for i in 0..16 {
        let app = app.clone();
        set.spawn(async move { login(&app, "10.0.0.1", &format!("guess{i}"), "wrong").await });
    }
    let answers = set.join_all().await;
    let busy: Vec<_> = answers
        .iter()
        .filter(|a| a.status == StatusCode::TOO_MANY_REQUESTS)
        .collect();
    let checked = answers
        .iter()
        .filter(|a| a.status == StatusCode::UNAUTHORIZED)
        .count();
    assert_eq!(busy.len() + checked, 16);
    assert!(
        busy.len() >= 8,
        "2 slots, 16 at once: most are refused ({} were)",
        busy.len()
    );
    assert!(checked >= 2, "the slots were used ({checked} checked)");
    for a in &busy {
        assert_eq!(retry_after(a), Some(1));
        assert!(
            a.body
                .contains("Too many sign-ins are being checked right now"),
            "{}",
            a.body
        );
        assert!(a.body.contains("name=\"password\""), "the form again");
    }
    assert_eq!(refusals(&metrics, "busy"), busy.len() as u64);
    assert_eq!(refusals(&metrics, "bad_credentials"), checked as u64);
}

#[tokio::test]
async fn a_paused_address_does_not_stop_the_right_password_from_elsewhere_until_the_name_is_locked()
{
    let db = TestDb::sqlite().await;
    let clock = ManualClock::new(Utc::now());
    let (app, metrics) = app(&db, &clock, LoginLimiter::new(2, Thresholds::default()));
    for _ in 0..5 {
        let a = login(&app, "10.0.0.1", "sam", "wrong").await;
        assert_eq!(a.status, StatusCode::UNAUTHORIZED, "{}", a.body);
    }
    // Sam at another address signs in (before: 429 with Retry-After).
    let a = login(&app, "10.9.9.9", "sam", PASSWORD).await;
    assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.body);
    assert!(
        a.set_cookies()
            .iter()
            .any(|c| c.starts_with("idemwatch_session="))
    );
    // The guesser's address is paused for this name, the password not checked.
    let a = login(&app, "10.0.0.1", "sam", PASSWORD).await;
    assert_eq!(a.status, StatusCode::TOO_MANY_REQUESTS, "{}", a.body);
    assert_eq!(retry_after(&a), Some(30));
    assert!(
        a.body
            .contains("Too many failed sign-ins for this user name from your address")
            && a.body.contains("paused for 30 s"),
        "{}",
        a.body
    );
    assert!(
        a.set_cookies()
            .iter()
            .all(|c| !c.starts_with("idemwatch_session="))
    );
    let a = login(&app, "10.0.0.1", "vic", PASSWORD).await;
    assert_eq!(
        a.status,
        StatusCode::SEE_OTHER,
        "another name from the guesser's address"
    );

    // Signing in cleared sam's counts. Guesses at sam from 20 addresses, one each,
    // lock the name itself: then no address gets its password checked.
    for i in 0..20 {
        let a = login(&app, &format!("10.1.0.{i}"), "sam", "wrong").await;
        assert_eq!(a.status, StatusCode::UNAUTHORIZED, "{i}: {}", a.body);
    }
    let a = login(&app, "10.9.9.9", "sam", PASSWORD).await;
    assert_eq!(
        (a.status, retry_after(&a)),
        (StatusCode::TOO_MANY_REQUESTS, Some(30)),
        "{}",
        a.body
    );
    assert!(
        a.body
            .contains("Too many failed sign-ins for this user name:"),
        "{}",
        a.body
    );
    clock.advance(TimeDelta::seconds(29));
    let a = login(&app, "10.9.9.9", "sam", PASSWORD).await;
    assert_eq!(retry_after(&a), Some(1));
    clock.advance(TimeDelta::seconds(1));
    let a = login(&app, "10.9.9.9", "sam", PASSWORD).await;
    assert_eq!(
        a.status,
        StatusCode::SEE_OTHER,
        "the pause has passed: {}",
        a.body
    );

    assert_eq!(refusals(&metrics, "bad_credentials"), 25);
    assert_eq!(refusals(&metrics, "throttled_address"), 1);
    assert_eq!(refusals(&metrics, "throttled_user"), 2);
    let text = metrics.render().unwrap();
    assert!(text.contains("# HELP idemwatch_login_refusals_total Sign-ins refused, by reason"));
    assert!(
        text.contains("idemwatch_login_refusals_total{reason=\"throttled_user\"} 2"),
        "{text}"
    );
}

#[tokio::test]
async fn behind_a_reverse_proxy_bad_logins_from_anyone_lock_out_no_other_user() {
    let db = TestDb::sqlite().await;
    let clock = ManualClock::new(Utc::now());
    let (app, metrics) = app(&db, &clock, LoginLimiter::new(2, Thresholds::default()));
    // Every sign-in comes from the proxy's address: 40 bad ones for other names (twice
    // the old per-address limit) and 4 for vic herself.
    let proxy = "10.0.0.9";
    for i in 0..40 {
        let a = login(&app, proxy, &format!("guess{}", i % 10), "wrong").await;
        assert_eq!(a.status, StatusCode::UNAUTHORIZED, "{i}: {}", a.body);
    }
    for _ in 0..4 {
        login(&app, proxy, "vic", "wrong").await;
    }
    for user in ["vic", "ada", "sam"] {
        let a = login(&app, proxy, user, PASSWORD).await;
        assert_eq!(a.status, StatusCode::SEE_OTHER, "{user}: {}", a.body);
    }
    assert_eq!(refusals(&metrics, "throttled_user"), 0);
    // guess0..9 had 4 failures each from the proxy: below 5, nothing paused.
    assert_eq!(refusals(&metrics, "throttled_address"), 0);
    let a = login(&app, proxy, "guess0", "wrong").await;
    assert_eq!(a.status, StatusCode::UNAUTHORIZED);
    let a = login(&app, proxy, "guess0", "wrong").await;
    assert_eq!(
        a.status,
        StatusCode::TOO_MANY_REQUESTS,
        "the guessed name is paused"
    );
}

fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Beyond idle, the most the process may grow under the flood.
const LIMIT_KIB: u64 = 100 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_500_concurrent_bad_logins_stays_within_100_mib_of_idle() {
    let db = TestDb::sqlite().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("auth.toml");
    std::fs::write(&file, auth_file_text(&HASH)).unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    // Quiet and unpiped: 500 refusals logged into a pipe nobody reads would block it.
    let child = Command::new(env!("CARGO_BIN_EXE_idemwatch"))
        .args(["serve", "--listen", &addr, "--database-url", &db.url])
        .args(["--auth-file", file.to_str().unwrap()])
        .arg("--session-secret")
        .arg(String::from_utf8(SECRET.to_vec()).unwrap())
        .env("IDEMWATCH_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let server = Server {
        child,
        addr: addr.clone(),
    };
    let started = Instant::now();
    while !matches!(get(&addr, "/healthz").await, Ok((200, _))) {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "serve did not start"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle = rss_kib(pid).unwrap();

    // Sample the process while the flood runs; past the limit, stop it at once (the
    // old code grew by gigabytes) so the machine survives the failing run.
    let watching = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let monitor = {
        let watching = watching.clone();
        tokio::spawn(async move {
            let mut peak = idle;
            while watching.load(std::sync::atomic::Ordering::Relaxed) {
                let Some(now) = rss_kib(pid) else { break };
                peak = peak.max(now);
                if now > idle + 4 * LIMIT_KIB {
                    let _ = Command::new("kill")
                        .args(["-KILL", &pid.to_string()])
                        .status();
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            peak
        })
    };
    let mut flood = tokio::task::JoinSet::new();
    for i in 0..500 {
        let body = form(&[
            ("name", &format!("user{}", i % 50)),
            ("password", "wrong guess"),
            ("csrf_token", &csrf_token()),
        ]);
        let addr = addr.clone();
        flood.spawn(async move {
            let request = format!(
                "POST /login HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
                 Cookie: idemwatch_csrf={CSRF_COOKIE}\r\n\
                 Content-Type: application/x-www-form-urlencoded\r\n\
                 Content-Length: {}\r\n\r\n{body}",
                body.len()
            );
            send_raw(&addr, &request)
                .await
                .map(|(status, _)| status)
                .unwrap_or(0)
        });
    }
    let statuses = flood.join_all().await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = rss_kib(pid);
    watching.store(false, std::sync::atomic::Ordering::Relaxed);
    let peak = monitor.await.unwrap();
    let count = |s: u16| statuses.iter().filter(|&&x| x == s).count();
    eprintln!(
        "login flood: idle {} MiB, peak {} MiB, after {} MiB; 401: {}, 429: {}, other: {}",
        idle / 1024,
        peak / 1024,
        after.map_or(-1, |a| (a / 1024) as i64),
        count(401),
        count(429),
        500 - count(401) - count(429)
    );
    assert!(
        peak < idle + LIMIT_KIB,
        "peak RSS {} MiB is over 100 MiB above idle ({} MiB)",
        peak / 1024,
        idle / 1024
    );
    let after = after.expect("the server survived the flood");
    assert!(after < idle + LIMIT_KIB, "after: {} MiB", after / 1024);
    assert_eq!(
        count(401) + count(429),
        500,
        "every login answered 401 or 429"
    );
    assert!(count(429) > 0, "beyond the slots and the throttle: 429");

    let (_, metrics) = get(&addr, "/metrics").await.unwrap();
    let total: u64 = metrics
        .lines()
        .filter(|l| l.starts_with("idemwatch_login_refusals_total{"))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok())
        .sum();
    assert_eq!(total, 500, "every refusal counted: {metrics}");
    drop(server);
}
