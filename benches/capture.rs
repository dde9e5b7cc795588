//! Capture throughput, each figure beside a reference measured in the same run on the same data.
//!
//! * Binlog: our decoder (rows into Arrow) versus reading the same binlog stream without
//!   decoding rows, and versus mysql_common's own row decoder.
//! * Snapshot: `SELECT` into Arrow versus `mariadb --quick -e 'SELECT ...' > /dev/null`.
//!
//! Run with `cargo bench --bench capture` (optionally `-- --rows N`, default 1,000,000). It starts its own private
//! MariaDB and prints rows/s and the ratios; nothing is asserted.

mod common;

use std::time::{Duration, Instant};

use cdcfusion::change::position::{BinlogCoord, StartPosition};
use cdcfusion::change::schema::{Flavor, TableId};
use cdcfusion::devserver::{DevServer, DevServerOptions};
use cdcfusion::source::binlog::{table_filter, BinlogReader, BinlogReaderOptions};
use cdcfusion::source::connect::{current_position, ConnectOptions};
use cdcfusion::source::schema::load_table_schema;
use cdcfusion::source::snapshot::{select_batches, DEFAULT_BATCH_ROWS};
use futures::StreamExt;
use mysql_async::binlog::events::EventData;
use mysql_async::prelude::Queryable;
use mysql_async::{BinlogStreamRequest, Conn};

/// Runs of each measurement; the best is reported (least disturbed by the rest of the machine).
const RUNS: usize = 3;

fn rate(rows: u64, d: Duration) -> f64 {
    rows as f64 / d.as_secs_f64()
}

async fn raw_stream(
    url: &str,
    from: &BinlogCoord,
    to: &BinlogCoord,
    decode_with_mysql_common: bool,
) -> (u64, Duration) {
    let mut conn = Conn::from_url(url).await.unwrap();
    conn.query_drop("SET @mariadb_slave_capability = 4")
        .await
        .unwrap();
    let file = from.file.as_bytes().to_vec();
    let mut started = None;
    let mut stream = conn
        .get_binlog_stream(
            BinlogStreamRequest::new(7777)
                .with_filename(&file)
                .with_pos(from.offset),
        )
        .await
        .unwrap();
    let mut rows = 0u64;
    let mut values = 0u64;
    let mut current_file = from.file.to_string();
    while let Some(event) = stream.next().await {
        // Time the stream, not the connection set-up: the clock starts at the first event.
        started.get_or_insert_with(Instant::now);
        let event = event.unwrap();
        let log_pos = event.header().log_pos() as u64;
        if let Ok(Some(data)) = event.read_data() {
            match data {
                EventData::RotateEvent(r) => {
                    let name = r.name().to_string();
                    // The first artificial rotate carries the checksum after the name.
                    current_file = if name.len() > file.len() {
                        name[..file.len()].to_string()
                    } else {
                        name
                    };
                }
                EventData::RowsEvent(re) => {
                    if decode_with_mysql_common {
                        let tme = stream.get_tme(re.table_id()).unwrap();
                        for row in re.rows(tme) {
                            let (_, after) = row.unwrap();
                            let after = after.unwrap();
                            for i in 0..after.len() {
                                values += after.as_ref(i).is_some() as u64;
                            }
                            rows += 1;
                        }
                    } else {
                        // Count rows without decoding values: the insert batches are fixed size.
                        rows += 1;
                    }
                }
                _ => {}
            }
        }
        if current_file == *to.file && log_pos >= to.offset {
            break;
        }
    }
    let elapsed = started.expect("events arrived").elapsed();
    std::hint::black_box(values);
    (rows, elapsed)
}

async fn ours(url: &str, from: &BinlogCoord, to: &BinlogCoord) -> (u64, Duration) {
    let connect = ConnectOptions::from_url(url).unwrap();
    let options = BinlogReaderOptions::new(7778, StartPosition::Coord(from.clone()))
        .with_filter(table_filter("bench.*").unwrap());
    let mut reader = BinlogReader::open(connect, options).await.unwrap();
    // As for the raw read, the clock starts at the first event (the stream's opening rotate).
    assert!(reader.step().await.unwrap().is_none());
    let started = Instant::now();
    let mut rows = 0u64;
    loop {
        let tx = reader.next().await.unwrap();
        rows += tx.num_rows() as u64;
        if tx.end >= *to {
            break;
        }
    }
    (rows, started.elapsed())
}

