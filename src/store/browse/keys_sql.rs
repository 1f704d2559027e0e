//! The statements of the `/keys` listing, assembled from shared pieces with `concat!`
//! so that every piece is written once and each statement is still a `&'static str`.
//! Optional filters are `($n IS NULL OR col = $n)`; sqlx declares each parameter's
//! type, so PostgreSQL needs no casts and one text serves both backends. Where the
//! backends must differ the two versions stand side by side in one [`Sql`].

use super::Sql;
use super::summary::summary_columns;

/// The filters every listing applies, after its driving condition.
/// $1/$2 key range, $3 business ref (driver only), $4 workflow, $5 intent, $6 tenant,
/// $7 tool, $8 status, $9/$10 last-activity range (never NULL: sentinels when absent),
/// $11/$12 the keyset position (a sentinel above every row on the first page).
/// Then ($13 is the row limit) $14/$15 the attempt window, $16 the attempt kinds and
/// $17 which `resolved` attempts count, for [`attempt_filter!`] and [`by_attempts!`];
/// $18 the search term (driver only, [`by_search!`]).
/// `$u` is how the time column is written: `updated_at`, or on SQLite `+updated_at`
/// where the time index must not be used (a no-op that SQLite's planner cannot index).
macro_rules! key_filters {
    () => {
        key_filters!("updated_at")
    };
    ($u:literal) => {
        concat!(
            " AND ($1 IS NULL OR key >= $1) AND ($2 IS NULL OR key <= $2) \
             AND ($4 IS NULL OR workflow_id = $4) AND ($5 IS NULL OR intent_id = $5) \
             AND ($6 IS NULL OR tenant = $6) AND ($7 IS NULL OR tool = $7) \
             AND ($8 IS NULL OR status = $8) AND ",
            $u,
            " >= $9 AND ",
            $u,
            " < $10 AND (",
            $u,
            ", key) < ($11, $12)"
        )
    };
}

/// Whether `$e` is one of the items of the parameter `$p`: comma-separated, never empty
/// when present, items without commas or quotes (kind names, [`resolved_as!`] pairs).
/// The one part of the attempt filter the backends spell differently. PostgreSQL folds
/// `string_to_array` of the bound value into a constant array when it plans, so it
/// estimates from the statistics of each kind (a rare one drives the listing).
macro_rules! in_list_postgres {
    ($e:expr, $p:literal) => {
        concat!($e, " = ANY(string_to_array(", $p, ", ','))")
    };
}
macro_rules! in_list_sqlite {
    ($e:expr, $p:literal) => {
        concat!(
            $e,
            " IN (SELECT value FROM json_each('[\"' || replace(",
            $p,
            ", ',', '\",\"') || '\"]'))"
        )
    };
}

/// What a `resolved` attempt did, as the tailer reads it from its detail:
/// `<resolution>:<previous status>` (`release:IN_PROGRESS`; `release:` without one).
macro_rules! resolved_as {
    () => {
        "coalesce(detail->>'resolution', '') || ':' || coalesce(detail->>'previous_status', '')"
    };
}

/// The attempts asked for: of one of the kinds `$16` (both backends look each kind up
/// in an index) and, when `$17` is given, a `resolved` one only if what it did is one
/// of `$17` (the status it entered depends on that: `entered=`).
macro_rules! attempt_match {
    ($in_list:ident) => {
        concat!(
            $in_list!("kind", "$16"),
            " AND ($17 IS NULL OR kind <> 'resolved' OR ",
            $in_list!(resolved_as!(), "$17"),
            ")"
        )
    };
}
macro_rules! kinds_postgres {
    () => {
        attempt_match!(in_list_postgres)
    };
}
macro_rules! kinds_sqlite {
    () => {
        attempt_match!(in_list_sqlite)
    };
}

/// What happened in the window: the key has an attempt [`attempt_match!`] selects that
/// occurred at or after `$14` and before `$15` (never NULL: sentinels when absent).
macro_rules! attempt_in_window {
    ($kinds:expr) => {
        concat!($kinds, " AND occurred_at >= $14 AND occurred_at < $15")
    };
}

/// The attempt filter of a listing driven by a records index: no filter when `$16` is
/// NULL, otherwise a probe of the key's own attempts (idempotency_attempts_key_seq)
/// for each row the driving index finds.
macro_rules! attempt_filter {
    ($kinds:expr) => {
        concat!(
            " AND ($16 IS NULL OR EXISTS (SELECT 1 FROM idempotency_attempts AS a \
             WHERE a.key = idempotency_records.key AND ",
            attempt_in_window!($kinds),
            "))"
        )
    };
}

