//! SQL functions (`CREATE FUNCTION … LANGUAGE SQL`, RFC 0012): their
//! definitions, durable and in memory, per namespace.
//!
//! ```text
//! 0x05 namespace_id(16) name -> function (JSON)
//! ```
//!
//! Functions are not relations (a table and a function may share a name),
//! so they have a key range of their own. Each `CREATE`/`DROP` is one
//! durable write, made outside transaction blocks only. Views record the
//! functions they call ([`crate::CatalogEntry::functions`]); a function
//! views call is neither dropped nor replaced while they exist.

use std::collections::BTreeMap;
use std::sync::Arc;

use rockstream_plan::arrow_types::arrow_type;
use rockstream_planner::{DeclaredType, SqlArgument, SqlFunction};
use rockstream_storage::storage_error;
use rockstream_types::{ObjectId, RsError, RsResult};
use serde::{Deserialize, Serialize};
use slatedb::Db;

use crate::catalog::parse_type;
use crate::control_db::CONTROL_PATH;
use crate::namespaces::namespace_id;

const PREFIX: u8 = 0x05;

pub(crate) fn function_key(namespace: &str, name: &str) -> Vec<u8> {
    let mut key = vec![PREFIX];
    key.extend_from_slice(&namespace_id(namespace).to_be_bytes());
    key.extend_from_slice(name.as_bytes());
    key
}

/// A SQL function as the catalog keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionEntry {
    /// From the catalog's counter, as relations' ids (`pg_proc.oid`).
    pub id: ObjectId,
    pub namespace: String,
    pub name: String,
    pub arguments: Vec<FunctionArgument>,
    /// The declared result type, in PostgreSQL's spelling.
    pub returns: String,
    /// One scalar expression over the arguments, in SQL.
    pub body: String,
    /// `STRICT` (`RETURNS NULL ON NULL INPUT`).
    pub strict: bool,
    /// As declared: `i`, `s` or `v` (`pg_proc.provolatile`). Views are
    /// judged by what the body calls, not by this.
    pub volatility: char,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionArgument {
    pub name: Option<String>,
    /// PostgreSQL's spelling.
    pub type_name: String,
}

impl FunctionEntry {
    /// The function as the planner inlines it.
    pub fn planned(&self) -> RsResult<SqlFunction> {
        Ok(SqlFunction {
            id: self.id,
            name: self.name.clone(),
            returns_name: self.returns.clone(),
            volatility: self.volatility,
            arguments: self
                .arguments
                .iter()
                .map(|argument| {
                    Ok(SqlArgument {
                        name: argument.name.clone(),
                        data_type: declared_type(&argument.type_name)?,
                        type_name: argument.type_name.clone(),
                    })
                })
                .collect::<RsResult<_>>()?,
            returns: declared_type(&self.returns)?,
            body: self.body.clone(),
            strict: self.strict,
        })
    }
}

/// `numeric` alone is any numeric; every other name is one type.
pub(crate) fn declared_type(type_name: &str) -> RsResult<DeclaredType> {
    if type_name == ANY_NUMERIC {
        return Ok(DeclaredType::AnyNumeric);
    }
    Ok(DeclaredType::Exact(arrow_type(parse_type(type_name)?)))
}

/// How an argument or result declared `numeric` without precision and
/// scale is stored.
pub const ANY_NUMERIC: &str = "numeric";

/// Functions by (namespace, name), each with its planned form (`None` for
/// one stored by a version whose types this one cannot read: it can be
/// dropped, and calls of it fail as calls of an unknown function).
type ByName = BTreeMap<(String, String), (FunctionEntry, Option<Arc<SqlFunction>>)>;

/// Every function, by namespace and name, each with its planned form.
#[derive(Debug, Default)]
pub(crate) struct Functions {
    functions: std::sync::RwLock<ByName>,
}

impl Functions {
    pub(crate) async fn load(control: &Db) -> RsResult<Functions> {
        let mut iterator = control
            .scan_prefix([PREFIX], ..)
            .await
            .map_err(|error| storage_error(CONTROL_PATH, error))?;
        let functions = Functions::default();
        while let Some(stored) = iterator
            .next()
            .await
            .map_err(|error| storage_error(CONTROL_PATH, error))?
        {
            let entry: FunctionEntry = serde_json::from_slice(&stored.value)
                .map_err(|error| RsError::internal(format!("corrupt function entry: {error}")))?;
            // One unreadable function does not keep the database closed.
            let planned = match entry.planned() {
                Ok(planned) => Some(Arc::new(planned)),
                Err(error) => {
                    tracing::error!(function = %entry.name, namespace = %entry.namespace, %error, "SQL function cannot be planned; drop it and create it again");
                    None
                }
            };
            functions.write().insert(
                (entry.namespace.clone(), entry.name.clone()),
                (entry, planned),
            );
        }
        Ok(functions)
    }

    /// Adds or replaces `entry`.
    pub(crate) fn insert(&self, entry: FunctionEntry) -> RsResult<()> {
        let planned = Arc::new(entry.planned()?);
        self.write().insert(
            (entry.namespace.clone(), entry.name.clone()),
            (entry, Some(planned)),
        );
        Ok(())
    }

    pub(crate) fn remove(&self, namespace: &str, name: &str) {
        self.write()
            .remove(&(namespace.to_string(), name.to_string()));
    }

    /// Removes every function of `namespace`.
    pub(crate) fn remove_namespace(&self, namespace: &str) {
        self.write().retain(|(of, _), _| of != namespace);
    }

    pub(crate) fn get(&self, namespace: &str, name: &str) -> Option<FunctionEntry> {
        self.read()
            .get(&(namespace.to_string(), name.to_string()))
            .map(|(entry, _)| entry.clone())
    }

    /// `namespace`'s functions, by name.
    pub(crate) fn entries(&self, namespace: &str) -> Vec<FunctionEntry> {
        self.of(namespace, |(entry, _)| entry.clone())
    }

    /// `namespace`'s functions as the planner inlines them.
    pub(crate) fn planned(&self, namespace: &str) -> Vec<Arc<SqlFunction>> {
        self.of(namespace, |(_, planned)| planned.clone())
            .into_iter()
            .flatten()
            .collect()
    }

    fn of<T>(
        &self,
        namespace: &str,
        map: impl Fn(&(FunctionEntry, Option<Arc<SqlFunction>>)) -> T,
    ) -> Vec<T> {
        let first = (namespace.to_string(), String::new());
        self.read()
            .range(first..)
            .take_while(|((of, _), _)| of == namespace)
            .map(|(_, function)| map(function))
            .collect()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, ByName> {
        self.functions
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, ByName> {
        self.functions
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
