//! `nextval`, `currval`, `setval` and `lastval` over the sequences of
//! `SERIAL` and identity columns (RFC 0003).
//!
//! The functions are registered in every statement's planning context.
//! They find a sequence by name (`nextval('t_id_seq')`) or by oid (what
//! `'t_id_seq'::regclass`, as a serial column's default spells it,
//! becomes), among the sequences the session's catalog holds, looked up
//! when first called. Values come from [`rockstream_control::Sequences`]:
//! handed out from memory, made durable before the statement returns
//! ([`rockstream_control::Database::persist_sequences`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use datafusion::arrow::array::{Array, ArrayRef, BooleanArray, Int64Array, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;
use datafusion::error::{DataFusionError, Result as DataFusionResult};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature,
    Volatility,
};
use datafusion::prelude::SessionContext;
use rockstream_control::{
    next_after_set, take_next, CatalogEntry, Database, PendingCatalog, SequenceRef, Sequences,
};
use rockstream_planner::{regclass_name, relation_oid};
use rockstream_types::{codes, ObjectId, RsError, RsResult, SqlType};

use crate::session::{restarted_map, RestartedSequences};

/// What `currval` and `lastval` read: the last value `nextval` (or
/// `setval`) gave each sequence in this session.
#[derive(Debug, Default)]
pub struct SessionSequences {
    current: HashMap<ObjectId, i64>,
    last: Option<i64>,
}

impl SessionSequences {
    /// `nextval` gave `value` for sequence `id`.
    pub fn drawn(&mut self, id: ObjectId, value: i64) {
        self.current.insert(id, value);
        self.last = Some(value);
    }
}

/// The session's view of the sequences, for one statement.
pub(crate) struct SequenceAccess {
    pub database: Arc<Database>,
    pub namespace: String,
    /// The transaction's DDL, whose tables' sequences it may use.
    pub pending: Option<PendingCatalog>,
    pub session: Arc<Mutex<SessionSequences>>,
    /// The transaction's restarted sequences, if it has any.
    pub restarted: Option<RestartedSequences>,
    known: OnceLock<Vec<SequenceRef>>,
}

impl SequenceAccess {
    pub fn new(
        database: Arc<Database>,
        namespace: String,
        pending: Option<PendingCatalog>,
        session: Arc<Mutex<SessionSequences>>,
        restarted: Option<RestartedSequences>,
    ) -> SequenceAccess {
        SequenceAccess {
            database,
            namespace,
            pending,
            session,
            restarted,
            known: OnceLock::new(),
        }
    }

    fn known(&self) -> &[SequenceRef] {
        self.known.get_or_init(|| {
            let committed = self.database.entries(&self.namespace);
            let entries = match &self.pending {
                Some(pending) => pending.overlay(&self.namespace, committed),
                None => committed,
            };
            entries.iter().flat_map(sequence_refs).collect()
        })
    }

    /// The sequence a function's first argument names: text (as
    /// `regclass` reads a name) or an oid.
    fn find(&self, argument: Argument<'_>) -> RsResult<SequenceRef> {
        let found = match argument {
            Argument::Oid(oid) => self
                .known()
                .iter()
                .find(|sequence| relation_oid(sequence.id) == oid),
            Argument::Name(name) => {
                let name = regclass_name(name);
                self.known().iter().find(|sequence| sequence.name == name)
            }
        };
        found.cloned().ok_or_else(|| {
            let named = match argument {
                Argument::Oid(oid) => oid.to_string(),
                Argument::Name(name) => regclass_name(name),
            };
            RsError::new(
                &codes::UNDEFINED_OBJECT,
                format!("relation \"{named}\" does not exist"),
            )
        })
    }

    fn session(&self) -> std::sync::MutexGuard<'_, SessionSequences> {
        self.session
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn next(&self, sequence: &SequenceRef) -> RsResult<i64> {
        let value = draw(&self.database, self.restarted.as_ref(), sequence)?;
        self.session().drawn(sequence.id, value);
        Ok(value)
    }

