//! Going on after storage fails, without a restart.
//!
//! A shard whose write fails (a full disk, say) is closed by SlateDB for
//! good: its WAL writer stops at the first error it cannot retry. The
//! engine then *recovers in place*, as a restart would: it reopens the
//! shards SlateDB closed over what is durable, completes an epoch the
//! coordinator logged but another shard missed ([`repair`]), publishes
//! that state and takes its views and reclaims on again from storage (a
//! view being built starts its build over). What the failed epoch wrote
//! was never acknowledged; its writers were told it failed. A view whose
//! build the failure ended is dropped instead: the statement creating it
//! was told it failed.
//!
//! The shards still open are kept as they are: the engine loop is their
//! only writer and awaits every write it makes, so they hold exactly what
//! is durable, and statements reading their published snapshots go on
//! undisturbed (reopening closes an instance, and a read of a closed
//! instance fails). A statement reading a failed shard gets the failure's
//! error, as before its reopening; the reopened shard's snapshots are
//! published with the state. If no shard is closed (the failure came from
//! elsewhere, a read say), none is reopened and the rest is done again.
//!
//! Until the shards reopen, every command is refused with the reason (a
//! full disk gives 53100); reopening is tried at most once per
//! [`REOPEN_INTERVAL_MICROS`], when a command arrives or that interval
//! passes, so writes succeed again on their own once space is back.

use std::time::Duration;

use rockstream_storage::ShardDb;
use rockstream_types::{Epoch, ObjectId, RsError, RsResult};
use tokio::sync::oneshot;

use super::{repair, EpochLoop};
use crate::engine::Command;

/// Least time between two attempts to reopen failed storage.
pub(super) const REOPEN_INTERVAL_MICROS: i64 = 1_000_000;

/// Storage failed and is not reopened yet.
pub(super) struct Failure {
    /// Why the last attempt (or the failure itself) failed.
    error: RsError,
    /// When reopening was last tried (µs).
    tried_at: i64,
    attempts: u64,
    /// Views whose build the failure ended (their CREATE was told it
    /// failed): dropped once storage reopens.
    abandoned: Vec<ObjectId>,
}

impl EpochLoop {
    /// Records that storage failed: commands are refused until
    /// [`EpochLoop::recover`] reopens it. The first error is the cause;
    /// later ones until then are its consequences.
    pub(super) fn storage_failed(&mut self, error: RsError) {
        if self.failure.is_some() {
            return;
        }
        tracing::error!(%error, "storage failed; writes are refused until its shards reopen");
        // A CREATE waiting for its view's build fails now, with the cause,
        // rather than once storage reopens (it holds the DDL lock, so every
        // other DDL statement would wait too). Its view is not built again:
        // the reopened storage drops it, and the CREATE's compensation its
        // catalog entry. A build nobody waits for (a view a restart or an
        // earlier reopening builds again) has a catalog entry that stays:
        // it starts over once storage reopens.
        let mut abandoned = Vec::new();
        self.views.retain_mut(|installed| {
            let waited = installed
                .built
                .as_ref()
                .is_some_and(|built| !built.is_closed());
            if waited {
                if let Some(built) = installed.built.take() {
                    let _ = built.send(Err(error.clone()));
                }
                abandoned.push(installed.view.view_id);
            }
            !waited
        });
        self.failure = Some(Failure {
            error,
            tried_at: self.runtime.now_micros(),
            attempts: 0,
            abandoned,
        });
    }

    /// How long until reopening may be tried again; `None` if storage has
    /// not failed.
    pub(super) fn reopen_wait(&self) -> Option<Duration> {
        let failure = self.failure.as_ref()?;
        let next = failure.tried_at + REOPEN_INTERVAL_MICROS;
        let micros = (next - self.runtime.now_micros()).max(0);
        Some(Duration::from_micros(micros as u64))
    }

