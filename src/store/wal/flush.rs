//! Flushing the database file beside the writer, through SQLite's own descriptor.
//!
//! SQLite syncs the database file at the end of a checkpoint only when the pass
//! copied the WAL to its very end. Under load a background pass rarely does — a
//! reader still on an older snapshot stops it short — so the pages it copied waited in
//! the page cache for the checkpoint on the one writer, whose sync of the database
//! file took 6.2 ms at the median with every writer queued behind it. The checkpointer
//! flushes the file before it queues for the writer (wal.rs says when, and what it
//! measured).
//!
//! **Why not `File::open(path)?.sync_data()`**: closing *any* descriptor of a file
//! releases every POSIX advisory lock the process holds on it, SQLite's shared lock on
//! the database included ("How To Corrupt An SQLite Database File", §2.2). Another
//! process on the file could then take the exclusive lock while this one is writing,
//! conclude it was the last connection, and delete the WAL under a live writer. That
//! version was on main briefly and was withdrawn; the test
//! `sqlite_writers::the_flush_keeps_sqlites_lock_on_the_database` fails on it. So the
//! flush asks SQLite for the file it holds open (`SQLITE_FCNTL_FILE_POINTER`) and
//! calls that file's own `xSync`: the same descriptor, nothing opened or closed.
//!
//! This is the crate's only `unsafe` code: three FFI calls into SQLite.
#![allow(unsafe_code)]

use libsqlite3_sys as ffi;
use sqlx::Error;
use sqlx::sqlite::SqliteConnection;
use std::ptr::{self, NonNull};

/// Flushes the database file of `conn` (a connection of the checkpointer's own, idle
/// between statements) to the disk. An extra sync never weakens what SQLite's own syncs
/// guarantee; it only moves the work earlier.
pub(super) async fn flush_database_file(conn: &mut SqliteConnection) -> Result<(), Error> {
    // While the handle is locked, the connection's worker thread makes no call on it:
    // the condition sqlx states for using the raw handle.
    let mut locked = conn.lock_handle().await?;
    let db = locked.as_raw_handle();
    // SAFETY: `db` is an open connection that nothing else uses while `locked` lives.
    let sync = || unsafe { sync_main_file(db) };
    // A sync takes milliseconds.
    crate::runtime::cpu_bound(sync)
}

/// `xSync` on the `main` database file of `db`.
///
/// # Safety
/// `db` must be an open connection that no other thread uses during the call.
unsafe fn sync_main_file(db: NonNull<ffi::sqlite3>) -> Result<(), Error> {
    let mut file: *mut ffi::sqlite3_file = ptr::null_mut();
    // SAFETY: FILE_POINTER writes one `sqlite3_file *` through the pointer it is given;
    // the file stays open as long as the connection.
    let rc = unsafe {
        ffi::sqlite3_file_control(
            db.as_ptr(),
            c"main".as_ptr(),
            ffi::SQLITE_FCNTL_FILE_POINTER,
            (&raw mut file).cast(),
        )
    };
    if rc != ffi::SQLITE_OK {
        return Err(failed("SQLITE_FCNTL_FILE_POINTER", rc));
    }
    // SAFETY: a file SQLite returned is valid; an unopened one has no methods.
    let x_sync = match unsafe { file.as_ref() }.and_then(|f| unsafe { f.pMethods.as_ref() }) {
        Some(methods) => methods.xSync,
        None => return Ok(()),
    };
    let Some(x_sync) = x_sync else {
        return Ok(());
    };
    // SAFETY: the VFS's own sync of its own open file, the call SQLite makes itself at
    // the end of a checkpoint; the connection is not in use by any other thread.
    let rc = unsafe { x_sync(file, ffi::SQLITE_SYNC_NORMAL) };
    if rc != ffi::SQLITE_OK {
        return Err(failed("xSync of the database file", rc));
    }
    Ok(())
}

fn failed(call: &str, rc: i32) -> Error {
    // SAFETY: sqlite3_errstr returns a static, NUL-terminated English message.
    let message = unsafe { std::ffi::CStr::from_ptr(ffi::sqlite3_errstr(rc)) };
    Error::Io(std::io::Error::other(format!(
        "{call} failed: {} (SQLite code {rc})",
        message.to_string_lossy()
    )))
}
