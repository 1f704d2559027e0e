//! Bad input and a database that is down: pages that name the field, a 503 page.

use super::assert_no_internals;
use crate::both_backends;
use crate::support::app::TestApp;
use axum::http::{StatusCode, header};

both_backends!(
    async fn bad_input_gets_a_page_that_names_the_field(db: TestDb) {
        let (app, _s) = TestApp::open(&db).await;
        let zeros = "0".repeat(64);
        let cases = [
            (format!("/keys/{zeros}"), 404, format!("No key {zeros} is recorded")),
            ("/keys?from=yesterday".into(), 400, "from: cannot read &#34;yesterday&#34; as a time; expected an RFC 3339 time".into()),
            ("/keys?to=now-1fortnight".into(), 400, "to: cannot read".into()),
            ("/keys?from=now&to=now-1h".into(), 400, "to: must be later than from".into()),
            ("/keys?status=finished".into(), 400, "status: &#34;finished&#34; is not a status; expected one of IN_PROGRESS, DONE, FAILED, UNKNOWN".into()),
            ("/keys?key=xyz".into(), 400, "key: expected 4 to 64 hexadecimal characters".into()),
            ("/keys?after=garbage".into(), 400, "after: expected a page position".into()),
            ("/keys?limit=0".into(), 400, "limit: expected a whole number from 1 to 200".into()),
            (format!("/keys?tenant={}", "x".repeat(600)), 400, "tenant: expected at most 512 bytes".into()),
            ("/keys/zz".into(), 400, "key: expected 4 to 64 hexadecimal characters".into()),
            ("/backlog?after=2026".into(), 400, "after: expected a page position".into()),
            ("/no/such/page".into(), 404, "There is no page at this address.".into()),
            ("/static/nope.css".into(), 404, "There is no static file".into()),
        ];
        for (uri, status, text) in cases {
            let p = app.get(&uri).await;
            assert_eq!(p.status.as_u16(), status, "{uri}: {}", p.body);
            assert!(
                p.headers[header::CONTENT_TYPE]
                    .to_str()
                    .unwrap()
                    .starts_with("text/html"),
                "{uri}"
            );
            assert!(p.body.contains(&text), "{uri}: want {text:?} in {}", p.body);
            assert!(p.body.contains("<h1 id=\"error-h\">"), "{uri}");
            assert_no_internals(&p);
        }
        let json_cases = [
            (format!("/api/v1/keys/{zeros}"), 404, None),
            ("/api/v1/keys/xyz".to_string(), 400, Some("key")),
            ("/api/v1/no-such".to_string(), 404, None),
        ];
        for (uri, status, field) in json_cases {
            let p = app.get(&uri).await;
            assert_eq!(p.status.as_u16(), status, "{uri}");
            assert_eq!(
                p.headers[header::CONTENT_TYPE],
                "application/problem+json",
                "{uri}"
            );
            let v: serde_json::Value = serde_json::from_str(&p.body).unwrap();
            assert_eq!(v["status"], status, "{uri}");
            assert_eq!(v["field"].as_str(), field, "{uri}");
        }
    }
);

both_backends!(
    async fn a_database_that_is_down_gets_a_503_page(db: TestDb) {
        let (app, s) = TestApp::open(&db).await;
        db.store.close().await;
        let uris = [
            "/".to_string(),
            "/keys".into(),
            "/keys?tool=issue_refund&from=now-1h".into(),
            format!("/keys/{}", s.replayed),
            "/backlog".into(),
            "/search?q=88214".into(),
        ];
        for uri in uris {
            let p = app.get(&uri).await;
            assert_eq!(p.status, StatusCode::SERVICE_UNAVAILABLE, "{uri}");
            assert!(p.body.contains("Database unavailable"), "{uri}: {}", p.body);
            assert!(p.body.contains("try again in a moment"));
            assert_eq!(p.headers[header::RETRY_AFTER], "5");
            assert_no_internals(&p);
        }
        let p = app.get(&format!("/api/v1/keys/{}", s.replayed)).await;
        assert_eq!(p.status, StatusCode::SERVICE_UNAVAILABLE);
        let v: serde_json::Value = serde_json::from_str(&p.body).unwrap();
        assert_eq!(v["title"], "Database unavailable");
        assert_eq!(v["code"], "unavailable");
    }
);

/// The first JSON object in `doc` after `marker`: a documented example.
fn documented(doc: &str, marker: &str) -> serde_json::Value {
    let at = doc
        .find(marker)
        .unwrap_or_else(|| panic!("{marker} in the docs"));
    let start = at + doc[at..].find('{').unwrap();
    let end = start + doc[start..].find('}').unwrap() + 1;
    let text = doc[start..end].replace('\n', " ");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

/// The members of a problem the docs show, against one the server sent: the same
/// names, and the same values except the occurrence's own `detail`.
fn assert_documented(doc: &serde_json::Value, sent: &serde_json::Value) {
    let names = |v: &serde_json::Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(names(doc), names(sent), "{sent}");
    for (name, value) in doc.as_object().unwrap() {
        if name != "detail" {
            assert_eq!(&sent[name], value, "{name}: {sent}");
        }
    }
}

both_backends!(
    async fn the_error_documents_in_the_docs_are_what_the_server_sends(db: TestDb) {
        let (app, _) = TestApp::open(&db).await;
        let ui = documented(
            include_str!("../../../docs/UI.md"),
            "Errors under `/api/` are RFC 9457",
        );
        let p = app.get(&format!("/api/v1/keys/{}", "0".repeat(64))).await;
        assert_eq!(p.headers[header::CONTENT_TYPE], "application/problem+json");
        assert_documented(&ui, &serde_json::from_str(&p.body).unwrap());

        let export = documented(
            include_str!("../../../docs/EXPORT.md"),
            "RFC 9457 problem document",
        );
        let p = app.get("/export/attempts.csv?since=yesterday-ish").await;
        assert_eq!(p.headers[header::CONTENT_TYPE], "application/problem+json");
        let sent: serde_json::Value = serde_json::from_str(&p.body).unwrap();
        assert_documented(&export, &sent);
        assert!(
            sent["detail"]
                .as_str()
                .unwrap()
                .starts_with("invalid since: "),
            "{sent}"
        );
    }
);
