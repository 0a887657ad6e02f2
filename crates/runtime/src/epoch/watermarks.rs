//! Event-time watermarks of tables (RFC 0013): late rows dropped and
//! counted as commits enter an epoch, and each watermarked table's
//! watermark advanced by the rows the epoch admits.
//!
//! All rows of an epoch are judged against the watermarks as the epoch
//! began, so a transaction never makes its own rows late and the outcome
//! does not depend on the order of rows within an epoch; a staged commit's
//! steps are judged against the watermark its commit began at. The
//! coordinator records each changed table's watermark and late rows in the
//! epoch's batch, so a crash neither loses an advance nor counts a late row
//! twice.

use std::collections::BTreeMap;

use rockstream_ops::keys;
use rockstream_ops::ScanOrder;
use rockstream_storage::ShardDb;
use rockstream_types::{Datum, ObjectId, RsError, RsResult};

use crate::engine::{EventTime, LateRows, TableChange, TableWatermark};

/// Every watermarked table's state, by table.
pub(crate) type Watermarks = BTreeMap<ObjectId, TableWatermark>;

/// What one commit's rows do to the watermarks, applied once the commit is
/// accepted ([`advance`]).
#[derive(Debug, Default)]
pub(super) struct Judged {
    tables: Vec<(ObjectId, Admitted)>,
    /// Per table (by name), the rows dropped as late, if any.
    late: LateRows,
}

impl Judged {
    /// Per table (by name), the rows the commit dropped as late.
    pub(super) fn late_rows(&self) -> LateRows {
        self.late.clone()
    }
}

#[derive(Debug, Clone, Copy)]
struct Admitted {
    late_rows: i64,
    /// `max(column) - delay` over the rows kept.
    watermark: Option<i64>,
    /// A staged commit's undo: the table's state returns to this.
    restore: Option<TableWatermark>,
}

/// Drops from `changes` every late row of a watermarked table (judged
/// against `watermarks`, the epoch's at its start); returns what the kept
/// and dropped rows do to the watermarks.
pub(super) fn drop_late(changes: &mut [TableChange], watermarks: &Watermarks) -> Judged {
    let mut judged = Judged::default();
    for change in changes {
        let Some(event_time) = change.watermark else {
            continue;
        };
        let current = watermarks
            .get(&change.table_id)
            .copied()
            .unwrap_or_default();
        let (began_at, undo) = match event_time.staged {
            Some(staged) => (staged.began_at, staged.undo),
            None => (current, false),
        };
        let mut late_rows = 0;
        let mut newest: Option<i64> = None;
        change.rows.retain(|row| {
            // New rows are judged; a staged undo judges the rows its
            // forward steps inserted, exactly as they were judged then.
            // Other changes (a table rewrite for new columns) keep rows
            // already admitted.
            let judged_row = match (&row.old, &row.new) {
                (None, Some(new)) => new,
                (Some(old), None) if undo => old,
                _ => return true,
            };
            let Some(time) = event_micros(judged_row, event_time) else {
                return true;
            };
            if began_at.watermark.is_some_and(|watermark| time < watermark) {
                late_rows += 1;
                return false;
            }
            newest = Some(newest.map_or(time, |newest| newest.max(time)));
            true
        });
        if late_rows > 0 && !undo {
            judged
                .late
                .push((change.table_name.clone(), late_rows as u64));
        }
        let admitted = if undo {
            Admitted {
                late_rows: 0,
                watermark: None,
                restore: Some(began_at),
            }
        } else {
            Admitted {
                late_rows,
                watermark: newest.map(|time| time.saturating_sub(event_time.delay_micros)),
                restore: None,
            }
        };
        judged.tables.push((change.table_id, admitted));
    }
    judged
}

/// The event time of `row` (microseconds; a date's midnight), `None` when
/// NULL.
fn event_micros(row: &[Datum], event_time: EventTime) -> Option<i64> {
    match row.get(event_time.column)? {
        Datum::Timestamp(micros) | Datum::TimestampTz(micros) => Some(*micros),
        Datum::Date(days) => Some(i64::from(*days) * MICROS_PER_DAY),
        _ => None,
    }
}

const MICROS_PER_DAY: i64 = 86_400_000_000;

/// The watermarks known (of tables that have had a row), as view steps
/// read them: a table `held` at an earlier watermark, at that one.
pub(super) fn known(
    watermarks: &Watermarks,
    held: Option<(ObjectId, Option<i64>)>,
) -> rockstream_plan::Watermarks {
    let mut known: rockstream_plan::Watermarks = watermarks
        .iter()
        .filter_map(|(table, state)| Some((*table, state.watermark?)))
        .collect();
    if let Some((table, watermark)) = held {
        match watermark {
            Some(watermark) => known.insert(table, watermark),
            None => known.remove(&table),
        };
    }
    known
}

/// Applies an accepted commit's `judged` rows to `watermarks`; the tables
/// whose state changed are added to `changed`.
pub(super) fn advance(watermarks: &mut Watermarks, judged: Judged, changed: &mut Vec<ObjectId>) {
    for (table_id, admitted) in judged.tables {
        let state = watermarks.entry(table_id).or_default();
        let before = *state;
        if let Some(restore) = admitted.restore {
            *state = restore;
        }
        state.late_rows = state.late_rows.saturating_add_signed(admitted.late_rows);
        if let Some(watermark) = admitted.watermark {
            state.watermark = Some(state.watermark.map_or(watermark, |w| w.max(watermark)));
        }
        if *state != before && !changed.contains(&table_id) {
            changed.push(table_id);
        }
    }
}

