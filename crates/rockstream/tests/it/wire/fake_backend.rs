//! The fake `Backend`: one in-memory table `t (id int, name text)` and a
//! handful of fixed statements, enough to exercise every wire path.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use datafusion::arrow::array::{
    ArrayRef, BooleanArray, Date32Array, Decimal128Array, Float32Array, Float64Array, Int16Array,
    Int32Array, Int64Array, IntervalMonthDayNanoArray, NullArray, StringArray,
    TimestampMicrosecondArray,
};
use datafusion::arrow::datatypes::{DataType, Field, IntervalMonthDayNano, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use rockstream_pgwire::{
    Backend, CopyPart, CopyTarget, Described, IdleLimit, Interrupt, PreparedStatements,
    StatementResult, TransactionState,
};
use rockstream_types::{codes, RsError};
use tokio_postgres::types::{FromSql, IsNull, ToSql, Type};

/// Rows of the one table `t (id int, name text)`, as text.
pub type Table = Vec<Vec<Option<String>>>;

#[derive(Default)]
pub struct FakeBackend {
    pub table: Mutex<Table>,
    pub disconnects: AtomicUsize,
    /// Statements stopped while waiting for a cancel.
    pub interrupted: AtomicUsize,
    /// The size of each COPY part the wire handed over (its fields' bytes).
    pub copy_parts: Mutex<Vec<usize>>,
}

/// A session: the interrupt the wire gave it at connect.
/// A session: its interrupt, transaction state, and the rows of a COPY
/// in progress (the table gets them when the COPY ends).
pub struct FakeSession(Interrupt, TransactionState, Vec<Vec<Option<String>>>);

impl FakeSession {
    /// Follows BEGIN/COMMIT and errors, as a backend's transaction state.
    fn track(&mut self, statement: &str, result: &Result<StatementResult, RsError>) {
        self.1 = match (statement, result, self.1) {
            ("BEGIN", Ok(_), _) => TransactionState::InTransaction,
            ("COMMIT" | "ROLLBACK", Ok(_), _) => TransactionState::Idle,
            (_, Err(_), TransactionState::InTransaction) => TransactionState::Failed,
            (_, _, state) => state,
        };
    }
}

fn t_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int32, true),
        Field::new("name", DataType::Utf8, true),
    ]))
}

/// One row of every supported type (the values of the text expectations below).
fn types_result() -> StatementResult {
    let columns: Vec<(&str, ArrayRef)> = vec![
        ("b", Arc::new(BooleanArray::from(vec![true]))),
        ("i2", Arc::new(Int16Array::from(vec![-2]))),
        ("i4", Arc::new(Int32Array::from(vec![40]))),
        ("i8", Arc::new(Int64Array::from(vec![8_000_000_000]))),
        ("f4", Arc::new(Float32Array::from(vec![1.5]))),
        ("f8", Arc::new(Float64Array::from(vec![1e20]))),
        (
            "n",
            Arc::new(
                Decimal128Array::from(vec![1250])
                    .with_precision_and_scale(10, 2)
                    .unwrap(),
            ),
        ),
        ("s", Arc::new(StringArray::from(vec!["héllo"]))),
        ("d", Arc::new(Date32Array::from(vec![19_753]))),
        (
            "ts",
            Arc::new(TimestampMicrosecondArray::from(vec![1_706_702_400_500_000])),
        ),
        (
            "tz",
            Arc::new(
                TimestampMicrosecondArray::from(vec![1_706_702_400_000_000]).with_timezone("UTC"),
            ),
        ),
        (
            "iv",
            Arc::new(IntervalMonthDayNanoArray::from(vec![
                IntervalMonthDayNano::new(14, 3, 14_706_500_000_000),
            ])),
        ),
        ("nothing", Arc::new(NullArray::new(1))),
    ];
    let batch = RecordBatch::try_from_iter(columns).unwrap();
    StatementResult::Query {
        schema: batch.schema(),
        batches: vec![batch],
    }
}

