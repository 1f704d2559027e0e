//! Links the pages and downloads write: query values percent-encoded, absent ones
//! left out.

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

/// What a query value keeps unencoded: RFC 3986's unreserved characters only.
const QUERY_VALUE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Percent-encodes a query value: everything but RFC 3986's unreserved characters.
pub fn encode(value: &str) -> String {
    utf8_percent_encode(value, QUERY_VALUE).to_string()
}

/// `path?name=value&…` for the pairs whose value is present.
pub fn link(path: &str, pairs: &[(&str, Option<&str>)]) -> String {
    let query: Vec<String> = pairs
        .iter()
        .filter_map(|(k, v)| v.map(|v| format!("{k}={}", encode(v))))
        .collect();
    if query.is_empty() {
        path.to_string()
    } else {
        format!("{path}?{}", query.join("&"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_encode_their_values_and_skip_absent_ones() {
        type Pairs<'a> = &'a [(&'a str, Option<&'a str>)];
        let cases: [(Pairs, &str); 3] = [
            (
                &[("tool", Some("issue_refund")), ("tenant", None)],
                "/keys?tool=issue_refund",
            ),
            (
                &[("business_ref", Some("order:A-88214 & co"))],
                "/keys?business_ref=order%3AA-88214%20%26%20co",
            ),
            (&[], "/keys"),
        ];
        for (pairs, want) in cases {
            assert_eq!(link("/keys", pairs), want);
        }
    }
}
