//! The real `psql`: meta-commands against captured tables, our own statements, session
//! statements, errors with their SQLSTATE, `\set ON_ERROR_STOP` and `\copy`.

use crate::fixture::*;

const SETUP: &str = "CREATE TABLE {db}.orders (id INT PRIMARY KEY, customer VARCHAR(20) NOT NULL, amount DECIMAL(10,2));
     INSERT INTO {db}.orders VALUES (1, 'ada', 10.50), (2, 'grace', NULL), (3, 'linus', 7.25);
     CREATE TABLE {db}.customers (name VARCHAR(20) PRIMARY KEY, tier ENUM('basic','gold'));
     INSERT INTO {db}.customers VALUES ('ada', 'gold');";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psql_meta_commands_describe_captured_tables() {
    let f = Fixture::start("metadb", "meta", SETUP, settings()).await;
    let psql = |args: &[&str]| stdout_of(&f.psql("meta", args));
    // \l lists every database: postgres and each source.
    let list = psql(&["-c", "\\l"]);
    assert!(list.contains("postgres") && list.contains("meta"), "{list}");
    // \dn lists the captured database as a schema, and the status schema.
    let schemas = psql(&["-c", "\\dn"]);
    assert!(
        schemas.contains("metadb") && schemas.contains("cdc"),
        "{schemas}"
    );
    // \dt metadb.* lists the current tables and their changelogs.
    let tables = psql(&["-c", "\\dt metadb.*"]);
    for name in ["orders", "customers", "orders$changelog"] {
        assert!(tables.contains(name), "{name} missing from:\n{tables}");
    }
    // \d and \d+ describe the columns with their types.
    let orders = psql(&["-c", "\\d metadb.orders"]);
    for column in [
        "id",
        "customer",
        "amount",
        "integer",
        "character varying(20)",
        "numeric(10,2)",
    ] {
        assert!(orders.contains(column), "{column} missing from:\n{orders}");
    }
    let detailed = psql(&["-c", "\\d+ metadb.orders"]);
    for word in ["Storage", "Description", "customer", "not null", "numeric"] {
        assert!(detailed.contains(word), "{word} missing from:\n{detailed}");
    }
    let sized = psql(&["-c", "\\dt+ metadb.*"]);
    assert!(
        sized.contains("Size") && sized.contains("orders"),
        "{sized}"
    );
    // \df lists no user-defined functions (psql leaves out pg_catalog's), \df+ neither.
    for command in ["\\df", "\\df+"] {
        let functions = psql(&["-c", command]);
        assert!(
            functions.contains("List of functions") && functions.contains("(0 rows)"),
            "{command}: {functions}"
        );
    }
    let builtin = psql(&["-c", "\\df pg_catalog.pg_size_pretty"]);
    assert!(
        builtin.contains("pg_size_pretty") && builtin.contains("| text"),
        "{builtin}"
    );
    // The other listings a psql user reaches for run without errors.
    for command in [
        "\\l+",
        "\\dn+",
        "\\dT",
        "\\du",
        "\\dv cdc.*",
        "\\d cdc.sources",
    ] {
        let out = psql(&["-c", command]);
        assert!(!out.is_empty(), "{command} printed nothing");
    }
    // Computed columns are named as PostgreSQL names them.
    let named = psql(&[
        "-A",
        "-c",
        "SELECT count(*), max(amount), 1 + 1, id::TEXT FROM metadb.orders GROUP BY id ORDER BY id LIMIT 1",
    ]);
    assert!(named.starts_with("count|max|?column?|id\n"), "{named}");
    let size = psql(&["-A", "-t", "-c", "SELECT pg_size_pretty(10485760)"]);
    assert_eq!(size, "10 MB\n");
    // The data itself, through the database's default catalog.
    let rows = psql(&[
        "-A",
        "-t",
        "-c",
        "SELECT id, customer, amount FROM metadb.orders ORDER BY id",
    ]);
    assert_eq!(rows, "1|ada|10.50\n2|grace|\n3|linus|7.25\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psql_runs_our_statements_and_session_statements() {
    let f = Fixture::start("pg_stmts", "stmts", SETUP, settings()).await;
    let out = stdout_of(&f.psql(
        "postgres",
        &[
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
            "SHOW SOURCES",
            "-c",
            "SET statement_timeout = '5s'",
            "-c",
            "SHOW statement_timeout",
            "-c",
            "BEGIN",
            "-c",
            "SELECT count(*) FROM stmts.pg_stmts.orders",
            "-c",
            "COMMIT",
            "-c",
            "SELECT current_database(), current_setting('server_version')",
            "-c",
            "SELECT version()",
            "-c",
            "DISCARD ALL",
            "-c",
            "SHOW statement_timeout",
        ],
    ));
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("stmts|"), "{out}");
    assert!(!out.contains("ann's secret"));
    assert!(lines.contains(&"5s"), "{out}");
    assert!(lines.contains(&"3"), "{out}");
    assert!(lines.contains(&"postgres|16.6"), "{out}");
    assert!(out.contains("PostgreSQL 16.6"), "{out}");
    assert_eq!(
        lines.last(),
        Some(&"0"),
        "DISCARD ALL resets settings: {out}"
    );
    // A source created and dropped from psql (its window reader's id is reserved too).
    let server_id = crate::common::source_server_id();
    let create = format!(
        "CREATE SOURCE made_in_psql FROM MYSQL '{}' WITH (tables = 'pg_stmts.orders', server_id = {server_id})",
        crate::common::server().cdc_url(),
    );
    let out = f.psql("postgres", &["-v", "ON_ERROR_STOP=1", "-c", &create]);
    assert!(stdout_of(&out).contains("CREATE SOURCE"));
    assert!(f.engine.source("made_in_psql").is_ok());
    stdout_of(&f.psql("postgres", &["-c", "DROP SOURCE made_in_psql"]));
    assert!(f.engine.source("made_in_psql").is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psql_reports_errors_with_sqlstate_and_honours_on_error_stop() {
    let f = Fixture::start("pg_errors", "errs", SETUP, settings()).await;
    let cases = [
        ("SELEC 1", "42601"),
        ("SELECT * FROM pg_errors.nowhere", "42P01"),
        ("SELECT nope FROM pg_errors.orders", "42703"),
        ("SET statement_timeout = 'soon'", "22023"),
        (
            "CREATE SOURCE s FROM MYSQL 'mysql://u@h' WITH (parallelism = 0)",
            "22023",
        ),
        ("CREATE SOURCE s FROM POSTGRES 'x'", "0A000"),
        ("SHOW no_such_setting", "42704"),
        ("DROP SOURCE nothing_here", "42704"),
        ("COPY pg_errors.orders FROM STDIN", "0A000"),
    ];
    for (sql, code) in cases {
        let out = f.psql(
            "errs",
            &[
                "-v",
                "VERBOSITY=verbose",
                "-v",
                "ON_ERROR_STOP=1",
                "-c",
                sql,
            ],
        );
        assert!(!out.status.success(), "{sql} succeeded");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!("ERROR:  {code}:")),
            "{sql}: expected {code}, got {stderr}"
        );
    }
    // ON_ERROR_STOP stops the script at the failing statement, exit status 3...
    let script = "SELECT 'before';\nSELECT * FROM pg_errors.nowhere;\nSELECT 'after';\n";
    let stopped = f.psql_script("errs", &["-A", "-t", "-v", "ON_ERROR_STOP=1"], script);
    assert_eq!(stopped.status.code(), Some(3));
    let out = String::from_utf8_lossy(&stopped.stdout);
    assert!(out.contains("before") && !out.contains("after"), "{out}");
    // ...and without it the same connection goes on after the error.
    let went_on = f.psql_script("errs", &["-A", "-t"], script);
    let out = String::from_utf8_lossy(&went_on.stdout);
    assert!(out.contains("before") && out.contains("after"), "{out}");
    // Several statements in one simple query stop at the first error.
    let multi = f.psql(
        "errs",
        &[
            "-A",
            "-t",
            "-c",
            "SELECT 1; SELECT * FROM nowhere; SELECT 3",
        ],
    );
    let out = String::from_utf8_lossy(&multi.stdout);
    assert!(!out.contains('3'), "{out}");
    // An error inside a transaction block aborts it: 25P02 until its end, which rolls back.
    let block = "BEGIN;\nSELECT nope;\nSELECT 'inside';\nCOMMIT;\nSELECT 'outside';\n";
    let aborted = f.psql_script("errs", &["-A", "-t", "-v", "VERBOSITY=verbose"], block);
    let out = String::from_utf8_lossy(&aborted.stdout);
    let err = String::from_utf8_lossy(&aborted.stderr);
    assert!(!out.contains("inside") && out.contains("outside"), "{out}");
    assert!(err.contains("ERROR:  25P02:"), "{err}");
    assert!(
        out.contains("ROLLBACK"),
        "COMMIT of an aborted block reports ROLLBACK: {out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psql_copy_writes_query_results() {
    let f = Fixture::start("pg_copy", "cp", SETUP, settings()).await;
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("orders.csv");
    let text = dir.path().join("orders.txt");
    let copy_csv = format!(
        "\\copy (SELECT id, customer, amount FROM pg_copy.orders ORDER BY id) TO '{}' CSV HEADER",
        csv.display()
    );
    let copy_text = format!("\\copy pg_copy.orders TO '{}'", text.display());
    let out = stdout_of(&f.psql(
        "cp",
        &["-v", "ON_ERROR_STOP=1", "-c", &copy_csv, "-c", &copy_text],
    ));
    // The header is not a row: three rows each time.
    assert_eq!(out, "COPY 3\nCOPY 3\n");
    assert_eq!(
        std::fs::read_to_string(&csv).unwrap(),
        "id,customer,amount\n1,ada,10.50\n2,grace,\n3,linus,7.25\n"
    );
    let mut lines: Vec<String> = std::fs::read_to_string(&text)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    lines.sort();
    assert_eq!(lines, ["1\tada\t10.50", "2\tgrace\t\\N", "3\tlinus\t7.25"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psql_is_refused_a_stopped_table_unless_it_reads_stale_state() {
    use crate::common::*;
    use mysql_async::prelude::Queryable;
    let f = Fixture::start("pg_stopped", "stopped", SETUP, settings()).await;
    let mut conn = root_conn(server()).await;
    conn.query_drop("DROP TABLE pg_stopped.orders")
        .await
        .unwrap();
    f.sync().await;
    let verbose = ["-A", "-t", "-v", "VERBOSITY=verbose"];
    let refused = f.psql_script(
        "stopped",
        &verbose,
        "SELECT count(*) FROM pg_stopped.orders;\n",
    );
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("ERROR:  55000:"), "{err}");
    assert!(err.contains("DROP TABLE"), "{err}");
    // The other table is still served, without a warning.
    let other = f.psql_script(
        "stopped",
        &verbose,
        "SELECT tier FROM pg_stopped.customers;\n",
    );
    assert_eq!(String::from_utf8_lossy(&other.stdout).trim(), "gold");
    assert!(
        other.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&other.stderr)
    );
    // Opted in: the last state, with a warning on every query.
    let script = "SET cdcfusion.stale_reads = on;\nSELECT count(*) FROM pg_stopped.orders;\nSELECT count(*) FROM pg_stopped.orders;\nSHOW cdcfusion.stale_reads;\n";
    let stale = f.psql_script("stopped", &verbose, script);
    let out = String::from_utf8_lossy(&stale.stdout);
    let err = String::from_utf8_lossy(&stale.stderr);
    assert_eq!(out.lines().filter(|l| *l == "3").count(), 2, "{out}");
    assert!(out.contains("on"), "{out}");
    assert_eq!(err.matches("WARNING:  01000:").count(), 2, "{err}");
    assert!(err.contains("DROP TABLE"), "{err}");
    let bad = f.psql_script("stopped", &verbose, "SET cdcfusion.stale_reads = maybe;\n");
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("ERROR:  22023:"), "{err}");
    f.shutdown().await;
}