    fn current(&self, sequence: &SequenceRef) -> RsResult<i64> {
        self.session()
            .current
            .get(&sequence.id)
            .copied()
            .ok_or_else(|| {
                RsError::new(
                    &codes::SEQUENCE_NOT_YET_DEFINED,
                    format!(
                        "currval of sequence \"{}\" is not yet defined in this session",
                        sequence.name
                    ),
                )
            })
    }

    fn set(&self, sequence: &SequenceRef, value: i64, is_called: bool) -> RsResult<i64> {
        let restarted = self.restarted.as_ref().map(restarted_map);
        match restarted {
            Some(mut restarted) if restarted.contains_key(&sequence.id) => {
                Sequences::check_set(sequence, value)?;
                restarted.insert(sequence.id, next_after_set(value, is_called));
            }
            _ => self.database.sequences().set(sequence, value, is_called)?,
        }
        if is_called {
            self.session().drawn(sequence.id, value);
        }
        Ok(value)
    }

    fn last(&self) -> RsResult<i64> {
        self.session().last.ok_or_else(|| {
            RsError::new(
                &codes::SEQUENCE_NOT_YET_DEFINED,
                "lastval is not yet defined in this session",
            )
        })
    }
}

/// The sequences `entry`'s columns own, bounded by their columns' types.
pub(crate) fn sequence_refs(entry: &CatalogEntry) -> Vec<SequenceRef> {
    entry
        .columns
        .iter()
        .filter_map(|column| {
            let sequence = column.sequence.as_ref()?;
            let max = match column.sql_type().ok()? {
                SqlType::Int16 => i64::from(i16::MAX),
                SqlType::Int32 => i64::from(i32::MAX),
                _ => i64::MAX,
            };
            Some(SequenceRef {
                id: sequence.id,
                name: sequence.name.clone(),
                max,
            })
        })
        .collect()
}

/// `nextval` of `sequence`: from the transaction's restarted counter when
/// `TRUNCATE … RESTART IDENTITY` restarted it, else from the server's.
pub(crate) fn draw(
    database: &Database,
    restarted: Option<&RestartedSequences>,
    sequence: &SequenceRef,
) -> RsResult<i64> {
    if let Some(restarted) = restarted {
        if let Some(next) = restarted_map(restarted).get_mut(&sequence.id) {
            return take_next(next, sequence);
        }
    }
    database.sequences().next(sequence)
}

#[derive(Debug, Clone, Copy)]
enum Argument<'a> {
    Name(&'a str),
    Oid(i64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Function {
    Next,
    Current,
    Set,
    Last,
}

impl Function {
    fn name(&self) -> &'static str {
        match self {
            Function::Next => "nextval",
            Function::Current => "currval",
            Function::Set => "setval",
            Function::Last => "lastval",
        }
    }
}

struct SequenceFunction {
    function: Function,
    signature: Signature,
    access: Arc<SequenceAccess>,
}

impl std::fmt::Debug for SequenceFunction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.function.name())
    }
}

impl PartialEq for SequenceFunction {
    fn eq(&self, other: &Self) -> bool {
        self.function == other.function && Arc::ptr_eq(&self.access, &other.access)
    }
}

impl Eq for SequenceFunction {}

impl std::hash::Hash for SequenceFunction {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.function.hash(state)
    }
}

/// Registers the four functions in `context`.
pub(crate) fn register_sequence_functions(context: &SessionContext, access: Arc<SequenceAccess>) {
    for function in [
        Function::Next,
        Function::Current,
        Function::Set,
        Function::Last,
    ] {
        context.register_udf(ScalarUDF::from(SequenceFunction {
            function,
            // Each call may change a sequence: never folded, never shared
            // between rows.
            signature: Signature::one_of(
                vec![TypeSignature::Nullary, TypeSignature::VariadicAny],
                Volatility::Volatile,
            ),
            access: access.clone(),
        }));
    }
}

fn external(error: RsError) -> DataFusionError {
    DataFusionError::External(Box::new(error))
}

