//! Capture throughput, each figure beside a reference measured in the same run on the same data.
//!
//! * Binlog: our decoder (rows into Arrow, every event's CRC32 verified) versus reading the same
//!   binlog stream without decoding rows, once verifying every CRC32 as we do (the reference of
//!   the ratio) and once without; and versus mysql_common's own row decoder. For the
//!   CRC32-verifying read and ours it also prints the CPU time per row of this process and of
//!   mysqld over all rounds (connection set-up included), since both share the machine's
//!   cores.
//! * Snapshot: `SELECT` into Arrow versus `mariadb --quick -e 'SELECT ...' > /dev/null`.
//!
//! Each round runs every contender once, in the same order (ABAB...); the figures are medians
//! over the rounds and each ratio is the median of the per-round ratios.
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

/// Alternating rounds of each measurement; medians are reported.
const ROUNDS: usize = 5;

fn rate(rows: u64, d: Duration) -> f64 {
    rows as f64 / d.as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// How the reference reads the stream.
#[derive(Clone, Copy, PartialEq)]
enum Raw {
    /// Frames events only.
    Read,
    /// Frames events and verifies each one's CRC32, as our reader does.
    VerifyCrc,
    /// Also decodes every row with mysql_common.
    MysqlCommon,
}

async fn raw_stream(url: &str, from: &BinlogCoord, to: &BinlogCoord, mode: Raw) -> (u64, Duration) {
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
        if mode != Raw::Read && event.footer().get_checksum_enabled() {
            if let (Some(expected), Ok(Some(alg))) =
                (event.checksum(), event.footer().get_checksum_alg())
            {
                assert_eq!(u32::from_le_bytes(expected), event.calc_checksum(alg));
            }
        }
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
                    if mode == Raw::MysqlCommon {
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
    cdcfusion::allocator::tune();
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
    let mysqld = server.pid().expect("the server runs");
    let mut rates: [Vec<f64>; 4] = Default::default();
    let (mut vs_crc, mut vs_read, mut vs_mc) = (vec![], vec![], vec![]);
    // CPU seconds of this process and of mysqld over all rounds, for the CRC32-verifying raw
    // read and ours: summed rather than per round, as the kernel counts it in 10 ms ticks.
    let (mut cpu_crc, mut cpu_ours) = ([0f64; 2], [0f64; 2]);
    let cpu = || {
        [
            common::cpu_seconds(std::process::id()),
            common::cpu_seconds(mysqld),
        ]
    };
    let add_cpu = |into: &mut [f64; 2], before: [f64; 2], after: [f64; 2]| {
        for ((v, b), a) in into.iter_mut().zip(before).zip(after) {
            *v += a - b;
        }
    };
    for _ in 0..ROUNDS {
        let before = cpu();
        let (events, crc) = raw_stream(&url, &from, &to, Raw::VerifyCrc).await;
        add_cpu(&mut cpu_crc, before, cpu());
        let (_, raw) = raw_stream(&url, &from, &to, Raw::Read).await;
        let (rows_mc, mc) = raw_stream(&url, &from, &to, Raw::MysqlCommon).await;
        let before = cpu();
        let (rows_ours, ours_t) = ours(&url, &from, &to).await;
        add_cpu(&mut cpu_ours, before, cpu());
        assert!(events > 0);
        assert_eq!(rows_mc, total, "mysql_common decoded every row");
        assert_eq!(rows_ours, total, "our decoder decoded every row");
        for (r, t) in rates.iter_mut().zip([crc, raw, mc, ours_t]) {
            r.push(rate(total, t));
        }
        vs_crc.push(crc.as_secs_f64() / ours_t.as_secs_f64());
        vs_read.push(raw.as_secs_f64() / ours_t.as_secs_f64());
        vs_mc.push(mc.as_secs_f64() / ours_t.as_secs_f64());
    }
    let [crc, raw, mc, ours_t] = rates.map(median);
    println!("  raw stream read, CRC32 verified:     {crc:>12.0} rows/s");
    println!("  raw stream read (no row decoding):   {raw:>12.0} rows/s");
    println!("  mysql_common row decoder:            {mc:>12.0} rows/s");
    println!("  cdcfusion decoder into Arrow:        {ours_t:>12.0} rows/s");
    println!(
        "  ratio cdcfusion / raw, both CRC32:   {:>12.2}",
        median(vs_crc)
    );
    println!(
        "  ratio cdcfusion / raw stream:        {:>12.2}",
        median(vs_read)
    );
    println!(
        "  ratio cdcfusion / mysql_common:      {:>12.2}",
        median(vs_mc)
    );
    // Both cores are shared by mysqld and the reader's threads: the sum is what a row costs
    // the machine, and what bounds the rate once both cores are busy.
    let rows_read = (total * ROUNDS as u64) as f64;
    let [crc_us, crc_server] = cpu_crc.map(|s| s / rows_read);
    let [ours_us, ours_server] = cpu_ours.map(|s| s / rows_read);
    println!(
        "  CPU per row, reader + mysqld:        raw (CRC32) {:.0} + {:.0} ns, cdcfusion {:.0} + {:.0} ns",
        crc_us * 1e9,
        crc_server * 1e9,
        ours_us * 1e9,
        ours_server * 1e9
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
    let (mut selects, mut clients, mut ratios) = (vec![], vec![], vec![]);
    for _ in 0..ROUNDS {
        let started = Instant::now();
        let batches = select_batches(&mut snap, &schema, None, vec![], DEFAULT_BATCH_ROWS)
            .await
            .unwrap();
        let select = started.elapsed();
        assert_eq!(
            batches.iter().map(|b| b.num_rows() as u64).sum::<u64>(),
            total
        );
        let client = common::time_mariadb_client(server.port());
        selects.push(rate(total, select));
        clients.push(rate(total, client));
        ratios.push(client.as_secs_f64() / select.as_secs_f64());
    }
    let (select, client) = (median(selects), median(clients));
    println!("snapshot: SELECT of {total} rows");
    println!("  mariadb --quick > /dev/null:         {client:>12.0} rows/s");
    println!("  cdcfusion SELECT into Arrow:         {select:>12.0} rows/s");
    println!(
        "  ratio cdcfusion / mariadb client:    {:>12.2}",
        median(ratios)
    );
}
