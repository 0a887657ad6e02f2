//! The `rockstream` binary.
//!
//! `rockstream start [--storage PATH_OR_URL] [--listen HOST:PORT]` runs every
//! role in one process (the embedded profile): storage on the local disk,
//! the catalog, the engine and the PostgreSQL-protocol gateway.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use rockstream_common::Runtime;
use rockstream_control::{Database, OpenOptions, Role, RoleChange};
use rockstream_gateway::{CatalogPasswords, Gateway, MemoryLimits};
use rockstream_pgwire::{Passwords, Security};

/// mimalloc instead of the system allocator: the engine allocates many small
/// rows and keys per epoch, and glibc's per-thread arenas both cost time
/// and keep freed memory resident (peak RSS of a large `COPY`).
///
/// Built without transparent huge pages (the `no_thp` feature): a fault on
/// a huge page zeroes 2 MiB, and a bulk load that keeps allocating fresh
/// buffers spent a sixth of its CPU time in the kernel zeroing pages.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// How long (ms) freed memory stays with the allocator before it goes back
/// to the OS. mimalloc's default is one second; a bulk load frees and
/// reallocates large buffers (SlateDB's write batches and memtables) every
/// second or two, and memory returned in between costs a page fault and a
/// zeroed page again on reuse. Longer delays saved a little more CPU but
/// raise peak RSS: a 5M-group load peaked near 2 GiB with 30 s, against
/// about 1.7 GiB with 1 s or 5 s.
const ALLOCATOR_PURGE_DELAY_MS: std::ffi::c_long = 5_000;

/// `mi_option_purge_delay` in the `mi_option_t` enum of mimalloc v3's
/// `mimalloc.h`, as bundled by libmimalloc-sys 0.1.49 (pinned exactly in
/// the workspace manifest), whose Rust bindings do not name it. A test
/// checks the index against the environment variable mimalloc reads.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Sets the purge delay unless the environment already chose one (mimalloc
/// reads `MIMALLOC_PURGE_DELAY` itself at startup).
#[allow(unsafe_code)]
fn tune_allocator() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
        return;
    }
    // SAFETY: `mi_option_set` stores a value in mimalloc's option table,
    // which mimalloc reads atomically; it has no other precondition, and
    // it runs before any other thread exists.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, ALLOCATOR_PURGE_DELAY_MS) }
}

#[derive(Parser)]
#[command(
    name = "rockstream",
    version,
    about = "Incrementally maintained SQL views over SlateDB, served over the PostgreSQL protocol"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs the server (all roles in one process).
    Start {
        /// Where state lives: a directory path or a file:// URL.
        #[arg(long, default_value = "./rockstream-data")]
        storage: String,
        /// Address the PostgreSQL-protocol listener binds.
        #[arg(long, default_value = "127.0.0.1:5432")]
        listen: String,
        /// Shards a new storage is split into (default: the number of CPU
        /// cores). An existing storage keeps the count it was created with.
        #[arg(long)]
        shards: Option<u16>,
        /// Memory for each shard's arrangement cache, the hot part of the
        /// views' operator state: a size such as `64MB`, `512kB` or `1GB`
        /// (`0` turns it off). State beyond it is read from storage.
        #[arg(long, default_value = ARRANGEMENT_CACHE_DEFAULT, value_parser = parse_size)]
        arrangement_cache: usize,
        /// Working memory of one statement (its sorts, joins, aggregates
        /// and collected rows): a size such as `1GB`. A sort beyond it
        /// spills to temporary files; anything else fails with 53200.
        #[arg(long, default_value = STATEMENT_MEMORY_DEFAULT, value_parser = parse_size)]
        statement_memory: usize,
        /// Memory for one transaction's changes, from the statements that
        /// make them until their commit is durable (counted at about three
        /// times the rows' size in memory). A transaction beyond it fails
        /// with 54000: load more rows than that in several transactions.
        #[arg(long, default_value = TRANSACTION_MEMORY_DEFAULT, value_parser = parse_size)]
        transaction_memory: usize,
        /// Memory of all running statements and open transactions' changes
        /// together; beyond it, the statement that asks for more fails with
        /// 53200.
        #[arg(long, default_value = TOTAL_STATEMENT_MEMORY_DEFAULT, value_parser = parse_size)]
        total_statement_memory: usize,
        /// Who may connect: `password` (SCRAM-SHA-256, for roles made with
        /// CREATE ROLE name LOGIN PASSWORD '...'; the first start creates
        /// role `rockstream` with the password in ROCKSTREAM_PASSWORD), or
        /// `trust` (anyone, as any role). Unset, a loopback address trusts
        /// and any other address is refused.
        #[arg(long, value_enum)]
        auth: Option<AuthMode>,
        /// TLS certificate chain (PEM), with --tls-key: clients may then
        /// connect over TLS (sslmode=require).
        #[arg(long, requires = "tls_key")]
        tls_cert: Option<PathBuf>,
        /// The certificate's private key (PEM).
        #[arg(long, requires = "tls_cert")]
        tls_key: Option<PathBuf>,
    },
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum AuthMode {
    Trust,
    Password,
}

