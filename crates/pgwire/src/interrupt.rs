//! Cancel requests: stopping the statement another connection runs.
//!
//! A client cancels by opening a second connection that sends only a
//! CancelRequest with the process id and secret key it got at startup
//! (BackendKeyData). [`Cancels`] maps each live connection's process id to
//! its secret and its [`Interrupt`]; a request naming a known id with the
//! right secret raises that interrupt. A statement notices at its next
//! interruption point (the backend decides where: reading is, committing
//! is not) and fails with 57014, as in PostgreSQL.
//!
//! A client that leaves while a statement runs abandons its connection:
//! that statement and any later one stop the same way.
//!
//! Invariants:
//! - a request counts only while a statement runs (from [`Interrupt::begin`]
//!   until its guard drops); one arriving between statements is dropped, as
//!   PostgreSQL drops a cancel for an idle backend;
//! - a wrong secret or unknown id changes nothing and reveals nothing (the
//!   cancel connection is closed either way).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use pgwire::api::cancel::CancelHandler;
use pgwire::api::{ClientInfo, PidSecretKeyGenerator, RandomPidSecretKeyGenerator};
use pgwire::messages::cancel::CancelRequest;
use pgwire::messages::startup::SecretKey;
use tokio::sync::Notify;

/// One connection's "stop the running statement" flag.
#[derive(Debug, Clone, Default)]
pub struct Interrupt(Arc<InterruptState>);

#[derive(Debug, Default)]
struct InterruptState {
    flags: Mutex<Flags>,
    raised: Notify,
    /// The connection's process id (BackendKeyData), once registered.
    pid: std::sync::OnceLock<i32>,
}

#[derive(Debug, Default)]
struct Flags {
    running: bool,
    requested: bool,
    /// The client left: every statement, running or to come, stops.
    abandoned: bool,
}

impl Interrupt {
    fn flags(&self) -> MutexGuard<'_, Flags> {
        self.0
            .flags
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The process id the client was given (`pg_backend_pid()`), once the
    /// connection is registered for cancel requests.
    pub fn pid(&self) -> Option<i32> {
        self.0.pid.get().copied()
    }

    /// A statement starts: requests from before it are forgotten. The
    /// statement runs until the returned guard drops.
    pub(crate) fn begin(&self) -> Running {
        let mut flags = self.flags();
        flags.running = true;
        flags.requested = false;
        Running(self.clone())
    }

    /// The client left: the running statement and any later one stop.
    pub(crate) fn abandon(&self) {
        self.flags().abandoned = true;
        self.0.raised.notify_waiters();
    }

    /// Asks the running statement, if any, to stop.
    pub fn request(&self) {
        let mut flags = self.flags();
        if flags.running {
            flags.requested = true;
            drop(flags);
            self.0.raised.notify_waiters();
        }
    }

    /// Whether the running statement was asked to stop.
    pub fn is_requested(&self) -> bool {
        let flags = self.flags();
        flags.requested || flags.abandoned
    }

    /// Resolves once the running statement is asked to stop.
    pub async fn requested(&self) {
        loop {
            let raised = self.0.raised.notified();
            tokio::pin!(raised);
            // Registered before the check, so a request between the check
            // and the wait is not missed.
            raised.as_mut().enable();
            if self.is_requested() {
                return;
            }
            raised.await;
        }
    }
}

/// A statement in progress; its end drops pending requests.
pub(crate) struct Running(Interrupt);

impl Drop for Running {
    fn drop(&mut self) {
        let mut flags = self.0.flags();
        flags.running = false;
        flags.requested = false;
    }
}

/// The server's live connections, by process id (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Cancels {
    /// Process ids count up from one server-wide counter; secrets are random.
    keys: RandomPidSecretKeyGenerator,
    /// Each connection's secret (as sent on the wire) and interrupt.
    connections: Mutex<HashMap<i32, (Vec<u8>, Interrupt)>>,
}

impl Cancels {
    fn connections(&self) -> MutexGuard<'_, HashMap<i32, (Vec<u8>, Interrupt)>> {
        self.connections
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A process id and secret key for a starting connection, which cancel
    /// requests naming them will interrupt.
    pub(crate) fn register(
        &self,
        client: &dyn ClientInfo,
        interrupt: Interrupt,
    ) -> (i32, SecretKey) {
        let (pid, secret) = self.keys.generate(client);
        self.connections()
            .insert(pid, (secret_bytes(&secret), interrupt.clone()));
        let _ = interrupt.0.pid.set(pid);
        (pid, secret)
    }

    pub(crate) fn unregister(&self, pid: i32) {
        self.connections().remove(&pid);
    }
}

#[async_trait]
impl CancelHandler for Cancels {
    async fn on_cancel_request(&self, request: CancelRequest) {
        let interrupt = match self.connections().get(&request.pid) {
            Some((secret, interrupt)) if *secret == secret_bytes(&request.secret_key) => {
                interrupt.clone()
            }
            _ => {
                tracing::debug!(pid = request.pid, "cancel request for no such connection");
                return;
            }
        };
        interrupt.request();
    }
}

/// A secret key's bytes on the wire: a CancelRequest's key decodes as bytes
/// or as a number depending on the protocol version its connection
/// announced, which is not the version of the connection it cancels.
fn secret_bytes(secret: &SecretKey) -> Vec<u8> {
    match secret {
        SecretKey::I32(number) => number.to_be_bytes().to_vec(),
        SecretKey::Bytes(bytes) => bytes.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    //! Goal: a request stops only the statement running when it arrives.
    use super::*;

    #[test]
    fn requests_count_only_while_a_statement_runs() {
        let interrupt = Interrupt::default();
        interrupt.request();
        let running = interrupt.begin();
        assert!(!interrupt.is_requested(), "an idle request is dropped");
        interrupt.request();
        assert!(interrupt.is_requested());
        drop(running);
        assert!(!interrupt.is_requested(), "the next statement starts clean");
        interrupt.abandon();
        let _running = interrupt.begin();
        assert!(
            interrupt.is_requested(),
            "an abandoned connection stops all"
        );
    }

    #[tokio::test]
    async fn a_waiting_statement_wakes_on_a_request() {
        let interrupt = Interrupt::default();
        let _running = interrupt.begin();
        let waiter = interrupt.requested();
        interrupt.request();
        waiter.await;
    }

    #[tokio::test]
    async fn only_the_right_secret_cancels() {
        let cancels = Cancels::default();
        let interrupt = Interrupt::default();
        let _running = interrupt.begin();
        let pid = 7;
        cancels
            .connections()
            .insert(pid, (secret_bytes(&SecretKey::I32(42)), interrupt.clone()));
        let request = |pid, secret| CancelRequest::new(pid, secret);
        cancels
            .on_cancel_request(request(pid, SecretKey::I32(41)))
            .await;
        cancels
            .on_cancel_request(request(pid + 1, SecretKey::I32(42)))
            .await;
        assert!(!interrupt.is_requested());
        // The key as bytes (how a cancel connection may decode it).
        let bytes = SecretKey::Bytes(42_i32.to_be_bytes().to_vec().into());
        cancels.on_cancel_request(request(pid, bytes)).await;
        assert!(interrupt.is_requested());
        cancels.unregister(pid);
        assert!(cancels.connections().is_empty());
    }
}
