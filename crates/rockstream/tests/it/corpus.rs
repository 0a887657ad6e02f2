//! Goal: RockStream passes the RisingWave streaming corpus (`shared/corpus/risingwave-streaming/`,
//! materialized views maintained under INSERT/UPDATE/DELETE) file by file as features land.
//! Method: each file in [`PASSING`] runs on a fresh server and must pass entirely; a file joins the
//! list in the commit that makes it pass, and never leaves it. The runner itself is validated by
//! running EVERY corpus file on the PostgreSQL oracle with plain views, the way the corpus's
//! expectations were checked (see `shared/corpus/README.md`).

use std::path::{Path, PathBuf};

use crate::harness::oracle::OracleDatabase;
use crate::harness::server::TestServer;
use crate::harness::slt::{run_slt_file, Dialect};

/// Corpus files (relative to the corpus folder) RockStream passes today. Grow it with the output
/// of `corpus_report_every_file_on_rockstream`.
const PASSING: &[&str] = &[
    "aggregate/array_agg.slt",
    "aggregate/bit_agg.slt",
    "aggregate/boolean.slt",
    "aggregate/count_star.slt",
    "aggregate/distinct_agg.slt",
    "aggregate/ordered_set_agg.slt",
    "aggregate/selective_agg.slt",
    "aggregate/string_agg.slt",
    "bug_fixes/issue_12299.slt",
    "bug_fixes/issue_13094.slt",
    "bug_fixes/issue_15302.slt",
    "bug_fixes/issue_5285.slt",
    "bug_fixes/issue_7698.slt",
    "bug_fixes/issue_8570.slt",
    "bug_fixes/mv_on_singleton_mv_4153.slt",
    "bug_fixes/stack_overflow_17342.slt",
    "delta_join/delta_join_snapshot.slt",
    "delta_join/delta_join_snapshot_no_index.slt",
    "delta_join/delta_join_upstream.slt",
    "delta_join/delta_join_upstream_no_index.slt",
    "delta_join/delta_join_upstream_with_index_different_types.slt",
    "demo/ecommerce.slt",
    "dynamic_filter.slt",
    "except.slt",
    "extreme_null.slt",
    "grouping_sets/cube.slt",
    "grouping_sets/grouping_sets.slt",
    "grouping_sets/rollup.slt",
    "intersect.slt",
    "join/join-3way.slt.part",
    "now.slt",
    "null_safe_equal_join.slt",
    "order_by.slt",
    "outer_join.slt",
    "temporal_filter.slt",
    "unaligned-join.slt",
];

/// Lines of each failure shown by the report.
const REPORT_LINES_MAX: usize = 12;

/// Files run at once on the oracle (each in its own database).
const ORACLE_FILES_IN_FLIGHT_MAX: usize = 4;

fn corpus_directory() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/corpus/risingwave-streaming")
        .canonicalize()
        .unwrap_or_else(|error| {
            panic!(
                "the corpus is expected in shared/corpus/risingwave-streaming beside the \
                 repository ({}/../../../shared): {error}",
                env!("CARGO_MANIFEST_DIR")
            )
        })
}

/// Every `.slt` / `.slt.part` file under the corpus folder, as paths relative to it, sorted.
fn corpus_files() -> Vec<String> {
    fn walk(directory: &Path, root: &Path, files: &mut Vec<String>) {
        let entries = std::fs::read_dir(directory)
            .unwrap_or_else(|error| panic!("cannot list {}: {error}", directory.display()));
        for entry in entries {
            let path = entry.expect("a readable folder entry").path();
            if path.is_dir() {
                walk(&path, root, files);
            } else if path.to_string_lossy().ends_with(".slt")
                || path.to_string_lossy().ends_with(".slt.part")
            {
                let relative = path.strip_prefix(root).expect("walked from the root");
                files.push(relative.to_string_lossy().into_owned());
            }
        }
    }
    let root = corpus_directory();
    let mut files = Vec::new();
    walk(&root, &root, &mut files);
    files.sort();
    assert!(!files.is_empty(), "no .slt file in {}", root.display());
    files
}

#[tokio::test]
async fn corpus_allow_listed_files_pass_on_rockstream() {
    let files = corpus_files();
    for name in PASSING {
        assert!(
            files.iter().any(|file| file == name),
            "PASSING names {name}, which is not in the corpus"
        );
    }
    let mut failures = Vec::new();
    for name in PASSING {
        let server = TestServer::start().await;
        if let Err(report) = run_slt_file(
            &server.config(),
            &corpus_directory().join(name),
            Dialect::RockStream,
        )
        .await
        {
            failures.push(format!("{name}:\n{report}\n{}", server.log_tail()));
        }
    }
    assert!(
        failures.is_empty(),
        "{} allow-listed corpus files fail on RockStream:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// Not a gate: lists which corpus files pass on RockStream now, to grow [`PASSING`].
/// `cargo test -p rockstream --test it -- --ignored corpus_report --nocapture`
#[tokio::test]
#[ignore = "a report for growing PASSING, not a gate"]
async fn corpus_report_every_file_on_rockstream() {
    let mut passing = Vec::new();
    for name in corpus_files() {
        let server = TestServer::start().await;
        let outcome = run_slt_file(
            &server.config(),
            &corpus_directory().join(&name),
            Dialect::RockStream,
        )
        .await;
        match outcome {
            Ok(()) => {
                println!("PASS {name}");
                passing.push(name);
            }
            Err(report) => {
                let head: Vec<&str> = report.lines().take(REPORT_LINES_MAX).collect();
                println!("FAIL {name}: {}", head.join("\n    "));
            }
        }
    }
    println!("\npassing files ({}):", passing.len());
    for name in passing {
        println!("    \"{name}\",");
    }
}

/// The runner, the rewrite to plain views and the corpus agree on PostgreSQL itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oracle_passes_every_corpus_file() {
    use futures::StreamExt;

    let directory = corpus_directory();
    let outcomes: Vec<(String, Result<(), String>)> = futures::stream::iter(corpus_files())
        .map(|name| {
            let path = directory.join(&name);
            async move {
                let database = OracleDatabase::create(&format!("corpus_{name}")).await;
                let outcome = run_slt_file(database.config(), &path, Dialect::PostgresOracle).await;
                (name, outcome)
            }
        })
        .buffer_unordered(ORACLE_FILES_IN_FLIGHT_MAX)
        .collect()
        .await;
    let failures: Vec<String> = outcomes
        .into_iter()
        .filter_map(|(name, outcome)| outcome.err().map(|report| format!("{name}:\n{report}")))
        .collect();
    assert!(
        failures.is_empty(),
        "{} corpus files fail on the PostgreSQL oracle:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}
