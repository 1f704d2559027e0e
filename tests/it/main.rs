//! Integration tests, compiled as one binary. Every store and guard test runs on both
//! SQLite and a real PostgreSQL (see `support`).

mod support;

mod browser;
mod cli;
mod guard_faults;
mod guard_random;
mod page_indexes;
mod pages;
mod ui_seed;
