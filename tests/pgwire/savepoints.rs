//! Savepoints in transaction blocks, through the simple and the extended protocol, answer as
//! on the reference PostgreSQL: the same successes and the same SQLSTATEs, statement by
//! statement.

use tokio_postgres::{Client, SimpleQueryMessage};

use crate::fixture::*;
use crate::reference::Reference;

/// A statement and the protocol it is sent with.
enum Step {
    Simple(&'static str),
    Extended(&'static str),
}
use Step::*;

/// Statements and their outcome on PostgreSQL 15: `ok`, `rows N`, or the SQLSTATE.
const SCRIPT: &[(Step, &str)] = &[
    (Simple("SAVEPOINT a"), "25P01"),
    (Simple("RELEASE a"), "25P01"),
    (Extended("ROLLBACK TO SAVEPOINT a"), "25P01"),
    (Simple("BEGIN"), "ok"),
    (Simple("SAVEPOINT a"), "ok"),
    (Extended("SAVEPOINT b"), "ok"),
    (Simple("RELEASE SAVEPOINT b"), "ok"),
    // An unknown savepoint is an error, which fails the block.
    (Simple("ROLLBACK TO b"), "3B001"),
    (Simple("SELECT 1"), "25P02"),
    (Simple("SAVEPOINT c"), "25P02"),
    (Extended("RELEASE a"), "25P02"),
    (Simple("ROLLBACK TO nope"), "3B001"),
    // Rolling back to a savepoint makes the failed block usable.
    (Simple("ROLLBACK TO a"), "ok"),
    (Simple("SELECT 1"), "rows 1"),
    (Extended("SELECT 1"), "rows 1"),
    (Extended("SELECT * FROM nowhere"), "42P01"),
    (Extended("SELECT 1"), "25P02"),
    // Names fold to lower case unless quoted.
    (Extended("ROLLBACK TO SAVEPOINT A"), "ok"),
    (Extended("SELECT 1"), "rows 1"),
    (Simple("ROLLBACK TO \"A\""), "3B001"),
    (Simple("ROLLBACK TO a; SELECT 1; SAVEPOINT d"), "rows 1"),
    (Simple("RELEASE a"), "ok"),
    (Simple("ROLLBACK TO d"), "3B001"),
    (Simple("COMMIT"), "ok"),
    (Simple("SELECT 1"), "rows 1"),
    // A new block has no savepoints of the old one.
    (Simple("BEGIN; SAVEPOINT e; COMMIT; BEGIN"), "ok"),
    (Simple("ROLLBACK TO e"), "3B001"),
    (Simple("ROLLBACK"), "ok"),
];

async fn outcome(client: &Client, step: &Step) -> String {
    match step {
        Simple(sql) => match client.simple_query(sql).await {
            Ok(messages) => {
                let rows = messages
                    .iter()
                    .filter(|m| matches!(m, SimpleQueryMessage::Row(_)))
                    .count();
                if rows > 0 {
                    format!("rows {rows}")
                } else {
                    "ok".into()
                }
            }
            Err(e) => sqlstate(&e),
        },
        Extended(sql) => match client.query(*sql, &[]).await {
            Ok(rows) if !rows.is_empty() => format!("rows {}", rows.len()),
            Ok(_) => "ok".into(),
            Err(e) => sqlstate(&e),
        },
    }
}

async fn run(client: &Client) -> Vec<String> {
    let mut outcomes = Vec::new();
    for (step, _) in SCRIPT {
        outcomes.push(outcome(client, step).await);
    }
    outcomes
}

#[tokio::test]
async fn savepoints_behave_as_in_postgresql() {
    let f = Fixture::start(
        "pg_savepoints",
        "savepoints",
        "CREATE TABLE {db}.t (id INT PRIMARY KEY)",
        settings(),
    )
    .await;
    let reference = Reference::create("cdcfusion_savepoints", "").await;
    let expected: Vec<String> = SCRIPT.iter().map(|(_, o)| o.to_string()).collect();
    let postgres = run(&reference.client().await).await;
    let ours = run(&f.client("savepoints").await).await;
    reference.drop_database().await;
    for (i, (step, _)) in SCRIPT.iter().enumerate() {
        let (Simple(sql) | Extended(sql)) = step;
        assert_eq!(postgres[i], expected[i], "PostgreSQL, step {i}: {sql}");
        assert_eq!(ours[i], expected[i], "cdcfusion, step {i}: {sql}");
    }
}
