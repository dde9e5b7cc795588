//! The user statements' grammar against the statements it must read and refuse.

use super::*;

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
            assert_eq!(e.sqlstate(), sqlstate, "{sql}: {e}");
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
    refused("CREATE ROLE analysts", "0A000", "cannot log in");
    refused(
        "CREATE USER ann NOLOGIN PASSWORD 'x'",
        "0A000",
        "cannot log in",
    );
    refused("CREATE USER ann", "0A000", "without a password");
    refused("CREATE USER ann PASSWORD NULL", "0A000", "PASSWORD NULL");
    refused(
        "CREATE USER ann SUPERUSER PASSWORD 'x'",
        "0A000",
        "SUPERUSER",
    );
    refused(
        "CREATE USER ann PASSWORD 'x' VALID UNTIL '2030-01-01'",
        "0A000",
        "VALID UNTIL",
    );
    refused(
        "CREATE USER ann CONNECTION LIMIT 3 PASSWORD 'x'",
        "0A000",
        "CONNECTION LIMIT",
    );
    refused(
        "CREATE USER ann PASSWORD 'x' IN ROLE auditors",
        "42704",
        "role \"auditors\" does not exist",
    );
    refused(
        "CREATE ROLE a, b LOGIN PASSWORD 'x'",
        "0A000",
        "several users",
    );
    refused("ALTER USER ann RENAME TO bob", "0A000", "RENAME");
    refused("ALTER USER ann SET search_path = x", "0A000", "SET");
    refused("ALTER USER ann CREATEDB", "0A000", "CREATEDB");
    refused("DROP USER ann CASCADE", "0A000", "CASCADE");
    refused("GRANT SELECT ON t TO ann", "0A000", "GRANT of privileges");
    refused(
        "GRANT ALL PRIVILEGES ON t TO ann",
        "0A000",
        "GRANT of privileges",
    );
    refused("GRANT auditors TO ann", "42704", "\"auditors\"");
    refused("GRANT admin TO PUBLIC", "0A000", "PUBLIC");
    refused(
        "GRANT admin TO ann WITH ADMIN OPTION",
        "0A000",
        "WITH ADMIN",
    );
    refused("REVOKE reader FROM ann", "0A000", "REVOKE reader");
    refused(
        "REVOKE ADMIN OPTION FOR admin FROM ann",
        "0A000",
        "OPTION FOR",
    );
    refused(
        "REVOKE SELECT ON t FROM ann",
        "0A000",
        "REVOKE of privileges",
    );
    refused("CREATE USER ann PASSWORD 'x' garbage", "42601", "garbage");
    refused(
        "CREATE USER ann PASSWORD 'unterminated",
        "42601",
        "syntax error",
    );
}

#[test]
fn passwords_are_plain_non_empty_strings_and_never_shown() {
    refused("CREATE USER ann PASSWORD ''", "22023", "cannot be empty");
    refused("ALTER USER ann PASSWORD 42", "22023", "string literal");
    refused(
        "ALTER USER ann PASSWORD 'md5d41d8cd98f00b204e9800998ecf8427e'",
        "0A000",
        "already hashed",
    );
    refused(
        "ALTER USER ann PASSWORD 'SCRAM-SHA-256$4096:c2FsdA==$a2V5:a2V5'",
        "0A000",
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
