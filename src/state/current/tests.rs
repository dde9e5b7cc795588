//! Unit tests of the current table: snapshots, lookups, merges and memory.

use super::*;
use crate::state::fixtures::{batch, codec, ids};
use arrow::array::Array;

fn encode(codec: &RowCodec, id: i32, v: &str) -> (KeyBytes, Arc<OwnedRow>) {
    let (k, r) = codec.encode(&batch(codec, &[(id, v)])).unwrap();
    (k.row(0).as_ref().into(), Arc::new(r.row(0).owned()))
}

#[test]
fn snapshots_are_immutable_and_lookups_see_the_overlay() {
    let c = codec(true);
    let mut t =
        CurrentTable::new(Arc::clone(&c), &batch(&c, &[(1, "a"), (2, "b"), (3, "c")])).unwrap();
    let before = t.snapshot(None).unwrap();
    let (k2, r2) = encode(&c, 2, "b2");
    t.put(&k2, Some((r2, 1)));
    let (k3, _) = encode(&c, 3, "c");
    t.put(&k3, None);
    let (k4, r4) = encode(&c, 4, "d");
    t.put(&k4, Some((r4, 1)));
    let after = t.snapshot(None).unwrap();
    assert_eq!(
        ids(&before.scan_all().unwrap()),
        vec![(1, "a".into()), (2, "b".into()), (3, "c".into())]
    );
    assert_eq!(
        ids(&after.scan_all().unwrap()),
        vec![(1, "a".into()), (2, "b2".into()), (4, "d".into())]
    );
    assert_eq!((before.len(), after.len()), (3, 3));
    let (k1, _) = encode(&c, 1, "a");
    let (k9, _) = encode(&c, 9, "");
    let found = after.lookup(&[k2.clone(), k3.clone(), k1, k9]).unwrap();
    assert_eq!(ids(&[found]), vec![(1, "a".into()), (2, "b2".into())]);
}

#[test]
fn compaction_keeps_the_rows_and_old_snapshots() {
    let c = codec(true);
    let mut t = CurrentTable::new(Arc::clone(&c), &batch(&c, &[(0, "base")])).unwrap();
    let old = t.snapshot(None).unwrap();
    for i in 1..=(COMPACT_MIN as i32 + 10) {
        let (k, r) = encode(&c, i, "x");
        t.put(&k, Some((r, 1)));
    }
    let snap = t.snapshot(None).unwrap();
    assert!(
        t.overlay.is_empty(),
        "the overlay was merged into a new base"
    );
    assert_eq!(snap.len(), COMPACT_MIN + 11);
    assert_eq!(
        snap.scan_all()
            .unwrap()
            .iter()
            .map(|b| b.num_rows())
            .sum::<usize>(),
        COMPACT_MIN + 11
    );
    assert_eq!(old.len(), 1);
    assert_eq!(ids(&old.scan_all().unwrap()), vec![(0, "base".into())]);
}

/// Fails naming the first row where `got` and `expect` part, not printing all of them.
fn same_rows(got: &[(i32, String)], expect: &[(i32, String)], context: &str) {
    if let Some(at) = (0..got.len().max(expect.len())).find(|&i| got.get(i) != expect.get(i)) {
        panic!(
            "{context}: {} rows, {} expected; from row {at}: {:?} where {:?} was expected",
            got.len(),
            expect.len(),
            got.get(at),
            expect.get(at)
        );
    }
}

