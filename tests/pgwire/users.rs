//! Users and roles managed by SQL: an admin creates, alters, grants to, revokes from and drops
//! users; they log in at once over SCRAM and md5, a role holds from a session's next statement
//! on, refusals carry PostgreSQL's SQLSTATEs, and with a state directory the users survive a
//! restart (with neither their password stored nor the settings file changed). The engines
//! here have no sources: no MariaDB is needed.

use std::path::Path;
use std::sync::Arc;

use cdcfusion::config::AuthMethod;
use cdcfusion::engine::{Engine, EngineOptions};

use crate::fixture::*;

/// The fixture's users (`ann` an admin, `bob` an md5 reader) with `auth` as the default method,
/// serving `engine`'s `postgres` database.
async fn serve(engine: Arc<Engine>, auth: AuthMethod) -> Fixture {
    let mut settings = settings();
    settings.auth = auth;
    Fixture::serve(engine, "", "postgres", settings).await
}

/// A session of `user`, or the SQLSTATE its login was refused with.
async fn login(f: &Fixture, user: &str, password: &str) -> Result<tokio_postgres::Client, String> {
    f.client_as(user, password, "postgres")
        .await
        .map_err(|e| sqlstate(&e))
}

/// Runs `sql`; the SQLSTATE it failed with, or `ok`.
async fn outcome(client: &tokio_postgres::Client, sql: &str) -> String {
    match client.simple_query(sql).await {
        Ok(_) => "ok".into(),
        Err(e) => sqlstate(&e),
    }
}

/// The error message of `sql`, which must fail.
async fn refusal(client: &tokio_postgres::Client, sql: &str) -> String {
    let error = client.simple_query(sql).await.unwrap_err();
    error
        .as_db_error()
        .expect("a server error")
        .message()
        .to_string()
}