fn table_result(rows: &Table) -> StatementResult {
    let ids: Vec<Option<i32>> = rows
        .iter()
        .map(|row| row[0].as_deref().map(|id| id.parse().unwrap()))
        .collect();
    let names: Vec<Option<&str>> = rows.iter().map(|row| row[1].as_deref()).collect();
    let batch = RecordBatch::try_new(
        t_schema(),
        vec![
            Arc::new(Int32Array::from(ids)),
            Arc::new(StringArray::from(names)),
        ],
    )
    .unwrap();
    StatementResult::Query {
        schema: t_schema(),
        batches: vec![batch],
    }
}

fn echo_schema(count: usize) -> SchemaRef {
    let fields: Vec<Field> = (1..=count)
        .map(|index| Field::new(format!("p{index}"), DataType::Utf8, true))
        .collect();
    Arc::new(Schema::new(fields))
}

/// The parameter types of the `SELECT echo(...)` statement.
fn echo_types() -> Vec<DataType> {
    vec![
        DataType::Int32,
        DataType::Int64,
        DataType::Float64,
        DataType::Utf8,
        DataType::Boolean,
        DataType::Date32,
    ]
}

fn copy_target(sql: &str) -> Option<CopyTarget> {
    let columns = vec!["id".to_owned(), "name".to_owned()];
    match sql {
        "COPY t FROM STDIN" => Some(CopyTarget::text("t", columns)),
        "COPY t FROM STDIN WITH (FORMAT csv, HEADER)" => {
            let mut target = CopyTarget::csv("t", columns);
            target.header = true;
            Some(target)
        }
        _ => None,
    }
}

impl FakeBackend {
    fn run(&self, sql: &str, params: &[Option<String>]) -> Result<StatementResult, RsError> {
        let command = |tag: &str| {
            Ok(StatementResult::Command {
                tag: tag.to_owned(),
            })
        };
        if let Some(target) = copy_target(sql) {
            return Ok(StatementResult::CopyIn(target));
        }
        match sql {
            "BEGIN" | "COMMIT" | "ROLLBACK" => command(sql),
            "SELECT types" => Ok(types_result()),
            "SELECT * FROM t" => Ok(table_result(&self.table.lock().unwrap())),
            "SELECT empty" => Ok(StatementResult::Query {
                schema: t_schema(),
                batches: vec![],
            }),
            "INSERT INTO t VALUES ($1, $2)" => {
                self.table.lock().unwrap().push(params.to_vec());
                command("INSERT 0 1")
            }
            "SELECT echo($1, $2, $3, $4, $5, $6)" => {
                let values: Vec<Option<&str>> = params.iter().map(Option::as_deref).collect();
                let batch = RecordBatch::try_new(
                    echo_schema(values.len()),
                    values
                        .iter()
                        .map(|value| Arc::new(StringArray::from(vec![*value])) as ArrayRef)
                        .collect(),
                )
                .unwrap();
                Ok(StatementResult::Query {
                    schema: batch.schema(),
                    batches: vec![batch],
                })
            }
            "PANIC" => panic!("the fake backend panics on request"),
            "FAIL" => Err(RsError::new(&codes::SYNTAX_ERROR, "syntax error at FAIL")
                .with_detail("the fake backend always fails here")),
            _ => Err(RsError::new(&codes::UNSUPPORTED_STATEMENT, sql.to_owned())),
        }
    }
}

#[async_trait]
impl Backend for FakeBackend {
    type Session = FakeSession;

    async fn connect(
        &self,
        _user: &str,
        database: &str,
        interrupt: Interrupt,
    ) -> Result<FakeSession, RsError> {
        if database == "default" {
            Ok(FakeSession(interrupt, TransactionState::Idle, Vec::new()))
        } else {
            Err(RsError::new(
                &codes::UNKNOWN_DATABASE,
                format!("database \"{database}\" does not exist"),
            ))
        }
    }

