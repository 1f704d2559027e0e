//! RFC 8785 (JSON Canonicalization Scheme) serialisation.
//!
//! Keys and fingerprints are SHA-256 over this form, so a guard written in another
//! language must produce the same bytes. JCS gives us that: object members sorted by
//! their UTF-16 code units, no insignificant whitespace, strings escaped exactly as
//! ECMAScript's `JSON.stringify` does, and numbers printed as ECMAScript doubles
//! (`4500.0` becomes `4500`, `1e21` becomes `1e+21`, `-0` becomes `0`).
//!
//! One writer for both inputs: a `serde_json::Value` (the guard's) and JSON text (a
//! stored column that export and verify read for every row). The writer is a serde
//! visitor ([`Jcs`]), so text is written in one pass without building a `Value`, and a
//! `Value` and its text are written by the same code to the same bytes.

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use std::borrow::Cow;
use std::fmt;

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
    let mut failure = None;
    let written = value.deserialize_any(Jcs {
        out,
        failure: &mut failure,
    });
    match (written, failure) {
        (Ok(()), _) => Ok(()),
        (Err(_), Some(e)) => Err(e.under("$")),
        // A `Value` raises nothing of its own: every error is the writer's.
        (Err(e), None) => unreachable!("a Value deserialises without error: {e}"),
    }
}

/// Appends the JCS form of the JSON `text` to `out`; `None` (with `out` as it was)
/// when the text is not JSON or holds what JCS refuses (then its `Value`, if any,
/// is refused too). The same bytes as [`write_canonical`] of the text's `Value`.
pub(crate) fn write_canonical_text(out: &mut String, text: &str) -> Option<()> {
    let start = out.len();
    let mut failure = None;
    let mut de = serde_json::Deserializer::from_str(text);
    let written = de
        .deserialize_any(Jcs {
            out: &mut *out,
            failure: &mut failure,
        })
        .and_then(|()| de.end());
    if written.is_err() {
        out.truncate(start);
    }
    written.ok()
}

/// Writes the value it visits in JCS form after what `out` holds. A value JCS refuses
/// leaves its reason in `failure` (the path added on the way out) and answers an error.
struct Jcs<'o> {
    out: &'o mut String,
    failure: &'o mut Option<CanonicalError>,
}

