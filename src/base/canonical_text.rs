//! The JCS form of JSON *text*, written without building a `serde_json::Value`.
//!
//! `verify` hashes every attempt row, and each row's `detail` arrives as JSON text
//! (~400-550 bytes of the guard's lease, policy and state digests). Parsing it into a
//! `Value` (a map and a `String` per member) only to print it again in JCS form was
//! most of the client's time per row. This scanner reads the text once, sorts an
//! object's members by name, and writes the same bytes as
//! [`canonical_json`](super::canonical::canonical_json) would.
//!
//! It writes only what it is sure to write exactly as `canonical_json` does: strings
//! (re-escaped by the same [`write_string`]), `true`/`false`/`null`, and integers
//! within 2^53. Anything else (fractions and exponents, whose ECMAScript form needs
//! the double; larger integers; escapes of lone surrogates; a name given twice, which
//! a `Value` resolves to its last value) answers `None`, and the caller takes the
//! `Value` way.

use super::canonical::{MAX_SAFE_INTEGER, jcs_order, write_string};
use std::borrow::Cow;
use std::ops::Range;

/// Appends the JCS form of `json` to `out`; `None` (with `out` as it was) when the
/// text is not valid JSON or holds something left to `canonical_json` (see above).
pub(crate) fn write_canonical_text(out: &mut String, json: &str) -> Option<()> {
    let start = out.len();
    let mut scan = Scanner {
        text: json,
        pos: 0,
        depth: 0,
    };
    let written = scan.value(out).and_then(|()| {
        scan.skip_ws();
        (scan.pos == json.len()).then_some(())
    });
    if written.is_none() {
        out.truncate(start);
    }
    written
}

/// serde_json's own nesting limit (it refuses a 128th level): text deeper than a
/// `Value` can hold is refused, and the recursion here stays as shallow as the parser's.
const MAX_DEPTH: u32 = 127;

struct Scanner<'a> {
    text: &'a str,
    pos: usize,
    /// Objects and arrays open around the current position.
    depth: u32,
}

impl<'a> Scanner<'a> {
    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    /// Consumes `byte` after any whitespace.
    fn expect(&mut self, byte: u8) -> Option<()> {
        self.skip_ws();
        (self.peek()? == byte).then(|| self.pos += 1)
    }

