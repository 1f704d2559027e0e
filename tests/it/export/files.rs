//! Export → parse → compare with the database, row for row, in both formats; the
//! nasty text; every filter; an empty result; verify on untouched data.

use super::*;
use crate::both_backends;
use crate::support::as_key;
use idemwatch::export::{COLUMNS, verify_csv, verify_database, verify_ndjson};

fn at(row: &Value) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(row["occurred_at"].as_str().unwrap())
        .unwrap()
        .to_utc()
}

both_backends!(
    async fn csv_and_ndjson_match_the_database_row_for_row(db: TestDb) {
        let f = Fixture::new(&db);
        let s = seed(&f, Utc::now() - TimeDelta::days(10)).await;
        let want = expected(&f.store, &s.keys()).await;
        assert_eq!(want.len(), 13, "3 + 2 + 2 + 3 + 2 + 1 attempt rows");

        let (bytes, manifest) = export(&f.store, &ExportFilter::default(), Format::Ndjson).await;
        let (rows, m) = ndjson_lines(&bytes);
        assert_eq!(rows, want);
        assert_eq!(m["row_count"], want.len());
        assert_eq!(m["key_count"], 6);
        let manifest_line = bytes[..bytes.len() - 1]
            .iter()
            .rposition(|b| *b == b'\n')
            .unwrap()
            + 1;
        assert_eq!(manifest.sha256, sha256_hex(&bytes[..manifest_line]));
        let first = want.iter().map(at).min().unwrap();
        let last = want.iter().map(at).max().unwrap();
        assert_eq!(m["first_occurred_at"], rfc3339(first));
        assert_eq!(m["last_occurred_at"], rfc3339(last));

        // The hash as docs/EXPORT.md defines it, recomputed without idemwatch's code:
        // sorted members, no whitespace (serde_json's map is sorted; this data has no
        // floats outside `detail.result.ratio`, which prints the same either way).
        for row in &rows {
            let content: serde_json::Map<String, Value> = [
                "key",
                "tenant",
                "tool",
                "seq",
                "kind",
                "fencing_token",
                "actor",
                "detail",
                "duration_ms",
                "occurred_at",
            ]
            .iter()
            .map(|n| (n.to_string(), row[*n].clone()))
            .collect();
            let material = format!(
                "{}\n{}",
                row["prev_hash"].as_str().unwrap(),
                serde_json::to_string(&content).unwrap()
            );
            assert_eq!(row["hash"], sha256_hex(material.as_bytes()), "{row}");
        }

        let (bytes, manifest) = export(&f.store, &ExportFilter::default(), Format::Csv).await;
        let records = csv_records(&bytes);
        assert_eq!(records[0], COLUMNS);
        let want_csv: Vec<Vec<String>> = want.iter().map(csv_fields).collect();
        assert_eq!(records[1..], want_csv[..]);
        assert_eq!(manifest.sha256, sha256_hex(&bytes));
        assert_eq!(manifest.row_count as usize, want.len());

        // RFC 4180: CRLF after every record, and the nasty text quoted, quotes doubled,
        // its own CR LF kept inside the field.
        let text = String::from_utf8(bytes).unwrap();
        assert!(text.ends_with("\r\n"));
        assert!(text.contains("\"søren\r\n@support\""), "actor with CR LF");
        assert!(
            text.contains("\"acme, \"\"eu\"\"\nß\""),
            "tenant with comma, quotes, LF"
        );
        let resolved = records
            .iter()
            .find(|r| r[1] == s.nasty && r[11] == "resolved")
            .unwrap();
        let detail: Value = serde_json::from_str(&resolved[15]).unwrap();
        assert_eq!(detail["reason"], NASTY);
        assert_eq!(detail["result"]["note"], NASTY);
        assert_eq!(resolved[9], NASTY_REF);
        assert_eq!(resolved[12], NASTY_ACTOR);
    }
);

