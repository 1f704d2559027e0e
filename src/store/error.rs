//! sqlx's errors, classified into the guard's [`StoreError`] (the storage port's error
//! type, defined with the port in `guard/port.rs`): sqlx stops here.

pub use crate::guard::StoreError;

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        classify(&e)
    }
}

/// What `e` means to the guard.
fn classify(e: &sqlx::Error) -> StoreError {
    match e {
        sqlx::Error::RowNotFound => StoreError::NotFound,
        sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::WorkerCrashed => StoreError::Unavailable(e.to_string()),
        sqlx::Error::Configuration(_) => StoreError::Config(e.to_string()),
        sqlx::Error::Database(db) if db.is_unique_violation() => {
            StoreError::Conflict(db.message().to_string())
        }
        sqlx::Error::Database(db) => {
            // PostgreSQL: class 08 (connection), 57P (shutdown); SQLite: BUSY/LOCKED.
            let code = db.code().unwrap_or_default();
            if code == "25006" {
                StoreError::ReadOnly(db.message().to_string())
            } else if code.starts_with("08")
                || code.starts_with("57P")
                || code == "5"
                || code == "6"
            {
                StoreError::Unavailable(db.message().to_string())
            } else {
                StoreError::Other(db.message().to_string())
            }
        }
        sqlx::Error::ColumnDecode { .. } | sqlx::Error::Decode(_) => {
            StoreError::Corrupt(e.to_string())
        }
        _ => StoreError::Other(e.to_string()),
    }
}

impl From<sqlx::migrate::MigrateError> for StoreError {
    fn from(e: sqlx::migrate::MigrateError) -> Self {
        match e {
            sqlx::migrate::MigrateError::Execute(inner) => inner.into(),
            other => StoreError::Other(format!("migration failed: {other}")),
        }
    }
}
