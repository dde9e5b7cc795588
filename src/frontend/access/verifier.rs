//! What a login is checked against: verifiers derived once from a password, for SCRAM-SHA-256
//! and for md5, never the password itself.
//!
//! # SCRAM-SHA-256
//! pgwire's SCRAM exchange checks the client's proof against the salted password
//! `Hi(password, salt, iterations)` of RFC 5802, so that is kept, with its salt and iteration
//! count. (PostgreSQL keeps the StoredKey and ServerKey derived from it instead; pgwire's
//! exchange cannot check a proof with those.)
//!
//! # md5
//! PostgreSQL's md5 method: the server keeps `md5(password || name)` and sends a random
//! 4-byte salt with every login; the client answers `"md5" || md5(hex(md5(password || name))
//! || salt)`. The user name is part of the hash, so a user cannot be renamed and keep it.
//!
//! # Secrecy
//! Neither verifier gives the password back, but each lets whoever holds it log in with its
//! method (as PostgreSQL's md5 hash does): where they are kept (the catalog of the state
//! directory, for users SQL creates) must be protected like the settings file. Their `Debug`
//! shows nothing of them.
//!
//! # Invariant
//! Every user's verifiers come from [`Verifiers::derive`]: users of the settings file at
//! start-up (with a fresh salt every run), users SQL creates at `CREATE USER` and `ALTER USER`
//! (kept in the catalog and read back with [`Verifiers::from_stored`]). A login checks both
//! kinds the same way.

use md5::{Digest, Md5};
use pgwire::api::auth::sasl::scram::{gen_salted_password, SCRAM_ITERATIONS};
use pgwire::api::auth::Password;

use crate::config::Role;
use crate::durable::CatalogUser;

/// Length of the SCRAM salts we make.
const SCRAM_SALT_LEN: usize = 16;

/// A user's verifiers (see the module docs).
#[derive(Clone, PartialEq, Eq)]
pub struct Verifiers {
    scram_salt: Vec<u8>,
    scram_iterations: usize,
    /// `Hi(password, salt, iterations)`.
    scram_salted: Vec<u8>,
    /// `md5(password || name)`, in hex.
    md5: String,
}

impl std::fmt::Debug for Verifiers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verifiers").finish_non_exhaustive()
    }
}

/// A user in the catalog whose verifiers cannot be read back.
#[derive(Debug, thiserror::Error)]
#[error("user {name:?} in the state directory's catalog cannot be read: {reason}")]
pub struct StoredUserError {
    name: String,
    reason: &'static str,
}

impl Verifiers {
    /// The verifiers of user `name` with `password`, with a fresh SCRAM salt.
    pub fn derive(name: &str, password: &str) -> Self {
        let scram_salt: Vec<u8> = (0..SCRAM_SALT_LEN).map(|_| rand::random()).collect();
        let scram_salted = gen_salted_password(password, &scram_salt, SCRAM_ITERATIONS);
        Self {
            scram_salt,
            scram_iterations: SCRAM_ITERATIONS,
            scram_salted,
            md5: to_hex(&Md5::digest(format!("{password}{name}"))),
        }
    }

    /// The iteration count the SCRAM exchange must tell the client.
    pub fn scram_iterations(&self) -> usize {
        self.scram_iterations
    }

    /// What pgwire's SCRAM exchange checks a proof against.
    pub fn scram(&self) -> Password {
        Password::new(Some(self.scram_salt.clone()), self.scram_salted.clone())
    }

    /// What pgwire's md5 exchange expects back for a login salted with `salt`.
    pub fn md5(&self, salt: [u8; 4]) -> Password {
        let mut answer = Md5::new();
        answer.update(self.md5.as_bytes());
        answer.update(salt);
        let answer = format!("md5{}", to_hex(&answer.finalize()));
        Password::new(Some(salt.to_vec()), answer.into_bytes())
    }

