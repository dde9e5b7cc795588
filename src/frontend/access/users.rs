//! The users who may log in: those of the settings file (`[[users]]` and the environment's
//! user) and those SQL creates (`CREATE USER`, kept in the engine's catalog), with what each
//! login method needs ([`Verifiers`]) and what each may do (its [`Role`]).
//!
//! # Lookups
//! Every login and every statement looks its user up here when it happens: a user SQL creates
//! logs in at once, a dropped one no more, and a session whose `admin` role was revoked is
//! refused the next admin statement it sends.
//!
//! # Changes
//! SQL changes only the users SQL made ([`Users::change`]). Changes are serial, and each is
//! committed to the engine's catalog before any login or statement sees it, so a user who can
//! log in is one a restart brings back (on an engine with a state directory; without one, the
//! users SQL makes live as long as the server).
//!
//! # Invariant
//! A user's method is the global `trust` when configured, else the user's own (a user SQL made
//! has the global one); an unknown user goes through SCRAM and fails in it, so the start-up
//! exchange answers the same whether the user exists or not. A user of the settings file hides
//! a user SQL made with the same name. A user of the settings file without a role is a reader.
//! A login that is no user (only the global `trust` lets one in) is an admin only when the
//! settings file configures no user.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
use std::sync::{Arc, RwLock};

use async_trait::async_trait;
use pgwire::api::auth::sasl::scram::SCRAM_ITERATIONS;
use pgwire::api::auth::{AuthSource, LoginInfo, Password};
use pgwire::error::{PgWireError, PgWireResult};

use crate::config::{AuthMethod, Role, UserSettings};
use crate::durable::CatalogUser;
use crate::engine::{Engine, EngineError};
use crate::frontend::access::verifier::{StoredUserError, Verifiers};
use crate::locks::RwLocked;

/// A user with what each method needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    method: AuthMethod,
    pub role: Role,
    pub verifiers: Arc<Verifiers>,
}

/// Where a user is defined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The settings file or the environment: only the operator changes it.
    Settings,
    /// `CREATE USER`.
    Sql,
}

/// The users who may log in.
pub struct Users {
    default: AuthMethod,
    settings: HashMap<String, User>,
    sql: RwLock<BTreeMap<String, User>>,
    /// Held by a change from its checks to its commit, so changes are serial.
    changes: tokio::sync::Mutex<()>,
}

impl Debug for Users {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Users")
            .field("default", &self.default)
            .field("settings", &self.settings.keys().collect::<Vec<_>>())
            .field("sql", &self.sql_users().keys().cloned().collect::<Vec<_>>())
            .finish()
    }
}

impl Users {
    /// The users of the settings and those of the engine's catalog (`stored`).
    pub fn new(
        default: AuthMethod,
        settings: &[UserSettings],
        stored: &[CatalogUser],
    ) -> Result<Self, StoredUserError> {
        let settings = settings
            .iter()
            .map(|u| {
                let user = User {
                    method: u.method.unwrap_or(default),
                    role: u.role.unwrap_or(Role::Reader),
                    verifiers: Arc::new(Verifiers::derive(&u.name, &u.password)),
                };
                (u.name.clone(), user)
            })
            .collect();
        let sql = stored
            .iter()
            .map(|u| {
                let (role, verifiers) = Verifiers::from_stored(u)?;
                Ok((u.name.clone(), User::made_by_sql(default, role, verifiers)))
            })
            .collect::<Result<_, StoredUserError>>()?;
        Ok(Self {
            default,
            settings,
            sql: RwLock::new(sql),
            changes: tokio::sync::Mutex::new(()),
        })
    }

