//! The PostgreSQL oracle: a real PostgreSQL server whose answers are the ground truth RockStream's
//! are compared with. `scripts/test.sh` starts a throwaway one and exports its connection string in
//! `ROCKSTREAM_TEST_PG_URL` (tokio-postgres key=value form or a `postgresql://` URL).
//!
//! Isolation: every test creates its own database ([`OracleDatabase::create`]) named after the
//! test, the process and a counter, so tests run in parallel without sharing tables. The database
//! is dropped (with `FORCE`) when the handle is dropped.
//!
//! A test that needs the oracle and finds no URL FAILS: a silently skipped oracle would let a
//! broken suite look green.

use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio_postgres::{Client, Config, NoTls};

pub const ORACLE_URL_VARIABLE: &str = "ROCKSTREAM_TEST_PG_URL";

const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// PostgreSQL limits identifiers to 63 bytes.
const DATABASE_NAME_LENGTH_MAX: usize = 63;

static DATABASE_COUNTER: AtomicUsize = AtomicUsize::new(0);

/// The oracle's connection settings, or a panic telling the reader how to get an oracle.
pub fn oracle_config() -> Config {
    let url = match std::env::var(ORACLE_URL_VARIABLE) {
        Ok(url) if !url.trim().is_empty() => url,
        _ => panic!(
            "this test needs the PostgreSQL oracle but {ORACLE_URL_VARIABLE} is not set.\n\
             Run the suite through `scripts/test.sh` (it installs and starts a throwaway \
             PostgreSQL and sets the variable), e.g. `scripts/test.sh -p rockstream --test it`, \
             or export {ORACLE_URL_VARIABLE}='host=127.0.0.1 port=5432 user=postgres \
             dbname=postgres' pointing at a PostgreSQL 15 you may create databases on."
        ),
    };
    let mut config = Config::from_str(&url)
        .unwrap_or_else(|error| panic!("{ORACLE_URL_VARIABLE}={url:?} does not parse: {error}"));
    config.connect_timeout(CONNECT_TIMEOUT);
    if config.get_dbname().is_none() {
        config.dbname("postgres");
    }
    config
}

/// Connects and drives the connection on the current tokio runtime.
pub async fn connect(config: &Config) -> Result<Client, tokio_postgres::Error> {
    let (client, connection) = config.connect(NoTls).await?;
    crate::harness::spawn(async move {
        // The connection ends when the client is dropped or the server goes away; the client's
        // next call reports the latter, so the error here adds nothing.
        let _ = connection.await;
    });
    Ok(client)
}

/// A database of its own on the oracle, dropped when this handle is dropped.
pub struct OracleDatabase {
    name: String,
    config: Config,
    administration_config: Config,
}

impl OracleDatabase {
    /// Creates an empty database whose name starts with `label` (letters, digits, `_` kept).
    pub async fn create(label: &str) -> OracleDatabase {
        let administration_config = oracle_config();
        let name = database_name(label);
        let administrator = connect(&administration_config)
            .await
            .unwrap_or_else(|error| {
                panic!(
                    "cannot connect to the PostgreSQL oracle ({ORACLE_URL_VARIABLE}): {}",
                    describe_error(&error)
                )
            });
        administrator
            .simple_query(&format!("CREATE DATABASE \"{name}\" TEMPLATE template0"))
            .await
            .unwrap_or_else(|error| {
                panic!(
                    "CREATE DATABASE {name} on the oracle failed: {}",
                    describe_error(&error)
                )
            });
        let mut config = administration_config.clone();
        config.dbname(&name);
        OracleDatabase {
            name,
            config,
            administration_config,
        }
    }

    /// Connection settings for this database (e.g. for a sqllogictest runner that opens several).
    pub fn config(&self) -> &Config {
        &self.config
    }

    pub async fn client(&self) -> Client {
        connect(&self.config).await.unwrap_or_else(|error| {
            panic!(
                "cannot connect to oracle database {}: {}",
                self.name,
                describe_error(&error)
            )
        })
    }
}

impl Drop for OracleDatabase {
    fn drop(&mut self) {
        // Drop may run inside a runtime (cannot block on it) or during a panic: use a thread with
        // a runtime of its own, and ignore failures (the oracle of scripts/test.sh is thrown away
        // anyway).
        let administration_config = self.administration_config.clone();
        let statement = format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", self.name);
        let cleanup = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async move {
                if let Ok(administrator) = connect(&administration_config).await {
                    let _ = administrator.simple_query(&statement).await;
                }
            });
        });
        let _ = cleanup.join();
    }
}

fn database_name(label: &str) -> String {
    let counter = DATABASE_COUNTER.fetch_add(1, Ordering::Relaxed);
    let suffix = format!("_{}_{counter}", std::process::id());
    let prefix = "rs_";
    let label: String = label
        .chars()
        .map(|character| {
            if character.is_ascii_alphanumeric() {
                character.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .take(DATABASE_NAME_LENGTH_MAX - prefix.len() - suffix.len())
        .collect();
    format!("{prefix}{label}{suffix}")
}

/// tokio-postgres prints only "db error" for server errors; this adds the server's message,
/// detail, hint and SQLSTATE.
pub fn describe_error(error: &tokio_postgres::Error) -> String {
    match error.as_db_error() {
        Some(database_error) => {
            let mut text = format!(
                "{}: {} (SQLSTATE {})",
                database_error.severity(),
                database_error.message(),
                database_error.code().code()
            );
            if let Some(detail) = database_error.detail() {
                text.push_str(&format!("\nDETAIL: {detail}"));
            }
            if let Some(hint) = database_error.hint() {
                text.push_str(&format!("\nHINT: {hint}"));
            }
            text
        }
        None => {
            let mut text = error.to_string();
            let mut source = std::error::Error::source(error);
            while let Some(cause) = source {
                text.push_str(&format!(": {cause}"));
                source = cause.source();
            }
            text
        }
    }
}
