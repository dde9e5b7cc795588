//! The users who may log in, with what each login method needs (the configured method and, for
//! SCRAM-SHA-256, a verifier derived once from the password, never at every login) and what
//! each may do (its [`Role`]).
//!
//! # Invariant
//! A user's method is the global `trust` when configured, else the user's own; an unknown user
//! goes through SCRAM and fails in it, so the start-up exchange answers the same whether the
//! user exists or not. A configured user without a role is a reader; a login that is not a
//! configured user (only `trust` lets one in) is an admin only when no user is configured.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use pgwire::api::auth::md5pass::hash_md5_password;
use pgwire::api::auth::sasl::scram::{gen_salted_password, SCRAM_ITERATIONS};
use pgwire::api::auth::{AuthSource, LoginInfo, Password};
use pgwire::error::{PgWireError, PgWireResult};

use crate::config::{AuthMethod, Role, UserSettings};

/// Salt length of the SCRAM verifiers we derive from configured passwords.
const SCRAM_SALT_LEN: usize = 16;

/// A configured user with what each method needs.
struct User {
    method: AuthMethod,
    role: Role,
    password: String,
    scram_salt: Vec<u8>,
    /// `Hi(password, salt, iterations)`: computed once, not at every login.
    scram_salted: Vec<u8>,
}

/// The users who may log in.
pub struct Users {
    default: AuthMethod,
    users: HashMap<String, User>,
}

impl Debug for Users {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Users")
            .field("default", &self.default)
            .field("names", &self.users.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Users {
    pub fn new(default: AuthMethod, users: &[UserSettings]) -> Self {
        let users = users
            .iter()
            .map(|u| {
                let scram_salt: Vec<u8> = (0..SCRAM_SALT_LEN).map(|_| rand::random()).collect();
                let scram_salted = gen_salted_password(&u.password, &scram_salt, SCRAM_ITERATIONS);
                (
                    u.name.clone(),
                    User {
                        method: u.method.unwrap_or(default),
                        role: u.role.unwrap_or(Role::Reader),
                        password: u.password.clone(),
                        scram_salt,
                        scram_salted,
                    },
                )
            })
            .collect();
        Self { default, users }
    }

    /// The method `user` logs in with: the global `trust` wins, then the user's own method;
    /// unknown users go through SCRAM and fail in it.
    pub fn method(&self, user: &str) -> AuthMethod {
        if self.default == AuthMethod::Trust {
            return AuthMethod::Trust;
        }
        self.users
            .get(user)
            .map_or(AuthMethod::ScramSha256, |u| u.method)
    }

    /// What `user`, logged in, may do (see the module docs).
    pub fn role(&self, user: &str) -> Role {
        match self.users.get(user) {
            Some(u) => u.role,
            None if self.users.is_empty() => Role::Admin,
            None => Role::Reader,
        }
    }
}

/// Passwords for pgwire's SCRAM and md5 handlers.
#[derive(Debug)]
pub struct PasswordSource {
    pub users: Arc<Users>,
    pub method: AuthMethod,
}

#[async_trait]
impl AuthSource for PasswordSource {
    async fn get_password(&self, login: &LoginInfo) -> PgWireResult<Password> {
        let name = login.user().unwrap_or_default();
        let user = self
            .users
            .users
            .get(name)
            .ok_or_else(|| PgWireError::InvalidPassword(name.to_string()))?;
        Ok(match self.method {
            AuthMethod::Md5 => {
                let salt: [u8; 4] = rand::random();
                let hash = hash_md5_password(name, &user.password, &salt);
                Password::new(Some(salt.to_vec()), hash.into_bytes())
            }
            _ => Password::new(Some(user.scram_salt.clone()), user.scram_salted.clone()),
        })
    }
}
