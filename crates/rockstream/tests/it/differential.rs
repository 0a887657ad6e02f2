//! Goal: every materialized view RockStream maintains equals what PostgreSQL computes from
//! scratch, after every transaction of a random workload.
//!
//! Method (differential testing): a [`Scenario`] names tables (with value domains for the
//! generator) and views (SELECTs). Both sides get the tables; the system under test gets the views
//! as `CREATE MATERIALIZED VIEW`, the oracle as plain `CREATE VIEW` (always fresh). A seeded
//! [`generator::DmlGenerator`] produces transactions (multi-statement, rollbacks, autocommit,
//! NULLs, duplicates); each runs on both sides, statement by statement, and must succeed or fail
//! alike with the same row counts. After each transaction every table and view is compared with
//! `SELECT * FROM name` as multisets ([`crate::harness::compare`]).
//!
//! Replay: the seed is printed on failure; `ROCKSTREAM_TEST_SEED=<seed>` replays it and
//! `ROCKSTREAM_TEST_TRANSACTIONS=<n>` sets the length (default [`TRANSACTIONS_DEFAULT`]).
//! The framework is itself checked by running it PostgreSQL against PostgreSQL (`oracle_…` tests).

pub mod generator;
#[cfg(test)]
mod tests;

use std::fmt::Write;

use rand::rngs::StdRng;
use rand::SeedableRng;
use tokio_postgres::{Client, SimpleQueryMessage};

use crate::harness::compare::compare_query;
use crate::harness::oracle::describe_error;
use generator::{DmlGenerator, Ending, GeneratorSettings, KeySnapshot, Transaction};

pub const TRANSACTIONS_DEFAULT: usize = 30;
/// Transactions of history printed with a failure (the failing one last).
const HISTORY_SHOWN_MAX: usize = 60;
/// How long one statement of a scenario may take before the run fails as stuck: far beyond what
/// any statement over these small tables takes, even in a debug build on a busy machine, so that
/// an engine that stops making progress fails the test with its seed and log instead of hanging.
const STATEMENT_DEADLINE: std::time::Duration = std::time::Duration::from_secs(180);
/// What a report says of a side that missed [`STATEMENT_DEADLINE`].
const STUCK: &str = "the server is stuck";

/// The values a column takes in generated DML. Small domains make collisions likely.
#[derive(Clone, Debug)]
pub enum Values {
    /// Integers in `min..=max` (also the domain of a primary key).
    Integer {
        min: i64,
        max: i64,
    },
    /// A NUMERIC: `min..=max` counted in units of `10^-scale`.
    Decimal {
        min: i64,
        max: i64,
        scale: u32,
    },
    /// One of these texts.
    Text(&'static [&'static str]),
    /// A TIMESTAMP in the first `days` days of 2024 (at most 60).
    Timestamp {
        days: u32,
    },
    Boolean,
}

#[derive(Clone, Debug)]
pub struct ColumnSpec {
    pub name: &'static str,
    /// The SQL type as written in the DDL, e.g. `NUMERIC(12,2)`.
    pub sql_type: &'static str,
    pub values: Values,
    pub nullable: bool,
    /// Declared `UNIQUE`: statements that would repeat a value fail, on
    /// both sides alike.
    pub unique: bool,
}

impl ColumnSpec {
    pub fn new(name: &'static str, sql_type: &'static str, values: Values) -> ColumnSpec {
        ColumnSpec {
            name,
            sql_type,
            values,
            nullable: true,
            unique: false,
        }
    }

    pub fn not_null(mut self) -> ColumnSpec {
        self.nullable = false;
        self
    }

    pub fn unique(mut self) -> ColumnSpec {
        self.unique = true;
        self
    }
}

#[derive(Clone, Debug)]
pub struct TableSpec {
    pub name: &'static str,
    pub columns: Vec<ColumnSpec>,
    /// A single integer column, or none (then rows may repeat exactly).
    pub primary_key: Option<&'static str>,
}

impl TableSpec {
    pub fn ddl(&self) -> String {
        let columns: Vec<String> = self
            .columns
            .iter()
            .map(|column| {
                let mut definition = format!("{} {}", column.name, column.sql_type);
                if Some(column.name) == self.primary_key {
                    definition.push_str(" PRIMARY KEY");
                } else if !column.nullable {
                    definition.push_str(" NOT NULL");
                }
                if column.unique {
                    definition.push_str(" UNIQUE");
                }
                definition
            })
            .collect();
        format!("CREATE TABLE {} ({})", self.name, columns.join(", "))
    }

