//! The hash chain that makes each key's attempt log tamper-evident: what a row's hash
//! covers, how it is computed and checked, and the one way a row joins its key's chain
//! ([`seal`]).

use super::binding::bind_state;
use super::record::{Attempt, AttemptDraft, Record};
use crate::base::canonical::{Members, canonical_json, write_canonical, write_canonical_text};
use crate::base::time::{rfc3339, write_rfc3339};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::borrow::Cow;
use std::cell::RefCell;

/// The `prev_hash` of a key's first attempt.
pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The content of an attempt row that the chain covers, in a fixed shape.
#[derive(Debug, Clone, Copy)]
pub struct ChainFields<'a> {
    pub key: &'a str,
    pub tenant: &'a str,
    pub tool: &'a str,
    pub seq: i64,
    pub kind: &'a str,
    pub fencing_token: i64,
    pub actor: &'a str,
    pub detail: Detail<'a>,
    pub duration_ms: Option<i64>,
    pub occurred_at: DateTime<Utc>,
}

/// A row's `detail` as the chain covers it: a value, or the JSON text the store read
/// (`verify`, which then builds no value for the hash).
#[derive(Debug, Clone, Copy)]
pub enum Detail<'a> {
    Value(&'a Value),
    Json(&'a str),
}

/// hash = lowercase hex SHA-256 of `prev_hash`, a newline, and the JCS form of the
/// row's content (times as RFC 3339 UTC with microseconds). Documented in
/// docs/GUARD.md so an auditor can recompute it without idemwatch.
pub fn chain_hash(prev_hash: &str, fields: ChainFields<'_>) -> String {
    hex::encode(chain_digest(prev_hash, &fields))
}

/// Whether `stored` is [`chain_hash`] of the row: the same test without a `String` per
/// row (`verify` asks it of every row in the database).
pub fn chain_hash_is(stored: &str, prev_hash: &str, fields: ChainFields<'_>) -> bool {
    let mut hex = [0u8; 64];
    hex::encode_to_slice(chain_digest(prev_hash, &fields), &mut hex)
        .is_ok_and(|()| hex.as_slice() == stored.as_bytes())
}

fn chain_digest(prev_hash: &str, fields: &ChainFields<'_>) -> [u8; 32] {
    thread_local! {
        /// The content of the row being hashed: one buffer per thread, reused for
        /// every row instead of a `String` (and the detail's and time's) per row.
        static CONTENT: RefCell<String> = const { RefCell::new(String::new()) };
    }
    CONTENT.with_borrow_mut(|content| {
        content.clear();
        if write_chain_content(content, fields).is_none() {
            content.clear();
            content.push_str(&chain_content_via_value(fields));
        }
        let mut hash = Sha256::new();
        hash.update(prev_hash.as_bytes());
        hash.update(b"\n");
        hash.update(content.as_bytes());
        let digest = hash.finalize().into();
        // One outsized row (an edited detail of megabytes) must not pin its size on
        // this thread for the life of the process.
        if content.capacity() > MAX_KEPT_CONTENT {
            *content = String::new();
        }
        digest
    })
}

/// The largest row content [`chain_digest`]'s buffer keeps between rows; the guard's
/// rows are under 1 KiB.
const MAX_KEPT_CONTENT: usize = 64 << 10;

/// The JCS form of the row's content, member by member ([`Members`]): the same bytes as
/// [`chain_content_via_value`] without building a JSON object per row, and for a detail
/// given as text without parsing it into a value. `verify` hashes every row of the
/// database, so this is its hot loop (docs/PERFORMANCE.md, "The chain's writer"). None
/// (with `out` part written) when a number is outside what JCS represents exactly or the
/// detail is not canonicalisable: the rare case goes the general way.
fn write_chain_content(out: &mut String, f: &ChainFields<'_>) -> Option<()> {
    let mut row = Members::open(out);
    row.string("actor", f.actor);
    match f.detail {
        Detail::Value(value) => write_canonical(row.name("detail"), value).ok()?,
        Detail::Json(text) => write_canonical_text(row.name("detail"), text)?,
    }
    row.integer("duration_ms", f.duration_ms)?;
    row.integer("fencing_token", Some(f.fencing_token))?;
    row.string("key", f.key);
    row.string("kind", f.kind);
    let at = row.name("occurred_at");
    // Its digits need no escaping.
    at.push('"');
    write_rfc3339(at, f.occurred_at);
    at.push('"');
    row.integer("seq", Some(f.seq))?;
    row.string("tenant", f.tenant);
    row.string("tool", f.tool);
    row.close();
    Some(())
}

/// The row's content as a JSON object in JCS form: the definition
/// [`write_chain_content`] must equal (tested), and the way for rows it does not take.
fn chain_content_via_value(fields: &ChainFields<'_>) -> String {
    // A detail read as text that no value holds (a number beyond a double's range)
    // hashes as that text quoted: the guard never writes one, so the row then fails.
    let detail = match fields.detail {
        Detail::Value(value) => Cow::Borrowed(value),
        Detail::Json(text) => Cow::Owned(
            serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string())),
        ),
    };
    let content = json!({
        "key": fields.key,
        "tenant": fields.tenant,
        "tool": fields.tool,
        "seq": fields.seq,
        "kind": fields.kind,
        "fencing_token": fields.fencing_token,
        "actor": fields.actor,
        "detail": &*detail,
        "duration_ms": fields.duration_ms,
        "occurred_at": rfc3339(fields.occurred_at),
    });
    // Values written by the guard were canonicalisable when written; a detail that
    // was edited into something that is not (a huge integer) must still hash, to a
    // value that then fails verification.
    canonical_json(&content).unwrap_or_else(|_| content.to_string())
}

