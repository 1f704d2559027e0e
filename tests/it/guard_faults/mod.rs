//! The fault-injection suite: each scenario asserts exactly one business effect at the
//! provider, the final record, and the attempt rows (kinds, contiguous seq, tokens).
//! Real time is scaled down (a 10 s client deadline becomes 100 ms); leases and the
//! provider's key retention run on a manual clock the test moves.

pub(crate) mod concurrency;
pub(crate) mod lost_answers;
pub(crate) mod people;
pub(crate) mod redelivery;