/// A table's record: a flag whether it has a watermark, the watermark and
/// the late rows, 17 bytes.
pub(super) fn encode(state: &TableWatermark) -> Vec<u8> {
    let mut value = Vec::with_capacity(17);
    value.push(u8::from(state.watermark.is_some()));
    value.extend_from_slice(&state.watermark.unwrap_or(0).to_be_bytes());
    value.extend_from_slice(&state.late_rows.to_be_bytes());
    value
}

pub(super) fn decode(value: &[u8]) -> RsResult<TableWatermark> {
    let corrupt = || RsError::internal("corrupt watermark record");
    let (&flag, rest) = value.split_first().ok_or_else(corrupt)?;
    let (watermark, late_rows) = rest.split_at_checked(8).ok_or_else(corrupt)?;
    let watermark = i64::from_be_bytes(watermark.try_into().map_err(|_| corrupt())?);
    let late_rows = u64::from_be_bytes(late_rows.try_into().map_err(|_| corrupt())?);
    Ok(TableWatermark {
        watermark: (flag == 1).then_some(watermark),
        late_rows,
    })
}

/// Every watermarked table's state as the coordinator records it.
pub(crate) async fn read_watermarks(coordinator: &ShardDb) -> RsResult<Watermarks> {
    let prefix = keys::watermarks_prefix();
    let stored = coordinator
        .snapshot()?
        .scan_prefix(&prefix, ScanOrder::Ascending, usize::MAX)
        .await?;
    stored
        .into_iter()
        .map(|(key, value)| {
            let id: [u8; 16] = key[prefix.len()..]
                .try_into()
                .map_err(|_| RsError::internal("corrupt watermark key"))?;
            Ok((ObjectId::from_be_bytes(id), decode(&value)?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    //! Goal: an epoch's rows are judged against the watermark it began at,
    //! late rows are dropped and counted, and the watermark advances by the
    //! newest admitted row less the delay; a staged undo restores it.
    use super::*;
    use crate::engine::{RowChange, StagedJudgement};

    fn change(times: &[Option<i64>], staged: Option<StagedJudgement>) -> TableChange {
        TableChange {
            table_id: 7,
            table_name: "t".into(),
            rows: times
                .iter()
                .enumerate()
                .map(|(index, time)| RowChange {
                    key: vec![index as u8],
                    old: None,
                    new: Some(vec![
                        Datum::Int64(index as i64),
                        time.map_or(Datum::Null, Datum::Timestamp),
                    ]),
                })
                .collect(),
            indexes: Vec::new(),
            watermark: Some(EventTime {
                column: 1,
                delay_micros: 10,
                staged,
            }),
            primary_key: Vec::new(),
        }
    }

    #[test]
    fn rows_below_the_epochs_watermark_are_dropped_and_counted() {
        let mut watermarks = Watermarks::new();
        let mut changes = vec![change(&[Some(100), Some(50), None], None)];
        let judged = drop_late(&mut changes, &watermarks);
        assert_eq!(changes[0].rows.len(), 3, "nothing is late before any row");
        let mut changed = Vec::new();
        advance(&mut watermarks, judged, &mut changed);
        assert_eq!(changed, vec![7]);
        assert_eq!(
            watermarks[&7],
            TableWatermark {
                watermark: Some(90),
                late_rows: 0
            }
        );
        // 89 is late, 90 is not (the watermark itself is on time), NULL
        // never is; the watermark does not go back.
        let mut changes = vec![change(&[Some(89), Some(90), None, Some(95)], None)];
        let judged = drop_late(&mut changes, &watermarks);
        assert_eq!(changes[0].rows.len(), 3);
        advance(&mut watermarks, judged, &mut changed);
        assert_eq!(
            watermarks[&7],
            TableWatermark {
                watermark: Some(90),
                late_rows: 1
            }
        );
        let stored = encode(&watermarks[&7]);
        assert_eq!(decode(&stored).expect("as written"), watermarks[&7]);
    }

    #[test]
    fn a_staged_commit_is_judged_where_it_began_and_its_undo_restores_it() {
        let began_at = TableWatermark {
            watermark: Some(90),
            late_rows: 4,
        };
        let mut watermarks = Watermarks::from([(7, began_at)]);
        let forward = StagedJudgement {
            began_at,
            undo: false,
        };
        // A first step moved the watermark to 190: the second step is still
        // judged against 90.
        let mut changes = vec![change(&[Some(200)], Some(forward))];
        let judged = drop_late(&mut changes, &watermarks);
        advance(&mut watermarks, judged, &mut Vec::new());
        let mut changes = vec![change(&[Some(95), Some(80)], Some(forward))];
        let judged = drop_late(&mut changes, &watermarks);
        assert_eq!(changes[0].rows.len(), 1);
        advance(&mut watermarks, judged, &mut Vec::new());
        assert_eq!(watermarks[&7].watermark, Some(190));
        assert_eq!(watermarks[&7].late_rows, 5);
        // Undone: the rows inserted are deleted, the dropped one is not,
        // and the table is as the commit found it.
        let mut undo = change(&[Some(95), Some(80)], None);
        for row in &mut undo.rows {
            std::mem::swap(&mut row.old, &mut row.new);
        }
        undo.watermark = Some(EventTime {
            column: 1,
            delay_micros: 10,
            staged: Some(StagedJudgement {
                began_at,
                undo: true,
            }),
        });
        let mut changes = vec![undo];
        let judged = drop_late(&mut changes, &watermarks);
        assert_eq!(changes[0].rows.len(), 1);
        advance(&mut watermarks, judged, &mut Vec::new());
        assert_eq!(watermarks[&7], began_at);
    }
}
