//! What a key listing is filtered by, and which index drives it: the most selective
//! filter present. Each driving index is its own statement ([`super::keys_sql`]), so no
//! planner has to guess from a generic plan.

use super::keys_sql::{
    BY_ATTEMPTS, BY_BUSINESS_REF, BY_INTENT, BY_KEY, BY_SEARCH, BY_TOOL, BY_UNDECIDED_STATUS,
    BY_UPDATED_AT, BY_WORKFLOW, KeyStatements,
};
use super::{far_future, far_past};
use crate::guard::{AttemptKind, Resolution, Status};
use chrono::{DateTime, Utc};

/// What a key listing is filtered by; every field is optional. Values are taken as
/// given: the web layer validates them (a key prefix is lowercase hex).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyFilter {
    /// Any id support staff may have, matched whole and in any case against the search
    /// terms the database keeps for each key (migration 0009): the business ref or its
    /// part after the colon, the number it ends with, a part of the intent id such as
    /// `ticket-1934`, a string in the result such as the provider's `rf_002202`.
    pub search: Option<String>,
    /// The beginning of a key, lowercase hex.
    pub key_prefix: Option<String>,
    /// The whole business ref (`order:A-88214`) or the part after its first colon.
    pub business_ref: Option<String>,
    pub workflow_id: Option<String>,
    pub intent_id: Option<String>,
    pub tenant: Option<String>,
    pub tool: Option<String>,
    pub status: Option<Status>,
    /// Last activity (`updated_at`) at or after this time; with `attempt_kinds`, the
    /// start of the window the attempt must fall in instead.
    pub from: Option<DateTime<Utc>>,
    /// Last activity before this time; with `attempt_kinds`, the window's end.
    pub to: Option<DateTime<Utc>>,
    /// Keys with an attempt of one of these kinds in the window (`from`, `to`),
    /// whatever happened to them later; empty: no such filter.
    pub attempt_kinds: Vec<AttemptKind>,
    /// With `attempt_kinds`: which of the `resolved` attempts count, by what the person
    /// decided and the status the key had before (the status a resolution entered
    /// depends on both); `None`: every one.
    pub resolved_as: Option<Vec<ResolvedAs>>,
}

/// What a `resolved` attempt did, as its detail records it (`detail.resolution`,
/// `detail.previous_status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResolvedAs {
    pub resolution: Resolution,
    /// `None`: a row without a previous status.
    pub previous_status: Option<Status>,
}

/// The index that drives a listing: the most selective filter present wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyIndex {
    Search,
    BusinessRef,
    KeyPrefix,
    WorkflowId,
    IntentId,
    UndecidedStatus,
    Tool,
    UpdatedAt,
    Attempts,
}

impl KeyFilter {
    pub fn index(&self) -> KeyIndex {
        let undecided = matches!(self.status, Some(Status::Unknown | Status::InProgress));
        if self.search.is_some() {
            KeyIndex::Search
        } else if self.business_ref.is_some() {
            KeyIndex::BusinessRef
        } else if self.key_prefix.is_some() {
            KeyIndex::KeyPrefix
        } else if self.workflow_id.is_some() {
            KeyIndex::WorkflowId
        } else if self.intent_id.is_some() {
            KeyIndex::IntentId
        } else if undecided {
            KeyIndex::UndecidedStatus
        } else if !self.attempt_kinds.is_empty() {
            KeyIndex::Attempts
        } else if self.tool.is_some() {
            KeyIndex::Tool
        } else {
            KeyIndex::UpdatedAt
        }
    }

    /// A count is cheap when the driving index bounds the rows it reads: always for the
    /// selective indexes; for tool and time alone only without filters the index cannot
    /// apply (a tenant or a common status would make the count scan for rare rows).
    pub(super) fn count_is_cheap(&self) -> bool {
        match self.index() {
            KeyIndex::Tool | KeyIndex::UpdatedAt => self.tenant.is_none() && self.status.is_none(),
            _ => true,
        }
    }

