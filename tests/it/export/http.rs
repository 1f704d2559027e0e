//! The HTTP downloads, driven through `web::app` with `oneshot`.

use super::*;
use crate::both_backends;
use axum::body::{Body, to_bytes};
use axum::http::{Request, StatusCode, header};
use idemwatch::export::verify_ndjson;
use idemwatch::web::{AppState, app};
use tower::ServiceExt;

async fn get(store: &Store, uri: &str) -> (StatusCode, axum::http::HeaderMap, Vec<u8>) {
    let response = app(AppState::new(store.clone()))
        .oneshot(Request::get(uri).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let body = to_bytes(response.into_body(), usize::MAX).await.unwrap();
    (status, headers, body.to_vec())
}

fn text(headers: &axum::http::HeaderMap, name: header::HeaderName) -> String {
    headers.get(name).unwrap().to_str().unwrap().to_string()
}

/// The URL of a `Link: <url>; rel=…` header.
fn link_target(link: &str) -> String {
    let url = link.strip_prefix('<').and_then(|l| l.split_once('>'));
    url.unwrap_or_else(|| panic!("not a link: {link}"))
        .0
        .to_string()
}

both_backends!(
    async fn downloads_stream_the_export_and_the_csv_links_its_manifest(db: TestDb) {
        let f = Fixture::new(&db);
        let s = seed(&f, Utc::now() - TimeDelta::days(10)).await;
        let until = Utc::now() - TimeDelta::days(1);
        let filter = ExportFilter {
            until: Some(until),
            ..Default::default()
        };
        let query = format!("until={}", rfc3339(until));

        let (status, headers, body) = get(&f.store, &format!("/export/attempts.csv?{query}")).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            text(&headers, header::CONTENT_TYPE),
            "text/csv; charset=utf-8; header=present"
        );
        let disposition = text(&headers, header::CONTENT_DISPOSITION);
        assert!(
            disposition.starts_with("attachment; filename=\"idemwatch-attempts_to-"),
            "{disposition}"
        );
        assert!(disposition.ends_with(".csv\""), "{disposition}");
        let (want, manifest) = export(&f.store, &filter, Format::Csv).await;
        assert_eq!(
            body, want,
            "the download is the CLI's export, byte for byte"
        );

        // The manifest the CSV links to describes exactly these bytes.
        let link = text(&headers, header::LINK);
        let url = link_target(&link);
        assert!(
            link.ends_with("rel=\"describedby\"; type=\"application/json\""),
            "{link}"
        );
        let (status, _, m) = get(&f.store, &url).await;
        assert_eq!(status, StatusCode::OK);
        let m: Value = serde_json::from_slice(&m).unwrap();
        assert_eq!(m["sha256"], sha256_hex(&body));
        assert_eq!(m["row_count"], manifest.row_count);
        assert_eq!(m["format"], "csv");

        let (status, headers, body) = get(
            &f.store,
            &format!("/export/attempts.ndjson?{query}&tool=issue_refund"),
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        assert!(text(&headers, header::CONTENT_DISPOSITION).contains("_tool-issue_refund_to-"));
        let (rows, m) = ndjson_lines(&body);
        let keys: Vec<String> = s.keys().into_iter().filter(|k| *k != s.other).collect();
        assert_eq!(rows, expected(&f.store, &keys).await);
        assert_eq!(m["filters"]["tool"], "issue_refund");
        assert!(verify_ndjson(&body[..]).unwrap().is_intact());
    }
);

both_backends!(
    async fn a_download_without_until_is_pinned_to_the_request_time(db: TestDb) {
        let f = Fixture::new(&db);
        seed(&f, Utc::now() - TimeDelta::days(10)).await;
        let (status, headers, body) = get(&f.store, "/export/attempts.csv").await;
        assert_eq!(status, StatusCode::OK);
        let link = text(&headers, header::LINK);
        assert!(link.contains("&until="), "{link}");
        let url = link_target(&link);
        let (_, _, m) = get(&f.store, &url).await;
        let m: Value = serde_json::from_slice(&m).unwrap();
        assert_eq!(m["sha256"], sha256_hex(&body));
    }
);

both_backends!(
    async fn a_bad_filter_is_a_400_naming_the_parameter(db: TestDb) {
        let (status, _, body) = get(&db.store, "/export/attempts.csv?since=yesterday").await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        let error: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(error["field"], "since");
        // The pages' grammar works here too: a window Grafana or a person writes.
        let (status, _, _) = get(&db.store, "/export/attempts.csv?since=now-1h").await;
        assert_eq!(status, StatusCode::OK);
        let (status, _, body) = get(&db.store, "/export/attempts.ndjson?key=order:A-1").await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(
            serde_json::from_slice::<Value>(&body).unwrap()["field"],
            "key"
        );
        let (status, _, _) = get(&db.store, "/export/attempts.manifest?format=xml").await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
    }
);

both_backends!(
    async fn raw_true_downloads_cells_as_stored_and_links_the_raw_manifest(db: TestDb) {
        let f = Fixture::new(&db);
        let mut call = refund("F-2", 100, "1");
        call.intent.tenant = "=1+1".into();
        f.guard.run(&call, &f.client([])).await.unwrap();
        let until = rfc3339(Utc::now() + TimeDelta::hours(1));

        let (_, headers, body) =
            get(&f.store, &format!("/export/attempts.csv?until={until}")).await;
        assert!(String::from_utf8_lossy(&body).contains(",'=1+1,"));
        assert!(!text(&headers, header::LINK).contains("raw=true"));

        let raw = format!("/export/attempts.csv?until={until}&raw=true");
        let (status, headers, body) = get(&f.store, &raw).await;
        assert_eq!(status, StatusCode::OK);
        assert!(String::from_utf8_lossy(&body).contains(",=1+1,"));
        let link = text(&headers, header::LINK);
        let manifest_uri = link[1..link.find('>').unwrap()].to_string();
        assert!(manifest_uri.ends_with("&raw=true"), "{link}");
        let (_, _, manifest) = get(&f.store, &manifest_uri).await;
        let manifest: Manifest = serde_json::from_slice(&manifest).unwrap();
        assert_eq!(manifest.sha256, sha256_hex(&body));

        let (status, _, body) = get(&f.store, "/export/attempts.csv?raw=maybe").await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["field"], "raw");
    }
);

