//! The alerting side of idemwatch, checked from `cargo test`:
//! - `promtool check rules` and `promtool test rules` on grafana/prometheus/;
//! - every alert has a `## Name` section in docs/RUNBOOK.md, a `runbook_url` pointing at
//!   it under the operator's `idemwatch_url` external label, a unit test where it
//!   fires and one where it stays silent; every per-tool alert a `ui_url` under the
//!   `idemwatch_url` external label;
//! - every recording rule is evaluated by a unit test;
//! - `amtool check-config` on grafana/alertmanager/alertmanager.yml, every alert routed
//!   by its severity (critical pages, warning opens a ticket), and every alert an
//!   inhibition names exists;
//! - the dashboard file is there with its uid (full JSON checks live elsewhere).
//!
//! std only, so it compiles without any dev-dependency. promtool comes from Debian's
//! `prometheus` package (or set `PROMTOOL=/path/to/promtool`), amtool from
//! `prometheus-alertmanager` (or `AMTOOL`). Without them these tests skip loudly, except
//! on CI (`CI=true`), where alerts must not ship untested.

use std::collections::BTreeSet;
use std::fs;
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const RULES: &str = "grafana/prometheus/idemwatch-rules.yml";
const TESTS_DIR: &str = "grafana/prometheus/tests";
const RUNBOOK: &str = "docs/RUNBOOK.md";
const ALERTMANAGER: &str = "grafana/alertmanager/alertmanager.yml";
/// Every `runbook_url` starts with this, then `#<alertname lowercased>`: the runbook the
/// operator's idemwatch serves, under the one external label.
const RUNBOOK_BASE: &str = "{{ $externalLabels.idemwatch_url }}/runbook";
/// Every `ui_url` starts with this, then a page of the idemwatch UI.
const UI_BASE: &str = "{{ $externalLabels.idemwatch_url }}/";
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

/// The program to run (`$env_var`, else `name`), or `None` (after saying so on stderr)
/// when it is missing outside CI. `package` is the Debian package that provides it.
fn tool(name: &str, env_var: &str, package: &str, checks: &str) -> Option<String> {
    let bin = std::env::var(env_var).unwrap_or_else(|_| name.to_owned());
    match Command::new(&bin).arg("--version").output() {
        Ok(_) => Some(bin),
        Err(e) if e.kind() == ErrorKind::NotFound => {
            assert!(
                !on_ci(),
                "{name} not found and CI=true: {checks} cannot be checked. \
                 Install it (apt-get install {package}) or set {env_var} to its path."
            );
            // Straight to the stderr handle: the test harness captures `eprintln!` of
            // passing tests, and this must be seen.
            let stars = "*".repeat(78);
            let banner = format!(
                "\n{stars}\n*** SKIPPED: {name} not found (apt-get install {package})\n\
                 *** {checks} were NOT checked.\n{stars}\n"
            );
            let _ = std::io::stderr().write_all(banner.as_bytes());
            None
        }
        Err(e) => panic!("cannot run {bin}: {e}"),
    }
}

fn promtool() -> Option<String> {
    tool(
        "promtool",
        "PROMTOOL",
        "prometheus",
        "The Prometheus rules and their unit tests",
    )
}