    /// User `name` with role `role` as the catalog keeps it.
    pub fn stored(&self, name: &str, role: Role) -> CatalogUser {
        CatalogUser {
            name: name.to_string(),
            role: role.name().to_string(),
            scram_salt: to_hex(&self.scram_salt),
            scram_iterations: u32::try_from(self.scram_iterations).unwrap_or(u32::MAX),
            scram_salted_password: to_hex(&self.scram_salted),
            md5: self.md5.clone(),
        }
    }

    /// A user of the catalog: its role and verifiers.
    pub fn from_stored(user: &CatalogUser) -> Result<(Role, Self), StoredUserError> {
        let error = |reason| StoredUserError {
            name: user.name.clone(),
            reason,
        };
        let role = Role::named(&user.role).ok_or_else(|| error("its role is unknown"))?;
        let scram_salt = from_hex(&user.scram_salt)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| error("its SCRAM salt is not hex"))?;
        let scram_salted = from_hex(&user.scram_salted_password)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| error("its SCRAM salted password is not hex"))?;
        let scram_iterations = usize::try_from(user.scram_iterations)
            .ok()
            .filter(|i| *i > 0)
            .ok_or_else(|| error("its SCRAM iteration count is 0"))?;
        if from_hex(&user.md5).is_none_or(|h| h.len() != 16) {
            return Err(error("its md5 hash is not 32 hex digits"));
        }
        Ok((
            role,
            Self {
                scram_salt,
                scram_iterations,
                scram_salted,
                md5: user.md5.to_ascii_lowercase(),
            },
        ))
    }
}

/// Lower-case hex of `bytes`.
fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes of lower- or upper-case hex text.
fn from_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use pgwire::api::auth::md5pass::hash_md5_password;

    use super::*;

    #[test]
    fn md5_logins_answer_as_pgwire_computes_from_the_password() {
        let verifiers = Verifiers::derive("ann", "s3cret");
        let salt = [1, 2, 250, 4];
        let expected = hash_md5_password("ann", "s3cret", &salt);
        assert_eq!(verifiers.md5(salt).password(), expected.as_bytes());
        assert_ne!(
            Verifiers::derive("bob", "s3cret").md5(salt).password(),
            expected.as_bytes(),
            "the name salts the hash"
        );
    }

    #[test]
    fn scram_keeps_the_salted_password_of_its_own_salt() {
        let verifiers = Verifiers::derive("ann", "s3cret");
        let scram = verifiers.scram();
        let salt = scram.salt().expect("a salt");
        assert_eq!(salt.len(), SCRAM_SALT_LEN);
        assert_eq!(
            scram.password(),
            gen_salted_password("s3cret", salt, SCRAM_ITERATIONS).as_slice()
        );
        assert_ne!(
            Verifiers::derive("ann", "s3cret").scram().salt(),
            Some(salt)
        );
    }

    #[test]
    fn stored_users_read_back_and_keep_no_password() {
        let verifiers = Verifiers::derive("ann", "s3cret");
        let stored = verifiers.stored("ann", Role::Admin);
        let json = serde_json::to_string(&stored).unwrap();
        assert!(!json.contains("s3cret"), "{json}");
        assert!(!format!("{stored:?}{verifiers:?}").contains(&stored.md5));
        assert_eq!(
            Verifiers::from_stored(&stored).unwrap(),
            (Role::Admin, verifiers)
        );
        for broken in [
            CatalogUser {
                role: "root".into(),
                ..stored.clone()
            },
            CatalogUser {
                scram_salt: "xyz".into(),
                ..stored.clone()
            },
            CatalogUser {
                scram_iterations: 0,
                ..stored.clone()
            },
            CatalogUser {
                md5: "abc".into(),
                ..stored.clone()
            },
        ] {
            let error = Verifiers::from_stored(&broken).unwrap_err().to_string();
            assert!(error.contains("user \"ann\""), "{error}");
        }
    }
}
