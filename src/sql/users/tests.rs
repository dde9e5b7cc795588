//! The user statements' grammar against the statements it must read and refuse.

use super::*;
use crate::sqlstate::{HasSqlState, SqlState};

fn parse(sql: &str) -> UserStatement {
    match parse_user_statement(sql) {
        Ok(Some(statement)) => statement,
        other => panic!("{sql:?} should parse, got {other:?}"),
    }
}

/// Asserts `sql` is refused with `sqlstate` and a message containing `fragment`.
fn refused(sql: &str, sqlstate: &str, fragment: &str) {
    match parse_user_statement(sql) {
        Err(e) => {
            assert_eq!(e.sqlstate().code(), sqlstate, "{sql}: {e}");
            assert!(e.to_string().contains(fragment), "{sql}: {e}");
        }
        other => panic!("{sql:?} should be refused, got {other:?}"),
    }
}

fn create(name: &str, password: &str, role: Role) -> UserStatement {
    UserStatement::Create(CreateUser {
        name: name.into(),
        if_not_exists: false,
        password: Password::new(password.into()),
        role,
    })
}

#[test]
fn create_user_and_create_role_login_are_one_statement() {
    for (sql, role) in [
        ("CREATE USER Ann PASSWORD 'pw'", Role::Reader),
        ("create user ann with password 'pw';", Role::Reader),
        (
            "CREATE USER ann WITH PASSWORD 'pw' IN ROLE admin",
            Role::Admin,
        ),
        ("CREATE USER ann PASSWORD 'pw' IN ROLE reader", Role::Reader),
        ("CREATE USER ann PASSWORD 'pw' IN GROUP ADMIN", Role::Admin),
        ("CREATE ROLE ann WITH LOGIN PASSWORD 'pw'", Role::Reader),
        (
            "CREATE ROLE ann LOGIN PASSWORD 'pw' IN ROLE admin",
            Role::Admin,
        ),
        (
            "CREATE ROLE ann WITH LOGIN NOSUPERUSER INHERIT NOCREATEDB NOCREATEROLE \
             NOREPLICATION PASSWORD 'pw'",
            Role::Reader,
        ),
    ] {
        assert_eq!(parse(sql), create("ann", "pw", role), "{sql}");
    }
    assert_eq!(
        parse("CREATE USER \"Ann\" PASSWORD $$it's$$"),
        create("Ann", "it's", Role::Reader)
    );
    let UserStatement::Create(c) = parse("CREATE USER IF NOT EXISTS ann PASSWORD 'pw'") else {
        panic!("CREATE USER");
    };
    assert!(c.if_not_exists);
    assert_eq!(parse("CREATE USER ann PASSWORD 'pw'").tag(), "CREATE ROLE");
}

#[test]
fn alter_drop_grant_and_revoke() {
    let alter = |password: Option<&str>| UserStatement::Alter {
        name: "ann".into(),
        password: password.map(|p| Password::new(p.into())),
    };
    assert_eq!(
        parse("ALTER USER ann WITH PASSWORD 'new'"),
        alter(Some("new"))
    );
    assert_eq!(parse("ALTER ROLE ANN PASSWORD 'new'"), alter(Some("new")));
    assert_eq!(parse("ALTER ROLE ann LOGIN"), alter(None));
    assert_eq!(
        parse("DROP USER IF EXISTS ann, \"Bob\""),
        UserStatement::Drop {
            names: vec!["ann".into(), "Bob".into()],
            if_exists: true
        }
    );
    assert_eq!(
        parse("DROP ROLE ann"),
        UserStatement::Drop {
            names: vec!["ann".into()],
            if_exists: false
        }
    );
    assert_eq!(
        parse("GRANT admin TO ann, bob"),
        UserStatement::Grant {
            role: Role::Admin,
            users: vec!["ann".into(), "bob".into()]
        }
    );
    assert_eq!(
        parse("GRANT reader TO GROUP ann"),
        UserStatement::Grant {
            role: Role::Reader,
            users: vec!["ann".into()]
        }
    );
    assert_eq!(
        parse("REVOKE ADMIN FROM ann RESTRICT"),
        UserStatement::RevokeAdmin {
            users: vec!["ann".into()]
        }
    );
}

#[test]
fn other_texts_are_not_claimed() {
    for sql in [
        "SELECT 1",
        "CREATE TABLE t (a int)",
        "DROP TABLE t",
        "CREATE SOURCE s FROM MYSQL 'mysql://u@h'",
        "ALTER SINK s PAUSE",
        "CREATE \"user\" x",
    ] {
        assert!(matches!(parse_user_statement(sql), Ok(None)), "{sql}");
    }
}

