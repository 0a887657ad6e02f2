//! Databases (namespaces): `default`, which every server has, and those
//! `CREATE DATABASE` made.
//!
//! ```text
//! 0x0A 0x01 name -> name
//! ```
//!
//! `default` is not stored; it is always there. Catalog entry keys carry
//! a namespace id derived from the name ([`namespace_id`]): it only groups
//! a namespace's entries, which object ids already make unique, so two
//! names hashing alike would share a group and nothing else.
//!
//! Sessions attach to the namespace they connected to
//! ([`Namespaces::attach`]) so that `DROP DATABASE` can refuse one in use,
//! as PostgreSQL does, without racing a connection.

use std::collections::BTreeMap;
use std::sync::Arc;

use rockstream_storage::storage_error;
use rockstream_types::{codes, RsError, RsResult};
use slatedb::Db;

use crate::catalog::DEFAULT_NAMESPACE;
use crate::control_db::CONTROL_PATH;

const PREFIX: [u8; 2] = [0x0A, 0x01];

/// The id of `namespace` in catalog keys: 0 for `default`, a 128-bit
/// FNV-1a hash of the name otherwise (never 0).
pub(crate) fn namespace_id(namespace: &str) -> u128 {
    if namespace == DEFAULT_NAMESPACE {
        return 0;
    }
    const OFFSET: u128 = 0x6c62272e07bb014262b821756295c58d;
    const PRIME: u128 = 0x0000000001000000000000000000013B;
    let hash = namespace.bytes().fold(OFFSET, |hash, byte| {
        (hash ^ u128::from(byte)).wrapping_mul(PRIME)
    });
    hash.max(1)
}

pub(crate) fn namespace_key(namespace: &str) -> Vec<u8> {
    let mut key = PREFIX.to_vec();
    key.extend_from_slice(namespace.as_bytes());
    key
}

#[derive(Debug, Default)]
struct Namespace {
    /// Sessions connected to it.
    sessions: usize,
    /// A `DROP DATABASE` is removing it: no session may connect.
    dropping: bool,
}

#[derive(Debug, Default)]
pub struct Namespaces {
    namespaces: std::sync::Mutex<BTreeMap<String, Namespace>>,
}

impl Namespaces {
    pub(crate) async fn load(control: &Db) -> RsResult<Arc<Namespaces>> {
        let mut iterator = control
            .scan_prefix(PREFIX, ..)
            .await
            .map_err(|error| storage_error(CONTROL_PATH, error))?;
        let mut namespaces = BTreeMap::new();
        namespaces.insert(DEFAULT_NAMESPACE.to_string(), Namespace::default());
        while let Some(entry) = iterator
            .next()
            .await
            .map_err(|error| storage_error(CONTROL_PATH, error))?
        {
            let name = String::from_utf8(entry.value.to_vec())
                .map_err(|_| RsError::internal("corrupt namespace entry"))?;
            namespaces.insert(name, Namespace::default());
        }
        Ok(Arc::new(Namespaces {
            namespaces: std::sync::Mutex::new(namespaces),
        }))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Namespace>> {
        self.namespaces
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn contains(&self, name: &str) -> bool {
        self.lock().contains_key(name)
    }

    /// Every namespace a session may connect to, by name.
    pub fn names(&self) -> Vec<String> {
        self.lock()
            .iter()
            .filter(|(_, namespace)| !namespace.dropping)
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// A session connects to `name`: 3D000 when there is no such
    /// namespace (or it is being dropped).
    pub fn attach(self: &Arc<Self>, name: &str) -> RsResult<Attachment> {
        let mut namespaces = self.lock();
        match namespaces.get_mut(name) {
            Some(namespace) if !namespace.dropping => {
                namespace.sessions += 1;
                Ok(Attachment {
                    namespaces: self.clone(),
                    name: name.to_string(),
                })
            }
            _ => Err(undefined_database(name)),
        }
    }

    /// 42P04 when `name` exists (or is being dropped).
    pub(crate) fn check_absent(&self, name: &str) -> RsResult<()> {
        if self.lock().contains_key(name) {
            return Err(RsError::new(
                &codes::DUPLICATE_DATABASE,
                format!("database \"{name}\" already exists"),
            ));
        }
        Ok(())
    }

    /// Adds `name` once its record is durable.
    pub(crate) fn insert(&self, name: &str) {
        self.lock().insert(name.to_string(), Namespace::default());
    }

    /// Starts dropping `name`: from now on no session connects to it, until
    /// the returned guard ends the drop. `Ok(None)`: there is no such
    /// namespace. Refused for `default` and while sessions are connected to
    /// it (55006).
    pub(crate) fn begin_drop(&self, name: &str) -> RsResult<Option<Dropping<'_>>> {
        if name == DEFAULT_NAMESPACE {
            return Err(RsError::new(
                &codes::DEFAULT_DATABASE,
                format!("cannot drop database \"{name}\": every server has it"),
            ));
        }
        let mut namespaces = self.lock();
        let Some(namespace) = namespaces.get_mut(name).filter(|found| !found.dropping) else {
            return Ok(None);
        };
        if namespace.sessions > 0 {
            let sessions = namespace.sessions;
            let plural = if sessions == 1 { "" } else { "s" };
            return Err(RsError::new(
                &codes::DATABASE_IN_USE,
                format!(
                    "database \"{name}\" is being accessed by other users: \
                     {sessions} session{plural} connected to it"
                ),
            ));
        }
        namespace.dropping = true;
        Ok(Some(Dropping {
            namespaces: self,
            name: name.to_string(),
            dropped: false,
        }))
    }
}

/// A drop [`Namespaces::begin_drop`] began: the namespace is gone once
/// [`Dropping::done`] says so, and back if the guard goes without it (the
/// removal failed, or the statement was cancelled).
#[derive(Debug)]
pub(crate) struct Dropping<'a> {
    namespaces: &'a Namespaces,
    name: String,
    dropped: bool,
}

impl Dropping<'_> {
    pub(crate) fn done(mut self) {
        self.dropped = true;
    }
}

