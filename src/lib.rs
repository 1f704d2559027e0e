//! idemwatch: a guard that makes retried side effects safe, and the service that
//! makes the guard visible (metrics, pages, exports).

pub mod auth;
pub mod base;
pub mod cli;
pub mod demo;
pub mod duration;
pub mod evidence;
pub mod export;
pub mod guard;
pub mod mcp;
pub mod metrics;
pub mod retention;
pub mod store;
pub mod tail;
pub mod time_input;
pub mod web;
