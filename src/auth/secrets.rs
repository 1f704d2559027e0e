//! Password hashes (argon2id, PHC strings), API token hashes (SHA-256: tokens are
//! long random values, so a fast hash is enough), and HMAC signing for session cookies
//! and CSRF tokens.

use argon2::password_hash::PasswordHasher;
use argon2::password_hash::phc::{Output, PasswordHash};
use argon2::{Algorithm, Argon2, Block, Params, Version};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use std::cell::RefCell;

pub fn hash_password(password: &str) -> Result<String, String> {
    Argon2::default()
        .hash_password(password.as_bytes())
        .map(|h| h.to_string())
        .map_err(|e| format!("cannot hash password: {e}"))
}

thread_local! {
    /// argon2's working memory (19 MiB with the default parameters), kept by the thread
    /// and reused for its next check. Passwords are checked on a few threads of their
    /// own (`auth::password_checks`), so this bounds what checking can hold: freed and
    /// allocated afresh each time, the allocator kept it per thread anyway, and more.
    static ARGON2_MEMORY: RefCell<Vec<Block>> = const { RefCell::new(Vec::new()) };
}

/// Constant-time verification against a PHC string (any argon2 variant, version and
/// parameters it names); a malformed hash never matches. What argon2's own
/// `PasswordVerifier` does, in memory this thread reuses.
pub fn verify_password(password: &str, phc: &str) -> bool {
    let Ok(parsed) = PasswordHash::new(phc) else {
        return false;
    };
    let (Some(salt), Some(expected)) = (&parsed.salt, &parsed.hash) else {
        return false;
    };
    let version = match parsed.version.map(Version::try_from) {
        None => Ok(Version::default()),
        Some(v) => v,
    };
    let (Ok(algorithm), Ok(version), Ok(params)) = (
        Algorithm::try_from(parsed.algorithm.as_str()),
        version,
        Params::try_from(&parsed),
    ) else {
        return false;
    };
    let blocks = params.block_count();
    let mut out = vec![0u8; expected.len()];
    let hashed = ARGON2_MEMORY.with_borrow_mut(|memory| {
        memory.clear();
        memory.resize(blocks, Block::default());
        let hashed = Argon2::new(algorithm, version, params)
            .hash_password_into_with_memory(
                password.as_bytes(),
                salt.as_ref(),
                &mut out,
                memory.as_mut_slice(),
            )
            .is_ok();
        // Nothing derived from the password stays behind.
        memory.fill(Block::default());
        hashed
    });
    // `Output`'s equality is constant-time.
    hashed && Output::new(&out).is_ok_and(|computed| computed == *expected)
}

/// `a == b` in time that depends only on the lengths.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

pub fn hash_token(token: &str) -> String {
    crate::base::hash::sha256_hex(token.as_bytes())
}

/// A new random API token: 32 bytes, URL-safe base64, prefixed so it is recognisable
/// in a secret scanner.
pub(crate) fn new_token() -> String {
    format!("iw_{}", URL_SAFE_NO_PAD.encode(random_bytes()))
}

pub(crate) fn random_bytes() -> [u8; 32] {
    let mut bytes = [0u8; 32];
    rand::fill(&mut bytes);
    bytes
}

/// Signs and checks short strings with HMAC-SHA256.
#[derive(Clone)]
pub(crate) struct Signer {
    key: Vec<u8>,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Signer(<redacted>)")
    }
}

impl Signer {
    pub fn new(key: &[u8]) -> Self {
        Self { key: key.to_vec() }
    }

    fn mac(&self) -> Hmac<Sha256> {
        <Hmac<Sha256> as KeyInit>::new_from_slice(&self.key).expect("HMAC takes any key length")
    }

    /// `payload.signature`, both URL-safe base64.
    pub fn sign(&self, payload: &[u8]) -> String {
        let mut mac = self.mac();
        mac.update(payload);
        let sig = mac.finalize().into_bytes();
        format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(payload),
            URL_SAFE_NO_PAD.encode(sig)
        )
    }

    /// The payload of a value made by [`Signer::sign`], if the signature holds
    /// (compared in constant time).
    pub fn verify(&self, signed: &str) -> Option<Vec<u8>> {
        let (payload, sig) = signed.split_once('.')?;
        let payload = URL_SAFE_NO_PAD.decode(payload).ok()?;
        let sig = URL_SAFE_NO_PAD.decode(sig).ok()?;
        let mut mac = self.mac();
        mac.update(&payload);
        mac.verify_slice(&sig).ok()?;
        Some(payload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_verifies_only_against_its_own_hash() {
        let hash = hash_password("correct horse").unwrap();
        assert!(hash.starts_with("$argon2id$"));
        assert!(verify_password("correct horse", &hash));
        assert!(!verify_password("wrong horse", &hash));
        assert!(!verify_password("correct horse", "not a phc string"));
    }

    #[test]
    fn hashes_with_other_variants_and_parameters_verify_too() {
        use argon2::password_hash::CustomizedPasswordHasher;
        let salt = b"0123456789abcdef";
        for (alg, version) in [("argon2id", 0x13), ("argon2i", 0x13), ("argon2d", 0x10)] {
            let params = Params::new(64, 2, 1, Some(24)).unwrap();
            let phc = Argon2::default()
                .hash_password_customized(b"pw", salt, Some(alg), Some(version), params)
                .unwrap()
                .to_string();
            assert!(verify_password("pw", &phc), "{phc}");
            assert!(!verify_password("px", &phc), "{phc}");
            let truncated = &phc[..phc.len() - 4];
            assert!(!verify_password("pw", truncated), "{truncated}");
        }
    }

    #[test]
    fn a_signed_value_survives_only_untouched() {
        let signer = Signer::new(b"secret");
        let signed = signer.sign(b"sam|1700000000");
        assert_eq!(signer.verify(&signed).unwrap(), b"sam|1700000000");
        let mut tampered = signed.clone();
        tampered.replace_range(0..1, if signed.starts_with('A') { "B" } else { "A" });
        assert!(signer.verify(&tampered).is_none());
        assert!(Signer::new(b"other").verify(&signed).is_none());
        assert!(signer.verify("garbage").is_none());
    }

    #[test]
    fn tokens_are_random_and_stored_as_their_hash() {
        let (a, b) = (new_token(), new_token());
        assert_ne!(a, b);
        assert!(a.starts_with("iw_") && a.len() > 40);
        assert_eq!(hash_token(&a).len(), 64);
    }
}
