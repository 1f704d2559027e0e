use thiserror::Error;

/// What the storage layer reports. The guard and the web layer never see sqlx.
#[derive(Debug, Error)]
pub enum StoreError {
    #[error("not found")]
    NotFound,
    /// A write lost to a concurrent one (unique or fencing condition).
    #[error("conflict: {0}")]
    Conflict(String),
    /// The database cannot be reached now; retrying later may work.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// A write reached a read-only database: a PostgreSQL hot standby (SQLSTATE 25006,
    /// `read_only_sql_transaction`). Retrying here never helps; writes go to the primary.
    #[error("the database is a read-only standby: {0}")]
    ReadOnly(String),
    /// A stored value that this version cannot read (a status it does not know…).
    #[error("corrupt row: {0}")]
    Corrupt(String),
    #[error("database configuration: {0}")]
    Config(String),
    #[error("database error: {0}")]
    Other(String),
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        match &e {
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
}

impl From<sqlx::migrate::MigrateError> for StoreError {
    fn from(e: sqlx::migrate::MigrateError) -> Self {
        match e {
            sqlx::migrate::MigrateError::Execute(inner) => inner.into(),
            other => StoreError::Other(format!("migration failed: {other}")),
        }
    }
}

impl StoreError {
    pub fn is_unavailable(&self) -> bool {
        matches!(self, StoreError::Unavailable(_))
    }
}
