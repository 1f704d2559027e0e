//! The alerting side of idemwatch, checked from `cargo test`:
//! - `promtool check rules` and `promtool test rules` on grafana/prometheus/;
//! - every alert has a `## Name` section in docs/RUNBOOK.md, a `runbook_url` pointing at
//!   it, a unit test where it fires and one where it stays silent;
//! - every recording rule is evaluated by a unit test;
//! - the dashboard file is there with its uid (full JSON checks live elsewhere).
//!
//! std only, so it compiles without any dev-dependency. promtool comes from Debian's
//! `prometheus` package (or set `PROMTOOL=/path/to/promtool`). Without it the promtool
//! tests skip loudly, except on CI (`CI=true`), where alerts must not ship untested.

use std::collections::BTreeSet;
use std::fs;
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const RULES: &str = "grafana/prometheus/idemwatch-rules.yml";
const TESTS_DIR: &str = "grafana/prometheus/tests";
const RUNBOOK: &str = "docs/RUNBOOK.md";
const RUNBOOK_URL: &str = "https://github.com/idemwatch/idemwatch/blob/main/docs/RUNBOOK.md#";
const DASHBOARD: &str = "grafana/dashboards/idemwatch.json";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

fn on_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true"))
}

/// The promtool to run, or `None` (after saying so on stderr) when it is missing
/// outside CI.
fn promtool() -> Option<String> {
    let bin = std::env::var("PROMTOOL").unwrap_or_else(|_| "promtool".to_owned());
    match Command::new(&bin).arg("--version").output() {
        Ok(_) => Some(bin),
        Err(e) if e.kind() == ErrorKind::NotFound => {
            assert!(
                !on_ci(),
                "promtool not found and CI=true: the Prometheus rules cannot be tested. \
                 Install it (apt-get install prometheus) or set PROMTOOL to its path."
            );
            // Straight to the stderr handle: the test harness captures `eprintln!` of
            // passing tests, and this must be seen.
            let banner = "\n\
                **********************************************************************\n\
                *** SKIPPED: promtool not found (apt-get install prometheus)       ***\n\
                *** The Prometheus rules and their unit tests were NOT checked.    ***\n\
                **********************************************************************\n";
            let _ = std::io::stderr().write_all(banner.as_bytes());
            None
        }
        Err(e) => panic!("cannot run {bin}: {e}"),
    }
}

fn assert_success(what: &str, out: &Output) {
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// grafana/prometheus/tests/*.yml, sorted.
fn test_files() -> Vec<PathBuf> {
    let dir = root().join(TESTS_DIR);
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no unit tests in {}", dir.display());
    files
}

/// Values of `- alert: X` or `- record: X` lines (`key` is "alert:" or "record:").
fn rule_names(rules: &str, key: &str) -> Vec<String> {
    rules
        .lines()
        .filter_map(|line| {
            let line = line.trim_start();
            let line = line.strip_prefix("- ").unwrap_or(line);
            line.strip_prefix(key)
        })
        .map(|rest| rest.trim().trim_matches('"').to_owned())
        .collect()
}

/// The value after `key` in a YAML fragment, up to a comma, brace or end of line.
fn field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let start = text.find(key)? + key.len();
    let rest = &text[start..];
    let end = rest.find([',', '}', '\n']).unwrap_or(rest.len());
    Some(rest[..end].trim().trim_matches('"'))
}

/// Whether `text` mentions the metric `name` as a whole word.
fn mentions(text: &str, name: &str) -> bool {
    let part_of_name = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    text.match_indices(name).any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = text[i + name.len()..].chars().next();
        !before.is_some_and(part_of_name) && !after.is_some_and(part_of_name)
    })
}

/// Alert names with at least one `alert_rule_test` entry expecting them to fire, and
/// with at least one expecting silence (`exp_alerts: []`).
fn alerts_under_test() -> (BTreeSet<String>, BTreeSet<String>) {
    let (mut firing, mut silent) = (BTreeSet::new(), BTreeSet::new());
    for file in test_files() {
        // One chunk per entry; entries start with `- eval_time:` (block) or `- {eval_time:` (flow).
        let mut entries: Vec<String> = Vec::new();
        for line in read(&file).lines() {
            let trimmed = line.trim_start();
            if trimmed.starts_with("- eval_time:") || trimmed.starts_with("- {eval_time:") {
                entries.push(String::new());
            }
            if let Some(entry) = entries.last_mut() {
                entry.push_str(line);
                entry.push('\n');
            }
        }
        for entry in &entries {
            let Some(name) = field(entry, "alertname:") else {
                continue;
            };
            if entry.contains("exp_labels:") {
                firing.insert(name.to_owned());
            } else if entry.contains("exp_alerts: []") {
                silent.insert(name.to_owned());
            }
        }
    }
    (firing, silent)
}

