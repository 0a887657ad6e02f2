//! Exchanges: how a dataflow running on several shards repartitions the
//! batches at its [`PlanNode::Exchange`](rockstream_plan::PlanNode) points.
//!
//! Each shard runs the whole operator list of a view over its own state
//! and its own part of the sources' deltas (RFC 0001 §4). At an exchange,
//! every shard sends each other shard the rows of its batch whose key that
//! shard owns, and continues with the rows every shard sent it. The walk
//! visits exchanges in the same order on every shard, so the shards meet at
//! each one, and a batch crosses from each shard to each other exactly once
//! per exchange point, even when empty: a receiver knows when it has all of
//! a point's rows without any further protocol.
//!
//! [`Unsharded`] is the one-shard case (every row is already home);
//! [`ChannelExchange`] connects the shards of one step by bounded channels,
//! one per ordered pair of shards, sized so that a send never waits (the
//! protocol bounds what is in flight; the wait for a peer is the receive,
//! never loss). A shard whose step fails drops its side of the mesh, and
//! its peers' exchanges then fail instead of waiting for it.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use futures::channel::mpsc;
use futures::{SinkExt, StreamExt};
use rockstream_types::encoding::encode_datum;
use rockstream_types::partition::{BucketMap, ShardId};
use rockstream_types::{Row, RsError, RsResult, ZSet};

/// One shard's side of the exchanges of a dataflow step.
pub trait Exchange: Send {
    /// Whether this shard holds the rows whose partition key encodes to
    /// `encoded_key` (for a key of no columns, whether rows gathered to one
    /// shard are here).
    fn owns(&self, encoded_key: &[u8]) -> bool;

    /// Sends every shard the rows of `batch` whose `key` columns it owns,
    /// and returns the rows all shards sent this one at exchange `point`
    /// (its own included), not consolidated.
    fn exchange(
        &mut self,
        point: usize,
        key: &[usize],
        batch: ZSet,
    ) -> impl Future<Output = RsResult<ZSet>> + Send;

    /// The step is at operator `index` (its exchange point, if it is one);
    /// `None` once it is done. Only recorded, for [`StepProgress`].
    fn at_operator(&mut self, _index: Option<usize>) {}
}

/// Where each shard's part of one dataflow step is, for the warning a step
/// that stops making progress logs: the operator it runs, and whether it
/// waits to send to or to receive from a peer at an exchange.
#[derive(Debug)]
pub struct StepProgress {
    /// Per shard: `operator << 32 | phase << 16 | peer`.
    shards: Vec<AtomicU64>,
}

const PHASE_RUNNING: u64 = 0;
const PHASE_SENDING: u64 = 1;
const PHASE_RECEIVING: u64 = 2;
const PHASE_DONE: u64 = 3;

impl StepProgress {
    fn new(shards: usize) -> StepProgress {
        StepProgress {
            shards: (0..shards).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn set(&self, shard: ShardId, operator: usize, phase: u64, peer: usize) {
        let value = (operator as u64) << 32 | phase << 16 | (peer as u64 & 0xFFFF);
        self.shards[usize::from(shard)].store(value, Ordering::Relaxed);
    }

    fn operator_of(&self, shard: ShardId) -> usize {
        (self.shards[usize::from(shard)].load(Ordering::Relaxed) >> 32) as usize
    }
}

impl std::fmt::Display for StepProgress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (shard, value) in self.shards.iter().enumerate() {
            let value = value.load(Ordering::Relaxed);
            let (operator, phase, peer) = (value >> 32, (value >> 16) & 0xFFFF, value & 0xFFFF);
            if shard > 0 {
                f.write_str("; ")?;
            }
            match phase {
                PHASE_SENDING => write!(
                    f,
                    "shard {shard} at operator {operator}, sending to shard {peer}"
                )?,
                PHASE_RECEIVING => write!(
                    f,
                    "shard {shard} at operator {operator}, receiving from shard {peer}"
                )?,
                PHASE_DONE => write!(f, "shard {shard} done")?,
                _ => write!(f, "shard {shard} running operator {operator}")?,
            }
        }
        Ok(())
    }
}

/// The encoded partition key of `row`: its `key` columns, in order.
pub fn partition_key(row: &Row, key: &[usize]) -> Vec<u8> {
    let mut encoded = Vec::new();
    for column in key {
        encode_datum(&row[*column], &mut encoded);
    }
    encoded
}

/// The exchange of a dataflow on one shard: every row is home.
#[derive(Debug, Default, Clone, Copy)]
pub struct Unsharded;

impl Exchange for Unsharded {
    fn owns(&self, _encoded_key: &[u8]) -> bool {
        true
    }

    async fn exchange(&mut self, _point: usize, _key: &[usize], batch: ZSet) -> RsResult<ZSet> {
        Ok(batch)
    }
}

/// Frames a channel of the mesh may hold: this exchange's and the next
/// one's ([`ChannelExchange::mesh`]).
const FRAMES_IN_FLIGHT_MAX: usize = 2;

/// A batch one shard sends another at an exchange point.
#[derive(Debug)]
struct Frame {
    point: usize,
    rows: ZSet,
}