#[test]
fn what_cdcfusion_does_not_have_is_refused_by_name() {
    refused(
        "CREATE ROLE analysts",
        SqlState::FEATURE_NOT_SUPPORTED.code(),
        "cannot log in",
    );
    refused(
        "CREATE USER ann NOLOGIN PASSWORD 'x'",
        SqlState::FEATURE_NOT_SUPPORTED.code(),
        "cannot log in",
    );
    refused(
        "CREATE USER ann",
        SqlState::FEATURE_NOT_SUPPORTED.code(),
        "without a password",
    );
    refused(
        "CREATE USER ann PASSWORD NULL",
        SqlState::FEATURE_NOT_SUPPORTED.code(),
        "PASSWORD NULL",
    );
    refused(
        "CREATE USER ann SUPERUSER PASSWORD 'x'",
        SqlState::FEATURE_NOT_SUPPORTED.code(),
        "SUPERUSER",
    );
    refused(
        "CREATE USER ann PASSWORD 'x' VALID UNTIL '2030-01-01'",
        SqlState::FEATURE_NOT_SUPPORTED.code(),
        "VALID UNTIL",
    );
    refused(
        "CREATE USER ann CONNECTION LIMIT 3 PASSWORD 'x'",
        SqlState::FEATURE_NOT_SUPPORTED.code(),
        "CONNECTION LIMIT",
    );
    refused(
        "CREATE USER ann PASSWORD 'x' IN ROLE auditors",
        SqlState::UNDEFINED_OBJECT.code(),
        "role \"auditors\" does not exist",
    );
    refused(
        "CREATE ROLE a, b LOGIN PASSWORD 'x'",
        SqlState::FEATURE_NOT_SUPPORTED.code(),
        "several users",
    );
    refused(
        "ALTER USER ann RENAME TO bob",
        SqlState::FEATURE_NOT_SUPPORTED.code(),
        "RENAME",
    );
    refused(
        "ALTER USER ann SET search_path = x",
        SqlState::FEATURE_NOT_SUPPORTED.code(),
        "SET",
    );
    refused(
        "ALTER USER ann CREATEDB",
        SqlState::FEATURE_NOT_SUPPORTED.code(),
        "CREATEDB",
    );
    refused(
        "DROP USER ann CASCADE",
        SqlState::FEATURE_NOT_SUPPORTED.code(),
        "CASCADE",
    );
    refused(
        "GRANT SELECT ON t TO ann",
        SqlState::FEATURE_NOT_SUPPORTED.code(),
        "GRANT of privileges",
    );
    refused(
        "GRANT ALL PRIVILEGES ON t TO ann",
        SqlState::FEATURE_NOT_SUPPORTED.code(),
        "GRANT of privileges",
    );
    refused(
        "GRANT auditors TO ann",
        SqlState::UNDEFINED_OBJECT.code(),
        "\"auditors\"",
    );
    refused(
        "GRANT admin TO PUBLIC",
        SqlState::FEATURE_NOT_SUPPORTED.code(),
        "PUBLIC",
    );
    refused(
        "GRANT admin TO ann WITH ADMIN OPTION",
        SqlState::FEATURE_NOT_SUPPORTED.code(),
        "WITH ADMIN",
    );
    refused(
        "REVOKE reader FROM ann",
        SqlState::FEATURE_NOT_SUPPORTED.code(),
        "REVOKE reader",
    );
    refused(
        "REVOKE ADMIN OPTION FOR admin FROM ann",
        SqlState::FEATURE_NOT_SUPPORTED.code(),
        "OPTION FOR",
    );
    refused(
        "REVOKE SELECT ON t FROM ann",
        SqlState::FEATURE_NOT_SUPPORTED.code(),
        "REVOKE of privileges",
    );
    refused(
        "CREATE USER ann PASSWORD 'x' garbage",
        SqlState::SYNTAX_ERROR.code(),
        "garbage",
    );
    refused(
        "CREATE USER ann PASSWORD 'unterminated",
        SqlState::SYNTAX_ERROR.code(),
        "syntax error",
    );
}

#[test]
fn passwords_are_plain_non_empty_strings_and_never_shown() {
    refused(
        "CREATE USER ann PASSWORD ''",
        SqlState::INVALID_PARAMETER_VALUE.code(),
        "cannot be empty",
    );
    refused(
        "ALTER USER ann PASSWORD 42",
        SqlState::INVALID_PARAMETER_VALUE.code(),
        "string literal",
    );
    refused(
        "ALTER USER ann PASSWORD 'md5d41d8cd98f00b204e9800998ecf8427e'",
        SqlState::FEATURE_NOT_SUPPORTED.code(),
        "already hashed",
    );
    refused(
        "ALTER USER ann PASSWORD 'SCRAM-SHA-256$4096:c2FsdA==$a2V5:a2V5'",
        SqlState::FEATURE_NOT_SUPPORTED.code(),
        "already hashed",
    );
    // Not a verifier: md5 and too short.
    assert_eq!(
        parse("CREATE USER ann PASSWORD 'md5secret'"),
        create("ann", "md5secret", Role::Reader)
    );
    let shown = format!("{:?}", parse("CREATE USER ann PASSWORD 'hunter2'"));
    assert!(!shown.contains("hunter2"), "{shown}");
}
