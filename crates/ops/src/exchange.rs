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
//! one per ordered pair of shards: a sender whose peer has not taken its
//! previous batch waits (backpressure, never loss). A shard whose step
//! fails drops its side of the mesh, and its peers' exchanges then fail
//! instead of waiting for it.

use std::future::Future;
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
}

impl ChannelExchange {
    /// The connected exchanges of every shard of `map`, by shard id. Each
    /// channel holds at most `capacity` batches beyond the one in flight.
    pub fn mesh(map: Arc<BucketMap>, capacity: usize) -> Vec<ChannelExchange> {
        let shards = usize::from(map.shard_count());
        let mut exchanges: Vec<ChannelExchange> = (0..shards)
            .map(|shard| ChannelExchange {
                shard: shard as ShardId,
                map: Arc::clone(&map),
                senders: (0..shards).map(|_| None).collect(),
                receivers: (0..shards).map(|_| None).collect(),
            })
            .collect();
        for from in 0..shards {
            for to in (0..shards).filter(|to| *to != from) {
                let (sender, receiver) = mpsc::channel(capacity);
                exchanges[from].senders[to] = Some(sender);
                exchanges[to].receivers[from] = Some(receiver);
            }
        }
        exchanges
    }

    pub fn shard(&self) -> ShardId {
        self.shard
    }
}

impl Exchange for ChannelExchange {
    fn owns(&self, encoded_key: &[u8]) -> bool {
        self.map.shard_of(encoded_key) == self.shard
    }

    async fn exchange(&mut self, point: usize, key: &[usize], batch: ZSet) -> RsResult<ZSet> {
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
            sender
                .send(Frame { point, rows })
                .await
                .map_err(|_| peer_stopped(to, point))?;
        }
        for (from, receiver) in self.receivers.iter_mut().enumerate() {
            let Some(receiver) = receiver.as_mut() else {
                continue;
            };
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