    fn sql_users(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, User>> {
        self.sql.read_locked()
    }

    /// User `name` as a login or a statement sees it now.
    fn find(&self, name: &str) -> Option<User> {
        match self.settings.get(name) {
            Some(user) => Some(user.clone()),
            None => self.sql_users().get(name).cloned(),
        }
    }

    /// The method `user` logs in with: the global `trust` wins, then the user's own method;
    /// unknown users go through SCRAM and fail in it.
    pub fn method(&self, user: &str) -> AuthMethod {
        if self.default == AuthMethod::Trust {
            return AuthMethod::Trust;
        }
        self.find(user)
            .map_or(AuthMethod::ScramSha256, |u| u.method)
    }

    /// The iteration count of `user`'s SCRAM verifier (pgwire's for an unknown user).
    pub fn scram_iterations(&self, user: &str) -> usize {
        self.find(user)
            .map_or(SCRAM_ITERATIONS, |u| u.verifiers.scram_iterations())
    }

    /// What `user`, logged in, may do now (see the module docs).
    pub fn role(&self, user: &str) -> Role {
        match self.find(user) {
            Some(u) => u.role,
            None if self.anyone_is_admin() => Role::Admin,
            None => Role::Reader,
        }
    }

    /// Whether a login that is no user is an admin: the global `trust` lets anyone in, and the
    /// settings file names no user to tell admins from others.
    fn anyone_is_admin(&self) -> bool {
        self.default == AuthMethod::Trust && self.settings.is_empty()
    }

    /// Whether no login can succeed: no user is configured or created by SQL, and `trust` is
    /// not the method (a fresh installation before its operator adds a user).
    pub fn nobody_can_log_in(&self) -> bool {
        self.default != AuthMethod::Trust && self.settings.is_empty() && self.sql_users().is_empty()
    }

    /// Every user by name, with its role and origin.
    pub fn listed(&self) -> Vec<(String, Role, Origin)> {
        let mut listed: BTreeMap<String, (Role, Origin)> = self
            .sql_users()
            .iter()
            .map(|(name, u)| (name.clone(), (u.role, Origin::Sql)))
            .collect();
        for (name, user) in &self.settings {
            listed.insert(name.clone(), (user.role, Origin::Settings));
        }
        listed
            .into_iter()
            .map(|(name, (role, origin))| (name, role, origin))
            .collect()
    }

    /// Runs `edit` on a copy of the users SQL made, then, if it changed them, commits the copy
    /// to `engine`'s catalog and only then makes it the users logins and statements see. An
    /// error of `edit` or of the commit changes nothing.
    pub async fn change<T, E: From<EngineError>>(
        &self,
        engine: &Engine,
        edit: impl FnOnce(&mut Draft<'_>) -> Result<T, E>,
    ) -> Result<T, E> {
        let _serial = self.changes.lock().await;
        let before = self.sql_users().clone();
        let mut draft = Draft {
            users: self,
            sql: before.clone(),
        };
        let answer = edit(&mut draft)?;
        if draft.sql != before {
            let stored = draft
                .sql
                .iter()
                .map(|(name, u)| u.verifiers.stored(name, u.role))
                .collect();
            engine.commit_users(stored).await?;
            *self.sql.write_locked() = draft.sql;
        }
        Ok(answer)
    }
}

impl User {
    /// A user SQL made: the global method, the given role and verifiers.
    fn made_by_sql(default: AuthMethod, role: Role, verifiers: Verifiers) -> Self {
        Self {
            method: default,
            role,
            verifiers: Arc::new(verifiers),
        }
    }
}

/// The users one change sees: those of the settings as they are, and a copy of those SQL
/// made to change (see [`Users::change`]).
#[derive(Debug)]
pub struct Draft<'a> {
    users: &'a Users,
    sql: BTreeMap<String, User>,
}

impl Draft<'_> {
    /// Where user `name` is defined, if it exists.
    pub fn origin(&self, name: &str) -> Option<Origin> {
        if self.users.settings.contains_key(name) {
            Some(Origin::Settings)
        } else if self.sql.contains_key(name) {
            Some(Origin::Sql)
        } else {
            None
        }
    }

    /// Adds (or replaces) user `name`, made by SQL.
    pub fn put(&mut self, name: &str, role: Role, verifiers: Verifiers) {
        let user = User::made_by_sql(self.users.default, role, verifiers);
        self.sql.insert(name.to_string(), user);
    }

    /// User `name` made by SQL, to change.
    pub fn made_by_sql(&mut self, name: &str) -> Option<&mut User> {
        self.sql.get_mut(name)
    }

    /// Removes user `name` made by SQL.
    pub fn remove(&mut self, name: &str) -> Option<User> {
        self.sql.remove(name)
    }

    /// Whether someone can still run admin statements: a user with the admin role, or anyone
    /// who logs in (see [`Users::role`]).
    pub fn admin_remains(&self) -> bool {
        self.users.anyone_is_admin()
            || self.users.settings.values().any(|u| u.role == Role::Admin)
            || self.sql.values().any(|u| u.role == Role::Admin)
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
            .find(name)
            .ok_or_else(|| PgWireError::InvalidPassword(name.to_string()))?;
        Ok(match self.method {
            AuthMethod::Md5 => user.verifiers.md5(rand::random()),
            _ => user.verifiers.scram(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings_user(name: &str, role: Option<Role>) -> UserSettings {
        UserSettings {
            name: name.into(),
            password: "pw".into(),
            method: None,
            role,
        }
    }

    #[test]
    fn roles_of_users_and_of_logins_that_are_none() {
        let stored = Verifiers::derive("sam", "pw").stored("sam", Role::Admin);
        let users = Users::new(
            AuthMethod::ScramSha256,
            &[settings_user("ann", None), settings_user("sam", None)],
            std::slice::from_ref(&stored),
        )
        .unwrap();
        assert_eq!(users.role("ann"), Role::Reader);
        // The settings' `sam` hides the catalog's.
        assert_eq!(users.role("sam"), Role::Reader);
        assert_eq!(users.role("nobody"), Role::Reader);
        let trusting = Users::new(AuthMethod::Trust, &[], &[stored]).unwrap();
        assert_eq!(trusting.role("sam"), Role::Admin);
        assert_eq!(trusting.role("nobody"), Role::Admin);
        assert_eq!(trusting.method("sam"), AuthMethod::Trust);
        let sql_only = Users::new(
            AuthMethod::Md5,
            &[],
            &[Verifiers::derive("bob", "pw").stored("bob", Role::Reader)],
        )
        .unwrap();
        assert_eq!(sql_only.method("bob"), AuthMethod::Md5);
        assert_eq!(sql_only.method("nobody"), AuthMethod::ScramSha256);
        // A dropped user's open session is nobody: not an admin without `trust`.
        assert_eq!(sql_only.role("nobody"), Role::Reader);
        assert_eq!(
            sql_only.listed(),
            vec![("bob".to_string(), Role::Reader, Origin::Sql)]
        );
    }
}
