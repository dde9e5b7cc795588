//! The GTID set a MySQL source starts its stream after goes to the server as MySQL itself
//! encodes GTID sets: checked against the bytes of a `Previous_gtids` event that MySQL 9 wrote
//! with tagged GTIDs (`binlog_transaction_with_GTID_TAG.000001` in the shared fixtures), the
//! one format a server reads both in its binlog and in a dump request.

mod common;

use cdcfusion::change::position::GtidSet;
use cdcfusion::source::binlog::reader::dump_sids;
use mysql_common::binlog::consts::BinlogVersion;
use mysql_common::binlog::events::EventData;
use mysql_common::binlog::BinlogFile;
use mysql_common::packets::ComBinlogDumpGtid;
use mysql_common::proto::MySerialize;

/// MySQL's printed form of a server UUID.
fn uuid_text(b: &[u8; 16]) -> String {
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

#[test]
fn a_tagged_gtid_start_is_encoded_as_mysql_encodes_gtid_sets() {
    let name = "binlog_transaction_with_GTID_TAG.000001";
    let data = std::fs::read(common::mysql_fixtures().join(name)).expect("fixture is readable");
    let mut file = BinlogFile::new(BinlogVersion::Version4, &data[..]).expect("a binlog file");
    // The event's GTID set, as text (read by mysql_common), and its body as MySQL wrote it.
    let (text, body) = loop {
        let event = file
            .next()
            .expect("a Previous_gtids event")
            .expect("an event");
        if let Ok(Some(EventData::PreviousGtidsEvent(previous))) = event.read_data() {
            let parts: Vec<String> = previous
                .sids()
                .iter()
                .map(|sid| {
                    let intervals: Vec<String> = sid
                        .intervals()
                        .iter()
                        .map(|i| format!("{}-{}", i.start(), i.end() - 1))
                        .collect();
                    let tag = sid.tag().map(|t| format!(":{t}")).unwrap_or_default();
                    format!("{}{tag}:{}", uuid_text(&sid.uuid()), intervals.join(":"))
                })
                .collect();
            break (parts.join(","), event.data().to_vec());
        }
    };
    assert!(text.contains(":") && text.split(',').count() == 2, "{text}");
    let set: GtidSet = text.parse().expect("MySQL's GTID set text");
    let GtidSet::MySql(intervals) = &set else {
        panic!("{set:?} is not a MySQL set")
    };
    assert!(
        intervals.keys().any(|(_, tag)| tag.is_some()),
        "{text}: no tagged GTID"
    );
    let sids = dump_sids(intervals).expect("a tagged set can be sent");
    let mut packet = Vec::new();
    ComBinlogDumpGtid::new(1)
        .with_sids(sids)
        .serialize(&mut packet);
    // The SID block ends the request; MySQL's event body is the block alone.
    let ours = &packet[packet.len() - body.len()..];
    // MySQL repeats the format in the header's low byte, which its reader masks off.
    assert_eq!(ours[1..], body[1..], "{text}");
    assert_eq!(ours[7], 0x01, "the tagged format");
}