impl ScalarUDFImpl for SequenceFunction {
    fn name(&self) -> &str {
        self.function.name()
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arguments: &[DataType]) -> DataFusionResult<DataType> {
        let expected = match self.function {
            Function::Last => 0..=0,
            Function::Next | Function::Current => 1..=1,
            Function::Set => 2..=3,
        };
        if !expected.contains(&arguments.len()) {
            return Err(external(RsError::new(
                &codes::UNDEFINED_FUNCTION,
                format!(
                    "function {}() does not take {} arguments",
                    self.function.name(),
                    arguments.len()
                ),
            )));
        }
        Ok(DataType::Int64)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DataFusionResult<ColumnarValue> {
        let rows = args.number_rows;
        let arrays = args
            .args
            .iter()
            .map(|arg| arg.to_array(rows))
            .collect::<DataFusionResult<Vec<ArrayRef>>>()?;
        let access = &self.access;
        let values: Vec<Option<i64>> = match self.function {
            Function::Last => (0..rows)
                .map(|_| access.last().map(Some))
                .collect::<RsResult<_>>()
                .map_err(external)?,
            _ => {
                let Some(first) = arrays.first() else {
                    return Err(DataFusionError::Internal("no sequence argument".into()));
                };
                let sequences = SequenceArgument::of(first)?;
                let values = match arrays.get(1) {
                    Some(values) => Some(cast(values, &DataType::Int64)?),
                    None => None,
                };
                let values = values
                    .as_ref()
                    .and_then(|array| array.as_any().downcast_ref::<Int64Array>());
                let called = match arrays.get(2) {
                    Some(called) => Some(cast(called, &DataType::Boolean)?),
                    None => None,
                };
                let called = called
                    .as_ref()
                    .and_then(|array| array.as_any().downcast_ref::<BooleanArray>());
                let mut out = Vec::with_capacity(rows);
                for row in 0..rows {
                    let Some(argument) = sequences.get(row) else {
                        out.push(None);
                        continue;
                    };
                    let sequence = access.find(argument).map_err(external)?;
                    let value = match self.function {
                        Function::Next => access.next(&sequence),
                        Function::Current => access.current(&sequence),
                        _ => {
                            // Strict, as PostgreSQL's: a NULL argument gives NULL.
                            let value = values
                                .filter(|array| !array.is_null(row))
                                .map(|array| array.value(row));
                            let is_called = match called {
                                None => Some(true),
                                Some(array) if array.is_null(row) => None,
                                Some(array) => Some(array.value(row)),
                            };
                            match (value, is_called) {
                                (Some(value), Some(is_called)) => {
                                    access.set(&sequence, value, is_called)
                                }
                                _ => {
                                    out.push(None);
                                    continue;
                                }
                            }
                        }
                    };
                    out.push(Some(value.map_err(external)?));
                }
                out
            }
        };
        Ok(ColumnarValue::Array(Arc::new(Int64Array::from(values))))
    }
}

/// A function's first argument: names, or oids (`regclass`).
enum SequenceArgument {
    Names(StringArray),
    Oids(Int64Array),
}

impl SequenceArgument {
    fn of(array: &ArrayRef) -> DataFusionResult<SequenceArgument> {
        if matches!(
            array.data_type(),
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
        ) {
            let names = cast(array, &DataType::Utf8)?;
            return names
                .as_any()
                .downcast_ref::<StringArray>()
                .cloned()
                .map(SequenceArgument::Names)
                .ok_or_else(|| DataFusionError::Internal("names are text".into()));
        }
        let oids = cast(array, &DataType::Int64)?;
        oids.as_any()
            .downcast_ref::<Int64Array>()
            .cloned()
            .map(SequenceArgument::Oids)
            .ok_or_else(|| DataFusionError::Internal("oids are numbers".into()))
    }

    fn get(&self, row: usize) -> Option<Argument<'_>> {
        match self {
            SequenceArgument::Names(names) => {
                (!names.is_null(row)).then(|| Argument::Name(names.value(row)))
            }
            SequenceArgument::Oids(oids) => {
                (!oids.is_null(row)).then(|| Argument::Oid(oids.value(row)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! Goal: sequence names are read as PostgreSQL's `regclass` reads them.
    use super::*;

    #[test]
    fn names_fold_as_regclass_folds_them() {
        assert_eq!(regclass_name("T_id_seq"), "t_id_seq");
        assert_eq!(regclass_name("public.t_id_seq"), "t_id_seq");
        assert_eq!(regclass_name("\"T_id_seq\""), "T_id_seq");
    }
}