    async fn execute(
        &self,
        session: &mut FakeSession,
        sql: &str,
        prepared: &dyn PreparedStatements,
    ) -> Vec<Result<StatementResult, RsError>> {
        if let Some(name) = sql.strip_prefix("DEALLOCATE ") {
            if name == "ALL" {
                prepared.forget_all();
            } else if !prepared.forget(name) {
                return vec![Err(RsError::new(
                    &codes::UNDEFINED_PREPARED_STATEMENT,
                    "no such statement",
                ))];
            }
            let tag = format!("DEALLOCATE{}", if name == "ALL" { " ALL" } else { "" });
            return vec![Ok(StatementResult::Command { tag })];
        }
        // Runs until the client cancels it.
        if sql == "WAIT FOR CANCEL" {
            session.0.requested().await;
            self.interrupted.fetch_add(1, Ordering::SeqCst);
            return vec![Err(RsError::new(&codes::QUERY_CANCELED, "canceled"))];
        }
        let mut results = Vec::new();
        for statement in sql.split(';').map(str::trim).filter(|s| !s.is_empty()) {
            let result = self.run(statement, &[]);
            session.track(statement, &result);
            let failed = result.is_err();
            results.push(result);
            if failed {
                break;
            }
        }
        results
    }

    async fn describe(&self, _session: &mut FakeSession, sql: &str) -> Result<Described, RsError> {
        let (parameter_types, columns) = match sql {
            "INSERT INTO t VALUES ($1, $2)" => (vec![DataType::Int32, DataType::Utf8], None),
            "SELECT echo($1, $2, $3, $4, $5, $6)" => (echo_types(), Some(echo_schema(6))),
            "SELECT * FROM t" | "SELECT empty" => (vec![], Some(t_schema())),
            "SELECT types" => match types_result() {
                StatementResult::Query { schema, .. } => (vec![], Some(schema)),
                _ => unreachable!(),
            },
            _ if copy_target(sql).is_some() => (vec![], None),
            _ => {
                self.run(sql, &[])?;
                (vec![], None)
            }
        };
        Ok(Described {
            parameter_types,
            columns,
            parsed: None,
        })
    }

    async fn execute_with_params(
        &self,
        session: &mut FakeSession,
        sql: &str,
        _described: &Described,
        params: &[Option<String>],
        _prepared: &dyn PreparedStatements,
    ) -> Result<StatementResult, RsError> {
        let result = self.run(sql, params);
        session.track(sql, &result);
        result
    }

    async fn copy_in(
        &self,
        session: &mut FakeSession,
        target: &CopyTarget,
        rows: Vec<Vec<Option<String>>>,
        part: CopyPart,
    ) -> Result<u64, RsError> {
        assert_eq!(target.table, "t");
        let bytes = rows.iter().flatten().flatten().map(String::len).sum();
        self.copy_parts.lock().unwrap().push(bytes);
        let count = rows.len() as u64;
        session.2.extend(rows);
        if part.last {
            self.table.lock().unwrap().append(&mut session.2);
        }
        Ok(count)
    }

    async fn statement_failed(&self, session: &mut FakeSession) {
        session.2.clear();
    }

    fn idle_limit(&self, _session: &FakeSession) -> Option<IdleLimit> {
        None
    }

    fn cursor_columns(&self, _session: &FakeSession, _name: &str) -> Option<SchemaRef> {
        None
    }

    fn transaction_state(&self, session: &FakeSession) -> TransactionState {
        session.1
    }

    async fn disconnect(&self, _session: FakeSession) {
        self.disconnects.fetch_add(1, Ordering::SeqCst);
    }
}

/// The raw binary bytes of a value, whatever its type.
pub struct Raw(pub Vec<u8>);

impl<'a> FromSql<'a> for Raw {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Raw(raw.to_vec()))
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}

/// A DATE parameter sent in binary: days since 2000-01-01.
#[derive(Debug)]
pub struct BinaryDate(pub i32);

impl ToSql for BinaryDate {
    fn to_sql(
        &self,
        _: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        out.extend_from_slice(&self.0.to_be_bytes());
        Ok(IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::DATE
    }

    tokio_postgres::types::to_sql_checked!();
}
