//! The proxy's two HTTP clients, `--upstream-url` and `--guard-url`: their TLS, and
//! their errors on one line. TLS is rustls with the ring provider. An `https://` server's certificate must chain to the
//! system's trust store (the platform verifier: on Linux the store `openssl` and
//! `curl` read, e.g. `/etc/ssl/certs`, so a CA the host already trusts works), or,
//! with `--upstream-ca-file` / `--guard-ca-file`, to one of the CA certificates in that
//! PEM file and nothing else (as `curl --cacert`): a private server's certificate then
//! cannot be passed off by any public CA.

use anyhow::Context;
use std::path::Path;
use std::sync::Once;

/// The flags an error names: the URL's and its CA file's.
#[derive(Debug, Clone, Copy)]
pub struct Flags {
    pub url: &'static str,
    pub ca_file: &'static str,
}

pub const UPSTREAM: Flags = Flags {
    url: "--upstream-url",
    ca_file: "--upstream-ca-file",
};
pub const GUARD: Flags = Flags {
    url: "--guard-url",
    ca_file: "--guard-ca-file",
};

/// A client builder for `url`, trusting `ca_file`'s CAs if given, else the system's.
pub fn client_builder(
    url: &url::Url,
    ca_file: Option<&Path>,
    flags: Flags,
) -> anyhow::Result<reqwest::ClientBuilder> {
    install_ring();
    let builder = reqwest::Client::builder();
    match (url.scheme(), ca_file) {
        ("https", None) => Ok(builder),
        ("https", Some(file)) => {
            let ca_flag = flags.ca_file;
            let pem = std::fs::read(file)
                .with_context(|| format!("cannot read {ca_flag} {}", file.display()))?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .ok()
                .filter(|c| !c.is_empty())
                .with_context(|| {
                    format!(
                        "{ca_flag} {}: no PEM certificate in it (expected -----BEGIN CERTIFICATE-----)",
                        file.display()
                    )
                })?;
            Ok(builder.tls_certs_only(certs))
        }
        ("http", None) => {
            // Plain HTTP needs no roots: none are loaded (a host without a system
            // trust store still runs an http:// proxy).
            Ok(builder.tls_certs_only([]))
        }
        ("http", Some(_)) => anyhow::bail!(
            "{} {url} is http://: {} is for an https:// server",
            flags.url,
            flags.ca_file
        ),
        (other, _) => anyhow::bail!(
            "{} {url}: the scheme is {other}, expected http or https",
            flags.url
        ),
    }
}

/// An error and its causes on one line (reqwest's and rmcp's own text name only the
/// URL; the cause, such as `invalid peer certificate: UnknownIssuer`, is in the chain).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Whether `url`'s host is this machine (a name or address of the loopback).
pub fn is_loopback(url: &url::Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

/// rustls's process-wide provider: ring (reqwest is built without one of its own).
fn install_ring() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        // Another part of the process may have installed one first: that one stays.
        #[expect(
            deprecated,
            reason = "ring has no post-quantum key exchange (aws-lc-rs has, at the cost of a cmake-era C build); classical X25519 suits a proxy's hop to its own upstream and guard"
        )]
        let provider = rustls::crypto::ring::default_provider();
        let _ = provider.install_default();
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> url::Url {
        s.parse().unwrap()
    }

    #[test]
    fn a_ca_file_must_hold_a_certificate_and_goes_with_https_only() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("ca.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let https = url("https://mcp.example/mcp");
        let e = client_builder(&https, Some(&empty), UPSTREAM).unwrap_err();
        assert!(
            e.to_string().contains("--upstream-ca-file")
                && e.to_string().contains("no PEM certificate"),
            "{e}"
        );
        let missing = dir.path().join("absent.pem");
        let e = client_builder(&https, Some(&missing), GUARD).unwrap_err();
        assert!(e.to_string().contains("cannot read --guard-ca-file"), "{e}");
        let e = client_builder(&url("http://127.0.0.1:9/mcp"), Some(&empty), UPSTREAM).unwrap_err();
        assert!(e.to_string().contains("is http://"), "{e}");
        assert!(
            client_builder(&url("http://127.0.0.1:9/mcp"), None, UPSTREAM)
                .unwrap()
                .build()
                .is_ok()
        );
    }

    #[test]
    fn loopback_is_localhost_or_a_loopback_address() {
        for u in [
            "http://localhost:8080",
            "http://127.0.0.1:1",
            "http://127.9.9.9",
            "http://[::1]:80",
        ] {
            assert!(is_loopback(&url(u)), "{u}");
        }
        for u in [
            "http://10.0.0.1",
            "http://idemwatch:8080",
            "http://localhost.example",
        ] {
            assert!(!is_loopback(&url(u)), "{u}");
        }
    }
}
