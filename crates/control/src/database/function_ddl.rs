//! `CREATE FUNCTION` and `DROP FUNCTION` (RFC 0012).

use std::sync::Arc;

use rockstream_planner::{check_function, is_builtin_function, new_context, SqlFunction};
use rockstream_types::{codes, ObjectId, RsError, RsResult};

use super::{dependents_exist, doomed_by, dropping_marks, Database, DropObject};
use crate::catalog::CatalogEntry;
use crate::functions::{declared_type, function_key, FunctionEntry};
use crate::resolver::CatalogResolver;

impl Database {
    /// `namespace`'s SQL functions, as the planner inlines them.
    pub fn functions(&self, namespace: &str) -> Vec<Arc<SqlFunction>> {
        self.functions.planned(namespace)
    }

    /// `namespace`'s SQL functions, by name.
    pub fn function_entries(&self, namespace: &str) -> Vec<FunctionEntry> {
        self.functions.entries(namespace)
    }

    /// `CREATE [OR REPLACE] FUNCTION` (durable when it returns). `function`'s
    /// id is assigned here. The body must plan, as one scalar expression,
    /// over the arguments; a function views call is not replaced.
    pub async fn create_function(&self, function: FunctionEntry, or_replace: bool) -> RsResult<()> {
        let _guard = self.ddl.lock().await;
        self.before_ddl().await?;
        let namespace = function.namespace.clone();
        if is_builtin_function(&function.name) {
            return Err(RsError::new(
                &codes::UNSUPPORTED_STATEMENT,
                format!(
                    "a SQL function named like the built-in function {} is not supported",
                    function.name
                ),
            ));
        }
        let existing = self.functions.get(&namespace, &function.name);
        // A replacement gets a new id: a view planned over the old body in
        // a transaction block then fails its COMMIT.
        match &existing {
            Some(existing) if !or_replace => {
                return Err(RsError::new(
                    &codes::DUPLICATE_FUNCTION,
                    format!(
                        "function \"{}\" already exists (as {})",
                        existing.name,
                        existing
                            .planned()
                            .map(|planned| planned.signature())
                            .unwrap_or_else(|_| existing.name.clone())
                    ),
                ));
            }
            Some(existing) => {
                let catalog = self.entries(&namespace);
                let caller = callers(&catalog, existing.id).next().cloned();
                if let Some(caller) = caller {
                    return Err(RsError::new(
                        &codes::FUNCTION_WITH_DEPENDENTS,
                        format!(
                            "cannot replace function {}: {} \"{}\" calls it",
                            existing.name,
                            caller.kind.describe(),
                            caller.name
                        ),
                    ));
                }
            }
            None => {}
        }
        let id = self.allocate_id().await?;
        let entry = FunctionEntry { id, ..function };
        let planned = Arc::new(entry.planned()?);
        let mut functions = self.functions.planned(&namespace);
        functions.retain(|other| other.name != entry.name);
        functions.push(planned.clone());
        let resolver = CatalogResolver::new(self.entries(&namespace), functions);
        check_function(&new_context(resolver), &planned).await?;
        let json =
            serde_json::to_vec(&entry).map_err(|error| RsError::internal(error.to_string()))?;
        self.durable_put(&function_key(&namespace, &entry.name), &json)
            .await?;
        self.functions.insert(entry)
    }