/// A listing page: newest activity first, `$13` rows. `$attempts` is the attempt
/// filter ([`attempt_filter!`]), or nothing where the driver applies it.
macro_rules! keys_sql {
    ($driver:expr, $u:literal, $attempts:expr) => {
        concat!(
            "SELECT ",
            summary_columns!(),
            " FROM idempotency_records WHERE ",
            $driver,
            key_filters!($u),
            $attempts,
            " ORDER BY updated_at DESC, key DESC LIMIT $13"
        )
    };
}

/// How many rows a listing has, counting at most `$13` (the cursor is the sentinel).
macro_rules! count_sql {
    ($driver:expr, $u:literal, $attempts:expr) => {
        concat!(
            "SELECT count(*) FROM (SELECT 1 FROM idempotency_records WHERE ",
            $driver,
            key_filters!($u),
            $attempts,
            " LIMIT $13) AS capped"
        )
    };
}

/// The driving conditions. Each one is the condition of one index; the ones after
/// search state `$18 IS NULL`, the ones after business_ref also `$3 IS NULL`: they serve
/// listings without those filters.
// The keys whose search terms (idempotency_search_terms, filled by the trigger of
// migration 0009) include the term, lower-cased by the backend that lower-cased the
// terms: one range of the primary key (term, key), then each record by its key. A
// business ref given as well still applies.
macro_rules! by_search {
    ($by_business_ref:expr) => {
        concat!(
            "key IN (SELECT key FROM idempotency_search_terms WHERE term = lower(trim($18))) \
             AND ($3 IS NULL OR ",
            $by_business_ref,
            ")"
        )
    };
}
macro_rules! by_business_ref_postgres {
    () => {
        "(business_ref = $3 OR substr(business_ref, strpos(business_ref, ':') + 1) = $3)"
    };
}
macro_rules! by_business_ref_sqlite {
    () => {
        "(business_ref = $3 OR substr(business_ref, instr(business_ref, ':') + 1) = $3)"
    };
}
macro_rules! without_search {
    ($driver:expr) => {
        concat!("$18 IS NULL AND ", $driver)
    };
}
macro_rules! by_key {
    () => {
        "$3 IS NULL AND key >= $1 AND key <= $2"
    };
}
macro_rules! by_workflow {
    () => {
        "$3 IS NULL AND workflow_id = $4"
    };
}
macro_rules! by_intent {
    () => {
        "$3 IS NULL AND intent_id = $5"
    };
}
// The literal IN list repeats the predicate of the partial index
// idempotency_records_undecided_updated_at, so both planners may use it.
macro_rules! by_undecided_status {
    () => {
        "$3 IS NULL AND status IN ('UNKNOWN', 'IN_PROGRESS') AND status = $8"
    };
}
macro_rules! by_tool {
    () => {
        "$3 IS NULL AND tool = $7"
    };
}
macro_rules! by_updated_at {
    () => {
        "$3 IS NULL"
    };
}
// The keys with an attempt of the kinds asked for in the window, read from
// idempotency_attempts_kind_occurred_at (one range per kind), then by primary key. A
// semi-join (IN) rather than EXISTS: SQLite runs a correlated EXISTS once per record,
// which would walk every record for a rare kind; an IN list it builds once and probes
// the records with. Costs what the matching attempts in the window number (PostgreSQL
// may walk the records newest first instead when the kind is common).
macro_rules! by_attempts {
    ($kinds:expr) => {
        concat!(
            "$3 IS NULL AND key IN (SELECT key FROM idempotency_attempts WHERE ",
            attempt_in_window!($kinds),
            ")"
        )
    };
}

/// The listing and capped-count statements of one driving index.
pub(super) struct KeyStatements {
    pub(super) list: Sql,
    pub(super) count: Sql,
}

/// The listing and count of one driving index: PostgreSQL's driver and attempt filter,
/// then SQLite's, with how SQLite's statements write the time column.
macro_rules! key_statements {
    ($postgres:expr, $pg_attempts:expr; $sqlite:expr, $sqlite_time:literal, $sqlite_attempts:expr) => {
        KeyStatements {
            list: Sql {
                postgres: keys_sql!($postgres, "updated_at", $pg_attempts),
                sqlite: keys_sql!($sqlite, $sqlite_time, $sqlite_attempts),
            },
            count: Sql {
                postgres: count_sql!($postgres, "updated_at", $pg_attempts),
                sqlite: count_sql!($sqlite, $sqlite_time, $sqlite_attempts),
            },
        }
    };
}