#[test]
fn promtool_accepts_the_rules() {
    let Some(promtool) = promtool() else { return };
    let out = Command::new(&promtool)
        .current_dir(root())
        .args(["check", "rules", RULES])
        .output()
        .expect("run promtool check rules");
    assert_success("promtool check rules", &out);
}

#[test]
fn every_rule_unit_test_passes() {
    let Some(promtool) = promtool() else { return };
    let out = Command::new(&promtool)
        .current_dir(root())
        .args(["test", "rules"])
        .args(test_files())
        .output()
        .expect("run promtool test rules");
    assert_success("promtool test rules", &out);
}

#[test]
fn every_alert_has_a_runbook_section_and_tests_that_fire_and_stay_silent() {
    let rules = read(&root().join(RULES));
    let alerts = rule_names(&rules, "alert:");
    assert!(!alerts.is_empty(), "no alerts found in {RULES}");

    let runbook = read(&root().join(RUNBOOK));
    let sections: BTreeSet<&str> = runbook
        .lines()
        .filter_map(|l| l.strip_prefix("## "))
        .map(str::trim)
        .collect();
    let (firing, silent) = alerts_under_test();

    let mut problems = Vec::new();
    for alert in &alerts {
        if !sections.contains(alert.as_str()) {
            problems.push(format!("{alert}: no `## {alert}` section in {RUNBOOK}"));
        }
        if !firing.contains(alert) {
            problems.push(format!(
                "{alert}: no test in {TESTS_DIR}/*.yml where it fires (exp_alerts with exp_labels)"
            ));
        }
        if !silent.contains(alert) {
            problems.push(format!(
                "{alert}: no test in {TESTS_DIR}/*.yml where it stays silent (exp_alerts: [])"
            ));
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

#[test]
fn every_runbook_url_points_at_the_alerts_own_section() {
    let rules = read(&root().join(RULES));
    let mut current: Option<String> = None;
    let mut urls: Vec<(String, String)> = Vec::new();
    for line in rules.lines() {
        let trimmed = line.trim_start();
        let item = trimmed.strip_prefix("- ").unwrap_or(trimmed);
        if let Some(name) = item.strip_prefix("alert:") {
            current = Some(name.trim().to_owned());
        } else if item.starts_with("record:") {
            current = None;
        } else if let Some(url) = trimmed.strip_prefix("runbook_url:") {
            let alert = current
                .clone()
                .unwrap_or_else(|| panic!("runbook_url outside an alert: {line}"));
            urls.push((alert, url.trim().trim_matches('"').to_owned()));
        }
    }
    for alert in rule_names(&rules, "alert:") {
        let expected = format!("{RUNBOOK_URL}{}", alert.to_lowercase());
        let found: Vec<&str> = urls
            .iter()
            .filter(|(a, _)| *a == alert)
            .map(|(_, u)| u.as_str())
            .collect();
        assert_eq!(found, [expected.as_str()], "{alert}: runbook_url");
    }
}

#[test]
fn every_recording_rule_is_tested() {
    let records = rule_names(&read(&root().join(RULES)), "record:");
    assert!(!records.is_empty(), "no recording rules found in {RULES}");
    let exprs: Vec<String> = test_files()
        .iter()
        .flat_map(|file| {
            read(file)
                .lines()
                .filter_map(|l| l.trim_start().strip_prefix("- expr:").map(str::to_owned))
                .collect::<Vec<_>>()
        })
        .collect();
    let untested: Vec<&String> = records
        .iter()
        .filter(|r| !exprs.iter().any(|e| mentions(e, r)))
        .collect();
    assert!(
        untested.is_empty(),
        "recording rules without a promql_expr_test: {untested:?}"
    );
}

#[test]
fn the_dashboard_is_there_with_its_uid() {
    let dashboard = read(&root().join(DASHBOARD));
    assert!(!dashboard.trim().is_empty(), "{DASHBOARD} is empty");
    assert!(
        dashboard.contains(r#""uid": "idemwatch""#),
        "{DASHBOARD} lacks \"uid\": \"idemwatch\""
    );
    for variable in ["datasource", "job", "instance", "tool", "idemwatch_url"] {
        assert!(
            dashboard.contains(&format!(r#""name": "{variable}""#)),
            "{DASHBOARD} lacks the template variable {variable}"
        );
    }
}

#[test]
fn mentions_matches_whole_metric_names_only() {
    assert!(mentions(
        "tool:idempotency_requests:rate5m",
        "tool:idempotency_requests:rate5m"
    ));
    assert!(mentions("sum(tool:x:rate5m{tool=\"a\"})", "tool:x:rate5m"));
    assert!(!mentions("tool_outcome:x:rate5m", "outcome:x:rate5m"));
    assert!(!mentions("tool:x:rate5m", "tool:x:rate5"));
}
