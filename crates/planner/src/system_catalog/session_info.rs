//! PostgreSQL's session information functions that drivers call when they
//! connect: `version()` (SQLAlchemy and others parse the PostgreSQL major
//! version out of it, so it must start `PostgreSQL 15.`),
//! `current_schema()` and `current_schemas(include_implicit)` (every
//! relation lives in `public`, which is the whole search path),
//! `pg_is_in_recovery()`, `current_setting(name)` over the session's
//! parameters, and the session's own numbers (`pg_backend_pid()`,
//! `txid_current()`).

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{Array, ArrayRef, AsArray, ListBuilder, StringBuilder};
use datafusion::arrow::datatypes::{DataType, Field};
use datafusion::common::ScalarValue;
use datafusion::error::Result as DataFusionResult;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature,
    Volatility,
};
use rockstream_types::{codes, RsError};

use super::{OWNER, PG_CATALOG, SCHEMA};
use crate::columnar::invoke_on_arrays;

/// The PostgreSQL release whose behaviour RockStream follows; also what
/// the `server_version` parameter reports.
pub const POSTGRESQL_VERSION: &str = "15.0";

/// `version()`'s text: PostgreSQL's shape (`PostgreSQL 15.0 (...) on
/// <platform>, 64-bit`), naming RockStream inside the parentheses.
pub fn version_text() -> String {
    format!(
        "PostgreSQL {POSTGRESQL_VERSION} (RockStream {}) on {}-{}, {}-bit",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::ARCH,
        std::env::consts::OS,
        usize::BITS
    )
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Info {
    Version,
    CurrentSchema,
    CurrentSchemas,
    /// `pg_is_in_recovery()`: a RockStream server is never a standby.
    InRecovery,
    /// `current_user`, `session_user`, `current_role`, `user` (which
    /// [`crate::pg_compat`] turns into calls of [`USER_FUNCTION`]): the
    /// owner role, where no session says who is connected (the gateway
    /// registers the session's user over it).
    User,
}

/// What `current_user` and its kin are called as.
pub const USER_FUNCTION: &str = "rs_session_user";

#[derive(Debug, PartialEq, Eq, Hash)]
struct SessionInfo {
    info: Info,
    signature: Signature,
}

/// The functions of this module, registered in every query's session.
pub(crate) static SESSION_INFO_FUNCTIONS: LazyLock<Vec<ScalarUDF>> = LazyLock::new(|| {
    [
        (Info::Version, Signature::nullary(Volatility::Stable)),
        (Info::CurrentSchema, Signature::nullary(Volatility::Stable)),
        (
            Info::CurrentSchemas,
            Signature::exact(vec![DataType::Boolean], Volatility::Stable),
        ),
        (Info::InRecovery, Signature::nullary(Volatility::Volatile)),
        (Info::User, Signature::nullary(Volatility::Stable)),
    ]
    .into_iter()
    .map(|(info, signature)| ScalarUDF::from(SessionInfo { info, signature }))
    .collect()
});

fn schema_list_type() -> DataType {
    DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, true)))
}

impl ScalarUDFImpl for SessionInfo {
    fn name(&self) -> &str {
        match self.info {
            Info::Version => "version",
            Info::CurrentSchema => "current_schema",
            Info::CurrentSchemas => "current_schemas",
            Info::InRecovery => "pg_is_in_recovery",
            Info::User => USER_FUNCTION,
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arguments: &[DataType]) -> DataFusionResult<DataType> {
        Ok(match self.info {
            Info::CurrentSchemas => schema_list_type(),
            Info::InRecovery => DataType::Boolean,
            _ => DataType::Utf8,
        })
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DataFusionResult<ColumnarValue> {
        match self.info {
            Info::Version => Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(
                version_text(),
            )))),
            Info::CurrentSchema => Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(
                SCHEMA.to_string(),
            )))),
            Info::InRecovery => Ok(ColumnarValue::Scalar(ScalarValue::Boolean(Some(false)))),
            Info::User => Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(
                OWNER.to_string(),
            )))),
            Info::CurrentSchemas => invoke_on_arrays(&args.args, |arrays| match arrays {
                [implicit] => Ok(schema_lists(implicit.as_boolean())),
                _ => Err(RsError::internal("current_schemas takes one argument")),
            }),
        }
    }
}

