//! RFC 8785 (JSON Canonicalization Scheme) serialisation.
//!
//! Keys and fingerprints are SHA-256 over this form, so a guard written in another
//! language must produce the same bytes. JCS gives us that: object members sorted by
//! their UTF-16 code units, no insignificant whitespace, strings escaped exactly as
//! ECMAScript's `JSON.stringify` does, and numbers printed as ECMAScript doubles
//! (`4500.0` becomes `4500`, `1e21` becomes `1e+21`, `-0` becomes `0`).

use serde_json::Value;

/// Integers above 2^53 cannot be represented exactly as IEEE 754 doubles. JCS would
/// silently round them, so two different amounts could share a fingerprint; for a
/// guard that protects payments we refuse them instead.
pub(crate) const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CanonicalError {
    #[error(
        "number {number} at {path} is not exactly representable as a JSON double (|n| > 2^53); send it as a string"
    )]
    UnsafeInteger { path: String, number: String },
    #[error("number at {path} is not finite")]
    NonFinite { path: String },
}

impl CanonicalError {
    /// The same error one level further out: `segment` (`.name`, `[3]`) goes in
    /// front of the path. The path is built only on the way out of an error, so the
    /// common case allocates nothing for it.
    fn under(mut self, segment: &str) -> Self {
        let (Self::UnsafeInteger { path, .. } | Self::NonFinite { path }) = &mut self;
        path.insert_str(0, segment);
        self
    }
}

/// Serialises `value` in JCS form.
pub fn canonical_json(value: &Value) -> Result<String, CanonicalError> {
    let mut out = String::new();
    write_canonical(&mut out, value)?;
    Ok(out)
}

/// Appends the JCS form of `value` to `out` (partly written on an error).
pub(crate) fn write_canonical(out: &mut String, value: &Value) -> Result<(), CanonicalError> {
    write_value(out, value).map_err(|e| e.under("$"))
}

fn write_value(out: &mut String, value: &Value) -> Result<(), CanonicalError> {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(out, n)?,
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item).map_err(|e| e.under(&format!("[{i}]")))?;
            }
            out.push(']');
        }
        Value::Object(map) => {
            // serde_json's map iterates in the byte order of its names (a BTreeMap),
            // which is JCS order for ASCII names: then the members are written as they
            // come, without a Vec and a sort per object (the guard canonicalises several
            // objects per call). Checked, not assumed: a map that iterates otherwise (a
            // name above U+FFFF, or serde_json's `preserve_order`) is sorted.
            let names = map.keys();
            if names
                .clone()
                .zip(names.skip(1))
                .all(|(a, b)| jcs_order(a, b).is_lt())
            {
                write_members(out, map.iter())?;
            } else {
                let mut members: Vec<(&String, &Value)> = map.iter().collect();
                members.sort_by(|(a, _), (b, _)| jcs_order(a, b));
                write_members(out, members.into_iter())?;
            }
        }
    }
    Ok(())
}

/// An object's members, already in JCS order, as `{"name":value,…}`.
fn write_members<'a>(
    out: &mut String,
    members: impl Iterator<Item = (&'a String, &'a Value)>,
) -> Result<(), CanonicalError> {
    out.push('{');
    for (i, (name, member)) in members.enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_string(out, name);
        out.push(':');
        write_value(out, member).map_err(|e| e.under(&format!(".{name}")))?;
    }
    out.push('}');
    Ok(())
}

/// JCS orders member names by their UTF-16 code units, which differs from Rust's
/// UTF-8 byte order only for characters above U+FFFF against U+E000..U+FFFF; names
/// in ASCII (nearly all) compare as bytes.
pub(crate) fn jcs_order(a: &str, b: &str) -> std::cmp::Ordering {
    if a.is_ascii() && b.is_ascii() {
        a.cmp(b)
    } else {
        a.encode_utf16().cmp(b.encode_utf16())
    }
}

fn write_number(out: &mut String, n: &serde_json::Number) -> Result<(), CanonicalError> {
    let unsafe_int = || CanonicalError::UnsafeInteger {
        path: String::new(),
        number: n.to_string(),
    };
    if let Some(i) = n.as_i64() {
        if i.unsigned_abs() > MAX_SAFE_INTEGER {
            return Err(unsafe_int());
        }
    } else if let Some(u) = n.as_u64()
        && u > MAX_SAFE_INTEGER
    {
        return Err(unsafe_int());
    }
    let f = n.as_f64().ok_or_else(|| CanonicalError::NonFinite {
        path: String::new(),
    })?;
    if !f.is_finite() {
        return Err(CanonicalError::NonFinite {
            path: String::new(),
        });
    }
    if f == 0.0 {
        // ECMAScript prints -0 as "0".
        out.push('0');
    } else {
        let mut buf = ryu_js::Buffer::new();
        out.push_str(buf.format_finite(f));
    }
    Ok(())
}

