//! PostgreSQL URL parameters the driver does not know. sqlx logs each one with its
//! value at start (`ignoring unrecognized connect parameter key=sslpassword
//! value=…`), so a secret put in such a parameter (`sslpassword`, a misspelt
//! `pasword`) reached the log (issue 47). `main` silences that line
//! ([`DRIVER_LOG_TARGET`]); [`warn_unrecognised`] logs the same warning naming the key
//! only.

/// Where sqlx logs the line that carries the value.
pub const DRIVER_LOG_TARGET: &str = "sqlx_postgres::options::parse";

/// The query parameters sqlx-postgres 0.9 reads (`PgConnectOptions::parse_from_url`);
/// `options[…]` too.
const KNOWN: [&str; 18] = [
    "sslmode",
    "ssl-mode",
    "sslrootcert",
    "ssl-root-cert",
    "ssl-ca",
    "sslcert",
    "ssl-cert",
    "sslkey",
    "ssl-key",
    "statement-cache-capacity",
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "application_name",
    "options",
];

/// The parameters of `url` that the driver ignores, by name.
pub(crate) fn unrecognised(url: &str) -> Vec<String> {
    let Ok(parsed) = url::Url::parse(url) else {
        return Vec::new();
    };
    parsed
        .query_pairs()
        .map(|(k, _)| k.into_owned())
        .filter(|k| {
            let option = k.starts_with("options[") && k.ends_with(']');
            !(option || KNOWN.contains(&k.as_str()))
        })
        .collect()
}

/// Logs each parameter the driver will ignore, without its value.
pub(crate) fn warn_unrecognised(url: &str) {
    for key in unrecognised(url) {
        tracing::warn!(
            key,
            "ignoring unrecognized database URL parameter (its value is not logged)"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_parameters_the_driver_ignores_are_named() {
        let url =
            "postgres://u@db/idem?sslmode=require&sslpassword=s3cret&options[jit]=off&pasword=x";
        assert_eq!(unrecognised(url), ["sslpassword", "pasword"]);
        assert!(unrecognised("postgres://u@db/idem").is_empty());
    }
}
