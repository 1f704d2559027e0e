//! idemwatch: a guard that makes retried side effects safe, and the service that
//! makes the guard visible (metrics, pages, exports).

pub mod auth;
pub mod cli;
pub mod guard;
pub mod store;
pub mod web;