impl Drop for Dropping<'_> {
    fn drop(&mut self) {
        let mut namespaces = self.namespaces.lock();
        if self.dropped {
            namespaces.remove(&self.name);
        } else if let Some(namespace) = namespaces.get_mut(&self.name) {
            namespace.dropping = false;
        }
    }
}

/// A session's hold on the namespace it is connected to; released when the
/// session ends.
#[derive(Debug)]
pub struct Attachment {
    namespaces: Arc<Namespaces>,
    name: String,
}

impl Attachment {
    pub fn namespace(&self) -> &str {
        &self.name
    }
}

impl Drop for Attachment {
    fn drop(&mut self) {
        if let Some(namespace) = self.namespaces.lock().get_mut(&self.name) {
            namespace.sessions = namespace.sessions.saturating_sub(1);
        }
    }
}

pub(crate) fn undefined_database(name: &str) -> RsError {
    RsError::new(
        &codes::UNKNOWN_DATABASE,
        format!("database \"{name}\" does not exist"),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests may unwrap: a panic is the failure report.
mod tests {
    use super::*;

    #[test]
    fn ids_are_stable_and_only_default_is_zero() {
        assert_eq!(namespace_id(DEFAULT_NAMESPACE), 0);
        assert_eq!(namespace_id("analytics"), namespace_id("analytics"));
        assert_ne!(namespace_id("analytics"), namespace_id("analytic"));
        assert_ne!(namespace_id(""), 0);
    }

    #[test]
    fn a_namespace_in_use_is_not_dropped() {
        let namespaces = Arc::new(Namespaces::default());
        namespaces.insert(DEFAULT_NAMESPACE);
        namespaces.insert("app");
        let session = namespaces.attach("app").unwrap();
        let error = namespaces.begin_drop("app").unwrap_err();
        assert_eq!(error.code.sqlstate, "55006");
        assert!(namespaces.begin_drop(DEFAULT_NAMESPACE).is_err());
        drop(session);
        let dropping = namespaces.begin_drop("app").unwrap().unwrap();
        // Connections fail while the drop runs.
        assert!(namespaces.attach("app").is_err());
        drop(dropping); // it failed
        assert!(namespaces.attach("app").is_ok());
        namespaces.begin_drop("app").unwrap().unwrap().done();
        assert!(!namespaces.contains("app"));
        assert!(namespaces.begin_drop("missing").unwrap().is_none());
    }
}