/// The statements of a selective driving index. On SQLite the time column is hidden
/// from the planner (see [`key_filters!`]): without it SQLite may prefer walking the
/// time index to sorting the few rows the driving index finds.
macro_rules! selective {
    ($postgres:expr, $sqlite:expr) => {
        key_statements!(
            $postgres, attempt_filter!(kinds_postgres!());
            $sqlite, "+updated_at", attempt_filter!(kinds_sqlite!())
        )
    };
}

/// The statements of a listing meant to walk a time-ordered index. With an attempt
/// filter only the undecided walk is chosen (its partial index is small by design) and
/// probes each key's attempts; the tool and last-activity walks never are
/// ([`by_attempts!`] drives those listings) but apply the filter all the same.
macro_rules! ordered {
    ($driver:expr) => {
        key_statements!(
            $driver, attempt_filter!(kinds_postgres!());
            $driver, "updated_at", attempt_filter!(kinds_sqlite!())
        )
    };
}

pub(super) const BY_SEARCH: KeyStatements = selective!(
    by_search!(by_business_ref_postgres!()),
    by_search!(by_business_ref_sqlite!())
);
pub(super) const BY_BUSINESS_REF: KeyStatements = selective!(
    without_search!(by_business_ref_postgres!()),
    without_search!(by_business_ref_sqlite!())
);
pub(super) const BY_KEY: KeyStatements =
    selective!(without_search!(by_key!()), without_search!(by_key!()));
pub(super) const BY_WORKFLOW: KeyStatements = selective!(
    without_search!(by_workflow!()),
    without_search!(by_workflow!())
);
pub(super) const BY_INTENT: KeyStatements =
    selective!(without_search!(by_intent!()), without_search!(by_intent!()));
pub(super) const BY_UNDECIDED_STATUS: KeyStatements =
    ordered!(without_search!(by_undecided_status!()));
pub(super) const BY_TOOL: KeyStatements = ordered!(without_search!(by_tool!()));
pub(super) const BY_UPDATED_AT: KeyStatements = ordered!(without_search!(by_updated_at!()));
/// On SQLite the time column is hidden as for a selective index: the attempts drive.
pub(super) const BY_ATTEMPTS: KeyStatements = key_statements!(
    without_search!(by_attempts!(kinds_postgres!())), "";
    without_search!(by_attempts!(kinds_sqlite!())), "+updated_at", ""
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_statement_filters_the_same_way() {
        for s in [
            &BY_SEARCH,
            &BY_BUSINESS_REF,
            &BY_KEY,
            &BY_WORKFLOW,
            &BY_INTENT,
            &BY_ATTEMPTS,
        ] {
            for sql in [s.list.postgres, s.count.postgres] {
                assert!(sql.contains(key_filters!()), "{sql}");
            }
            for sql in [s.list.sqlite, s.count.sqlite] {
                assert!(sql.contains(key_filters!("+updated_at")), "{sql}");
            }
        }
        for s in [&BY_UNDECIDED_STATUS, &BY_TOOL, &BY_UPDATED_AT] {
            for sql in [
                s.list.postgres,
                s.list.sqlite,
                s.count.postgres,
                s.count.sqlite,
            ] {
                assert!(sql.contains(key_filters!()), "{sql}");
                assert!(!sql.contains("OFFSET"), "{sql}");
            }
        }
        // Every statement applies the attempt filter, once: as its filter or its driver,
        // and names the search term (as its driver, or as absent).
        for s in [
            &BY_SEARCH,
            &BY_BUSINESS_REF,
            &BY_KEY,
            &BY_WORKFLOW,
            &BY_INTENT,
            &BY_UNDECIDED_STATUS,
            &BY_TOOL,
            &BY_UPDATED_AT,
            &BY_ATTEMPTS,
        ] {
            for sql in [s.list.postgres, s.count.postgres] {
                assert_eq!(sql.matches(kinds_postgres!()).count(), 1, "{sql}");
            }
            for sql in [s.list.sqlite, s.count.sqlite] {
                assert_eq!(sql.matches(kinds_sqlite!()).count(), 1, "{sql}");
            }
            for sql in [
                s.list.postgres,
                s.list.sqlite,
                s.count.postgres,
                s.count.sqlite,
            ] {
                assert_eq!(sql.matches("$18").count(), 1, "{sql}");
            }
        }
    }

    #[test]
    fn the_resolution_filter_names_the_resolved_kind_as_the_vocabulary_does() {
        let kind = format!("kind <> '{}'", crate::guard::AttemptKind::Resolved.as_str());
        for sql in [kinds_postgres!(), kinds_sqlite!()] {
            assert!(sql.contains(&kind), "{sql}");
            assert!(sql.contains(resolved_as!()), "{sql}");
        }
    }
}
