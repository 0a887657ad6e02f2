//! Incremental operator logic: pure, synchronous in spirit (async only to
//! await state reads), written against the [`StateStore`] trait so it runs on
//! SlateDB in production and on a `BTreeMap` in tests.
//!
//! Operators are push-style: each is handed its input batches and returns
//! its output batch, and none steps another; a [`Dataflow`] is the view's
//! operators in topological order, walked once per epoch.
//!
//! Invariants kept by every operator: any operator accepts a delta that
//! repeats a row (maps and filters pass repeats on rather than sort their
//! output; operators that group their input sum them), and a dataflow's
//! output is consolidated; no stored weight or count goes negative
//! (asserted: a negative count means an input retracted what it never
//! inserted, a bug upstream).

pub mod aggregate;
pub mod arrow_rows;
mod clock_series;
pub mod dataflow;
mod distinct;
pub mod exchange;
pub mod expr;
mod join;
pub mod keys;
pub mod layered;
mod recursive;
mod session_window;
pub mod state;
mod temporal_filter;
mod top_k;
mod unnest;
mod window;
mod window_close;

pub use dataflow::{Dataflow, Step};
pub use exchange::{ChannelExchange, Exchange, StepProgress, Unsharded};
pub use layered::{LayeredStore, OverlayStore};
pub use state::{add_to_count, MemoryStore, ScanOrder, StateRead, StateStore, Write};

#[cfg(test)]
mod proptests;