/// serde_json escapes exactly the characters `JSON.stringify` escapes (`"`, `\`,
/// and controls below U+0020, with the short forms \b \f \n \r \t and lowercase
/// `\u00xx` otherwise), and leaves everything else, including non-ASCII, as UTF-8.
pub(crate) fn write_string(out: &mut String, s: &str) {
    if s.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20) {
        out.push_str(&serde_json::to_string(s).expect("serialising a str cannot fail"));
    } else {
        // Nothing to escape (the common case): the text as it is, quoted.
        out.push('"');
        out.push_str(s);
        out.push('"');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn canon(text: &str) -> String {
        canonical_json(&serde_json::from_str(text).unwrap()).unwrap()
    }

    #[test]
    fn member_order_and_whitespace_never_matter() {
        assert_eq!(
            canon(r#"{ "b": 1, "a": [ 1, 2 ] }"#),
            r#"{"a":[1,2],"b":1}"#
        );
        assert_eq!(
            canon(r#"{"a":[1,2],"b":1}"#),
            canon("{\n\"b\" :1 ,\"a\":[1 ,2]}")
        );
    }

    #[test]
    fn numbers_follow_ecmascript_doubles() {
        let table = [
            ("4500", "4500"),
            ("4500.0", "4500"),
            ("45e2", "4500"),
            ("-0", "0"),
            ("-0.0", "0"),
            ("1e21", "1e+21"),
            ("1e20", "100000000000000000000"),
            ("0.000001", "0.000001"),
            ("0.0000001", "1e-7"),
            ("1.5", "1.5"),
            ("-12.25", "-12.25"),
            ("9007199254740991", "9007199254740991"),
            ("333333333.33333329", "333333333.3333333"),
            ("1E400", ""),
        ];
        for (input, expected) in table {
            let parsed: Result<Value, _> = serde_json::from_str(input);
            match parsed {
                Ok(v) => assert_eq!(canonical_json(&v).unwrap(), expected, "input {input}"),
                // serde_json rejects out-of-range numbers at parse time.
                Err(_) => assert_eq!(expected, "", "input {input}"),
            }
        }
    }

    #[test]
    fn integers_beyond_two_to_the_53_are_refused_not_rounded() {
        let err = canonical_json(&json!({"amount_p": 9007199254740993u64})).unwrap_err();
        assert!(err.to_string().contains("$.amount_p"), "{err}");
        assert!(canonical_json(&json!(-9007199254740993i64)).is_err());
    }

    #[test]
    fn strings_are_escaped_like_json_stringify() {
        assert_eq!(canon(r#""a\"b\\c\/d""#), r#""a\"b\\c/d""#);
        assert_eq!(
            canon(r#""\u0001\b\f\n\r\t\u001f""#),
            r#""\u0001\b\f\n\r\t\u001f""#
        );
        assert_eq!(canon(r#""caf\u00e9 €""#), "\"café €\"");
        assert_eq!(canon(r#""\ud83d\ude00""#), "\"😀\"");
        assert_eq!(canon(r#""\u007f""#), "\"\u{7f}\"");
    }

    #[test]
    fn members_sort_by_utf16_code_units() {
        // U+1F600 is D83D DE00 in UTF-16 and sorts before U+FF21; in UTF-8 it sorts after.
        let v = json!({"\u{FF21}": 1, "\u{1F600}": 2, "a": 3});
        assert_eq!(
            canonical_json(&v).unwrap(),
            "{\"a\":3,\"\u{1F600}\":2,\"\u{FF21}\":1}"
        );
    }

    #[test]
    fn nested_objects_and_arrays_are_canonical_all_the_way_down() {
        assert_eq!(
            canon(r#"{"z":{"y":[{"b":2.0,"a":null}],"x":true},"a":"A"}"#),
            r#"{"a":"A","z":{"x":true,"y":[{"a":null,"b":2}]}}"#
        );
    }
}
