//! Roles: who may log in, and the SCRAM verifier of their password.
//!
//! ```text
//! 0x04 'R' name -> role (JSON)
//! ```
//!
//! A password is stored as PostgreSQL stores it (`pg_authid.rolpassword`):
//! a SCRAM-SHA-256 verifier, from which it cannot be recovered. The gateway
//! computes the verifier; this module keeps roles durable and in memory.
//! Roles belong to the server, not to a database.

use std::collections::BTreeMap;

use rockstream_storage::storage_error;
use rockstream_types::{codes, RsError, RsResult};
use serde::{Deserialize, Serialize};
use slatedb::Db;

use crate::control_db::{ControlDb, CONTROL_PATH};

const PREFIX: [u8; 2] = [0x04, b'R'];

fn role_key(name: &str) -> Vec<u8> {
    let mut key = PREFIX.to_vec();
    key.extend_from_slice(name.as_bytes());
    key
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Role {
    pub name: String,
    /// `LOGIN`: the role may connect.
    pub login: bool,
    /// `SCRAM-SHA-256$iterations:salt$stored_key:server_key`; `None`: no
    /// password, so no password login.
    pub password: Option<String>,
}

/// What `ALTER ROLE` changes (`None`: left as it is).
#[derive(Debug, Clone, Default)]
pub struct RoleChange {
    pub login: Option<bool>,
    /// `Some(None)`: `PASSWORD NULL`.
    pub password: Option<Option<String>>,
}

#[derive(Default)]
pub struct Roles {
    roles: std::sync::RwLock<BTreeMap<String, Role>>,
    /// One change at a time (read, check, write).
    changing: tokio::sync::Mutex<()>,
}

impl Roles {
    pub(crate) async fn load(control: &Db) -> RsResult<Roles> {
        let mut iterator = control
            .scan_prefix(PREFIX, ..)
            .await
            .map_err(|error| storage_error(CONTROL_PATH, error))?;
        let mut roles = BTreeMap::new();
        while let Some(entry) = iterator
            .next()
            .await
            .map_err(|error| storage_error(CONTROL_PATH, error))?
        {
            let role: Role = serde_json::from_slice(&entry.value)
                .map_err(|error| RsError::internal(format!("corrupt role entry: {error}")))?;
            roles.insert(role.name.clone(), role);
        }
        Ok(Roles {
            roles: std::sync::RwLock::new(roles),
            changing: tokio::sync::Mutex::new(()),
        })
    }

    pub fn get(&self, name: &str) -> Option<Role> {
        self.read().get(name).cloned()
    }

    pub fn all(&self) -> Vec<Role> {
        self.read().values().cloned().collect()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Role>> {
        self.roles
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, Role>> {
        self.roles
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// `CREATE ROLE`: 42710 when it exists.
    pub(crate) async fn create(&self, control: &ControlDb, role: Role) -> RsResult<()> {
        let _changing = self.changing.lock().await;
        if self.read().contains_key(&role.name) {
            return Err(RsError::new(
                &codes::DUPLICATE_ROLE,
                format!("role \"{}\" already exists", role.name),
            ));
        }
        store(control, &role).await?;
        self.write().insert(role.name.clone(), role);
        Ok(())
    }

    /// `ALTER ROLE`: 42704 when it does not exist.
    pub(crate) async fn alter(
        &self,
        control: &ControlDb,
        name: &str,
        change: RoleChange,
    ) -> RsResult<()> {
        let _changing = self.changing.lock().await;
        let mut role = self.get(name).ok_or_else(|| undefined_role(name))?;
        if let Some(login) = change.login {
            role.login = login;
        }
        if let Some(password) = change.password {
            role.password = password;
        }
        store(control, &role).await?;
        self.write().insert(role.name.clone(), role);
        Ok(())
    }

    /// `DROP ROLE`: returns false when it does not exist.
    pub(crate) async fn drop(&self, control: &ControlDb, name: &str) -> RsResult<bool> {
        let _changing = self.changing.lock().await;
        if !self.read().contains_key(name) {
            return Ok(false);
        }
        control.delete(&role_key(name)).await?;
        self.write().remove(name);
        Ok(true)
    }
}

async fn store(control: &ControlDb, role: &Role) -> RsResult<()> {
    let json = serde_json::to_vec(role).map_err(|error| RsError::internal(error.to_string()))?;
    control.put(&role_key(&role.name), &json).await
}

pub(crate) fn undefined_role(name: &str) -> RsError {
    RsError::new(
        &codes::UNDEFINED_ROLE,
        format!("role \"{name}\" does not exist"),
    )
}