/// The role a first start with `--auth password` creates.
const BOOTSTRAP_ROLE: &str = "rockstream";
/// Where that role's password comes from.
const PASSWORD_VARIABLE: &str = "ROCKSTREAM_PASSWORD";

/// How the server admits connections.
struct Admission {
    auth: Option<AuthMode>,
    tls: Option<(PathBuf, PathBuf)>,
}

/// Stack of each runtime thread. Planning a statement recurses over its
/// syntax tree (in sqlparser, DataFusion and our own rewrites), and tokio's
/// default of 2 MiB overflowed, aborting the server, on a `WHERE` of a few
/// thousand `OR`s. Only the pages a thread touches take memory.
/// `rockstream_gateway` refuses statements nested deeper than this holds.
const WORKER_STACK_BYTES: usize = 64 << 20;

/// Default of `--arrangement-cache`, per shard.
const ARRANGEMENT_CACHE_DEFAULT: &str = "64MB";
/// Defaults of `--statement-memory`, `--transaction-memory` and
/// `--total-statement-memory` (`rockstream_gateway::STATEMENT_MEMORY_DEFAULT`,
/// `TRANSACTION_MEMORY_DEFAULT` and `TOTAL_STATEMENT_MEMORY_DEFAULT`; a test
/// checks they agree).
const STATEMENT_MEMORY_DEFAULT: &str = "1GB";
const TRANSACTION_MEMORY_DEFAULT: &str = "2GB";
const TOTAL_STATEMENT_MEMORY_DEFAULT: &str = "4GB";

/// A memory size as PostgreSQL writes one (`512kB`, `64MB`, `1GB`; also
/// `KiB`/`MiB`/`GiB`, and plain bytes), in bytes.
fn parse_size(text: &str) -> Result<usize, String> {
    let text = text.trim();
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits);
    let number: usize = number
        .parse()
        .map_err(|_| format!("\"{text}\" is not a size such as 64MB"))?;
    let unit_bytes: usize = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" | "kib" => 1 << 10,
        "mb" | "mib" => 1 << 20,
        "gb" | "gib" => 1 << 30,
        other => return Err(format!("unknown size unit \"{other}\": use kB, MB or GB")),
    };
    number
        .checked_mul(unit_bytes)
        .ok_or_else(|| format!("\"{text}\" is too large"))
}

fn main() -> anyhow::Result<()> {
    tune_allocator();
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,slatedb=warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(WORKER_STACK_BYTES)
        .build()
        .context("starting the async runtime")?;
    match cli.command {
        Command::Start {
            storage,
            listen,
            shards,
            arrangement_cache,
            statement_memory,
            transaction_memory,
            total_statement_memory,
            auth,
            tls_cert,
            tls_key,
        } => {
            let admission = Admission {
                auth,
                tls: tls_cert.zip(tls_key),
            };
            let options = OpenOptions {
                shards: shards.unwrap_or_else(default_shards),
                arrangement_cache_bytes: arrangement_cache,
            };
            let memory = MemoryLimits {
                statement_bytes: statement_memory.min(total_statement_memory),
                transaction_bytes: transaction_memory.min(total_statement_memory),
                total_bytes: total_statement_memory,
            };
            runtime.block_on(start(storage, listen, options, memory, admission))
        }
    }
}

/// With `--auth password`, role [`BOOTSTRAP_ROLE`] gets the password in
/// [`PASSWORD_VARIABLE`] if it has none yet (the first start creates it);
/// a password it has is changed with `ALTER ROLE`, never by a restart.
/// Some login role must have a password, or nobody could connect.
async fn bootstrap_role(database: &Database) -> anyhow::Result<()> {
    let password = std::env::var(PASSWORD_VARIABLE).ok();
    if password.as_deref() == Some("") {
        anyhow::bail!("{PASSWORD_VARIABLE} is empty: an empty password would let anyone in");
    }
    let existing = database.role(BOOTSTRAP_ROLE);
    let has_password = existing
        .as_ref()
        .is_some_and(|role| role.password.is_some());
    if has_password && password.is_some() {
        tracing::info!(
            role = BOOTSTRAP_ROLE,
            "{PASSWORD_VARIABLE} is ignored: the role has a password (change it with ALTER ROLE)"
        );
    }
    if let Some(password) = password.filter(|_| !has_password) {
        let verifier = rockstream_pgwire::scram_verifier(&password);
        let result = match existing {
            Some(_) => {
                let change = RoleChange {
                    login: None,
                    password: Some(Some(verifier)),
                };
                database.alter_role(BOOTSTRAP_ROLE, change).await
            }
            None => {
                let role = Role {
                    name: BOOTSTRAP_ROLE.to_string(),
                    login: true,
                    password: Some(verifier),
                };
                database.create_role(role).await
            }
        };
        return result.map_err(|error| {
            anyhow::anyhow!("setting the password of role {BOOTSTRAP_ROLE}: {error}")
        });
    }
    if !database
        .roles()
        .iter()
        .any(|role| role.login && role.password.is_some())
    {
        anyhow::bail!(
            "--auth password, but no role has a password yet: set {PASSWORD_VARIABLE} to give role \
             {BOOTSTRAP_ROLE} one"
        );
    }
    Ok(())
}