/// Random upserts and deletes over 20,000 keys, merged many times: every snapshot scans
/// and looks up exactly what a plain map holds, older snapshots keep theirs, and merges
/// both append (several batches) and rebuild (one batch again).
#[test]
fn merges_that_append_and_rebuild_keep_every_version_exact() {
    use rand::{Rng, SeedableRng};
    const KEYS: i32 = 20_000;
    for keyed in [true, false] {
        let c = codec(keyed);
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        // A keyless table is keyed by the whole row: there a key's value never changes.
        let value = |id: i32, round: u32| match keyed {
            true => format!("v{round}"),
            false => format!("v{}", id % 3),
        };
        // id → (value, copies)
        let mut model: std::collections::BTreeMap<i32, (String, u32)> =
            (0..KEYS).map(|id| (id, (value(id, 0), 1))).collect();
        let rows = |rows: &[(i32, String)]| {
            let rows: Vec<(i32, &str)> = rows.iter().map(|(i, v)| (*i, v.as_str())).collect();
            batch(&c, &rows)
        };
        let first: Vec<(i32, String)> = model.iter().map(|(i, (v, _))| (*i, v.clone())).collect();
        let mut t = CurrentTable::new(Arc::clone(&c), &rows(&first)).unwrap();
        let (mut kept, mut appended, mut rebuilt) = (Vec::new(), false, false);
        for round in 1..=30u32 {
            let ops: Vec<(i32, String)> = (0..1500)
                .map(|_| rng.random_range(0..KEYS))
                .map(|id| (id, value(id, round)))
                .collect();
            let (keys, encoded) = c.encode(&rows(&ops)).unwrap();
            for (i, (id, v)) in ops.iter().enumerate() {
                let key: KeyBytes = keys.row(i).as_ref().into();
                if rng.random_bool(0.1) {
                    t.put(&key, None);
                    model.remove(id);
                } else {
                    let copies = if keyed { 1 } else { rng.random_range(1..3) };
                    t.put(&key, Some((Arc::new(encoded.row(i).owned()), copies)));
                    model.insert(*id, (v.clone(), copies));
                }
            }
            let batches_before = t.base.batches.len();
            let snap = t.snapshot(None).unwrap();
            if t.overlay.is_empty() {
                match t.base.batches.len() {
                    1 => rebuilt = true,
                    n if n > batches_before => appended = true,
                    n => panic!("a merge left {n} batches, {batches_before} before"),
                }
            }
            let expect: Vec<(i32, String)> = model
                .iter()
                .flat_map(|(id, (v, n))| std::iter::repeat_n((*id, v.clone()), *n as usize))
                .collect();
            let context = format!("keyed {keyed}, round {round}");
            same_rows(&ids(&snap.scan_all().unwrap()), &expect, &context);
            assert_eq!(snap.len(), expect.len(), "{context}");
            let probe: Vec<(i32, String)> = (0..40)
                .map(|_| rng.random_range(0..KEYS))
                .map(|id| {
                    (
                        id,
                        model
                            .get(&id)
                            .map_or_else(|| value(id, round), |(v, _)| v.clone()),
                    )
                })
                .collect();
            let (probe_keys, _) = c.encode(&rows(&probe)).unwrap();
            let wanted: Vec<KeyBytes> = (0..probe.len())
                .map(|i| probe_keys.row(i).as_ref().into())
                .collect();
            let mut expect_found: Vec<(i32, String)> = probe
                .iter()
                .flat_map(|(id, _)| model.get(id).map(|(v, n)| ((*id, v.clone()), *n)))
                .flat_map(|(row, n)| std::iter::repeat_n(row, n as usize))
                .collect();
            expect_found.sort();
            let found = ids(&[snap.lookup(&wanted).unwrap()]);
            same_rows(&found, &expect_found, &format!("lookups, {context}"));
            kept.push((snap, expect));
        }
        assert!(
            appended && rebuilt,
            "keyed {keyed}: both kinds of merge ran"
        );
        for (round, (snap, expect)) in kept.iter().enumerate() {
            same_rows(
                &ids(&snap.scan_all().unwrap()),
                expect,
                &format!("snapshot {round}"),
            );
        }
    }
}

#[test]
fn keyless_tables_count_identical_rows() {
    let c = codec(false);
    let mut t =
        CurrentTable::new(Arc::clone(&c), &batch(&c, &[(1, "a"), (1, "a"), (2, "b")])).unwrap();
    assert_eq!(t.len(), 3);
    let (k, r) = encode(&c, 1, "a");
    assert_eq!(t.count(&k), 2);
    t.put(&k, Some((r, 1)));
    let snap = t.snapshot(None).unwrap();
    assert_eq!(
        ids(&snap.scan_all().unwrap()),
        vec![(1, "a".into()), (2, "b".into())]
    );
    let all = snap.scan_all().unwrap();
    assert!(all.iter().all(|b| b.column(0).null_count() == 0));
}
