//! What users and their tools parse, as reviewed text: the `/metrics` exposition, the
//! CSV and NDJSON exports and a key page's timeline, produced from the seeded keys at a
//! fixed time. Both backends must produce the same snapshot, byte for byte, so these
//! also pin SQLite and PostgreSQL to one output. A change shows up in review as a
//! `.snap` diff (`cargo insta review`, or `INSTA_UPDATE=always` and read `git diff`);
//! under CI=true a mismatch fails and nothing is written.

use crate::both_backends;
use crate::metrics::{catch_up_all, ids_now, scrape};
use crate::support::app::TestApp;
use crate::ui_seed::seed;
use chrono::{DateTime, Utc};
use idemwatch::metrics::{Metrics, backlog};
use idemwatch::tail::{TailSettings, Tailer};
use std::sync::Arc;

/// The seed ends here: every time, hash and token in the snapshots follows from it.
fn end() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-11-29T14:02:11Z")
        .unwrap()
        .to_utc()
}

/// Values the seed does not fix: provider call durations (measured on the real
/// clock) and the build's version.
fn settings() -> insta::Settings {
    let mut s = insta::Settings::clone_current();
    s.set_prepend_module_to_snapshot(false);
    s.add_filter(r#"version="[^"]*""#, r#"version="[version]""#);
    s.add_filter(
        r"(idempotency_attempt_duration_seconds_(?:bucket\{[^}]*\}|sum(?:\{[^}]*\})?)) \S+",
        "$1 [timing]",
    );
    // Lag, hold-back and refresh times are read off the real clock: their names are
    // contract, their values are not.
    s.add_filter(
        r"(?m)^(idemwatch_(?:tail_last_success_timestamp|tail_lag|tail_held_back|backlog_refresh_duration|replica_lag)_seconds) \S+$",
        "$1 [now]",
    );
    s.add_filter(
        r"(?m)^process_start_time_seconds \S+$",
        "process_start_time_seconds [now]",
    );
    s.add_filter(r"took \d+ ms", "took [ms] ms");
    // NDJSON: the timed fields (see TIMED), and the manifest's time and digest.
    s.add_filter(r#""duration_ms":\d+"#, r#""duration_ms":"[timed]""#);
    s.add_filter(
        r#""(prev_hash|hash|log_hash|sha256)":"[0-9a-f]{64}""#,
        r#""$1":"[timed]""#,
    );
    s.add_filter(r#""generated_at":"[^"]*""#, r#""generated_at":"[now]""#);
    s
}

/// The columns that follow from a provider call's real duration: the duration itself
/// and every hash over it. The rest of each row is fixed by the seed.
const TIMED: [&str; 4] = ["duration_ms", "prev_hash", "hash", "log_hash"];

fn untimed_csv(text: &str) -> String {
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let headers = reader.headers().unwrap().clone();
    let mut writer = csv::Writer::from_writer(Vec::new());
    writer.write_record(&headers).unwrap();
    for row in reader.records() {
        let row = row.unwrap();
        let cells = headers.iter().zip(row.iter()).map(|(name, cell)| {
            if TIMED.contains(&name) && !cell.is_empty() {
                "[timed]"
            } else {
                cell
            }
        });
        writer.write_record(cells).unwrap();
    }
    String::from_utf8(writer.into_inner().unwrap()).unwrap()
}

both_backends!(
    async fn the_metrics_exposition_of_the_seeded_keys(db: TestDb) {
        let store = &db.store;
        let metrics = Arc::new(Metrics::default());
        let mut tailer = Tailer::new(metrics.clone(), TailSettings::default());
        tailer.poll(store).await.unwrap();
        let before = ids_now(store).await;
        assert!(before.is_empty());
        let s = seed(store, end(), 0).await;
        // Every row counted once (PostgreSQL may hold the tail back for a moment).
        catch_up_all(&mut tailer, store, &metrics, &before).await;
        backlog::refresh(store, &metrics, s.end).await.unwrap();
        let text = scrape(store, &metrics).await.text;
        settings().bind(|| insta::assert_snapshot!("metrics", text));
    }
);

both_backends!(
    async fn the_csv_and_ndjson_exports_of_the_seeded_keys(db: TestDb) {
        let (app, _s) = TestApp::open_at(&db, end()).await;
        let until = "until=2026-11-29T14:02:12Z";
        let csv = app.export("csv", until).await;
        assert_eq!(csv.status, 200, "{}", csv.body);
        let ndjson = app.export("ndjson", until).await;
        assert_eq!(ndjson.status, 200, "{}", ndjson.body);
        settings().bind(|| {
            insta::assert_snapshot!("export_csv", untimed_csv(&csv.body));
            insta::assert_snapshot!("export_ndjson", ndjson.body);
        });
    }
);

both_backends!(
    async fn the_timeline_of_an_escalated_key(db: TestDb) {
        let (app, s) = TestApp::open_at(&db, end()).await;
        let page = app.get(&format!("/keys/{}", s.escalated)).await;
        assert_eq!(page.status, 200, "{}", page.body);
        let start = page
            .body
            .find("<section aria-labelledby=\"timeline-h\">")
            .expect("the key page has a timeline section");
        let end = start + page.body[start..].find("</section>").expect("section end") + 10;
        let fragment = page.body[start..end].to_string();
        settings().bind(|| insta::assert_snapshot!("key_page_timeline", fragment));
    }
);