impl Jcs<'_> {
    /// The same writer for a member or an element, writing into the same `out`.
    fn nested(&mut self) -> Jcs<'_> {
        Jcs {
            out: &mut *self.out,
            failure: &mut *self.failure,
        }
    }

    fn refuse<E: serde::de::Error>(self, why: CanonicalError) -> Result<(), E> {
        *self.failure = Some(why);
        Err(E::custom("not canonicalisable"))
    }

    /// An error from inside `segment` (`.name`, `[3]`), with the segment on its path.
    fn within<E>(&mut self, segment: impl FnOnce() -> String, e: E) -> E {
        if let Some(failure) = self.failure.take() {
            *self.failure = Some(failure.under(&segment()));
        }
        e
    }

    fn integer<E: serde::de::Error>(self, magnitude: u64, number: String) -> Result<(), E> {
        if magnitude > MAX_SAFE_INTEGER {
            return self.refuse(CanonicalError::UnsafeInteger {
                path: String::new(),
                number,
            });
        }
        // Exactly a double: printed as ECMAScript prints that double.
        let f = magnitude as f64;
        self.number(if number.starts_with('-') { -f } else { f })
    }

    fn number<E: serde::de::Error>(self, f: f64) -> Result<(), E> {
        if !f.is_finite() {
            return self.refuse(CanonicalError::NonFinite {
                path: String::new(),
            });
        }
        if f == 0.0 {
            // ECMAScript prints -0 as "0".
            self.out.push('0');
        } else {
            let mut buf = ryu_js::Buffer::new();
            self.out.push_str(buf.format_finite(f));
        }
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for Jcs<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Jcs<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        self.out.push_str("null");
        Ok(())
    }
    fn visit_bool<E: serde::de::Error>(self, b: bool) -> Result<(), E> {
        self.out.push_str(if b { "true" } else { "false" });
        Ok(())
    }
    fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<(), E> {
        self.integer(n, n.to_string())
    }
    fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<(), E> {
        self.integer(n.unsigned_abs(), n.to_string())
    }
    fn visit_f64<E: serde::de::Error>(self, f: f64) -> Result<(), E> {
        self.number(f)
    }
    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<(), E> {
        write_string(self.out, s);
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut items: A) -> Result<(), A::Error> {
        self.out.push('[');
        let mut i = 0;
        loop {
            let comma = self.out.len();
            if i > 0 {
                self.out.push(',');
            }
            match items.next_element_seed(self.nested()) {
                Ok(Some(())) => i += 1,
                Ok(None) => {
                    self.out.truncate(comma);
                    break;
                }
                Err(e) => return Err(self.within(|| format!("[{i}]"), e)),
            }
        }
        self.out.push(']');
        Ok(())
    }

    /// Each member's value is written after what `out` holds, in the order given; then
    /// the object is written from those pieces with its members in JCS order (a name
    /// given twice keeps its last value, as a `Value` does), and the pieces are dropped.
    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        let pieces_from = self.out.len();
        let mut members: Vec<(Cow<'de, str>, std::ops::Range<usize>)> = Vec::new();
        while let Some(name) = map.next_key_seed(Name)? {
            let start = self.out.len();
            if let Err(e) = map.next_value_seed(self.nested()) {
                return Err(self.within(|| format!(".{name}"), e));
            }
            members.push((name, start..self.out.len()));
        }
        // Stable: of equal names, the last given comes last, and is the one kept.
        members.sort_by(|(a, _), (b, _)| jcs_order(a, b));
        let object_from = self.out.len();
        self.out.push('{');
        let mut first = true;
        for (i, (name, piece)) in members.iter().enumerate() {
            if members.get(i + 1).is_some_and(|(next, _)| next == name) {
                continue;
            }
            if !first {
                self.out.push(',');
            }
            first = false;
            write_string(self.out, name);
            self.out.push(':');
            self.out.extend_from_within(piece.clone());
        }
        self.out.push('}');
        self.out.drain(pieces_from..object_from);
        Ok(())
    }
}

/// A member's name, borrowed from the input when it holds no escape.
struct Name;

impl<'de> DeserializeSeed<'de> for Name {
    type Value = Cow<'de, str>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Name {
    type Value = Cow<'de, str>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a member name")
    }
    fn visit_borrowed_str<E: serde::de::Error>(self, s: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(s))
    }
    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(s.to_string()))
    }
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

/// Whether any string or member name inside `v` contains U+0000, which PostgreSQL's
/// text and jsonb cannot hold: refused on both backends alike, as a 400 naming the
/// field rather than a 500 on one of them.
pub(crate) fn holds_nul(v: &Value) -> bool {
    match v {
        Value::String(s) => s.contains('\0'),
        Value::Array(items) => items.iter().any(holds_nul),
        Value::Object(o) => o.iter().any(|(k, v)| k.contains('\0') || holds_nul(v)),
        _ => false,
    }
}

/// A JSON object written member by member in JCS form, for a fixed shape whose member
/// names the caller gives in JCS order: the guard's key material (every call) and the
/// chain's row content (every row `verify` reads), without building and sorting a
/// `Value` each time. Values go through this file's writers, so JCS stays defined here.
pub(crate) struct Members<'o> {
    out: &'o mut String,
    last: Option<&'static str>,
}

impl<'o> Members<'o> {
    pub(crate) fn open(out: &'o mut String) -> Self {
        out.push('{');
        Self { out, last: None }
    }