/// The allocator the `cdcfusion` binary uses, so the figures match it.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let total = common::rows_arg(1_000_000);
    let server = DevServer::start(DevServerOptions::default()).expect("private MariaDB");
    let url = server.cdc_url();
    let mut conn = Conn::from_url(server.root_url()).await.unwrap();
    common::create_table(&mut conn).await;
    let (from, _) = current_position(&mut conn, Flavor::MariaDb).await.unwrap();
    // Transactions of 1,000 rows, as a bulk load would write them.
    const PER_STATEMENT: u64 = 1000;
    let mut id = 0u64;
    while id < total {
        let end = (id + PER_STATEMENT).min(total);
        common::insert_rows(&mut conn, id + 1, end).await;
        id = end;
    }
    let (to, _) = current_position(&mut conn, Flavor::MariaDb).await.unwrap();
    println!("binlog: {total} row changes (7 columns) from {from} to {to}");

    if args.iter().any(|a| a == "--profile-decoder") {
        // Only our decoder, repeatedly: for profilers.
        for _ in 0..5 {
            let (rows, t) = ours(&url, &from, &to).await;
            println!("  cdcfusion decoder: {:.0} rows/s", rate(rows, t));
        }
        return;
    }
    let mut best = [Duration::MAX; 3];
    for _ in 0..RUNS {
        let (events, raw) = raw_stream(&url, &from, &to, false).await;
        let (rows_mc, mc) = raw_stream(&url, &from, &to, true).await;
        let (rows_ours, ours_t) = ours(&url, &from, &to).await;
        assert!(events > 0);
        assert_eq!(rows_mc, total, "mysql_common decoded every row");
        assert_eq!(rows_ours, total, "our decoder decoded every row");
        best[0] = best[0].min(raw);
        best[1] = best[1].min(mc);
        best[2] = best[2].min(ours_t);
    }
    let (raw, mc, ours_t) = (
        rate(total, best[0]),
        rate(total, best[1]),
        rate(total, best[2]),
    );
    println!("  raw stream read (no row decoding):   {raw:>12.0} rows/s");
    println!("  mysql_common row decoder:            {mc:>12.0} rows/s");
    println!("  cdcfusion decoder into Arrow:        {ours_t:>12.0} rows/s");
    println!(
        "  ratio cdcfusion / raw stream:        {:>12.2}",
        ours_t / raw
    );
    println!(
        "  ratio cdcfusion / mysql_common:      {:>12.2}",
        ours_t / mc
    );

    let mut snap = ConnectOptions::from_url(&url)
        .unwrap()
        .connect()
        .await
        .unwrap();
    let schema = load_table_schema(&mut snap, &TableId::new("bench", "t"))
        .await
        .unwrap()
        .unwrap();
    let mut best_select = Duration::MAX;
    let mut best_client = Duration::MAX;
    for _ in 0..RUNS {
        let started = Instant::now();
        let batches = select_batches(&mut snap, &schema, None, vec![], DEFAULT_BATCH_ROWS)
            .await
            .unwrap();
        best_select = best_select.min(started.elapsed());
        assert_eq!(
            batches.iter().map(|b| b.num_rows() as u64).sum::<u64>(),
            total
        );
        best_client = best_client.min(common::time_mariadb_client(server.port()));
    }
    let (select, client) = (rate(total, best_select), rate(total, best_client));
    println!("snapshot: SELECT of {total} rows");
    println!("  mariadb --quick > /dev/null:         {client:>12.0} rows/s");
    println!("  cdcfusion SELECT into Arrow:         {select:>12.0} rows/s");
    println!(
        "  ratio cdcfusion / mariadb client:    {:>12.2}",
        select / client
    );
}
