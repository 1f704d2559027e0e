//! What a payload-mismatch retry changed against the stored business arguments, field
//! by field: `amount_p 4500 → 4000`.

use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonChange {
    /// `amount_p`, `items[0].sku`, or `(whole value)`.
    pub field: String,
    /// Compact JSON, or `–` when the field is absent on that side.
    pub stored: String,
    pub retry: String,
    pub kind: ChangeKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    Changed,
    Added,
    Removed,
}

impl ChangeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Changed => "changed",
            ChangeKind::Added => "added",
            ChangeKind::Removed => "removed",
        }
    }
}

/// The fields that differ between `stored` and `retry`, in field order.
pub fn diff(stored: &Value, retry: &Value) -> Vec<JsonChange> {
    let mut out = Vec::new();
    walk("", stored, retry, &mut out);
    out
}

fn join(path: &str, field: &str) -> String {
    if path.is_empty() {
        field.to_string()
    } else {
        format!("{path}.{field}")
    }
}

/// One field or element at `path`, present on either side or both.
fn member(path: String, a: Option<&Value>, b: Option<&Value>, out: &mut Vec<JsonChange>) {
    let (stored, retry, kind) = match (a, b) {
        (Some(u), Some(v)) => return walk(&path, u, v, out),
        (Some(u), None) => (u.to_string(), "–".into(), ChangeKind::Removed),
        (None, Some(v)) => ("–".into(), v.to_string(), ChangeKind::Added),
        (None, None) => return,
    };
    out.push(JsonChange {
        field: path,
        stored,
        retry,
        kind,
    });
}

fn walk(path: &str, a: &Value, b: &Value, out: &mut Vec<JsonChange>) {
    let name = || {
        if path.is_empty() {
            "(whole value)".to_string()
        } else {
            path.to_string()
        }
    };
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut fields: Vec<&String> = x.keys().chain(y.keys()).collect();
            fields.sort();
            fields.dedup();
            for f in fields {
                member(join(path, f), x.get(f), y.get(f), out);
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            for i in 0..x.len().max(y.len()) {
                member(format!("{path}[{i}]"), x.get(i), y.get(i), out);
            }
        }
        _ if a != b => out.push(JsonChange {
            field: name(),
            stored: a.to_string(),
            retry: b.to_string(),
            kind: ChangeKind::Changed,
        }),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn row(field: &str, stored: &str, retry: &str, kind: ChangeKind) -> JsonChange {
        JsonChange {
            field: field.into(),
            stored: stored.into(),
            retry: retry.into(),
            kind,
        }
    }

    #[test]
    fn each_changed_field_is_listed_with_both_values() {
        use ChangeKind::*;
        let cases = [
            (
                json!({"order": "A-88214", "amount_p": 4500}),
                json!({"order": "A-88214", "amount_p": 4000}),
                vec![row("amount_p", "4500", "4000", Changed)],
            ),
            (
                json!({"order": "A-1"}),
                json!({"order": "A-1", "currency": "GBP"}),
                vec![row("currency", "–", "\"GBP\"", Added)],
            ),
            (
                json!({"order": "A-1", "note": 1}),
                json!({"order": "A-1"}),
                vec![row("note", "1", "–", Removed)],
            ),
            (
                json!({"items": [{"sku": "x", "qty": 1}]}),
                json!({"items": [{"sku": "x", "qty": 2}, {"sku": "y", "qty": 1}]}),
                vec![
                    row("items[0].qty", "1", "2", Changed),
                    row("items[1]", "–", "{\"qty\":1,\"sku\":\"y\"}", Added),
                ],
            ),
            (
                json!({"amount_p": 4500}),
                json!({"amount_p": "4500"}),
                vec![row("amount_p", "4500", "\"4500\"", Changed)],
            ),
            (json!({"a": 1}), json!({"a": 1}), vec![]),
            (json!([1]), json!([2]), vec![row("[0]", "1", "2", Changed)]),
            (
                json!(1),
                json!({"a": 1}),
                vec![row("(whole value)", "1", "{\"a\":1}", Changed)],
            ),
        ];
        for (stored, retry, want) in cases {
            assert_eq!(diff(&stored, &retry), want, "{stored} vs {retry}");
        }
    }
}