/// One shard's side of an in-process exchange mesh (see the module docs).
#[derive(Debug)]
pub struct ChannelExchange {
    shard: ShardId,
    map: Arc<BucketMap>,
    /// To each shard; `None` at this shard's own index.
    senders: Vec<Option<mpsc::Sender<Frame>>>,
    /// From each shard; `None` at this shard's own index.
    receivers: Vec<Option<mpsc::Receiver<Frame>>>,
    /// Where every shard of the step is, shared by the mesh.
    progress: Arc<StepProgress>,
}

impl ChannelExchange {
    /// The connected exchanges of every shard of `map`, by shard id.
    ///
    /// A send must never wait: each shard sends to every peer before it
    /// receives from any, so a send waiting for its peer to receive can
    /// close a cycle of shards each waiting for the next (seen at 4 shards:
    /// shard 0 sending to 2, 2 to 3, 3 receiving from 0). A channel never
    /// holds more than two frames — a shard passes an exchange only once
    /// every peer sent it that exchange's frame, so it is at most one
    /// exchange ahead of any peer — and a buffer of two holds them without
    /// parking the sender. (With a buffer of one, `futures`' channel parks
    /// a sender whose second frame fills it until a frame is taken, and
    /// when the receiver takes the older one between the send and the
    /// park, until its own frame is taken: a rendezvous.)
    pub fn mesh(map: Arc<BucketMap>) -> Vec<ChannelExchange> {
        let shards = usize::from(map.shard_count());
        let progress = Arc::new(StepProgress::new(shards));
        let mut exchanges: Vec<ChannelExchange> = (0..shards)
            .map(|shard| ChannelExchange {
                shard: shard as ShardId,
                map: Arc::clone(&map),
                senders: (0..shards).map(|_| None).collect(),
                receivers: (0..shards).map(|_| None).collect(),
                progress: Arc::clone(&progress),
            })
            .collect();
        for from in 0..shards {
            for to in (0..shards).filter(|to| *to != from) {
                let (sender, receiver) = mpsc::channel(FRAMES_IN_FLIGHT_MAX);
                exchanges[from].senders[to] = Some(sender);
                exchanges[to].receivers[from] = Some(receiver);
            }
        }
        exchanges
    }

    pub fn shard(&self) -> ShardId {
        self.shard
    }

    /// Where every shard of this mesh's step is.
    pub fn progress(&self) -> Arc<StepProgress> {
        Arc::clone(&self.progress)
    }
}

impl Exchange for ChannelExchange {
    fn owns(&self, encoded_key: &[u8]) -> bool {
        self.map.shard_of(encoded_key) == self.shard
    }

    fn at_operator(&mut self, index: Option<usize>) {
        match index {
            Some(index) => self.progress.set(self.shard, index, PHASE_RUNNING, 0),
            None => self.progress.set(self.shard, 0, PHASE_DONE, 0),
        }
    }

    async fn exchange(&mut self, point: usize, key: &[usize], batch: ZSet) -> RsResult<ZSet> {
        let operator = self.progress.operator_of(self.shard);
        let mut parts: Vec<ZSet> = (0..self.senders.len()).map(|_| ZSet::new()).collect();
        for (row, weight) in batch.updates {
            let shard = self.map.shard_of(&partition_key(&row, key));
            parts[usize::from(shard)].push(row, weight);
        }
        let mut home = std::mem::take(&mut parts[usize::from(self.shard)]);
        for (to, rows) in parts.into_iter().enumerate() {
            let Some(sender) = self.senders[to].as_mut() else {
                continue;
            };
            self.progress.set(self.shard, operator, PHASE_SENDING, to);
            sender
                .send(Frame { point, rows })
                .await
                .map_err(|_| peer_stopped(to, point))?;
        }
        for (from, receiver) in self.receivers.iter_mut().enumerate() {
            let Some(receiver) = receiver.as_mut() else {
                continue;
            };
            self.progress
                .set(self.shard, operator, PHASE_RECEIVING, from);
            let frame = receiver
                .next()
                .await
                .ok_or_else(|| peer_stopped(from, point))?;
            if frame.point != point {
                return Err(RsError::internal(format!(
                    "shard {} received exchange {} from shard {from} while at exchange {point}",
                    self.shard, frame.point
                )));
            }
            home.extend(frame.rows);
        }
        self.progress.set(self.shard, operator, PHASE_RUNNING, 0);
        Ok(home)
    }
}

/// Marks the error of a shard whose exchange failed because a peer's step
/// had failed: a consequence, never the cause.
const PEER_STOPPED: &str = "a peer shard's step of the same view failed first";

/// A peer shard ended its step (it failed) before exchange `point`.
fn peer_stopped(shard: usize, point: usize) -> RsError {
    RsError::internal(format!(
        "shard {shard} stopped its step before exchange {point}"
    ))
    .with_detail(PEER_STOPPED)
}

/// The error to report for a step that failed on some shards: the first
/// one that is not a peer's consequence of another's failure, else the
/// first.
pub fn first_cause(errors: Vec<RsError>) -> Option<RsError> {
    let cause = errors
        .iter()
        .position(|error| error.detail.as_deref() != Some(PEER_STOPPED))
        .unwrap_or(0);
    errors.into_iter().nth(cause)
}
