//! The worked examples of docs/GUARD.md, run as written.

use super::*;

/// Splits a shell line: words, and 'single-quoted' strings taken literally.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    let mut in_word = false;
    for c in line.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                in_word = true;
            }
            c if c.is_whitespace() && !quoted => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                }
                in_word = false;
            }
            c => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

/// Each `$ idemwatch …` line in a console block of docs/GUARD.md, with the output
/// printed under it up to the next command or the end of the block.
fn examples(doc: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut in_console = false;
    let mut current: Option<(String, Vec<&str>)> = None;
    for line in doc.lines() {
        if line.starts_with("```console") {
            in_console = true;
            continue;
        }
        if !in_console {
            continue;
        }
        if line.starts_with("```") || line.starts_with("$ ") {
            if let Some((cmd, out)) = current.take() {
                found.push((cmd, out.join("\n")));
            }
            if line.starts_with("```") {
                in_console = false;
                continue;
            }
        }
        if let Some(cmd) = line.strip_prefix("$ ") {
            current = Some((cmd.to_string(), Vec::new()));
        } else if let Some((_, out)) = current.as_mut() {
            out.push(line);
        }
    }
    found
}

#[test]
fn every_worked_example_in_guard_md_is_what_the_binary_prints() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/GUARD.md"))
        .expect("docs/GUARD.md");
    let examples = examples(&doc);
    assert!(examples.len() >= 4, "too few examples found: {examples:?}");
    for (cmd, expected) in examples {
        let words = shell_words(&cmd);
        assert_eq!(words[0], "idemwatch", "{cmd}");
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_idemwatch"))
            .args(&words[1..])
            .output()
            .unwrap();
        let printed = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(printed.trim_end(), expected.trim_end(), "$ {cmd}");
    }
}

#[test]
fn the_documented_hash_chain_example_verifies() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/GUARD.md"))
        .expect("docs/GUARD.md");
    let occurred_at = chrono::DateTime::parse_from_rfc3339("2026-11-29T14:02:11.402000Z")
        .unwrap()
        .to_utc();
    // What the guard writes in a claim's detail: the lease, serialised by serde.
    let lease_until = occurred_at + chrono::TimeDelta::seconds(40);
    let detail = serde_json::json!({ "lease_until": lease_until });
    assert_eq!(detail["lease_until"], "2026-11-29T14:02:51.402Z");
    let intent = idemwatch::guard::Intent {
        tenant: "acme".into(),
        tool: "issue_refund".into(),
        workflow_id: "run-7f3a".into(),
        step_id: "4".into(),
        intent_id: "refund:order-A-88214:ticket-5521".into(),
    };
    let key = intent.key().unwrap();
    let key = key.as_str();
    let fields = idemwatch::guard::ChainFields {
        key,
        tenant: "acme",
        tool: "issue_refund",
        seq: 1,
        kind: "claimed",
        fencing_token: 1,
        actor: "worker-1",
        detail: idemwatch::guard::Detail::Value(&detail),
        duration_ms: None,
        occurred_at,
    };
    let hash = chain_hash(GENESIS_HASH, fields);
    assert!(doc.contains(&hash), "docs/GUARD.md should show hash {hash}");
    let empty = serde_json::json!({});
    let second = idemwatch::guard::ChainFields {
        seq: 2,
        kind: "completed",
        detail: idemwatch::guard::Detail::Value(&empty),
        duration_ms: Some(1180),
        occurred_at: occurred_at + chrono::TimeDelta::milliseconds(1205),
        ..fields
    };
    let hash2 = chain_hash(&hash, second);
    assert!(
        doc.contains(&hash2),
        "docs/GUARD.md should show hash {hash2}"
    );
}