    fn literal(&mut self, word: &'static str) -> Option<&'static str> {
        let rest = &self.text[self.pos..];
        rest.starts_with(word).then(|| {
            self.pos += word.len();
            word
        })
    }

    /// One value, written in JCS form.
    fn value(&mut self, out: &mut String) -> Option<()> {
        self.skip_ws();
        let scalar = match self.peek()? {
            b'{' | b'[' => {
                self.depth += 1;
                if self.depth > MAX_DEPTH {
                    return None;
                }
                let nested = if self.peek()? == b'{' {
                    self.object(out)
                } else {
                    self.array(out)
                };
                self.depth -= 1;
                return nested;
            }
            b'"' => {
                write_name(out, self.string()?);
                return Some(());
            }
            b't' => self.literal("true")?,
            b'f' => self.literal("false")?,
            b'n' => self.literal("null")?,
            _ => self.integer()?,
        };
        out.push_str(scalar);
        Some(())
    }

    fn array(&mut self, out: &mut String) -> Option<()> {
        self.pos += 1;
        out.push('[');
        self.skip_ws();
        if self.peek()? != b']' {
            loop {
                self.value(out)?;
                self.skip_ws();
                match self.peek()? {
                    b',' => out.push(','),
                    b']' => break,
                    _ => return None,
                }
                self.pos += 1;
            }
        }
        self.pos += 1;
        out.push(']');
        Some(())
    }

    /// An object: each member's value is written after what `out` holds, in the
    /// order given; then the object is written from those pieces with its members in
    /// JCS order, and the pieces are dropped. Each byte is read once.
    fn object(&mut self, out: &mut String) -> Option<()> {
        self.pos += 1;
        let pieces_from = out.len();
        let mut members: Vec<(Cow<'a, str>, Range<usize>)> = Vec::new();
        self.skip_ws();
        if self.peek()? == b'}' {
            self.pos += 1;
        } else {
            loop {
                self.expect(b'"')?;
                self.pos -= 1;
                let name = self.string()?;
                self.expect(b':')?;
                let start = out.len();
                self.value(out)?;
                members.push((name, start..out.len()));
                self.skip_ws();
                match self.peek()? {
                    b',' => self.pos += 1,
                    b'}' => break,
                    _ => return None,
                }
            }
            self.pos += 1;
        }
        members.sort_by(|(a, _), (b, _)| jcs_order(a, b));
        if members.windows(2).any(|m| m[0].0 == m[1].0) {
            return None;
        }
        let object_from = out.len();
        out.push('{');
        for (i, (name, piece)) in members.into_iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            write_name(out, name);
            out.push(':');
            out.extend_from_within(piece);
        }
        out.push('}');
        out.drain(pieces_from..object_from);
        Some(())
    }

    /// A string's text, unescaped; borrowed when it holds no escape (the usual case).
    fn string(&mut self) -> Option<Cow<'a, str>> {
        let bytes = self.text.as_bytes();
        let start = self.pos + 1;
        let mut i = start;
        loop {
            match *bytes.get(i)? {
                b'"' => {
                    self.pos = i + 1;
                    return Some(Cow::Borrowed(&self.text[start..i]));
                }
                b'\\' => break,
                b if b < 0x20 => return None,
                _ => i += 1,
            }
        }
        let mut text = String::from(&self.text[start..i]);
        loop {
            match *bytes.get(i)? {
                b'"' => {
                    self.pos = i + 1;
                    return Some(Cow::Owned(text));
                }
                b'\\' => {
                    let escaped = *bytes.get(i + 1)?;
                    i += 2;
                    let c = match escaped {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            let unit = hex4(bytes.get(i..i + 4)?)?;
                            i += 4;
                            match unit {
                                0xD800..=0xDBFF => {
                                    if bytes.get(i..i + 2)? != b"\\u" {
                                        return None;
                                    }
                                    let low = hex4(bytes.get(i + 2..i + 6)?)?;
                                    i += 6;
                                    if !(0xDC00..=0xDFFF).contains(&low) {
                                        return None;
                                    }
                                    let c = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
                                    char::from_u32(c)?
                                }
                                _ => char::from_u32(unit)?,
                            }
                        }
                        _ => return None,
                    };
                    text.push(c);
                }
                b if b < 0x20 => return None,
                _ => {
                    // Up to the next quote or escape, whole characters at a time.
                    let run = bytes[i..]
                        .iter()
                        .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
                        .map_or(bytes.len(), |n| i + n);
                    text.push_str(self.text.get(i..run)?);
                    i = run;
                }
            }
        }
    }

    /// An integer JCS prints as its digits: within 2^53, no fraction or exponent.
    /// `-0` prints as `0`, as ECMAScript does.
    fn integer(&mut self) -> Option<&'a str> {
        let bytes = self.text.as_bytes();
        let start = self.pos;
        let digits_from = start + usize::from(bytes[start] == b'-');
        let digits = bytes[digits_from..]
            .iter()
            .position(|b| !b.is_ascii_digit())
            .unwrap_or(bytes.len() - digits_from);
        let end = digits_from + digits;
        if digits == 0
            || digits > 16
            || (digits > 1 && bytes[digits_from] == b'0')
            || matches!(bytes.get(end), Some(b'.' | b'e' | b'E'))
        {
            return None;
        }
        let n: u64 = self.text[digits_from..end].parse().ok()?;
        if n > MAX_SAFE_INTEGER {
            return None;
        }
        self.pos = end;
        Some(if n == 0 { "0" } else { &self.text[start..end] })
    }
}

/// A string as [`write_string`] writes it; text read without an escape has nothing
/// to escape (no quote, backslash or control), so it is only quoted.
fn write_name(out: &mut String, text: Cow<'_, str>) {
    match text {
        Cow::Borrowed(text) => {
            out.push('"');
            out.push_str(text);
            out.push('"');
        }
        Cow::Owned(text) => write_string(out, &text),
    }
}

