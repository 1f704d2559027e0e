//! The guard: keys from intents, fingerprints of business arguments, an atomic claim,
//! leases with fencing tokens, UNKNOWN for every ambiguous outcome, reconciliation
//! before any resend, and a person when the provider has forgotten the key.
//!
//! No HTTP here, and no sqlx types in the API: the guard reaches its database
//! through the storage port it owns ([`Storage`], errors as [`StoreError`]), which
//! the store above implements.

pub mod binding;
pub mod canonical;
pub(crate) mod canonical_text;
pub mod clock;
mod deadline;
mod decide;
mod duplicates;
mod engine;
mod error;
mod heads;
pub mod key;
mod money;
mod natural;
mod operation;
mod policy;
mod port;
mod record;
mod repeats;
mod status;
mod steps;
mod tools_file;

pub use clock::{Clock, ManualClock, SystemClock};
pub use deadline::{LeaseState, RETENTION_MARGIN, resend_safe, resend_safe_until};
pub use decide::{Admission, Lookup, ResolveRequest, differing_fields};
pub use duplicates::DuplicateReview;
pub use engine::{Guard, GuardSettings, Outcome, ToolCall};
pub use error::GuardError;
pub use key::{BusinessArgs, FencingToken, Fingerprint, IdempotencyKey, Intent, KeyError};
pub use money::MoneyField;
pub use natural::NaturalKey;
pub use operation::{ErrorClass, Operation};
pub use policy::{DEFAULT_DUPLICATE_WINDOW, ToolPolicies, ToolPolicy};
pub use port::{Claim, ClaimChecks, PairReview, Storage, StoreError};
/// A record for unit tests outside the guard (the key page's view).
#[cfg(test)]
pub(crate) use record::tests::record as sample_record;
pub use record::{
    Attempt, AttemptDraft, ChainFields, Detail, GENESIS_HASH, Record, chain_hash, chain_hash_is,
    rfc3339, seal,
};
pub use status::{
    AdmissionOutcome, AttemptKind, DuplicateVerdict, Resolution, Status, UnknownName,
};
pub use steps::{Admitted, CallOutcome, Reconciled};
pub use tools_file::{LookupEntry, McpToolEntry, McpToolsFile, ToolKind};
