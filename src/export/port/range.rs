//! A range of idempotency keys, so that `verify` can read the attempt log in parts
//! on several connections at once. Keys are 64 lowercase hex digits (a SHA-256), so
//! ranges cut at two-digit prefixes hold about equal shares of them.

/// Keys `from <= key < to` (`to: None`: no upper end). The first range starts at
/// `""`, below every text, and the last has no upper end, so the ranges of
/// [`KeyRange::split`] cover every key the table can hold, hex or not (a key edited
/// by hand still lands in exactly one range, under the database's own ordering).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRange {
    pub from: String,
    pub to: Option<String>,
}

impl KeyRange {
    /// `parts` ranges in key order (at most 256), adjacent and covering every key:
    /// the cuts are two-digit hex prefixes spread evenly over `00`..`ff`.
    pub fn split(parts: usize) -> Vec<KeyRange> {
        let parts = parts.clamp(1, 256);
        let cut = |i: usize| format!("{:02x}", i * 256 / parts);
        (0..parts)
            .map(|i| KeyRange {
                from: if i == 0 { String::new() } else { cut(i) },
                to: (i + 1 < parts).then(|| cut(i + 1)),
            })
            .collect()
    }

    pub fn contains(&self, key: &str) -> bool {
        key >= self.from.as_str() && self.to.as_deref().is_none_or(|to| key < to)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_ranges_are_adjacent_and_cover_every_key() {
        for parts in [1, 2, 3, 16, 255, 256, 1000] {
            let ranges = KeyRange::split(parts);
            assert_eq!(ranges.len(), parts.min(256));
            assert_eq!(ranges[0].from, "");
            assert_eq!(ranges.last().unwrap().to, None);
            for pair in ranges.windows(2) {
                assert_eq!(pair[0].to.as_deref(), Some(pair[1].from.as_str()));
                assert!(pair[0].from < pair[1].from);
            }
            for key in ["", "0", "00ab", "7f", "80", "ff", "fff", "G-not-hex", "~"] {
                let holding = ranges.iter().filter(|r| r.contains(key)).count();
                assert_eq!(holding, 1, "{key} in {parts} ranges");
            }
        }
    }

    #[test]
    fn sixteen_ranges_cut_at_each_first_hex_digit() {
        let ranges = KeyRange::split(16);
        assert_eq!(ranges[1].from, "10");
        assert_eq!(ranges[15].from, "f0");
        assert!(ranges[10].contains(&format!("a{}", "0".repeat(63))));
    }
}