    /// `DROP FUNCTION [IF EXISTS] name [(types)], … [CASCADE]`: every named
    /// function is checked before any goes, and all go in one atomic write.
    /// With `CASCADE` the views calling them (and what depends on those) go
    /// too, in that write; without, 2BP01 while views call one. Functions
    /// absent with `if_exists` are skipped.
    pub async fn drop_functions(
        &self,
        namespace: &str,
        named: &[(String, Option<Vec<String>>)],
        if_exists: bool,
        cascade: bool,
    ) -> RsResult<()> {
        let _guard = self.ddl.lock().await;
        self.before_ddl().await?;
        let mut dropped: Vec<FunctionEntry> = Vec::new();
        for (name, argument_types) in named {
            match self.named_function(namespace, name, argument_types.as_deref()) {
                Ok(function) if !dropped.iter().any(|other| other.id == function.id) => {
                    dropped.push(function)
                }
                Ok(_) => {}
                Err(_) if if_exists => {}
                Err(error) => return Err(error),
            }
        }
        let catalog = self.entries(namespace);
        let mut doomed: Vec<ObjectId> = Vec::new();
        for function in &dropped {
            let calling: Vec<&CatalogEntry> = callers(&catalog, function.id).collect();
            if !calling.is_empty() && !cascade {
                return Err(dependents_exist(
                    &format!("function {}", function.name),
                    calling.iter().copied(),
                ));
            }
            for caller in calling {
                let drop = DropObject {
                    name: &caller.name,
                    kind: caller.kind,
                    cascade: true,
                    if_exists: true,
                };
                for entry in doomed_by(&catalog, drop)?.unwrap_or_default() {
                    if !doomed.contains(&entry.id) {
                        doomed.push(entry.id);
                    }
                }
            }
        }
        if dropped.is_empty() {
            return Ok(());
        }
        // Creation order is dependency order.
        let doomed: Vec<CatalogEntry> = catalog
            .into_iter()
            .filter(|entry| doomed.contains(&entry.id))
            .collect();
        let mut batch = dropping_marks(&doomed)?;
        for function in &dropped {
            batch.delete(function_key(namespace, &function.name));
        }
        self.control.write(batch).await?;
        for function in &dropped {
            self.functions.remove(namespace, &function.name);
        }
        self.catalog_mut()
            .retain(|existing| !doomed.iter().any(|gone| gone.id == existing.id));
        // Dependents first, as DROP ... CASCADE removes them.
        self.drop_in_background(doomed.into_iter().rev().collect())
            .await;
        Ok(())
    }

    /// The function `DROP FUNCTION name [(types)]` names: 42883 if there is
    /// none, or if its arguments are not `argument_types`.
    fn named_function(
        &self,
        namespace: &str,
        name: &str,
        argument_types: Option<&[String]>,
    ) -> RsResult<FunctionEntry> {
        let named = |types: &[String]| format!("{name}({})", types.join(", "));
        let Some(existing) = self.functions.get(namespace, name) else {
            return Err(match argument_types {
                Some(types) => undefined_function(&named(types)),
                None => RsError::new(
                    &codes::UNDEFINED_FUNCTION,
                    format!("could not find a function named \"{name}\""),
                ),
            });
        };
        if let Some(types) = argument_types {
            let declared: Vec<&String> = existing
                .arguments
                .iter()
                .map(|argument| &argument.type_name)
                .collect();
            // By type, or by name where a stored type no longer parses.
            let same = |(declared, given): (&&String, &String)| match (
                declared_type(declared),
                declared_type(given),
            ) {
                (Ok(declared), Ok(given)) => declared == given,
                _ => *declared == given,
            };
            if declared.len() != types.len() || !declared.iter().zip(types).all(same) {
                return Err(undefined_function(&named(types)));
            }
        }
        Ok(existing)
    }

    /// 42883 when a view `created` calls a function that is gone (dropped,
    /// or replaced, since the view was planned in a transaction block).
    pub(super) fn check_functions_stand(&self, created: &[CatalogEntry]) -> RsResult<()> {
        for view in created {
            let standing = self.function_entries(&view.namespace);
            if let Some(gone) = view
                .functions
                .iter()
                .find(|id| !standing.iter().any(|function| function.id == **id))
            {
                return Err(RsError::new(
                    &codes::UNDEFINED_FUNCTION,
                    format!(
                        "a function {} \"{}\" calls (id {gone}) was dropped or replaced by another session; run the transaction again",
                        view.kind.describe(),
                        view.name
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// The views of `catalog` calling function `id`.
fn callers(catalog: &[CatalogEntry], id: ObjectId) -> impl Iterator<Item = &CatalogEntry> {
    catalog
        .iter()
        .filter(move |entry| entry.functions.contains(&id))
}

fn undefined_function(named: &str) -> RsError {
    RsError::new(
        &codes::UNDEFINED_FUNCTION,
        format!("function {named} does not exist"),
    )
}
