//! Integration tests, compiled as one binary. Every store and guard test runs on both
//! SQLite and a real PostgreSQL (see `support`).

mod support;

mod auth;
mod auth_login_flood;
mod auth_proxy;
mod auth_rebinding;
mod auth_serve;
mod auth_sessions;
mod auth_site;
mod browser;
mod browser_resolve;
mod cli;
mod db_faults;
mod demo;
mod duplicates;
mod export;
mod guard_clock;
mod guard_faults;
mod guard_http;
mod guard_http_auth;
mod guard_http_csrf;
mod guard_http_input;
mod guard_natural;
mod guard_random;
mod guard_replicas;
mod guard_rust_api;
mod guard_unchanged_write;
mod hardening;
mod key_timeline;
mod metrics;
mod migration_0007;
mod openapi;
mod page_indexes;
mod pages;
mod pages_drilldown;
mod pages_transitions;
mod past_retention;
mod pool_ping;
mod prometheus_e2e;
mod resolve;
mod serve_timeouts;
mod snapshots;
mod sqlite_writers;
mod tools_file;
mod ui_seed;