    fn primary_key_column(&self) -> Option<&ColumnSpec> {
        let key = self.primary_key?;
        Some(
            self.columns
                .iter()
                .find(|column| column.name == key)
                .unwrap_or_else(|| panic!("primary key {key} is not a column of {}", self.name)),
        )
    }
}

#[derive(Clone, Debug)]
pub struct ViewSpec {
    pub name: &'static str,
    pub query: String,
    /// The same view as PostgreSQL spells it, where it lacks our syntax
    /// (`TUMBLE`, `HOP`); `None`: `query`.
    pub oracle_query: Option<String>,
}

impl ViewSpec {
    pub fn new(name: &'static str, query: &str) -> ViewSpec {
        ViewSpec {
            name,
            query: query.to_owned(),
            oracle_query: None,
        }
    }

    /// A view the oracle computes with `oracle_query` instead.
    pub fn with_oracle(name: &'static str, query: &str, oracle_query: &str) -> ViewSpec {
        ViewSpec {
            oracle_query: Some(oracle_query.to_owned()),
            ..ViewSpec::new(name, query)
        }
    }
}

#[derive(Clone, Debug)]
pub struct Scenario {
    pub name: &'static str,
    pub tables: Vec<TableSpec>,
    /// Statements both sides run after creating the tables and before the
    /// views (`CREATE FUNCTION`).
    pub setup: Vec<String>,
    pub views: Vec<ViewSpec>,
}

/// How a side declares the views.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ViewKind {
    Materialized,
    Plain,
}

/// One database taking part, with a label for messages.
pub struct Side<'a> {
    pub label: &'a str,
    pub client: &'a Client,
    pub view_kind: ViewKind,
}

#[derive(Clone, Debug)]
pub struct Settings {
    pub seed: u64,
    pub transactions: usize,
    pub generator: GeneratorSettings,
}

impl Settings {
    /// Seed from `ROCKSTREAM_TEST_SEED` (else random), length from `ROCKSTREAM_TEST_TRANSACTIONS`.
    pub fn from_environment() -> Settings {
        Settings {
            seed: crate::harness::test_seed(),
            transactions: crate::harness::environment_count(
                "ROCKSTREAM_TEST_TRANSACTIONS",
                TRANSACTIONS_DEFAULT,
            ),
            generator: GeneratorSettings::default(),
        }
    }
}

/// Runs `scenario` on both sides; `Err` explains the first divergence, with seed and history.
pub async fn run(
    scenario: &Scenario,
    system_under_test: &Side<'_>,
    oracle: &Side<'_>,
    settings: &Settings,
) -> Result<(), String> {
    run_with_views(
        scenario,
        &scenario.views,
        system_under_test,
        oracle,
        settings,
    )
    .await
}

/// [`run`], but the system under test declares `system_under_test_views` (same names) instead of
/// the scenario's views: lets the framework's own tests plant a wrong view and see it caught.
pub(crate) async fn run_with_views(
    scenario: &Scenario,
    system_under_test_views: &[ViewSpec],
    system_under_test: &Side<'_>,
    oracle: &Side<'_>,
    settings: &Settings,
) -> Result<(), String> {
    let mut history: Vec<Transaction> = Vec::new();
    let outcome = drive(
        scenario,
        system_under_test_views,
        system_under_test,
        oracle,
        settings,
        &mut history,
    )
    .await;
    outcome.map_err(|failure| {
        let mut report = format!(
            "differential scenario `{}`: {} diverged from {} at transaction {} (seed {})\n\n\
             {failure}\n",
            scenario.name,
            system_under_test.label,
            oracle.label,
            history.len(),
            settings.seed
        );
        describe_history(&mut report, scenario, &history);
        let _ = write!(
            report,
            "\nreplay with: ROCKSTREAM_TEST_SEED={} ROCKSTREAM_TEST_TRANSACTIONS={} \
             scripts/test.sh -p rockstream --test it -- <test name>",
            settings.seed,
            history.len().max(1)
        );
        report
    })
}

async fn drive(
    scenario: &Scenario,
    system_under_test_views: &[ViewSpec],
    system_under_test: &Side<'_>,
    oracle: &Side<'_>,
    settings: &Settings,
    history: &mut Vec<Transaction>,
) -> Result<(), String> {
    assert_eq!(
        system_under_test_views.len(),
        scenario.views.len(),
        "the system under test must declare the same views"
    );
    set_up(scenario, &scenario.views, oracle).await?;
    set_up(scenario, system_under_test_views, system_under_test).await?;
    compare_everything(scenario, system_under_test, oracle).await?;

    let mut generator = DmlGenerator::new(
        StdRng::seed_from_u64(settings.seed),
        settings.generator.clone(),
    );
    for _ in 0..settings.transactions {
        let keys = key_snapshot(scenario, oracle).await?;
        let transaction = generator.transaction(scenario, &keys);
        history.push(transaction.clone());
        apply(&transaction, system_under_test, oracle).await?;
        compare_everything(scenario, system_under_test, oracle).await?;
    }
    Ok(())
}

