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

pub(crate) fn public_key_pem(key: &VerifyingKey) -> String {
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

/// What a verification established about a signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Authenticity {
    /// Nothing signed to check.
    #[default]
    Unsigned,
    /// Signed, but no trusted key was given: anyone holding some key could have
    /// signed it (a forger re-signs with a fresh key), so it shows nothing.
    Unchecked,
    /// A trusted key verified it.
    Verified,
    /// It does not verify with the trusted keys (reported as a break).
    Failed,
}

impl Authenticity {
    /// The outcome of checking a signature that is there: `None` when no trusted key
    /// was given.
    pub fn of(checked: Option<&Result<(), String>>) -> Self {
        match checked {
            None => Authenticity::Unchecked,
            Some(Ok(())) => Authenticity::Verified,
            Some(Err(_)) => Authenticity::Failed,
        }
    }

    /// Both established: the weaker of two outcomes.
    pub fn and(self, other: Authenticity) -> Authenticity {
        use Authenticity::*;
        match (self, other) {
            (Failed, _) | (_, Failed) => Failed,
            (Unsigned, _) | (_, Unsigned) => Unsigned,
            (Unchecked, _) | (_, Unchecked) => Unchecked,
            (Verified, Verified) => Verified,
        }
    }
}

/// The public keys an auditor trusts (`verify --public-key`, repeatable), found by the
/// `key_id` each checkpoint and signed manifest names: after a key rotation the old
/// key still verifies what it signed and the new key what came after.
#[derive(Debug, Clone, Default)]
pub struct TrustedKeys(Vec<VerifyingKey>);

impl TrustedKeys {
    pub fn new(keys: impl IntoIterator<Item = VerifyingKey>) -> Self {
        let mut list: Vec<VerifyingKey> = Vec::new();
        for key in keys {
            if !list.contains(&key) {
                list.push(key);
            }
        }
        TrustedKeys(list)
    }

    /// No key given: signatures cannot be checked, only reported as unchecked.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The trusted key whose [`key_id`] is `id`.
    pub fn get(&self, id: &str) -> Option<&VerifyingKey> {
        self.0.iter().find(|k| key_id(k) == id)
    }

    /// The key ids, for messages: `3f9c…, 81aa…`.
    pub fn ids(&self) -> String {
        let ids: Vec<String> = self.0.iter().map(key_id).collect();
        ids.join(", ")
    }

    /// Checks `signature` (hex) over `message` with the trusted key named `id`.
    /// `what` names the signed thing in the error ("checkpoint 7", "the manifest").
    pub fn verify(
        &self,
        what: &str,
        id: &str,
        message: &[u8],
        signature: &str,
    ) -> Result<(), String> {
        use ed25519_dalek::{Signature, Verifier};
        let Some(key) = self.get(id) else {
            return Err(format!(
                "{what} is signed by key {id}, which is not a trusted key ({}): it was signed by another key",
                self.ids()
            ));
        };
        let bytes: [u8; 64] = hex::decode(signature)
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| format!("{what}: the signature is not 64 hex bytes"))?;
        key.verify(message, &Signature::from_bytes(&bytes)).map_err(|_| {
            format!(
                "{what}: the signature does not verify with public key {id}: it was altered or signed by another key"
            )
        })
    }
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
