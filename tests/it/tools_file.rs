//! `serve --tools-file`: a mistake stops the start-up, naming the tool and the field,
//! before the database is opened.

use std::process::Command;

fn serve_with(tools: &str) -> (i32, String, bool) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tools.toml");
    std::fs::write(&file, tools).unwrap();
    let db = dir.path().join("never.db");
    let out = Command::new(env!("CARGO_BIN_EXE_idemwatch"))
        .args(["serve", "--listen", "127.0.0.1:0", "--tools-file"])
        .arg(&file)
        .arg("--database-url")
        .arg(format!("sqlite://{}?mode=rwc", db.display()))
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).to_string(),
        db.exists(),
    )
}

#[test]
fn a_bad_tools_file_stops_serve_naming_the_tool_and_the_field() {
    let cases = [
        (
            "[tools.issue_refund]\nkey_retention = \"24h\"\ncall_timeout = \"10\"\n",
            "tool \"issue_refund\": call_timeout: \"10\" is not a duration",
        ),
        (
            "[tools.issue_refund]\nkey_retention = \"24h\"\ncall_timout = \"10s\"\n",
            "unknown field `call_timout`",
        ),
        (
            "[default]\ncall_timeout = \"1s\"\n",
            "[default]: key_retention is missing",
        ),
    ];
    for (text, want) in cases {
        let (code, stderr, db_created) = serve_with(text);
        assert_ne!(code, 0, "{text}");
        assert!(stderr.contains("tools file"), "{stderr}");
        assert!(stderr.contains(want), "{want:?} not in {stderr}");
        assert!(
            !db_created,
            "nothing is opened before the tools file is checked"
        );
    }
}

#[test]
fn the_shipped_example_tools_file_is_valid() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/tools.toml");
    let tools = idemwatch::guard::ToolPolicies::load(std::path::Path::new(path)).unwrap();
    assert!(tools.get("issue_refund").is_some());
    assert_eq!(
        tools.get("refund_invoice").unwrap().natural_key,
        ["invoice_id"]
    );
    assert!(tools.default.is_some());
}