async fn set_up(scenario: &Scenario, views: &[ViewSpec], side: &Side<'_>) -> Result<(), String> {
    for table in &scenario.tables {
        execute(side, &table.ddl()).await?;
    }
    for statement in &scenario.setup {
        execute(side, statement).await?;
    }
    for view in views {
        let (keyword, query) = match side.view_kind {
            ViewKind::Materialized => ("MATERIALIZED VIEW", &view.query),
            ViewKind::Plain => ("VIEW", view.oracle_query.as_ref().unwrap_or(&view.query)),
        };
        execute(side, &format!("CREATE {keyword} {} AS {query}", view.name)).await?;
    }
    Ok(())
}

/// Runs one statement; `Ok` holds the affected (or returned) row count.
async fn execute(side: &Side<'_>, sql: &str) -> Result<u64, String> {
    let messages = tokio::time::timeout(STATEMENT_DEADLINE, side.client.simple_query(sql))
        .await
        .map_err(|_| {
            format!(
                "on {}: {sql}\ngot no answer within {STATEMENT_DEADLINE:?}: {STUCK}",
                side.label
            )
        })?
        .map_err(|error| {
            format!(
                "on {}: {sql}\nfailed: {}",
                side.label,
                describe_error(&error)
            )
        })?;
    Ok(messages
        .iter()
        .filter_map(|message| match message {
            SimpleQueryMessage::CommandComplete(count) => Some(*count),
            _ => None,
        })
        .next_back()
        .unwrap_or(0))
}

/// Runs the transaction on both sides in lockstep. Both must agree on each statement's success
/// and row count; when both fail alike, both roll back and the run goes on.
async fn apply(
    transaction: &Transaction,
    system_under_test: &Side<'_>,
    oracle: &Side<'_>,
) -> Result<(), String> {
    let lines = transaction.to_sql_lines();
    for line in &lines {
        let expected = execute(oracle, line).await;
        let actual = execute(system_under_test, line).await;
        match (&expected, &actual) {
            (Ok(expected_count), Ok(actual_count)) if expected_count == actual_count => {}
            (Ok(expected_count), Ok(actual_count)) => {
                return Err(format!(
                    "{line}\n{} reports {expected_count} rows, {} reports {actual_count}",
                    oracle.label, system_under_test.label
                ))
            }
            (Err(_), Err(_)) => {
                if transaction.ending != Ending::Autocommit {
                    let _ = execute(oracle, "ROLLBACK").await;
                    let _ = execute(system_under_test, "ROLLBACK").await;
                }
                return Ok(());
            }
            (Ok(_), Err(error)) | (Err(error), Ok(_)) => {
                return Err(format!("only one side failed: {error}"));
            }
        }
    }
    Ok(())
}

async fn compare_everything(
    scenario: &Scenario,
    system_under_test: &Side<'_>,
    oracle: &Side<'_>,
) -> Result<(), String> {
    let names = scenario
        .tables
        .iter()
        .map(|table| table.name)
        .chain(scenario.views.iter().map(|view| view.name));
    for name in names {
        compare_query(
            oracle.label,
            oracle.client,
            system_under_test.label,
            system_under_test.client,
            &format!("SELECT * FROM {name}"),
        )
        .await?;
    }
    Ok(())
}

async fn key_snapshot(scenario: &Scenario, oracle: &Side<'_>) -> Result<KeySnapshot, String> {
    let mut snapshot = KeySnapshot::new();
    for table in &scenario.tables {
        let Some(key) = table.primary_key else {
            continue;
        };
        let sql = format!("SELECT {key} FROM {}", table.name);
        let rows = crate::harness::compare::fetch_text_rows(oracle.client, &sql).await?;
        let keys = rows
            .iter()
            .filter_map(|row| row.first().cloned().flatten())
            .map(|text| {
                text.parse::<i64>()
                    .map_err(|error| format!("{sql}: key {text:?} is not an integer: {error}"))
            })
            .collect::<Result<_, _>>()?;
        snapshot.insert(table.name.to_owned(), keys);
    }
    Ok(snapshot)
}