    /// Reopens failed storage, if the last attempt is old enough; `Err`:
    /// why it is still unusable.
    pub(super) async fn recover(&mut self) -> RsResult<()> {
        let now = self.runtime.now_micros();
        let Some(failure) = self.failure.as_mut() else {
            return Ok(());
        };
        if now < failure.tried_at + REOPEN_INTERVAL_MICROS {
            return Err(failure.error.clone());
        }
        failure.tried_at = now;
        failure.attempts += 1;
        let attempts = failure.attempts;
        match self.reopen().await {
            Ok(epoch) => {
                self.failure = None;
                tracing::info!(
                    epoch,
                    attempts,
                    "storage reopened; writes are accepted again"
                );
                Ok(())
            }
            Err(error) => {
                tracing::debug!(%error, attempts, "storage is still unusable");
                if let Some(failure) = self.failure.as_mut() {
                    failure.error = error.clone();
                }
                Err(error)
            }
        }
    }

    /// Reopens every shard and takes the durable state on again; returns
    /// its epoch.
    async fn reopen(&mut self) -> RsResult<Epoch> {
        for flush in std::mem::take(&mut self.flushing) {
            flush.abort();
        }
        let closed: Vec<bool> = self.shards.iter().map(ShardDb::is_closed).collect();
        // Snapshots from before the failure stay open on the kept shards:
        // a dropped object's keys stay while they may read them.
        let readers = self
            .shards
            .iter()
            .zip(&closed)
            .map(|(shard, &closed)| if closed { Ok(0) } else { shard.last_seq() })
            .collect::<RsResult<Vec<u64>>>()?;
        let mut reopened = Vec::new();
        for (index, shard) in self.shards.iter().enumerate() {
            if !closed[index] {
                continue;
            }
            match shard.reopen().await {
                Ok(shard) => reopened.push((index, shard)),
                Err(error) => {
                    // The instances this attempt closed are reopened by
                    // the next one (they read as closed).
                    for (_, opened) in &reopened {
                        let _ = opened.close().await;
                    }
                    return Err(error);
                }
            }
        }
        for (index, shard) in reopened {
            tracing::info!(shard = index, "reopened a shard storage had closed");
            self.shards[index] = shard;
        }
        self.logged = repair(&self.shards).await?;
        let epoch = self.shards[0].committed_epoch().await?;
        if epoch > self.epoch {
            // Durable on the coordinator, missing on a shard ([`repair`]
            // completed it), or durable although storage failed before
            // that was confirmed: its writers were told so (08007).
            tracing::info!(
                epoch,
                published = self.epoch,
                "the reopened storage holds an epoch newer than the last published one; it is visible now"
            );
        }
        self.epoch = epoch;
        self.ddl_transaction = crate::engine::read_ddl_transaction(&self.shards[0]).await?;
        self.watermarks = super::read_watermarks(&self.shards[0]).await?;
        self.flushed_at = (epoch, self.runtime.now_micros());
        // Part of a large transaction's commit is not shown: it is
        // completed first, below.
        // Held while a staged commit's marker stands: it is completed
        // below, once the views are installed again.
        self.hold_publish = self.staged_commit_pending().await?;
        self.publish()?;
        self.reclaims.clear();
        self.forget_drops();
        self.resume_drops(&readers).await?;
        // Each view is installed again from what storage says of it, in
        // dependency order (each one moves to the end as it is installed).
        // If that fails part way, the rest keep their entries for the next
        // attempt.
        for _ in 0..self.views.len() {
            let installed = &mut self.views[0];
            let view = installed.view.clone();
            let built = installed
                .built
                .take()
                .unwrap_or_else(|| oneshot::channel().0);
            self.install(view, built).await?;
        }
        let abandoned = self
            .failure
            .as_ref()
            .map(|failure| failure.abandoned.clone())
            .unwrap_or_default();
        if !abandoned.is_empty() {
            self.drop_objects(&abandoned).await?;
        }
        self.finish_staged().await?;
        Ok(self.epoch)
    }
}

/// Answers a command with `error` (storage is unusable).
pub(super) fn refuse(command: Command, error: RsError) {
    match command {
        Command::Commit { reply, .. } => {
            let _ = reply.send(Err(error));
        }
        Command::Install { registered, .. } => {
            let _ = registered.send(Err(error));
        }
        Command::Drop { reply, .. } => {
            let _ = reply.send(Err(error));
        }
        Command::Stage { reply, .. } => {
            let _ = reply.send(Err(error));
        }
        Command::CommitStaged { reply, .. } => {
            let _ = reply.send(Err(error));
        }
        Command::FinishStaged { reply } => {
            let _ = reply.send(Err(error));
        }
    }
}
