//! The Ed25519 key that signs checkpoints, as PEM files any tool reads: the private
//! key as PKCS#8 (`openssl pkey -in signing.pem -pubout` prints the public key), the
//! public key as SubjectPublicKeyInfo (RFC 8410).

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::{SigningKey, VerifyingKey};
use sha2::{Digest, Sha256};

/// DER of PKCS#8 v1 for Ed25519, up to the 32-byte seed (RFC 8410 §7).
const PKCS8_PREFIX: [u8; 16] = [
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
];
/// DER of SubjectPublicKeyInfo for Ed25519, up to the 32-byte key (RFC 8410 §4).
const SPKI_PREFIX: [u8; 12] = [
    0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
];

/// A new random signing key.
pub fn generate() -> SigningKey {
    SigningKey::from_bytes(&crate::auth::secrets::random_bytes())
}

pub fn signing_key_pem(key: &SigningKey) -> String {
    let mut der = PKCS8_PREFIX.to_vec();
    der.extend_from_slice(&key.to_bytes());
    pem("PRIVATE KEY", &der)
}

pub fn public_key_pem(key: &VerifyingKey) -> String {
    let mut der = SPKI_PREFIX.to_vec();
    der.extend_from_slice(key.as_bytes());
    pem("PUBLIC KEY", &der)
}

pub fn parse_signing_key(text: &str) -> Result<SigningKey, String> {
    let der = unpem("PRIVATE KEY", text)?;
    let seed = der
        .strip_prefix(&PKCS8_PREFIX[..])
        .and_then(|s| <[u8; 32]>::try_from(s).ok())
        .ok_or("not an Ed25519 PKCS#8 private key")?;
    Ok(SigningKey::from_bytes(&seed))
}

pub fn parse_public_key(text: &str) -> Result<VerifyingKey, String> {
    let der = unpem("PUBLIC KEY", text)?;
    let raw = der
        .strip_prefix(&SPKI_PREFIX[..])
        .and_then(|s| <[u8; 32]>::try_from(s).ok())
        .ok_or("not an Ed25519 public key (SubjectPublicKeyInfo)")?;
    VerifyingKey::from_bytes(&raw).map_err(|e| format!("not a valid Ed25519 public key: {e}"))
}

/// First 16 hex characters of the SHA-256 of the raw public key: names the key in
/// every checkpoint.
pub fn key_id(key: &VerifyingKey) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))[..16].to_string()
}

fn pem(label: &str, der: &[u8]) -> String {
    format!(
        "-----BEGIN {label}-----\n{}\n-----END {label}-----\n",
        STANDARD.encode(der)
    )
}

fn unpem(label: &str, text: &str) -> Result<Vec<u8>, String> {
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let body = text
        .split_once(&begin)
        .and_then(|(_, rest)| rest.split_once(&end))
        .map(|(body, _)| body)
        .ok_or_else(|| format!("no {begin} block"))?;
    let joined: String = body.split_whitespace().collect();
    STANDARD
        .decode(joined)
        .map_err(|e| format!("bad base64 in the {label} block: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_survive_their_pem_files() {
        let key = generate();
        let again = parse_signing_key(&signing_key_pem(&key)).unwrap();
        assert_eq!(again.to_bytes(), key.to_bytes());
        let pk = parse_public_key(&public_key_pem(&key.verifying_key())).unwrap();
        assert_eq!(pk, key.verifying_key());
        assert!(parse_public_key(&signing_key_pem(&key)).is_err());
    }
}