fn describe_history(report: &mut String, scenario: &Scenario, history: &[Transaction]) {
    let _ = writeln!(report, "schema:");
    for table in &scenario.tables {
        let _ = writeln!(report, "    {};", table.ddl());
    }
    for view in &scenario.views {
        let _ = writeln!(
            report,
            "    CREATE MATERIALIZED VIEW {} AS {};",
            view.name, view.query
        );
    }
    let skipped = history.len().saturating_sub(HISTORY_SHOWN_MAX);
    let _ = writeln!(report, "transactions (the last one failed):");
    if skipped > 0 {
        let _ = writeln!(report, "    … {skipped} earlier transactions not shown");
    }
    for (index, transaction) in history.iter().enumerate().skip(skipped) {
        let _ = writeln!(report, "  -- transaction {}", index + 1);
        for line in transaction.to_sql_lines() {
            let _ = writeln!(report, "    {line};");
        }
    }
}

/// The orders/customers schema of the README tour, with values chosen to collide.
pub fn orders_and_customers_tables() -> Vec<TableSpec> {
    const NAMES: &[&str] = &["Ada", "Grace", "Edsger", "Barbara", "Ken", ""];
    const TIERS: &[&str] = &["gold", "silver", "bronze"];
    const REGIONS: &[&str] = &["eu", "us", "apac", "latam"];
    // Fewer than the customers: writes repeat them, and fail as PostgreSQL's do.
    const EMAILS: &[&str] = &["a@x", "b@x", "c@x", "d@x", "e@x", "f@x", "g@x", "h@x"];
    vec![
        TableSpec {
            name: "customers",
            columns: vec![
                ColumnSpec::new("id", "BIGINT", Values::Integer { min: 1, max: 12 }),
                ColumnSpec::new("name", "TEXT", Values::Text(NAMES)).not_null(),
                ColumnSpec::new("tier", "TEXT", Values::Text(TIERS)),
                ColumnSpec::new("email", "TEXT", Values::Text(EMAILS)).unique(),
            ],
            primary_key: Some("id"),
        },
        TableSpec {
            name: "orders",
            columns: vec![
                ColumnSpec::new("id", "BIGINT", Values::Integer { min: 1, max: 60 }),
                // Customers 13 and 14 never exist: dangling join keys.
                ColumnSpec::new("customer_id", "BIGINT", Values::Integer { min: 1, max: 14 }),
                ColumnSpec::new(
                    "amount",
                    "NUMERIC(12,2)",
                    Values::Decimal {
                        min: -500,
                        max: 50_000,
                        scale: 2,
                    },
                ),
                ColumnSpec::new("region", "TEXT", Values::Text(REGIONS)),
                ColumnSpec::new("created_at", "TIMESTAMP", Values::Timestamp { days: 45 }),
            ],
            primary_key: Some("id"),
        },
    ]
}

/// Views over orders/customers: filter/project, grouped and global aggregates, inner joins.
pub fn orders_and_customers_views() -> Vec<ViewSpec> {
    vec![
        ViewSpec::new(
            "paid_orders",
            "SELECT id, customer_id, amount, region FROM orders \
             WHERE amount IS NOT NULL AND region <> 'apac'",
        ),
        ViewSpec::new(
            "revenue_by_region",
            "SELECT region, COUNT(*) AS orders, SUM(amount) AS revenue, AVG(amount) AS avg_amount, \
             MIN(amount) AS smallest, MAX(amount) AS largest FROM orders GROUP BY region",
        ),
        ViewSpec::new(
            "orders_per_customer",
            "SELECT customer_id, COUNT(amount) AS priced, MIN(created_at) AS first_order, \
             MAX(created_at) AS last_order FROM orders GROUP BY customer_id",
        ),
        ViewSpec::new(
            "order_totals",
            "SELECT COUNT(*) AS orders, COUNT(region) AS with_region, SUM(amount) AS revenue \
             FROM orders",
        ),
        ViewSpec::new(
            "big_orders",
            "SELECT o.id, c.name, c.tier, o.amount FROM orders o \
             JOIN customers c ON o.customer_id = c.id WHERE o.amount > 100",
        ),
        ViewSpec::new(
            "revenue_by_tier",
            "SELECT c.tier, COUNT(*) AS orders, SUM(o.amount) AS revenue FROM orders o \
             JOIN customers c ON o.customer_id = c.id GROUP BY c.tier",
        ),
    ]
}

pub fn orders_and_customers_scenario() -> Scenario {
    Scenario {
        name: "orders_and_customers",
        tables: orders_and_customers_tables(),
        setup: Vec::new(),
        views: orders_and_customers_views(),
    }
}
