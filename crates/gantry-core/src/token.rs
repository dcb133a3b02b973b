//! Bearer tokens: how they are made and how they are stored. Only a token's SHA-256 is ever
//! stored or cached, so a leaked database or memory dump holds no usable token.

use rand::RngCore;
use sha2::{Digest, Sha256};

use crate::{Error, Result};

/// A new random bearer token: 192 bits, hex.
pub fn generate_token() -> String {
    let mut bytes = [0u8; 24];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

/// Tokens are looked up by this hash, so the lookup does not compare secrets byte by byte.
pub fn hash_token(token: &str) -> String {
    hex::encode(token_digest(token))
}

/// The SHA-256 of a token: `hash_token` is its hex text; the token cache keys on its bytes.
pub fn token_digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// The longest grace period a rotation may give the replaced token: one day.
pub const MAX_GRACE_SECONDS: i64 = 86_400;

/// A rotation's grace period (`graceSeconds`, default 0) in milliseconds, checked.
pub fn grace_ms(grace_seconds: Option<i64>) -> Result<i64> {
    let grace = grace_seconds.unwrap_or(0);
    if !(0..=MAX_GRACE_SECONDS).contains(&grace) {
        return Err(Error::invalid(
            "graceSeconds",
            format!("must be a whole number from 0 to {MAX_GRACE_SECONDS}"),
        ));
    }
    Ok(grace * 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_long_and_distinct() {
        let (a, b) = (generate_token(), generate_token());
        assert_eq!(a.len(), 48);
        assert_ne!(a, b);
        assert_eq!(hash_token(&a), hash_token(&a));
        assert_ne!(hash_token(&a), hash_token(&b));
    }
}