    /// Starts member `name` (plain ASCII, after the previous one in JCS order) and
    /// returns the text to write its value to.
    pub(crate) fn name(&mut self, name: &'static str) -> &mut String {
        debug_assert!(
            name.bytes()
                .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\')
        );
        debug_assert!(
            self.last.is_none_or(|last| last < name),
            "{name} out of JCS order"
        );
        if self.last.is_some() {
            self.out.push(',');
        }
        self.last = Some(name);
        self.out.push('"');
        self.out.push_str(name);
        self.out.push_str("\":");
        self.out
    }

    pub(crate) fn string(&mut self, name: &'static str, value: &str) {
        write_string(self.name(name), value);
    }

    /// An integer (or null); `None` for one beyond what JCS represents exactly.
    pub(crate) fn integer(&mut self, name: &'static str, value: Option<i64>) -> Option<()> {
        let out = self.name(name);
        match value {
            Some(n) if n.unsigned_abs() > MAX_SAFE_INTEGER => return None,
            // Within 2^53 an integer's double prints as its decimal digits.
            Some(n) => {
                // Writing to a String cannot fail.
                let _ = fmt::Write::write_fmt(out, format_args!("{n}"));
            }
            None => out.push_str("null"),
        }
        Some(())
    }

    pub(crate) fn close(self) {
        self.out.push('}');
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

    /// What the text way must equal: the `Value` way, for every text either takes.
    fn same(text: &str) -> bool {
        let via_value = serde_json::from_str(text)
            .ok()
            .and_then(|v: Value| canonical_json(&v).ok());
        let mut out = String::from("prefix");
        let via_text =
            write_canonical_text(&mut out, text).map(|()| out["prefix".len()..].to_string());
        if via_text.is_none() {
            assert_eq!(out, "prefix", "a refusal leaves the buffer as it was");
        }
        assert_eq!(via_text, via_value, "input {text:?}");
        via_text.is_some()
    }

    #[test]
    fn text_is_written_as_its_value_is_written() {
        let taken = [
            r#"{"state": {"status": "DONE", "fingerprint": "aaf5", "error_sha256": null, "result_sha256": "eb74", "business_ref_sha256": null, "business_args_sha256": "aaf5"}, "lease_until": "2026-11-01T00:00:30.001000Z"}"#,
            r#"{"reason": "provider said \"no\"\n", "lookup": {"found": false, "attempts": [1, 2, 3]}}"#,
            r#""a\"b\\c\/d""#,
            r#""\u0001\b\f\n\r\t\u001f\u007f""#,
            r#""caf\u00e9 € \u20AC \ud83d\ude00 😀""#,
            r#"{"\uFF21": 1, "😀": 2, "a": 3, "\u00e9": 4, "\ue000": 5, "": 6}"#,
            r#"{"b": {"d": [], "c": {}}, "a": [[], [{}], [[1]]]}"#,
            r#"[true, false, null, "x", 0, -0, -0.0, 7, -7, 1.5, 4500.0, 1e21, 45E2]"#,
            r#"[9007199254740991, -9007199254740991, 1e-7, 333333333.33333329]"#,
            "  {\n\t\"z\" : [ 1 , 2 ] ,\r\"y\":\"\"}  ",
            r#"{"a": 1, "b": 0, "a": 2}"#,
            "{}",
            "[]",
        ];
        for text in taken {
            assert!(same(text), "not taken: {text}");
        }
        let deepest = format!("{}1{}", "[".repeat(127), "]".repeat(127));
        assert!(same(&deepest), "the deepest a value holds is taken");
    }

    #[test]
    fn text_jcs_or_json_refuses_is_refused_whole() {
        let deep = format!("{}{}", "[".repeat(128), "]".repeat(128));
        let refused = [
            "9007199254740992",
            r#"{"a": [1, -9007199254740993]}"#,
            r#""\ud800""#,
            r#"{"a": 1,}"#,
            "[1 2]",
            "01",
            "{} x",
            deep.as_str(),
            "",
            "tru",
            r#""unterminated"#,
        ];
        for text in refused {
            assert!(!same(text), "taken: {text}");
        }
    }
}
