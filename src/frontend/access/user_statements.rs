//! Running the statements that manage users (`CREATE USER`, `ALTER USER`, `DROP USER`,
//! `GRANT`, `REVOKE`; read by `sql::users`), and the errors they answer with.
//!
//! # Rules
//! * Only admins run them; `privileges` refuses them to readers before they get here.
//! * Users of the settings file are the operator's: SQL neither alters, drops, grants to nor
//!   revokes from them (`55000`, see [`UserAdminError::FromSettings`]).
//! * A session cannot drop its own user (`55006`, as in PostgreSQL), and no statement may
//!   leave nobody able to run admin statements (`55000`): `GRANT admin` to another user first.
//! * A statement naming several users changes all of them or none.
//!
//! # Invariant
//! A statement's checks, its commit to the catalog and its taking effect happen under one
//! change of [`Users`] (see there): what a statement checked is still true when it takes
//! effect, and what takes effect is committed. Passwords become verifiers before the change
//! starts and are dropped when the statement ends.

use pgwire::api::results::{Response, Tag};
use pgwire::error::PgWireError;

use crate::config::Role;
use crate::engine::{Engine, EngineError};
use crate::frontend::access::users::{Draft, Origin, Users};
use crate::frontend::access::verifier::Verifiers;
use crate::frontend::protocol::error::user_error;
use crate::sql::UserStatement;
use crate::sqlstate::{HasSqlState, SqlState};

/// Why a user statement changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum UserAdminError {
    #[error("role {0:?} already exists")]
    Exists(String),
    #[error("role {0:?} does not exist")]
    Missing(String),
    /// `55000` rather than `42501`: no session, however privileged, may change such a user;
    /// what stands in the way is where the user is defined, not who asks.
    #[error(
        "user {0:?} is defined in the server's settings file ([[users]] or CDCFUSION_USER), \
         not by SQL: change it there and restart the server"
    )]
    FromSettings(String),
    #[error("current user cannot be dropped")]
    CurrentUser,
    #[error(
        "{0:?} is the last user with the admin role and nobody could run admin statements \
         without it: GRANT admin TO another user first"
    )]
    LastAdmin(String),
    #[error(transparent)]
    Engine(#[from] EngineError),
}

impl UserAdminError {
    /// The error as the client sees it.
    fn into_pg(self) -> PgWireError {
        user_error(self.sqlstate(), self.to_string())
    }
}

impl HasSqlState for UserAdminError {
    fn sqlstate(&self) -> SqlState {
        match self {
            Self::Exists(_) => SqlState::DUPLICATE_OBJECT,
            Self::Missing(_) => SqlState::UNDEFINED_OBJECT,
            Self::FromSettings(_) | Self::LastAdmin(_) => {
                SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE
            }
            Self::CurrentUser => SqlState::OBJECT_IN_USE,
            Self::Engine(e) => e.sqlstate(),
        }
    }
}

/// Runs `statement` for the session of `session_user`, committing through `engine`.
pub async fn run(
    users: &Users,
    engine: &Engine,
    session_user: &str,
    statement: &UserStatement,
) -> Result<Response, PgWireError> {
    apply(users, engine, session_user, statement)
        .await
        .map_err(UserAdminError::into_pg)?;
    Ok(Response::Execution(Tag::new(statement.tag())))
}

async fn apply(
    users: &Users,
    engine: &Engine,
    session_user: &str,
    statement: &UserStatement,
) -> Result<(), UserAdminError> {
    match statement {
        UserStatement::Create(create) => {
            let verifiers = Verifiers::derive(&create.name, create.password.expose());
            users
                .change(engine, |draft| {
                    if draft.origin(&create.name).is_some() {
                        return match create.if_not_exists {
                            true => Ok(()),
                            false => Err(UserAdminError::Exists(create.name.clone())),
                        };
                    }
                    draft.put(&create.name, create.role, verifiers);
                    Ok(())
                })
                .await
        }
        UserStatement::Alter { name, password } => {
            let verifiers = password
                .as_ref()
                .map(|p| Verifiers::derive(name, p.expose()));
            users
                .change(engine, |draft| {
                    let role = changeable(draft, name)?;
                    if let Some(verifiers) = verifiers {
                        draft.put(name, role, verifiers);
                    }
                    Ok(())
                })
                .await
        }
        UserStatement::Drop { names, if_exists } => {
            users
                .change(engine, |draft| {
                    for name in names {
                        if *if_exists && draft.origin(name).is_none() {
                            continue;
                        }
                        changeable(draft, name)?;
                        if name == session_user {
                            return Err(UserAdminError::CurrentUser);
                        }
                        draft.remove(name);
                        if !draft.admin_remains() {
                            return Err(UserAdminError::LastAdmin(name.clone()));
                        }
                    }
                    Ok(())
                })
                .await
        }
        UserStatement::Grant { role, users: names } => {
            users
                .change(engine, |draft| {
                    set_roles(draft, names, |held| held.max(*role))
                })
                .await
        }
        UserStatement::RevokeAdmin { users: names } => {
            users
                .change(engine, |draft| set_roles(draft, names, |_| Role::Reader))
                .await
        }
    }
}