    pub(super) fn statements(&self) -> &'static KeyStatements {
        match self.index() {
            KeyIndex::Search => &BY_SEARCH,
            KeyIndex::BusinessRef => &BY_BUSINESS_REF,
            KeyIndex::KeyPrefix => &BY_KEY,
            KeyIndex::WorkflowId => &BY_WORKFLOW,
            KeyIndex::IntentId => &BY_INTENT,
            KeyIndex::UndecidedStatus => &BY_UNDECIDED_STATUS,
            KeyIndex::Tool => &BY_TOOL,
            KeyIndex::UpdatedAt => &BY_UPDATED_AT,
            KeyIndex::Attempts => &BY_ATTEMPTS,
        }
    }

    /// Whether a plan made for other parameter values serves this listing. Not with an
    /// attempt filter: the best plan depends on how common the kinds are in the window
    /// (a rare kind drives from its attempts, a common one walks the records newest
    /// first), and a cached generic plan on PostgreSQL knows neither (measured: 1.6 s
    /// instead of 0.2 ms for a kind with no attempts among 200,000 keys). Such
    /// statements are prepared unnamed, so PostgreSQL plans them for the values bound.
    pub(super) fn plan_is_reusable(&self) -> bool {
        self.attempt_kinds.is_empty()
    }

    /// The bounds on last activity: `from`/`to`, unless they bound the attempts.
    pub(super) fn activity_range(&self) -> (DateTime<Utc>, DateTime<Utc>) {
        if self.attempt_kinds.is_empty() {
            (
                self.from.unwrap_or_else(far_past),
                self.to.unwrap_or_else(far_future),
            )
        } else {
            (far_past(), far_future())
        }
    }

    /// The window an attempt must fall in (only read with attempt kinds).
    pub(super) fn attempt_range(&self) -> (DateTime<Utc>, DateTime<Utc>) {
        (
            self.from.unwrap_or_else(far_past),
            self.to.unwrap_or_else(far_future),
        )
    }

    /// The attempt kinds as the statements take them: comma-separated names, or NULL
    /// for none.
    pub(super) fn attempt_kinds_list(&self) -> Option<String> {
        if self.attempt_kinds.is_empty() {
            return None;
        }
        let names: Vec<&str> = self.attempt_kinds.iter().map(|k| k.as_str()).collect();
        Some(names.join(","))
    }

    /// The `resolved` attempts that count, as the statements take them: comma-separated
    /// `<resolution>:<previous status>` pairs (`keys_sql::resolved_as!`), or NULL for
    /// every one. An empty list counts none: a pair no row has stands for it.
    pub(super) fn resolved_as_list(&self) -> Option<String> {
        let pairs = self.resolved_as.as_ref()?;
        if pairs.is_empty() {
            return Some(":none".into());
        }
        let pairs: Vec<String> = pairs
            .iter()
            .map(|r| {
                let previous = r.previous_status.map_or("", Status::as_str);
                format!("{}:{previous}", r.resolution.as_str())
            })
            .collect();
        Some(pairs.join(","))
    }

    /// The key range a prefix stands for: keys are exactly 64 lowercase hex digits.
    pub(super) fn key_range(&self) -> (Option<String>, Option<String>) {
        match &self.key_prefix {
            Some(p) => (Some(format!("{p:0<64}")), Some(format!("{p:f<64}"))),
            None => (None, None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_selective_filter_drives_the_listing() {
        let mut f = KeyFilter {
            tool: Some("issue_refund".into()),
            ..KeyFilter::default()
        };
        assert_eq!(f.index(), KeyIndex::Tool);
        f.status = Some(Status::Done);
        assert_eq!(f.index(), KeyIndex::Tool);
        f.attempt_kinds = vec![AttemptKind::PayloadMismatch];
        assert_eq!(f.index(), KeyIndex::Attempts);
        f.status = Some(Status::Unknown);
        assert_eq!(f.index(), KeyIndex::UndecidedStatus);
        f.intent_id = Some("i".into());
        assert_eq!(f.index(), KeyIndex::IntentId);
        f.workflow_id = Some("w".into());
        assert_eq!(f.index(), KeyIndex::WorkflowId);
        f.key_prefix = Some("ab12".into());
        assert_eq!(f.index(), KeyIndex::KeyPrefix);
        f.business_ref = Some("order:A-88214".into());
        assert_eq!(f.index(), KeyIndex::BusinessRef);
        f.search = Some("rf_002202".into());
        assert_eq!(f.index(), KeyIndex::Search);
        assert_eq!(KeyFilter::default().index(), KeyIndex::UpdatedAt);
    }

    #[test]
    fn a_key_prefix_stands_for_every_key_that_starts_with_it() {
        let f = KeyFilter {
            key_prefix: Some("ab12".into()),
            ..KeyFilter::default()
        };
        let (lo, hi) = f.key_range();
        let (lo, hi) = (lo.unwrap(), hi.unwrap());
        assert_eq!(lo.len(), 64);
        assert!(lo.starts_with("ab120000") && hi.starts_with("ab12ffff"));
        assert_eq!(hi.len(), 64);
    }

    #[test]
    fn with_attempt_kinds_the_window_bounds_the_attempts_not_the_last_activity() {
        let t = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().to_utc();
        let mut f = KeyFilter {
            from: Some(t("2026-11-29T14:00:00Z")),
            to: Some(t("2026-11-29T15:00:00Z")),
            ..KeyFilter::default()
        };
        assert_eq!(f.activity_range(), (f.from.unwrap(), f.to.unwrap()));
        assert_eq!(f.attempt_kinds_list(), None);
        f.attempt_kinds = vec![AttemptKind::Replayed, AttemptKind::ReplayedFailure];
        assert_eq!(f.activity_range(), (far_past(), far_future()));
        assert_eq!(f.attempt_range(), (f.from.unwrap(), f.to.unwrap()));
        assert_eq!(
            f.attempt_kinds_list().as_deref(),
            Some("replayed,replayed_failure")
        );
    }

    #[test]
    fn a_count_is_skipped_where_it_could_scan() {
        let tenant_only = KeyFilter {
            tenant: Some("acme".into()),
            ..KeyFilter::default()
        };
        assert!(!tenant_only.count_is_cheap());
        assert!(KeyFilter::default().count_is_cheap());
        let by_ref = KeyFilter {
            business_ref: Some("order:A-1".into()),
            tenant: Some("acme".into()),
            ..KeyFilter::default()
        };
        assert!(by_ref.count_is_cheap());
    }

    #[test]
    fn resolved_attempts_are_matched_by_resolution_and_previous_status() {
        let mut f = KeyFilter::default();
        assert_eq!(f.resolved_as_list(), None);
        f.resolved_as = Some(vec![
            ResolvedAs {
                resolution: Resolution::Release,
                previous_status: Some(Status::InProgress),
            },
            ResolvedAs {
                resolution: Resolution::Release,
                previous_status: None,
            },
        ]);
        assert_eq!(
            f.resolved_as_list().as_deref(),
            Some("release:IN_PROGRESS,release:")
        );
        f.resolved_as = Some(Vec::new());
        assert_eq!(f.resolved_as_list().as_deref(), Some(":none"));
    }
}
