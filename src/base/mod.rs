//! The ground floor: utilities every layer above may use and that use nothing of the
//! crate. Canonical JSON (RFC 8785, what every hash covers), SHA-256 as hex, the one
//! time format, the clock, and running CPU-bound work off the async runtime.

pub mod canonical;
pub mod clock;
pub mod hash;
pub mod runtime;
pub mod time;