both_backends!(
    async fn every_filter_selects_exactly_its_rows(db: TestDb) {
        let f = Fixture::new(&db);
        let s = seed(&f, Utc::now() - TimeDelta::days(10)).await;
        let all = expected(&f.store, &s.keys()).await;
        let created = |key: &str| s.created.iter().find(|(k, _)| k == key).unwrap().1;
        let (t_unknown, t_nasty) = (created(&s.unknown), created(&s.nasty));
        type Pred = Box<dyn Fn(&Value) -> bool>;
        let cases: Vec<(&str, ExportFilter, Pred)> = vec![
            (
                "since",
                ExportFilter {
                    since: Some(t_unknown),
                    ..Default::default()
                },
                Box::new(move |r| at(r) >= t_unknown),
            ),
            (
                "until",
                ExportFilter {
                    until: Some(t_nasty),
                    ..Default::default()
                },
                Box::new(move |r| at(r) < t_nasty),
            ),
            (
                "since and until",
                ExportFilter {
                    since: Some(t_unknown),
                    until: Some(t_nasty),
                    ..Default::default()
                },
                Box::new(move |r| at(r) >= t_unknown && at(r) < t_nasty),
            ),
            (
                "tenant",
                ExportFilter {
                    tenant: Some(NASTY_TENANT.into()),
                    ..Default::default()
                },
                Box::new(|r| r["tenant"] == NASTY_TENANT),
            ),
            (
                "tool",
                ExportFilter {
                    tool: Some("send_message".into()),
                    ..Default::default()
                },
                Box::new(|r| r["tool"] == "send_message"),
            ),
            (
                "key",
                ExportFilter {
                    key: Some(as_key(&s.failed)),
                    ..Default::default()
                },
                {
                    let k = s.failed.clone();
                    Box::new(move |r| r["key"] == k.as_str())
                },
            ),
            (
                "business_ref",
                ExportFilter {
                    business_ref: Some(NASTY_REF.into()),
                    ..Default::default()
                },
                Box::new(|r| r["business_ref"] == NASTY_REF),
            ),
            (
                "tenant, tool and since together",
                ExportFilter {
                    tenant: Some("acme".into()),
                    tool: Some("issue_refund".into()),
                    since: Some(t_unknown),
                    ..Default::default()
                },
                Box::new(move |r| {
                    r["tenant"] == "acme" && r["tool"] == "issue_refund" && at(r) >= t_unknown
                }),
            ),
        ];
        for (name, filter, keep) in cases {
            let want: Vec<Value> = all.iter().filter(|r| keep(r)).cloned().collect();
            assert!(
                !want.is_empty() && want.len() < all.len(),
                "{name}: a filter that selects something, not everything"
            );
            let (bytes, manifest) = export(&f.store, &filter, Format::Ndjson).await;
            assert_eq!(ndjson_lines(&bytes).0, want, "{name} (ndjson)");
            assert_eq!(
                manifest.filters, filter,
                "{name}: the manifest repeats the filters"
            );
            assert!(
                verify_ndjson(&bytes[..]).unwrap().is_intact(),
                "{name}: verifies"
            );
            let (bytes, manifest) = export(&f.store, &filter, Format::Csv).await;
            let want_csv: Vec<Vec<String>> = want.iter().map(csv_fields).collect();
            assert_eq!(csv_records(&bytes)[1..], want_csv[..], "{name} (csv)");
            assert!(
                verify_csv(&bytes[..], &manifest).unwrap().is_intact(),
                "{name}: verifies"
            );
        }
    }
);

both_backends!(
    async fn an_empty_result_is_a_header_or_a_lone_manifest(db: TestDb) {
        let f = Fixture::new(&db);
        seed(&f, Utc::now() - TimeDelta::days(10)).await;
        let nobody = ExportFilter {
            tenant: Some("nobody".into()),
            ..Default::default()
        };
        let (bytes, manifest) = export(&f.store, &nobody, Format::Csv).await;
        assert_eq!(bytes, format!("{}\r\n", COLUMNS.join(",")).into_bytes());
        assert_eq!((manifest.row_count, manifest.first_occurred_at), (0, None));
        assert!(verify_csv(&bytes[..], &manifest).unwrap().is_intact());
        let (bytes, manifest) = export(&f.store, &nobody, Format::Ndjson).await;
        let (rows, m) = ndjson_lines(&bytes);
        assert!(rows.is_empty());
        assert_eq!(m["row_count"], 0);
        assert_eq!(manifest.sha256, sha256_hex(b""));
        assert!(verify_ndjson(&bytes[..]).unwrap().is_intact());
    }
);

both_backends!(
    async fn verify_passes_on_an_untouched_database_and_its_exports(db: TestDb) {
        let f = Fixture::new(&db);
        let s = seed(&f, Utc::now() - TimeDelta::days(10)).await;
        let all = expected(&f.store, &s.keys()).await;
        let report = verify_database(&f.store).await.unwrap();
        assert!(report.is_intact(), "{:?}", report.breaks);
        assert_eq!((report.rows as usize, report.keys), (all.len(), 6));

        let (bytes, _) = export(&f.store, &ExportFilter::default(), Format::Ndjson).await;
        assert!(verify_ndjson(&bytes[..]).unwrap().is_intact());

        // `since` after the first key's first rows: its chain starts at its replay,
        // which is fine because the manifest says the export was filtered.
        let late = s.created.last().unwrap().1 + TimeDelta::minutes(30);
        let filter = ExportFilter {
            since: Some(late),
            ..Default::default()
        };
        let (bytes, _) = export(&f.store, &filter, Format::Ndjson).await;
        let report = verify_ndjson(&bytes[..]).unwrap();
        assert!(report.is_intact(), "{:?}", report.breaks);
        assert_eq!((report.rows, report.partial_keys), (1, 1));
    }
);
