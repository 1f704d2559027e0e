//! The Grafana dashboard's PromQL, as the end-to-end test evaluates it in a real
//! Prometheus: every `expr` in the JSON, with Grafana's variables replaced.

use serde_json::Value;

/// Grafana variables in a dashboard query, replaced with concrete values.
pub fn substitute(expr: &str, instance: &str) -> String {
    let value = |name: &str| -> String {
        match name {
            "job" => "idemwatch".into(),
            "instance" => instance.into(),
            "tool" => "issue_refund".into(),
            "tenant" => ".*".into(),
            "client_deadline" => "10".into(),
            "__rate_interval" => "1m".into(),
            "__interval" => "15s".into(),
            "__range" => "1h".into(),
            "__range_s" => "3600".into(),
            "__range_ms" => "3600000".into(),
            "__interval_ms" => "15000".into(),
            other => panic!("dashboard variable ${other} has no test value: add one here"),
        }
    };
    let mut out = String::new();
    let mut rest = expr;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let (name, used) = if let Some(braced) = after.strip_prefix('{') {
            let end = braced.find('}').expect("closing brace of a variable");
            let name = braced[..end].split(':').next().unwrap_or_default();
            (name, end + 2)
        } else {
            let end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            (&after[..end], end)
        };
        out.push_str(&value(name));
        rest = &after[used..];
    }
    out.push_str(rest);
    out
}

pub fn dashboard_exprs(json: &Value, out: &mut Vec<String>) {
    match json {
        Value::Object(map) => {
            for (k, v) in map {
                match (k.as_str(), v) {
                    ("expr", Value::String(e)) if !e.trim().is_empty() => out.push(e.clone()),
                    _ => dashboard_exprs(v, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| dashboard_exprs(v, out)),
        _ => {}
    }
}

#[test]
fn grafana_variables_are_replaced_with_concrete_values() {
    assert_eq!(
        substitute(
            r#"rate(x{job="$job",instance=~"${instance:regex}",tool=~"$tool"}[$__rate_interval])"#,
            "127.0.0.1:1"
        ),
        r#"rate(x{job="idemwatch",instance=~"127.0.0.1:1",tool=~"issue_refund"}[1m])"#
    );
}
