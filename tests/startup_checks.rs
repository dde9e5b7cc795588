//! Start-up checks fail early with errors that name the problem and the fix.

mod common;

use cdcfusion::change::position::StartPosition;
use cdcfusion::devserver::{DevServer, DevServerOptions, CDC_PASSWORD};
use cdcfusion::source::binlog::{BinlogReader, BinlogReaderOptions};
use cdcfusion::source::connect::ConnectOptions;
use cdcfusion::source::SourceError;
use common::*;
use mysql_async::prelude::Queryable;

async fn open(url: &str) -> Result<BinlogReader, SourceError> {
    let mut connect = ConnectOptions::from_url(url).unwrap();
    connect.max_attempts = 2;
    BinlogReader::open(
        connect,
        BinlogReaderOptions::new(next_server_id(), StartPosition::Current),
    )
    .await
}

#[tokio::test]
async fn binlog_off_is_refused() {
    let server = tokio::task::spawn_blocking(|| {
        DevServer::start(DevServerOptions {
            log_bin: false,
            ..Default::default()
        })
    })
    .await
    .unwrap()
    .unwrap();
    let err = open(&server.cdc_url()).await.unwrap_err();
    assert!(
        matches!(
            err,
            SourceError::BadSetting {
                setting: "log_bin",
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("--log-bin"), "{err}");
}

#[tokio::test]
async fn statement_format_and_minimal_images_are_refused() {
    let server = tokio::task::spawn_blocking(|| {
        DevServer::start(DevServerOptions {
            binlog_format: "STATEMENT".into(),
            row_image: "MINIMAL".into(),
            ..Default::default()
        })
    })
    .await
    .unwrap()
    .unwrap();
    let err = open(&server.cdc_url()).await.unwrap_err();
    assert!(
        matches!(
            err,
            SourceError::BadSetting {
                setting: "binlog_format",
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("'STATEMENT'"), "{err}");
    let mut conn = root_conn(&server).await;
    conn.query_drop("SET GLOBAL binlog_format = 'ROW'")
        .await
        .unwrap();
    let err = open(&server.cdc_url()).await.unwrap_err();
    assert!(
        matches!(
            err,
            SourceError::BadSetting {
                setting: "binlog_row_image",
                ..
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string().contains("binlog_row_image = 'FULL'"),
        "{err}"
    );
    conn.query_drop("SET GLOBAL binlog_row_image = 'FULL'")
        .await
        .unwrap();
    open(&server.cdc_url())
        .await
        .expect("passes once both are fixed");
}

#[tokio::test]
async fn missing_privileges_are_named_with_the_grant_that_fixes_them() {
    let server = server();
    let mut conn = root_conn(server).await;
    conn.query_drop(
        "CREATE USER IF NOT EXISTS 'weak'@'%' IDENTIFIED BY 'weak-pw';
         GRANT SELECT ON *.* TO 'weak'@'%';",
    )
    .await
    .unwrap();
    let url = format!("mysql://weak:weak-pw@127.0.0.1:{}", server.port());
    let err = open(&url).await.unwrap_err();
    let SourceError::MissingPrivileges { missing, grant, .. } = &err else {
        panic!("unexpected error {err}");
    };
    assert_eq!(missing, &vec!["REPLICATION SLAVE", "REPLICATION CLIENT"]);
    assert!(
        grant.contains("REPLICATION SLAVE") && grant.contains("BINLOG MONITOR"),
        "{grant}"
    );
    // The production grant set is enough.
    open(&server.cdc_url()).await.expect("the CDC user passes");
}

#[tokio::test]
async fn wrong_password_is_a_definite_error() {
    let server = server();
    let url = format!("mysql://cdc:not-{CDC_PASSWORD}@127.0.0.1:{}", server.port());
    let err = open(&url).await.unwrap_err();
    assert!(matches!(err, SourceError::AccessDenied { .. }), "{err}");
    assert!(!err.is_transient());
    assert!(err.to_string().contains("'cdc'"), "{err}");
}

#[tokio::test]
async fn unreachable_server_is_retried_then_reported() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let err = open(&format!("mysql://cdc:x@127.0.0.1:{port}"))
        .await
        .unwrap_err();
    let SourceError::Unreachable {
        attempts, address, ..
    } = &err
    else {
        panic!("unexpected error {err}");
    };
    assert_eq!(*attempts, 2);
    assert_eq!(address, &format!("127.0.0.1:{port}"));
}