fn amtool() -> Option<String> {
    tool(
        "amtool",
        "AMTOOL",
        "prometheus-alertmanager",
        "The Alertmanager configuration and its routing",
    )
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

/// No link falls back to a host that is not the operator's (the upstream repository, a
/// loopback address): one external label builds them all.
#[test]
fn no_alert_link_names_a_host_of_its_own() {
    let rules = read(&root().join(RULES));
    for banned in [
        "github.com",
        "127.0.0.1",
        "localhost",
        "idemwatch_runbook_url",
    ] {
        assert!(!rules.contains(banned), "{RULES} mentions {banned}");
    }
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

/// One alert of the rules file: its name and its text, from its `- alert:` line up to
/// the next rule or group.
struct Alert {
    name: String,
    text: String,
}

impl Alert {
    /// Values of the lines (trimmed) that start with `key`, quotes removed.
    fn values(&self, key: &str) -> Vec<&str> {
        self.text
            .lines()
            .filter_map(|l| l.trim_start().strip_prefix(key))
            .map(|v| v.trim().trim_matches(|c| c == '"' || c == '\''))
            .collect()
    }
}

fn alerts(rules: &str) -> Vec<Alert> {
    let mut alerts: Vec<Alert> = Vec::new();
    let mut in_alert = false;
    for line in rules.lines() {
        let trimmed = line.trim_start();
        let item = trimmed.strip_prefix("- ").unwrap_or(trimmed);
        if let Some(name) = item.strip_prefix("alert:") {
            alerts.push(Alert {
                name: name.trim().to_owned(),
                text: String::new(),
            });
            in_alert = true;
        } else if trimmed.starts_with("- ")
            && (item.starts_with("record:") || item.starts_with("name:"))
        {
            in_alert = false;
        }
        if let (true, Some(alert)) = (in_alert, alerts.last_mut()) {
            alert.text.push_str(line);
            alert.text.push('\n');
        }
    }
    assert!(!alerts.is_empty(), "no alerts found in {RULES}");
    alerts
}

#[test]
fn every_runbook_url_points_at_the_alerts_own_section() {
    for alert in alerts(&read(&root().join(RULES))) {
        let expected = format!("{RUNBOOK_BASE}#{}", alert.name.to_lowercase());
        assert_eq!(
            alert.values("runbook_url:"),
            [expected.as_str()],
            "{}: runbook_url",
            alert.name
        );
    }
}

/// Alerts about a tool (`Idempotency*`) link to its keys in the UI; alerts about
/// idemwatch itself (`Idemwatch*`) have no tool to link to.
#[test]
fn every_per_tool_alert_links_to_the_ui_under_the_operators_label() {
    for alert in alerts(&read(&root().join(RULES))) {
        let links = alert.values("ui_url:");
        if alert.name.starts_with("Idempotency") {
            assert_eq!(links.len(), 1, "{}: one ui_url expected", alert.name);
            let link = links[0];
            assert!(
                link.starts_with(UI_BASE) && link.contains("tool={{ $labels.tool | urlquery }}"),
                "{}: ui_url must start with {UI_BASE} and pass the tool query-encoded: {link}",
                alert.name
            );
            // A list of keys over a time window names what happened in it (`outcome=`,
            // `attempt_kind=`): the keys behind the alert, not every key of the tool.
            if link.contains("/keys?") && link.contains("from=") {
                assert!(
                    link.contains("&outcome=") || link.contains("&attempt_kind="),
                    "{}: ui_url must select the keys behind the alert: {link}",
                    alert.name
                );
            }
        } else {
            assert_eq!(
                links,
                Vec::<&str>::new(),
                "{}: no tool, no ui_url",
                alert.name
            );
        }
    }
}

#[test]
fn amtool_accepts_the_alertmanager_config() {
    let Some(amtool) = amtool() else { return };
    let out = Command::new(&amtool)
        .current_dir(root())
        .args(["check-config", ALERTMANAGER])
        .output()
        .expect("run amtool check-config");
    assert_success("amtool check-config", &out);
}

/// Critical pages, warning opens a ticket, whatever else an alert carries.
#[test]
fn every_alert_is_routed_by_its_severity() {
    let Some(amtool) = amtool() else { return };
    for alert in alerts(&read(&root().join(RULES))) {
        let severity = alert.values("severity:");
        let receiver = match severity[..] {
            ["critical"] => "page",
            ["warning"] => "ticket",
            _ => panic!(
                "{}: severity must be critical or warning: {severity:?}",
                alert.name
            ),
        };
        let out = Command::new(&amtool)
            .current_dir(root())
            .args(["config", "routes", "test", "--config.file", ALERTMANAGER])
            .arg(format!("--verify.receivers={receiver}"))
            .arg(format!("alertname={}", alert.name))
            .arg(format!("severity={}", severity[0]))
            .args([
                "job=idemwatch",
                "tool=issue_refund",
                "instance=10.0.0.1:8080",
            ])
            .output()
            .expect("run amtool config routes test");
        assert_success(&format!("{} routed to {receiver}", alert.name), &out);
    }
}

/// Every alert name an inhibition matches exists (a renamed alert would silently stop
/// being inhibited), and the database-down inhibition covers every alert built on the
/// backlog gauges.
#[test]
fn the_alertmanager_inhibitions_name_real_alerts() {
    let alerts = alerts(&read(&root().join(RULES)));
    let known: BTreeSet<&str> = alerts.iter().map(|a| a.name.as_str()).collect();
    let config = read(&root().join(ALERTMANAGER));
    let mut named: BTreeSet<String> = BTreeSet::new();
    for line in config.lines().filter(|l| !l.trim_start().starts_with('#')) {
        for (i, _) in line.match_indices("alertname=") {
            let rest = line[i + "alertname=".len()..].trim_start_matches('~');
            let value = rest.trim_start_matches('"').split('"').next().unwrap_or("");
            named.extend(value.split('|').map(str::to_owned));
        }
    }
    assert!(!named.is_empty(), "no alertname matchers in {ALERTMANAGER}");
    let unknown: Vec<&String> = named
        .iter()
        .filter(|n| !known.contains(n.as_str()))
        .collect();
    assert!(
        unknown.is_empty(),
        "{ALERTMANAGER} names alerts that do not exist: {unknown:?}"
    );

    let backlog_alerts: Vec<&str> = alerts
        .iter()
        .filter(|a| {
            a.text.contains("idempotency_unknown_") || a.text.contains("idempotency_expired_leases")
        })
        .map(|a| a.name.as_str())
        .collect();
    assert!(
        backlog_alerts.len() >= 5,
        "backlog alerts: {backlog_alerts:?}"
    );
    let db_down = config
        .split("- source_matchers:")
        .find(|rule| {
            rule.contains(r#"alertname="IdemwatchDatabaseDown""#)
                && rule.contains("IdempotencyUnknown")
        })
        .expect("an inhibition of the backlog alerts by IdemwatchDatabaseDown");
    for alert in backlog_alerts {
        assert!(
            db_down.contains(alert),
            "IdemwatchDatabaseDown does not inhibit {alert}"
        );
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
    // One base for every link, as in the rules: the runbook is the one idemwatch
    // serves, never a repository host or a second variable.
    for banned in ["github.com", "runbook_url", "idemwatch_runbook_url"] {
        assert!(!dashboard.contains(banned), "{DASHBOARD} mentions {banned}");
    }
    assert!(dashboard.contains(r#""url": "${idemwatch_url}/runbook""#));
    assert!(
        dashboard.contains(
            r#""url": "${idemwatch_url}/runbook?alert=${__data.fields.alertname:percentencode}""#
        ),
        "the alert table links each alert to its section"
    );
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