/// One shard per CPU core, within what a storage allows.
fn default_shards() -> u16 {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    u16::try_from(cores)
        .unwrap_or(u16::MAX)
        .min(rockstream_types::partition::SHARDS_MAX)
}

async fn start(
    storage: String,
    listen: String,
    options: OpenOptions,
    memory: MemoryLimits,
    admission: Admission,
) -> anyhow::Result<()> {
    let runtime = Runtime::system();
    let tls = match &admission.tls {
        Some((certificate, key)) => Some(
            rockstream_pgwire::tls_acceptor(certificate, key)
                .map_err(|error| anyhow::anyhow!("TLS: {error}"))?,
        ),
        None => None,
    };
    let database = match Database::open_with(&storage, runtime.clone(), options).await {
        Ok(database) => database,
        Err(error) => {
            eprintln!("error: {error}\nhint: {}", error.next_steps());
            std::process::exit(1);
        }
    };
    let listener = tokio::net::TcpListener::bind(&listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    let loopback = listener.local_addr()?.ip().is_loopback();
    if admission.auth.is_none() && !loopback {
        anyhow::bail!(
            "refusing to listen on {listen} without authentication: anyone who can reach it could \
             read and change every table. Pass --auth password (with {PASSWORD_VARIABLE} set on the \
             first start), or --auth trust to allow that on purpose"
        );
    }
    let passwords = admission.auth == Some(AuthMode::Password);
    if passwords {
        bootstrap_role(&database).await?;
    }
    let shards = database.engine().shard_count();
    tracing::info!(%storage, %listen, shards, auth = if passwords { "password" } else { "trust" }, tls = tls.is_some(), "RockStream is ready: psql \"host=HOST port=PORT user=rockstream dbname=default\"");
    let security = Security {
        passwords: passwords
            .then(|| Arc::new(CatalogPasswords::new(database.clone())) as Arc<dyn Passwords>),
        tls,
    };
    let gateway = Arc::new(Gateway::new(database, runtime, memory));
    rockstream_pgwire::serve(gateway, listener, security)
        .await
        .context("serving connections")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    //! Goal: the option index the server sets is mimalloc's purge delay.
    //! Method: a child run of this test binary, given `MIMALLOC_PURGE_DELAY`
    //! (which mimalloc reads by name at startup), reads the option back at
    //! that index.

    const CHILD: &str = "ROCKSTREAM_TEST_PURGE_DELAY_CHILD";

    #[allow(unsafe_code)]
    fn purge_delay() -> std::ffi::c_long {
        // SAFETY: `mi_option_get` only reads mimalloc's option table.
        unsafe { libmimalloc_sys::mi_option_get(super::MI_OPTION_PURGE_DELAY) }
    }

    #[test]
    fn purge_delay_option_index_names_the_purge_delay() {
        if std::env::var_os(CHILD).is_some() {
            assert_eq!(purge_delay(), 777, "option index is not the purge delay");
            return;
        }
        // The test binary is ours; its path comes from the test harness.
        #[allow(clippy::unwrap_used)]
        let binary = std::env::current_exe().unwrap();
        let status = std::process::Command::new(binary)
            .args([
                "tests::purge_delay_option_index_names_the_purge_delay",
                "--exact",
            ])
            .env(CHILD, "1")
            .env("MIMALLOC_PURGE_DELAY", "777")
            .status()
            .expect("the test binary runs");
        assert!(status.success(), "child run failed: {status}");
    }
}

#[cfg(test)]
mod size_tests {
    //! Goal: `--arrangement-cache` reads sizes as PostgreSQL writes them and
    //! refuses what is not one.
    use super::parse_size;

    #[test]
    fn sizes_parse_in_postgresql_units() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("512kB"), Ok(512 << 10));
        assert_eq!(parse_size("64MB"), Ok(64 << 20));
        assert_eq!(parse_size("2 GiB"), Ok(2 << 30));
        assert!(parse_size("MB").is_err());
        assert!(parse_size("12 parsecs").is_err());
        assert!(parse_size("99999999999999999999GB").is_err());
    }

    #[test]
    fn memory_defaults_agree_with_the_gateway() {
        assert_eq!(
            parse_size(super::STATEMENT_MEMORY_DEFAULT),
            Ok(rockstream_gateway::STATEMENT_MEMORY_DEFAULT)
        );
        assert_eq!(
            parse_size(super::TRANSACTION_MEMORY_DEFAULT),
            Ok(rockstream_gateway::TRANSACTION_MEMORY_DEFAULT)
        );
        assert_eq!(
            parse_size(super::TOTAL_STATEMENT_MEMORY_DEFAULT),
            Ok(rockstream_gateway::TOTAL_STATEMENT_MEMORY_DEFAULT)
        );
    }
}