impl Attempt {
    pub fn chain_fields(&self) -> ChainFields<'_> {
        ChainFields {
            key: self.key.as_str(),
            tenant: &self.tenant,
            tool: &self.tool,
            seq: self.seq,
            kind: self.kind.as_str(),
            fencing_token: self.fencing_token.0,
            actor: &self.actor,
            detail: Detail::Value(&self.detail),
            duration_ms: self.duration_ms,
            occurred_at: self.occurred_at,
        }
    }
}

/// Extends `record`'s chain with `draft`, returning the sealed row (id not yet known).
/// The row's `detail` gains `state`: digests of the record as it is after this row
/// (see [`super::binding`]), so the chain covers what replays return, not only the
/// order of events. Every writer seals through here, so every row is bound.
pub fn seal(record: &mut Record, mut draft: AttemptDraft) -> Attempt {
    draft.detail = bind_state(draft.detail, record);
    let seq = record.log_seq + 1;
    let prev_hash = record.log_hash.clone();
    let hash = chain_hash(
        &prev_hash,
        ChainFields {
            key: record.key.as_str(),
            tenant: &record.intent.tenant,
            tool: &record.intent.tool,
            seq,
            kind: draft.kind.as_str(),
            fencing_token: draft.fencing_token.0,
            actor: &draft.actor,
            detail: Detail::Value(&draft.detail),
            duration_ms: draft.duration_ms,
            occurred_at: draft.occurred_at,
        },
    );
    record.log_seq = seq;
    record.log_hash = hash.clone();
    Attempt {
        id: 0,
        key: record.key.clone(),
        tenant: record.intent.tenant.clone(),
        tool: record.intent.tool.clone(),
        seq,
        kind: draft.kind,
        fencing_token: draft.fencing_token,
        actor: draft.actor,
        detail: draft.detail,
        duration_ms: draft.duration_ms,
        occurred_at: draft.occurred_at,
        prev_hash,
        hash,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guard::key::FencingToken;
    use crate::guard::record::tests::record;
    use crate::guard::status::AttemptKind;

    fn chain_content(fields: &ChainFields<'_>) -> Option<String> {
        let mut out = String::new();
        write_chain_content(&mut out, fields).map(|()| out)
    }

    /// The member-by-member form is the JSON object's JCS form, byte for byte, for
    /// text that needs escaping, non-ASCII, nested and odd details, and the numbers at
    /// the edge of what JCS represents (where it hands over to the general way); a
    /// detail given as its JSON text (compact, or spaced as jsonb prints it) hashes
    /// as its value does.
    #[test]
    fn chain_content_written_directly_equals_the_json_objects_jcs_form() {
        let t = DateTime::parse_from_rfc3339("2026-11-29T14:02:11.000402Z")
            .unwrap()
            .to_utc();
        let details = [
            json!({}),
            json!(null),
            json!({"b": 1, "a": [1.5, "x"], "state": {"result_sha256": "ab"}}),
            json!({"reason": "timeout \"after\" 10 s\n\u{1}", "ünï": "€ 😀", "\u{e000}": 1, "😀": 2}),
            json!({"amount": 4500.0, "tiny": 1e-7, "big": 1e21, "neg": -0.0}),
            json!({"unsafe": 9_007_199_254_740_993_u64}),
            json!([1, {"z": null, "a": true}]),
        ];
        let numbers = [0, 1, -7, (1 << 53) - 1, 1 << 53, i64::MAX, i64::MIN];
        let texts = [
            "k",
            "acme \"quoted\"",
            "tab\there",
            "ünï€😀",
            "back\\slash",
            "",
        ];
        let mut checked = 0;
        let as_text: Vec<[String; 2]> = details
            .iter()
            .map(|d| [d.to_string(), serde_json::to_string_pretty(d).unwrap()])
            .collect();
        for (i, value) in details.iter().enumerate() {
            for (j, n) in numbers.iter().enumerate() {
                let detail = match j % 3 {
                    0 => Detail::Value(value),
                    k => Detail::Json(&as_text[i][k - 1]),
                };
                let text = texts[(i + j) % texts.len()];
                let fields = ChainFields {
                    key: text,
                    tenant: texts[j % texts.len()],
                    tool: "issue_refund",
                    seq: *n,
                    kind: "claimed",
                    fencing_token: numbers[(j + 1) % numbers.len()],
                    actor: text,
                    detail,
                    duration_ms: (j % 2 == 0).then_some(*n),
                    occurred_at: t,
                };
                let general = chain_content_via_value(&ChainFields {
                    detail: Detail::Value(value),
                    ..fields
                });
                assert_eq!(chain_content_via_value(&fields), general);
                if let Some(direct) = chain_content(&fields) {
                    assert_eq!(direct, general, "{fields:?}");
                    checked += 1;
                }
                let mut h = Sha256::new();
                h.update(b"prev\n");
                h.update(general.as_bytes());
                let hash = hex::encode(h.finalize());
                assert!(chain_hash_is(&hash, "prev", fields));
                assert!(!chain_hash_is(&hash, "other", fields));
                assert!(!chain_hash_is(&hash[..63], "prev", fields));
                assert!(!chain_hash_is(&hash.to_uppercase(), "prev", fields));
                assert_eq!(chain_hash("prev", fields), hash);
            }
        }
        assert!(
            checked >= 15,
            "the direct form was taken only {checked} times"
        );
    }

    /// A draft of worker `w1` under the first token, at `record()`'s creation time.
    fn draft(kind: AttemptKind) -> AttemptDraft {
        AttemptDraft::new(kind, FencingToken::FIRST, "w1", record().created_at)
    }

    #[test]
    fn sealing_numbers_rows_without_gaps_and_links_each_to_the_last() {
        let mut r = record();
        let a = seal(&mut r, draft(AttemptKind::Claimed));
        let b = seal(&mut r, draft(AttemptKind::Completed).duration_ms(5));
        assert_eq!((a.seq, b.seq), (1, 2));
        assert_eq!(a.prev_hash, GENESIS_HASH);
        assert_eq!(b.prev_hash, a.hash);
        assert_eq!(r.log_hash, b.hash);
        assert_eq!(chain_hash(&b.prev_hash, b.chain_fields()), b.hash);
    }

    #[test]
    fn editing_any_field_changes_the_hash() {
        let mut r = record();
        let a = seal(&mut r, draft(AttemptKind::Claimed));
        let mut edited = a.clone();
        edited.actor = "someone-else".into();
        assert_ne!(chain_hash(&a.prev_hash, edited.chain_fields()), a.hash);
        let mut edited = a.clone();
        edited.detail = json!({"x": 1});
        assert_ne!(chain_hash(&a.prev_hash, edited.chain_fields()), a.hash);
    }

    /// Hashes fixed in the stored chains: every way a row can take
    /// (a value or its text, escapes, non-ASCII, numbers JCS refuses, a detail that is
    /// not JSON) must keep its bytes, or every stored chain breaks.
    #[test]
    fn chain_hashes_keep_their_bytes() {
        let t = DateTime::parse_from_rfc3339("2026-11-29T14:02:11.000402Z")
            .unwrap()
            .to_utc();
        let details = [
            json!({"state": {"status": "DONE", "result_sha256": "ab"}, "lease_until": "x"}),
            json!({"reason": "timeout \"after\" 10 s\n\u{1}", "ünï": "€ 😀", "\u{e000}": 1, "😀": 2}),
            json!({"amount": 4500.0, "tiny": 1e-7, "big": 1e21, "neg": -0.0}),
            json!({"unsafe": 9_007_199_254_740_993_u64}),
            json!(null),
        ];
        let mut got = Vec::new();
        for (i, detail) in details.iter().enumerate() {
            let text = detail.to_string();
            for (j, seq) in [3, 1 << 53].into_iter().enumerate() {
                let fields = ChainFields {
                    key: "k\"ey",
                    tenant: "acme",
                    tool: "ünï",
                    seq,
                    kind: "completed",
                    fencing_token: 2,
                    actor: "token:w\t1",
                    detail: Detail::Value(detail),
                    duration_ms: (i % 2 == 0).then_some(812),
                    occurred_at: t,
                };
                let by_text = chain_hash(
                    "p",
                    ChainFields {
                        detail: Detail::Json(&text),
                        ..fields
                    },
                );
                assert_eq!(by_text, chain_hash("p", fields), "{i} {j}");
                assert!(chain_hash_is(&by_text, "p", fields));
                assert!(!chain_hash_is(&by_text, "q", fields));
                got.push(chain_hash("p", fields));
            }
        }
        let not_json = ChainFields {
            key: "k",
            tenant: "t",
            tool: "x",
            seq: 1,
            kind: "claimed",
            fencing_token: 1,
            actor: "a",
            detail: Detail::Json("{\"a\": 1e999}"),
            duration_ms: None,
            occurred_at: t,
        };
        got.push(chain_hash(GENESIS_HASH, not_json));
        // A detail text that would add members to the content if pasted into it is not
        // one JSON value: it hashes as that text quoted.
        let splice = "{}, \"seq\": 9";
        let quoted = Value::String(splice.into());
        assert_eq!(
            chain_hash(
                "p",
                ChainFields {
                    detail: Detail::Json(splice),
                    ..not_json
                }
            ),
            chain_hash(
                "p",
                ChainFields {
                    detail: Detail::Value(&quoted),
                    ..not_json
                }
            ),
        );
        assert_eq!(
            got,
            [
                "af8f740279a3d1894998c079e91ba44be2a9180b16923f2f3d7251f8f2cb503e",
                "9ed6b94c1fad985ca91d8e980a3aaa6ab915540df55e22b9580aef7abfb15b39",
                "9fb706766a2791262a056f018d47d0430f989bbc4756fbc28e7825e5ea1c1b31",
                "01941a4e6cf94d18fdb50cb0b9bdb706ccb4976a0653209851296ee9a82115ca",
                "30a3b9736a6e644146e274cd79ce8218df6a148f763a212faf711668cf44e214",
                "62920e27afeda994f7a984c8ce94f94e27c75e8d36cd977b3d26f84700015c1c",
                "6a12f5aae576b140e902e0eac04714b6877d687df1eb5276117acb601006cb81",
                "b3d1631b686366ed139b68ebc8ac687cfc1abd064c4780cc32a94d23728c4720",
                "c52bed869129de61b0d33a38149f5a771b53123fb51b08310532695af681fd46",
                "6e7b127d133e72898ab1104a45c960b13e105ab1c16699c50b0c758e238b70fb",
                "098a5f0e69318a10d07eebb351d80635d6663e46243ce671aad52581aacb72e1"
            ]
        );
    }
}