/// The role of user `name` if SQL may change it (it exists and SQL made it).
fn changeable(draft: &mut Draft<'_>, name: &str) -> Result<Role, UserAdminError> {
    match draft.origin(name) {
        None => Err(UserAdminError::Missing(name.to_string())),
        Some(Origin::Settings) => Err(UserAdminError::FromSettings(name.to_string())),
        Some(Origin::Sql) => draft
            .made_by_sql(name)
            .map(|u| u.role)
            .ok_or_else(|| UserAdminError::Missing(name.to_string())),
    }
}

/// Gives each of `names` the role `new` makes of the one it holds; an admin must remain.
fn set_roles(
    draft: &mut Draft<'_>,
    names: &[String],
    new: impl Fn(Role) -> Role,
) -> Result<(), UserAdminError> {
    for name in names {
        changeable(draft, name)?;
        if let Some(user) = draft.made_by_sql(name) {
            user.role = new(user.role);
        }
        if !draft.admin_remains() {
            return Err(UserAdminError::LastAdmin(name.clone()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{AuthMethod, UserSettings};
    use crate::sql::parse_user_statement;

    /// An admin `root` from the settings, nothing else.
    fn with_root() -> Users {
        let root = UserSettings {
            name: "root".into(),
            password: "pw".into(),
            method: None,
            role: Some(Role::Admin),
        };
        Users::new(AuthMethod::ScramSha256, &[root], &[]).unwrap()
    }

    async fn run_as(users: &Users, who: &str, sql: &str) -> Result<(), UserAdminError> {
        let statement = parse_user_statement(sql).unwrap().unwrap();
        apply(users, &Engine::new(), who, &statement).await
    }

    fn code(result: Result<(), UserAdminError>) -> String {
        match result {
            Ok(()) => "ok".into(),
            Err(e) => match e.into_pg() {
                PgWireError::UserError(info) => info.code,
                other => format!("{other:?}"),
            },
        }
    }

    #[tokio::test]
    async fn users_are_created_changed_and_dropped_with_postgresql_errors() {
        let users = with_root();
        let root = |sql| run_as(&users, "root", sql);
        assert_eq!(code(root("CREATE USER ann PASSWORD 'a'").await), "ok");
        assert_eq!(
            code(root("CREATE USER ann PASSWORD 'a'").await),
            SqlState::DUPLICATE_OBJECT.code()
        );
        assert_eq!(
            code(root("CREATE USER root PASSWORD 'a'").await),
            SqlState::DUPLICATE_OBJECT.code()
        );
        assert_eq!(
            code(root("CREATE USER IF NOT EXISTS ann PASSWORD 'b'").await),
            "ok"
        );
        assert_eq!(users.role("ann"), Role::Reader);
        assert_eq!(code(root("GRANT admin TO ann").await), "ok");
        assert_eq!(users.role("ann"), Role::Admin);
        assert_eq!(code(root("GRANT reader TO ann").await), "ok");
        assert_eq!(users.role("ann"), Role::Admin, "every user is a reader");
        assert_eq!(code(root("REVOKE admin FROM ann").await), "ok");
        assert_eq!(users.role("ann"), Role::Reader);
        for sql in [
            "ALTER USER nobody PASSWORD 'x'",
            "DROP USER nobody",
            "GRANT admin TO nobody",
            "REVOKE admin FROM nobody",
        ] {
            assert_eq!(
                code(root(sql).await),
                SqlState::UNDEFINED_OBJECT.code(),
                "{sql}"
            );
        }
        for sql in [
            "ALTER USER root PASSWORD 'x'",
            "DROP USER root",
            "GRANT admin TO root",
            "REVOKE admin FROM root",
        ] {
            assert_eq!(
                code(root(sql).await),
                SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE.code(),
                "{sql}"
            );
        }
        // Several names change all or none.
        assert_eq!(
            code(root("GRANT admin TO ann, nobody").await),
            SqlState::UNDEFINED_OBJECT.code()
        );
        assert_eq!(users.role("ann"), Role::Reader);
        assert_eq!(code(root("DROP USER IF EXISTS nobody, ann").await), "ok");
        assert_eq!(users.listed().len(), 1);
    }

    #[tokio::test]
    async fn nobody_drops_themselves_or_the_last_admin() {
        // An admin made by SQL while the settings had one, which they no longer have.
        let stored = Verifiers::derive("ann", "a").stored("ann", Role::Admin);
        let users = Users::new(AuthMethod::ScramSha256, &[], &[stored]).unwrap();
        assert_eq!(
            code(run_as(&users, "ann", "DROP USER ann").await),
            SqlState::OBJECT_IN_USE.code()
        );
        assert_eq!(
            code(run_as(&users, "ann", "REVOKE admin FROM ann").await),
            SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE.code()
        );
        assert_eq!(
            code(run_as(&users, "ann", "CREATE USER bob PASSWORD 'b'").await),
            "ok"
        );
        assert_eq!(
            code(run_as(&users, "bob", "DROP USER ann").await),
            SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE.code()
        );
        assert_eq!(
            code(run_as(&users, "ann", "GRANT admin TO bob").await),
            "ok"
        );
        assert_eq!(
            code(run_as(&users, "ann", "REVOKE admin FROM ann").await),
            "ok"
        );
        assert_eq!(code(run_as(&users, "bob", "DROP USER ann").await), "ok");
        assert_eq!(users.role("bob"), Role::Admin);
    }
}
