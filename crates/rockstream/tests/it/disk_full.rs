//! Goal: a full disk fails writes with 53100 (`RS-5005`) instead of hanging them; the server
//! stays up and answers; nothing acknowledged is lost; once space is back, writes succeed again
//! without a restart, and the tables and views are as they should be, also after a restart.
//! Method: the server's storage is a small tmpfs the test mounts (skipped, saying why, where it
//! cannot mount one: it needs root); the test fills it with INSERTs of 64 KiB rows until one
//! fails, then fills what is left with a file of its own, checks DML and DDL fail with 53100,
//! frees the space and checks everything acknowledged is there; another session reads every
//! shard while storage reopens, and sees rows or the disk-full error, never a closed shard. A
//! second test fills the disk with a view's build: its CREATE fails with 53100 at once (not once
//! space is back, holding every other DDL statement meanwhile), and the view does not exist,
//! then or after a restart.
#![allow(clippy::unwrap_used)] // Tests may unwrap: a panic is the failure report.
#![allow(clippy::disallowed_methods)] // The test harness sleeps on tokio directly.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_postgres::Client;

use crate::harness::compare::fetch_text_rows;
use crate::harness::server::{Storage, TestServer};
use crate::harness::sqlstate;

/// The tmpfs's size: room for the server's empty storage and some rows.
const FILESYSTEM_BYTES: usize = 64 << 20;
/// Held back at the start, freed to bring space back: more than the rows
/// take, so freeing it leaves room even if SlateDB's compactor writes
/// another copy of the data first (the tables it replaces stay until
/// garbage collection, minutes later). Depending on timing the disk fills
/// under a commit's WAL write or under SlateDB's own background flush (which
/// closes the shard without any commit failing); runs see both.
const BALLAST_BYTES: usize = 36 << 20;
const PAD_BYTES: usize = 64 << 10;
/// Longest a write may take to fail: it must not hang.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// A tmpfs mounted over a directory, unmounted on drop.
struct Tmpfs {
    path: PathBuf,
}

