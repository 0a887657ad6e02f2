//! The circuit runtime: one engine task per shard turns committed table
//! changes into epochs.
//!
//! Each epoch (DESIGN §9) takes every commit waiting in the engine's bounded
//! queue, validates each against the current rows (optimistic exact-key
//! guards, DESIGN §13.5.1), propagates the table deltas through every
//! installed dataflow in dependency order, and writes table rows, operator
//! state, view output and the epoch number as one atomic SlateDB batch. Only
//! after that batch is durable are the commits acknowledged and the new
//! snapshot published for readers, so a reader that saw a commit acknowledged
//! sees it in every view (read-your-writes).
//!
//! A view whose step fails (e.g. division by zero on some row) is isolated:
//! its writes for the epoch are discarded, its input from then on is kept in
//! a durable pending Z-set, and every epoch retries the step over the pending
//! changes. When the offending rows are gone the retry succeeds and the view
//! heals; meanwhile reading it returns the coded error.
//!
//! A new view is built in the background: its backfill reads its sources a
//! bounded chunk per turn in key order, taking turns with commits; a
//! commit's change to a row the backfill has read goes through the view at
//! once, one beyond it is read later (`epoch::backfill`).
//! A dropped object's keys are left to compaction, after a durable marker
//! lets `DROP` return at once (`epoch::reclaim`).

mod engine;
mod epoch;

pub use engine::{
    Committed, Engine, EventTime, InstallView, LateRows, MaintainedIndex, Published, RowChange,
    StagedJudgement, StagedTable, TableChange, TableWatermark, ViewBuild, ViewStatus,
};
pub use epoch::installed_marker;