both_backends!(
    async fn a_manifest_larger_than_a_chunk_is_streamed_whole(db: TestDb) {
        use super::evidence::{checkpoint_to, checkpointer, done_keys};
        let f = Fixture::new(&db);
        let keys = done_keys(&f, 200).await;
        let writer = checkpointer(&f, None);
        checkpoint_to(&f.store, &writer, keys.len() as u64).await;
        let until = Utc::now() + TimeDelta::minutes(1);
        let (status, headers, body) = get(
            &f.store,
            &format!(
                "/export/attempts.manifest?format=csv&until={}",
                rfc3339(until)
            ),
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(text(&headers, header::CONTENT_TYPE), "application/json");
        // A proof a key: several of the body's chunks, written as serialised.
        assert!(
            body.len() > 2 * idemwatch::export::CHUNK,
            "{} bytes",
            body.len()
        );
        assert_eq!(body.last(), Some(&b'\n'));
        let served: Manifest = serde_json::from_slice(&body).unwrap();
        let filter = ExportFilter {
            until: Some(until),
            ..Default::default()
        };
        let (csv, mut written) = export(&f.store, &filter, Format::Csv).await;
        assert_eq!(served.sha256, sha256_hex(&csv));
        let evidence = served.evidence.as_ref().expect("evidence");
        assert_eq!(evidence.proofs.len(), keys.len() as u64);
        // The CLI's manifest of the same query, but for the time it was made.
        written.generated_at = served.generated_at;
        let (served_json, written_json) = (
            serde_json::to_value(&served).unwrap(),
            serde_json::to_value(&written).unwrap(),
        );
        let differ: Vec<&String> = written_json
            .as_object()
            .unwrap()
            .iter()
            .filter(|(k, v)| served_json.get(k.as_str()) != Some(v))
            .map(|(k, _)| k)
            .collect();
        assert!(differ.is_empty(), "fields differ: {differ:?}");
        assert!(
            body == written.to_pretty_json().into_bytes(),
            "the served bytes are the manifest's pretty JSON"
        );
    }
);