/// `name` and `rolsuper` of every `pg_roles` row.
async fn roles(client: &tokio_postgres::Client) -> Vec<(String, bool)> {
    client
        .query(
            "SELECT rolname, rolsuper FROM pg_catalog.pg_roles ORDER BY rolname",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

const CREATE_SOURCE: &str = "CREATE SOURCE elsewhere FROM MYSQL 'mysql://u:p@127.0.0.1:1'";
/// An admin statement that needs no MariaDB.
const ADMIN_ONLY: &str = "DROP SOURCE IF EXISTS nowhere";

// Several threads: psql runs (and blocks) beside the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_made_by_sql_log_in_at_once_and_their_role_holds_from_the_next_statement() {
    let f = serve(Arc::new(Engine::new()), AuthMethod::ScramSha256).await;
    let admin = f.client("postgres").await;
    assert_eq!(login(&f, "carol", "carol pw").await.err().unwrap(), "28P01");
    admin
        .simple_query("CREATE USER Carol WITH PASSWORD 'carol pw'")
        .await
        .unwrap();
    // Over SCRAM (the default method), as a reader.
    let carol = login(&f, "carol", "carol pw").await.unwrap();
    assert_eq!(login(&f, "carol", "wrong").await.err().unwrap(), "28P01");
    for sql in [CREATE_SOURCE, ADMIN_ONLY, "CREATE USER dave PASSWORD 'd'"] {
        assert_eq!(outcome(&carol, sql).await, "42501", "{sql}");
    }
    let refused = refusal(&carol, CREATE_SOURCE).await;
    assert!(
        refused.contains("CREATE SOURCE needs the admin role")
            && refused.contains("GRANT admin TO \"carol\""),
        "{refused}"
    );
    let refused = refusal(&carol, "GRANT admin TO carol").await;
    assert!(
        refused.contains("GRANT ROLE needs the admin role"),
        "{refused}"
    );
    // A grant holds from the session's next statement, and a revocation as well.
    admin.simple_query("GRANT admin TO carol").await.unwrap();
    assert_eq!(outcome(&carol, ADMIN_ONLY).await, "ok");
    let create = outcome(&carol, CREATE_SOURCE).await;
    assert_ne!(
        create, "42501",
        "an admin may create a source (this one is unreachable)"
    );
    admin.simple_query("REVOKE admin FROM carol").await.unwrap();
    assert_eq!(outcome(&carol, ADMIN_ONLY).await, "42501");
    carol.simple_query("SELECT 1").await.unwrap();
    // A new password: the old one no longer logs in, the new one does; the session goes on.
    admin
        .execute("ALTER USER carol WITH PASSWORD 'new pw'", &[])
        .await
        .unwrap();
    assert_eq!(login(&f, "carol", "carol pw").await.err().unwrap(), "28P01");
    login(&f, "carol", "new pw").await.unwrap();
    carol.simple_query("SELECT 1").await.unwrap();
    // Listed beside the settings' users, an admin as a superuser; psql's \du works.
    admin
        .simple_query("CREATE ROLE erin LOGIN PASSWORD 'erin pw' IN ROLE admin")
        .await
        .unwrap();
    assert_eq!(
        roles(&admin).await,
        [
            ("ann".to_string(), true),
            ("bob".to_string(), false),
            ("carol".to_string(), false),
            ("erin".to_string(), true),
        ]
    );
    let du = stdout_of(&f.psql("postgres", &["-c", "\\du"]));
    assert!(du.contains("carol") && du.contains("erin"), "{du}");
    // PostgreSQL's SQLSTATEs for what cannot be done.
    let erin = login(&f, "erin", "erin pw").await.unwrap();
    for (sql, expected) in [
        ("CREATE USER carol PASSWORD 'x'", "42710"),
        ("CREATE USER ann PASSWORD 'x'", "42710"),
        ("CREATE USER IF NOT EXISTS carol PASSWORD 'x'", "ok"),
        ("ALTER USER nobody PASSWORD 'x'", "42704"),
        ("DROP USER nobody", "42704"),
        ("DROP USER IF EXISTS nobody", "ok"),
        ("GRANT admin TO nobody", "42704"),
        ("GRANT auditors TO carol", "42704"),
        ("REVOKE admin FROM nobody", "42704"),
        ("ALTER USER bob PASSWORD 'x'", "55000"),
        ("DROP USER ann", "55000"),
        ("GRANT admin TO bob", "55000"),
        ("DROP USER erin", "55006"),
        (
            "CREATE USER x PASSWORD 'md5d41d8cd98f00b204e9800998ecf8427e'",
            "0A000",
        ),
        ("CREATE USER x PASSWORD ''", "22023"),
        ("CREATE ROLE analysts", "0A000"),
        ("GRANT SELECT ON cdc.sources TO carol", "0A000"),
        ("CREATE USER x PASSWORD", "42601"),
    ] {
        assert_eq!(outcome(&erin, sql).await, expected, "{sql}");
    }
    let refused = refusal(&erin, "DROP USER bob").await;
    assert!(refused.contains("settings file"), "{refused}");
    // The old password of `carol` still applies: `IF NOT EXISTS` changed nothing.
    login(&f, "carol", "new pw").await.unwrap();
    // Dropped: no new login, and the open session is nobody's, so a reader's.
    admin.simple_query("DROP USER carol").await.unwrap();
    assert_eq!(login(&f, "carol", "new pw").await.err().unwrap(), "28P01");
    assert_eq!(outcome(&carol, ADMIN_ONLY).await, "42501");
    assert!(!roles(&admin).await.iter().any(|(name, _)| name == "carol"));
}

/// The catalog files of the state directory `dir`, as text.
fn catalog_text(dir: &Path) -> String {
    std::fs::read_dir(dir.join("catalog"))
        .unwrap()
        .map(|e| std::fs::read(e.unwrap().path()).unwrap())
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .collect()
}

async fn open(dir: &Path) -> Arc<Engine> {
    Arc::new(
        Engine::open(dir.to_str().unwrap(), EngineOptions::default())
            .await
            .unwrap(),
    )
}

#[tokio::test]
async fn users_made_by_sql_survive_a_restart_without_their_password_stored() {
    let dir = tempfile::tempdir().unwrap();
    // First run: md5 by default.
    let f = serve(open(dir.path()).await, AuthMethod::Md5).await;
    let admin = f.client("postgres").await;
    for sql in [
        "CREATE USER dana PASSWORD 'dana pw' IN ROLE admin",
        "CREATE USER erin PASSWORD 'erin pw'",
        "CREATE USER gone PASSWORD 'gone pw'",
        "DROP USER gone",
    ] {
        admin.simple_query(sql).await.unwrap();
    }
    login(&f, "dana", "dana pw").await.unwrap();
    login(&f, "erin", "erin pw").await.unwrap();
    f.shutdown().await;
    let catalog = catalog_text(dir.path());
    assert!(
        catalog.contains("\"dana\"") && catalog.contains("\"erin\""),
        "{catalog}"
    );
    for secret in ["dana pw", "erin pw", "ann's secret"] {
        assert!(!catalog.contains(secret), "{secret} in {catalog}");
    }

    // Second run: SCRAM by default, from the verifiers kept.
    let f = serve(open(dir.path()).await, AuthMethod::ScramSha256).await;
    let dana = login(&f, "dana", "dana pw").await.unwrap();
    let erin = login(&f, "erin", "erin pw").await.unwrap();
    assert_eq!(login(&f, "erin", "dana pw").await.err().unwrap(), "28P01");
    assert_eq!(login(&f, "gone", "gone pw").await.err().unwrap(), "28P01");
    assert_eq!(outcome(&dana, ADMIN_ONLY).await, "ok");
    assert_eq!(outcome(&erin, ADMIN_ONLY).await, "42501");
    dana.simple_query("ALTER USER erin PASSWORD 'erin new'; GRANT admin TO erin")
        .await
        .unwrap();
    assert_eq!(outcome(&erin, ADMIN_ONLY).await, "ok");
    f.shutdown().await;

    // Third run: md5 again, with the password and role the second run gave.
    let f = serve(open(dir.path()).await, AuthMethod::Md5).await;
    assert_eq!(login(&f, "erin", "erin pw").await.err().unwrap(), "28P01");
    let erin = login(&f, "erin", "erin new").await.unwrap();
    assert_eq!(outcome(&erin, ADMIN_ONLY).await, "ok");
    assert_eq!(
        roles(&erin).await,
        [
            ("ann".to_string(), true),
            ("bob".to_string(), false),
            ("dana".to_string(), true),
            ("erin".to_string(), true),
        ]
    );
    f.shutdown().await;
}