impl Tmpfs {
    /// Mounts one at `path`; `Err` says why it could not.
    fn mount(path: &Path, bytes: usize) -> Result<Tmpfs, String> {
        let output = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(path)
            .output()
            .map_err(|error| format!("cannot run mount: {error}"))?;
        if !output.status.success() {
            return Err(format!(
                "mount -t tmpfs failed: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        Ok(Tmpfs {
            path: path.to_path_buf(),
        })
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

/// A storage on a tmpfs of [`FILESYSTEM_BYTES`] holding a ballast file of
/// [`BALLAST_BYTES`] (its path returned, to free space by removing it);
/// `None`, saying why, where no tmpfs can be mounted.
fn small_storage() -> Option<(Arc<Storage>, Tmpfs, PathBuf)> {
    let storage = Storage::new();
    let tmpfs = match Tmpfs::mount(&storage.storage_path(), FILESYSTEM_BYTES) {
        Ok(tmpfs) => tmpfs,
        Err(reason) => {
            eprintln!("skipped: the test needs a tmpfs it can mount ({reason})");
            return None;
        }
    };
    let ballast = storage.storage_path().join("ballast");
    fill(&ballast, BALLAST_BYTES);
    Some((storage, tmpfs, ballast))
}

/// Writes `path` until the file system is full (or `bytes` are written).
fn fill(path: &Path, bytes: usize) {
    let mut file = std::fs::File::create(path).unwrap();
    let block = vec![0x55u8; 64 << 10];
    let mut written = 0;
    while written < bytes {
        match file.write(&block) {
            Ok(0) => break,
            Ok(n) => written += n,
            Err(error) => {
                assert_eq!(error.raw_os_error(), Some(28), "{error}");
                break;
            }
        }
    }
    // A tmpfs needs no sync; the file's blocks are taken once written.
}

async fn insert(client: &Client, id: i64) -> Result<(), tokio_postgres::Error> {
    let statement = format!("INSERT INTO t VALUES ({id}, repeat('x', {PAD_BYTES}))");
    tokio::time::timeout(WRITE_TIMEOUT, client.batch_execute(&statement))
        .await
        .unwrap_or_else(|_| panic!("INSERT {id} neither committed nor failed in {WRITE_TIMEOUT:?}"))
}

fn assert_disk_full(error: &tokio_postgres::Error, what: &str) {
    assert_eq!(sqlstate(error), "53100", "{what}: {}", message(error));
    let message = error.as_db_error().unwrap().message();
    assert!(message.starts_with("RS-5005"), "{what}: {message}");
    assert!(message.contains("the disk is full"), "{what}: {message}");
}

/// Bytes under each directory two levels below `root` (`shards/0/wal`,
/// `control/compacted`, …) and the file system's free bytes: what filled
/// the disk, for failure messages.
fn usage(root: &Path) -> String {
    fn bytes(path: &Path) -> u64 {
        match std::fs::symlink_metadata(path) {
            Ok(meta) if meta.is_dir() => std::fs::read_dir(path)
                .map(|entries| entries.flatten().map(|entry| bytes(&entry.path())).sum())
                .unwrap_or(0),
            Ok(meta) => meta.len(),
            Err(_) => 0,
        }
    }
    fn walk(path: &Path, depth: usize, lines: &mut Vec<String>, root: &Path) {
        let Ok(entries) = std::fs::read_dir(path) else {
            return;
        };
        let mut entries: Vec<PathBuf> = entries.flatten().map(|entry| entry.path()).collect();
        entries.sort();
        for entry in entries {
            let name = entry
                .strip_prefix(root)
                .unwrap_or(&entry)
                .display()
                .to_string();
            if depth > 0 && entry.is_dir() {
                walk(&entry, depth - 1, lines, root);
            } else {
                lines.push(format!("{:>10} {name}", bytes(&entry)));
            }
        }
    }
    let mut lines = Vec::new();
    walk(root, 2, &mut lines, root);
    let free = Command::new("df")
        .args(["--output=avail", "-B1"])
        .arg(root)
        .output()
        .map(|output| String::from_utf8_lossy(&output.stdout).replace('\n', " "))
        .unwrap_or_default();
    format!("{}\n free: {}", lines.join("\n"), free.trim())
}

/// The server's message of a failed statement, else the client's error.
fn message(error: &tokio_postgres::Error) -> String {
    error
        .as_db_error()
        .map_or_else(|| error.to_string(), |db| db.message().to_string())
}

/// Every acknowledged row is there, and the view says what its query says.
async fn check_contents(client: &Client, acknowledged: &[i64]) {
    let rows = fetch_text_rows(client, "SELECT id FROM t ORDER BY id")
        .await
        .unwrap();
    let stored: Vec<i64> = rows
        .iter()
        .map(|row| row[0].as_deref().unwrap().parse().unwrap())
        .collect();
    for id in acknowledged {
        assert!(stored.contains(id), "acknowledged row {id} is missing");
    }
    let view = fetch_text_rows(client, "SELECT n, bytes FROM totals")
        .await
        .unwrap();
    let query = fetch_text_rows(client, "SELECT count(*), sum(length(pad)) FROM t")
        .await
        .unwrap();
    assert_eq!(view, query, "the view differs from its query");
    assert_eq!(
        view[0][0].as_deref(),
        Some(stored.len().to_string().as_str())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_fails_writes_and_they_succeed_once_space_is_back() {
    let Some((storage, _tmpfs, ballast)) = small_storage() else {
        return;
    };
    let mut server = TestServer::start_on(storage.clone()).await;
    let client = server.client().await;
    client
        .batch_execute(
            "CREATE TABLE t (id bigint PRIMARY KEY, pad text);
             CREATE MATERIALIZED VIEW totals AS SELECT count(*) AS n, sum(length(pad)) AS bytes FROM t;",
        )
        .await
        .unwrap();

    let mut acknowledged = Vec::new();
    let mut next = 1;
    let first_failure = loop {
        match insert(&client, next).await {
            Ok(()) => acknowledged.push(next),
            Err(error) => break error,
        }
        next += 1;
        assert!(
            next < (FILESYSTEM_BYTES / PAD_BYTES) as i64 * 4,
            "the disk never filled"
        );
    };
    if sqlstate(&first_failure) == "08007" {
        let message = first_failure.as_db_error().unwrap().message();
        assert!(message.contains("the disk is full"), "{message}");
        if message.starts_with("RS-3007") {
            // Durable on the coordinator but not on every shard (a shard
            // found the disk full): it must appear once storage reopens.
            acknowledged.push(next);
        } else {
            // Storage failed after the batch reached SlateDB: committed or
            // not, found out when the storage reopens.
            assert!(message.starts_with("RS-3008"), "{message}");
        }
    } else {
        assert_disk_full(&first_failure, "the INSERT that found the disk full");
    }
    next += 1;
    assert!(!acknowledged.is_empty());

    // Whatever room is left goes too: every write now fails. SlateDB may
    // free room meanwhile (deleting obsolete files), and a write that finds
    // room may succeed: fill again and retry, a few times.
    let filler = storage.storage_path().join("filler");
    let mut refill = 0;
    let error = loop {
        fill(&filler.with_extension(refill.to_string()), FILESYSTEM_BYTES);
        match insert(&client, next).await {
            Err(error) => break error,
            Ok(()) => acknowledged.push(next),
        }
        next += 1;
        refill += 1;
        assert!(refill < 5, "INSERTs kept finding room on a full disk");
    };
    assert_disk_full(&error, "an INSERT on a full disk");
    let error = loop {
        fill(&filler.with_extension(refill.to_string()), FILESYSTEM_BYTES);
        let create = format!("CREATE TABLE u{refill} (a int)");
        if let Err(error) = client.batch_execute(&create).await {
            break error;
        }
        refill += 1;
        assert!(refill < 10, "CREATE TABLE kept finding room on a full disk");
    };
    assert_disk_full(&error, "a CREATE TABLE on a full disk");
    // The server is up and answers, on this session and on new ones.
    let fresh = server.client().await;
    for session in [&client, &fresh] {
        let rows = fetch_text_rows(session, "SELECT 1").await.unwrap();
        assert_eq!(rows[0][0].as_deref(), Some("1"));
    }

    // Space comes back: writes succeed again, without a restart. Meanwhile
    // another session reads every shard without pause: while storage
    // reopens, a read succeeds or fails with the disk-full error, never
    // with a closed shard's (a shard the failure left open stays open; at
    // one shard the only shard is the failed one).
    let reader = Reader::start(server.client().await, acknowledged.clone());
    for number in 0..=refill {
        std::fs::remove_file(filler.with_extension(number.to_string())).unwrap();
    }
    std::fs::remove_file(&ballast).unwrap();
    let freed = usage(&storage.storage_path());
    let started = Instant::now();
    loop {
        match insert(&client, next).await {
            Ok(()) => break,
            Err(error) => {
                assert_disk_full(&error, "an INSERT while storage reopens");
                assert!(
                    started.elapsed() < Duration::from_secs(20),
                    "writes still fail after space came back: {}\n\
                     storage when space came back:\n{freed}\nstorage now:\n{}",
                    message(&error),
                    usage(&storage.storage_path())
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    acknowledged.push(next);
    let (reads, failures) = reader.stop().await;
    assert!(reads > 0, "no read succeeded while storage reopened");
    for error in &failures {
        assert_disk_full(error, "a read while storage reopens");
    }
    client
        .batch_execute("CREATE TABLE u (a int)")
        .await
        .unwrap();
    client
        .batch_execute("INSERT INTO u VALUES (1)")
        .await
        .unwrap();
    check_contents(&client, &acknowledged).await;

    server.restart().await;
    let client = server.client().await;
    check_contents(&client, &acknowledged).await;
    let rows = fetch_text_rows(&client, "SELECT a FROM u").await.unwrap();
    assert_eq!(rows.len(), 1);
    server.stop();
}

/// A session reading rows on every shard, and the view, one statement
/// after another until stopped.
struct Reader {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<(usize, Vec<tokio_postgres::Error>)>,
}

impl Reader {
    fn start(client: Client, ids: Vec<i64>) -> Reader {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let task = tokio::spawn(async move {
            let mut reads = 0;
            let mut failures = Vec::new();
            // One more round once stopped: storage has reopened by then.
            let mut last_round = false;
            for id in ids.iter().cycle() {
                if last_round {
                    break;
                }
                last_round = stopped.load(Ordering::Relaxed);
                for query in [
                    format!("SELECT id FROM t WHERE id = {id}"),
                    "SELECT n FROM totals".to_string(),
                ] {
                    match client.simple_query(&query).await {
                        Ok(_) => reads += 1,
                        Err(error) => failures.push(error),
                    }
                }
            }
            (reads, failures)
        });
        Reader { stop, task }
    }

    /// How many reads succeeded, and the errors of those that failed.
    async fn stop(self) -> (usize, Vec<tokio_postgres::Error>) {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap()
    }
}

/// The view whose CREATE failed does not exist.
async fn assert_no_copies(client: &Client) {
    let error = client
        .batch_execute("SELECT * FROM copies")
        .await
        .expect_err("the failed CREATE left its view");
    assert_eq!(sqlstate(&error), "42P01", "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_view_build_that_fills_the_disk_fails_its_create_and_leaves_nothing() {
    let Some((storage, _tmpfs, ballast)) = small_storage() else {
        return;
    };
    let mut server = TestServer::start_on(storage.clone()).await;
    let client = server.client().await;
    client
        .batch_execute("CREATE TABLE t (id bigint PRIMARY KEY, pad text)")
        .await
        .unwrap();
    // 6 MiB of rows: the view below keeps four copies of each, 24 MiB,
    // more than the disk has left.
    const ROWS: i64 = 96;
    for id in 1..=ROWS {
        insert(&client, id).await.unwrap();
    }

    let create = "CREATE MATERIALIZED VIEW copies AS SELECT id, repeat(pad, 4) AS pads FROM t";
    let error = tokio::time::timeout(WRITE_TIMEOUT, client.batch_execute(create))
        .await
        .unwrap_or_else(|_| panic!("the CREATE neither finished nor failed in {WRITE_TIMEOUT:?}"))
        .expect_err("a view four times the free space was built");
    assert_disk_full(&error, "the CREATE whose build filled the disk");
    assert_no_copies(&client).await;
    let rows = fetch_text_rows(&client, "SELECT 1").await.unwrap();
    assert_eq!(rows[0][0].as_deref(), Some("1"));

    // Space comes back: DDL works again, and the failed view is not there.
    std::fs::remove_file(&ballast).unwrap();
    let started = Instant::now();
    loop {
        let created = client
            .batch_execute("CREATE MATERIALIZED VIEW n AS SELECT count(*) AS n FROM t")
            .await;
        match created {
            Ok(()) => break,
            Err(error) => {
                assert_disk_full(&error, "a CREATE while storage reopens");
                assert!(
                    started.elapsed() < Duration::from_secs(20),
                    "DDL still fails after space came back: {}\nstorage now:\n{}",
                    message(&error),
                    usage(&storage.storage_path())
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    assert_no_copies(&client).await;
    let rows = fetch_text_rows(&client, "SELECT n FROM n").await.unwrap();
    assert_eq!(rows[0][0].as_deref(), Some(ROWS.to_string().as_str()));

    server.restart().await;
    let client = server.client().await;
    assert_no_copies(&client).await;
    let rows = fetch_text_rows(&client, "SELECT n FROM n").await.unwrap();
    assert_eq!(rows[0][0].as_deref(), Some(ROWS.to_string().as_str()));
    let rows = fetch_text_rows(
        &client,
        "SELECT count(*) FROM pg_class WHERE relname = 'copies'",
    )
    .await
    .unwrap();
    assert_eq!(rows[0][0].as_deref(), Some("0"));
    server.stop();
}