/// `current_schemas(b)` for each `b`: the search path, with the implicitly
/// searched `pg_catalog` first when `b` is true; NULL for NULL.
fn schema_lists(implicit: &datafusion::arrow::array::BooleanArray) -> ArrayRef {
    let mut lists = ListBuilder::new(StringBuilder::new());
    for row in 0..implicit.len() {
        if implicit.is_null(row) {
            lists.append_null();
            continue;
        }
        if implicit.value(row) {
            lists.values().append_value(PG_CATALOG);
        }
        lists.values().append_value(SCHEMA);
        lists.append(true);
    }
    Arc::new(lists.finish())
}

/// A function of no arguments that answers one value for the session:
/// `pg_backend_pid()` (its connection's process id), `txid_current()`
/// (its transaction's number).
pub fn session_constant(name: &'static str, value: ScalarValue) -> ScalarUDF {
    ScalarUDF::from(SessionConstant {
        name,
        value,
        signature: Signature::nullary(Volatility::Stable),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct SessionConstant {
    name: &'static str,
    value: ScalarValue,
    signature: Signature,
}

impl ScalarUDFImpl for SessionConstant {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arguments: &[DataType]) -> DataFusionResult<DataType> {
        Ok(self.value.data_type())
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> DataFusionResult<ColumnarValue> {
        Ok(ColumnarValue::Scalar(self.value.clone()))
    }
}

/// `current_setting(name [, missing_ok])` over the session's parameters as
/// `SHOW` reports them (`values`, keyed by lower-case name): an unknown
/// name fails with 42704, or gives NULL when `missing_ok` is true.
pub fn current_setting(values: BTreeMap<String, String>) -> ScalarUDF {
    ScalarUDF::from(CurrentSetting {
        values,
        signature: Signature::one_of(
            vec![
                TypeSignature::Exact(vec![DataType::Utf8]),
                TypeSignature::Exact(vec![DataType::Utf8, DataType::Boolean]),
            ],
            Volatility::Stable,
        ),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct CurrentSetting {
    values: BTreeMap<String, String>,
    signature: Signature,
}

impl ScalarUDFImpl for CurrentSetting {
    fn name(&self) -> &str {
        "current_setting"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arguments: &[DataType]) -> DataFusionResult<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DataFusionResult<ColumnarValue> {
        invoke_on_arrays(&args.args, |arrays| {
            let names = arrays[0].as_string::<i32>();
            let missing_ok = arrays.get(1).map(|array| array.as_boolean());
            let mut values = StringBuilder::new();
            for row in 0..names.len() {
                if names.is_null(row) {
                    values.append_null();
                    continue;
                }
                let name = names.value(row).to_lowercase();
                match self.values.get(&name) {
                    Some(value) => values.append_value(value),
                    None if missing_ok.is_some_and(|ok| ok.is_valid(row) && ok.value(row)) => {
                        values.append_null()
                    }
                    None => {
                        return Err(RsError::new(
                            &codes::UNRECOGNIZED_PARAMETER,
                            format!("unrecognized configuration parameter \"{name}\""),
                        ))
                    }
                }
            }
            Ok(Arc::new(values.finish()) as ArrayRef)
        })
    }
}

/// `set_config(name, value, is_local)`: the new value. Setting it is the
/// gateway's part: it applies the calls of a statement once the statement
/// has succeeded (PostgreSQL's effect, as readers of the same statement
/// still see the old value).
pub fn set_config() -> ScalarUDF {
    ScalarUDF::from(SetConfig {
        signature: Signature::exact(
            vec![DataType::Utf8, DataType::Utf8, DataType::Boolean],
            Volatility::Volatile,
        ),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct SetConfig {
    signature: Signature,
}

impl ScalarUDFImpl for SetConfig {
    fn name(&self) -> &str {
        "set_config"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arguments: &[DataType]) -> DataFusionResult<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DataFusionResult<ColumnarValue> {
        Ok(args.args[1].clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_reads_as_postgresql_15() {
        // SQLAlchemy's pattern for the server version.
        let version = version_text();
        assert!(
            version.starts_with("PostgreSQL 15.0 (RockStream "),
            "{version}"
        );
        assert!(version.ends_with("-bit"), "{version}");
    }
}