fn hex4(digits: &[u8]) -> Option<u32> {
    let text = std::str::from_utf8(digits).ok()?;
    if !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(text, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::canonical::canonical_json;

    /// What the text way must equal: the `Value` way.
    fn via_value(text: &str) -> Option<String> {
        canonical_json(&serde_json::from_str(text).ok()?).ok()
    }

    fn via_text(text: &str) -> Option<String> {
        let mut out = String::from("prefix");
        let written = write_canonical_text(&mut out, text);
        match written {
            Some(()) => Some(out["prefix".len()..].to_string()),
            None => {
                assert_eq!(out, "prefix", "a refusal leaves the buffer as it was");
                None
            }
        }
    }

    /// Either the same bytes as the `Value` way, or a refusal; returns whether taken.
    fn same(text: &str) -> bool {
        match via_text(text) {
            Some(direct) => {
                assert_eq!(Some(&direct), via_value(text).as_ref(), "input {text:?}");
                true
            }
            None => false,
        }
    }

    /// The guard's real details, as jsonb prints them (members by length, spaces).
    const GUARD_DETAILS: [&str; 4] = [
        r#"{"state": {"status": "IN_PROGRESS", "fingerprint": "aaf52bea6eae9d8e3428cab21930b2247913b95cf6fdb15785377a932a01a2d0", "error_sha256": null, "result_sha256": null, "business_ref_sha256": "15d93cc8e8012642a39e2137b06379da9e72516520e0b1fa4b146f6295be72b0", "business_args_sha256": "aaf52bea6eae9d8e3428cab21930b2247913b95cf6fdb15785377a932a01a2d0"}, "policy": {"tool": "issue_refund", "natural_key": [], "free_text_fields": [], "call_timeout_seconds": 10, "key_retention_seconds": 86400, "duplicate_window_seconds": 86400}, "lease_until": "2026-11-01T00:00:30.001000Z"}"#,
        r#"{"state": {"status": "DONE", "fingerprint": "aaf5", "error_sha256": null, "result_sha256": "eb74", "business_ref_sha256": null, "business_args_sha256": "aaf5"}}"#,
        r#"{"reason": "provider said \"no\"\n", "lookup": {"found": false, "attempts": [1, 2, 3]}, "approved_by": "ops@example.com"}"#,
        "{}",
    ];

    #[test]
    fn the_guards_details_are_written_as_canonical_json_writes_them() {
        for text in GUARD_DETAILS {
            assert!(same(text), "not taken: {text}");
        }
    }

    #[test]
    fn escapes_non_ascii_and_names_above_the_bmp_match_the_value_way() {
        let taken = [
            r#""a\"b\\c\/d""#,
            r#""\u0001\b\f\n\r\t\u001f\u007f""#,
            r#""caf\u00e9 € \u20AC""#,
            r#""\ud83d\ude00 😀""#,
            r#"{"\uFF21": 1, "😀": 2, "a": 3, "\u00e9": 4, "\ue000": 5, "": 6}"#,
            r#"{"b": {"d": [], "c": {}}, "a": [[], [{}], [[1]]]}"#,
            r#"[true, false, null, "x", 0, -0, 7, -7, 9007199254740991, -9007199254740991]"#,
            "  {\n\t\"z\" : [ 1 , 2 ] ,\r\"y\":\"\"}  ",
            &format!("{}1{}", "[{\"a\":".repeat(63), "}]".repeat(63)),
            r#""ünï\"€""#,
            r#"{"a\"b": 1, "a": 2, "a\u0000": 3}"#,
            "0",
            "null",
        ];
        let deepest = format!("{}1{}", "[".repeat(127), "]".repeat(127));
        assert!(same(&deepest), "the deepest a value holds is taken");
        for text in taken {
            assert!(same(text), "not taken: {text}");
        }
    }

    #[test]
    fn what_it_cannot_write_exactly_is_refused_not_guessed() {
        let deep = format!("{}{}", "[".repeat(128), "]".repeat(128));
        let refused = [
            "1.5",
            "4500.0",
            "1e21",
            "45E2",
            "-0.0",
            "9007199254740992",
            "-9007199254740993",
            "123456789012345678901234567890",
            r#""\ud800""#,
            r#""\ud800\u0041""#,
            r#""\udc00""#,
            r#"{"a": 1, "a": 2}"#,
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

    /// Mutations of the guard's details and of odd values, put in every place a value
    /// can go: whatever the text way writes is the `Value` way's bytes.
    #[test]
    fn a_generated_corpus_writes_the_same_bytes_as_the_value_way() {
        let values = [
            "0",
            "-1",
            "42",
            "9007199254740991",
            "9007199254740992",
            "1.25",
            "-0",
            "1E3",
            "true",
            "null",
            r#""""#,
            r#""\u00e9\n""#,
            r#""\ud83d\ude00""#,
            r#""€""#,
            "[]",
            "{}",
            r#"[1, "a", [null]]"#,
            r#"{"y": 1, "x": {"b": [], "a": "\t"}}"#,
        ];
        let names = [
            "a",
            "b",
            "\u{e000}",
            "😀",
            "\\u00e9",
            "\\\"q",
            "",
            "lease_until",
        ];
        let mut taken = 0;
        let mut seen = 0;
        for (i, v) in values.iter().enumerate() {
            for (j, n) in names.iter().enumerate() {
                let other = names[(i + j + 1) % names.len()];
                let w = values[(i * 7 + j) % values.len()];
                let texts = [
                    format!(r#"{{"{n}": {v}}}"#),
                    format!(r#"{{"{n}": {v}, "{other}": {w}}}"#),
                    format!(r#"[{v}, {{"{other}": [{w}, {v}]}}]"#),
                    format!(r#"{{"state": {{"{n}": {v}}}, "policy": [{w}]}}"#),
                ];
                for text in texts {
                    seen += 1;
                    if via_value(&text).is_some() || via_text(&text).is_some() {
                        taken += usize::from(same(&text));
                    }
                }
                for base in GUARD_DETAILS {
                    // A member added at the front, and one value replaced.
                    let text = base.replacen('{', &format!(r#"{{"{n}": {v}, "#), 1);
                    let text = if text.ends_with(", }") {
                        text.replace(", }", "}")
                    } else {
                        text
                    };
                    seen += 1;
                    taken += usize::from(same(&text));
                    let text = base.replacen("null", v, 1);
                    seen += 1;
                    taken += usize::from(same(&text));
                }
            }
        }
        assert!(taken * 2 > seen, "taken only {taken} of {seen}");
    }
}
