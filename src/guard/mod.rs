//! The guard: keys from intents, fingerprints of business arguments, an atomic claim,
//! leases with fencing tokens, UNKNOWN for every ambiguous outcome, reconciliation
//! before any resend, and a person when the provider has forgotten the key.
//!
//! No HTTP here, and no sqlx types in the API: the guard reaches its database
//! through the storage port it owns ([`Storage`], errors as [`StoreError`]), which
//! the store above implements.

pub mod binding;
mod call;
mod chain;
mod context;
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

pub use crate::base::clock::{Clock, ManualClock, SystemClock};
/// The one time format (`crate::base::time`), named here too because the guard's
/// answers and the pages built on them print its times.
pub use crate::base::time::rfc3339;
pub use call::{Admitted, CallOutcome, Outcome, Reconciled, ToolCall};
pub use chain::{ChainFields, Detail, GENESIS_HASH, chain_hash, chain_hash_is, seal};
pub use context::{CONTEXT_MEMBER, WithContext};
pub use deadline::{LeaseState, RETENTION_MARGIN, resend_safe, resend_safe_until};
pub use decide::{Admission, Lookup, ResolveRequest, differing_fields};
pub use duplicates::DuplicateReview;
pub use engine::{Guard, GuardSettings};
pub use error::GuardError;
pub use key::{BusinessArgs, FencingToken, Fingerprint, IdempotencyKey, Intent, KeyError};
pub use money::MoneyField;
pub use natural::NaturalKey;
pub use operation::{DEFAULT_DUPLICATE_WINDOW, ErrorClass, Operation};
pub use policy::{ToolPolicies, ToolPolicy};
pub use port::{Claim, ClaimChecks, PairReview, Storage, StoreError};
/// A record for unit tests outside the guard (the key page's view).
#[cfg(test)]
pub(crate) use record::tests::record as sample_record;
pub use record::{Attempt, AttemptDraft, Record};
pub use repeats::{NOT_LOGGED, RefusalsNotLogged};
pub use status::{
    AdmissionOutcome, AttemptKind, DuplicateVerdict, Resolution, Status, UnknownName,
};
pub use tools_file::{LookupEntry, McpToolEntry, McpToolsFile, ToolKind};
