//! Goal: RisingWave's Nexmark queries, as materialized views over its fixed dataset, give
//! RisingWave's expected rows — views created before the data (the incremental path) and after it
//! (the backfill path) (issue #15, proof 3). Method: per query and order, a script made of the
//! corpus's parts (`../shared/corpus/nexmark`: tables, the query's view, the inserts, the expected
//! results; `flush;` is RisingWave's wait for freshness, which RockStream needs none of) runs on a
//! fresh server. RisingWave prints a timestamp's fraction with trailing zeros (`00:00:20.210`),
//! PostgreSQL without (`00:00:20.21`): the expected rows are rewritten as PostgreSQL prints them.
//! RisingWave also prints an `avg` of integers as `6221.50` where PostgreSQL, and RockStream, print
//! `6221.5000000000000000` (q4, q6_group_top1, q17): decimals are compared by value
//! ([`decimals_by_value`]). The queries in [`PASSING`] must pass (every query of the corpus now);
//! the test prints how any other one fails.

use std::path::{Path, PathBuf};

use crate::harness::server::TestServer;
use crate::harness::slt::{decimals_by_value, run_slt_script_with, Dialect};

/// Queries whose views pass in both orders.
const PASSING: &[&str] = &[
    "q0",
    "q1",
    "q10",
    "q101",
    "q102",
    "q103",
    "q104",
    "q105",
    "q106",
    "q14",
    "q15",
    "q16",
    "q17",
    "q18",
    "q19",
    "q2",
    "q20",
    "q21",
    "q22",
    "q3",
    "q4",
    "q5",
    "q6_group_top1",
    "q7",
    "q8",
    "q9",
];

/// Lines of each failure printed.
const REPORT_LINES_MAX: usize = 8;

/// Which comes first: the view (its rows arrive as changes) or the data (the view's build reads
/// them).
#[derive(Clone, Copy, Debug)]
enum Order {
    ViewFirst,
    DataFirst,
}

fn nexmark_directory() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/corpus/nexmark")
        .canonicalize()
        .unwrap_or_else(|error| {
            panic!(
                "the Nexmark corpus is expected in shared/corpus/nexmark beside the repository \
                 ({}/../../../shared): {error}",
                env!("CARGO_MANIFEST_DIR")
            )
        })
}

fn part(name: &str) -> String {
    let path = nexmark_directory().join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("cannot read {}: {error}", path.display()));
    // RisingWave's barrier: every commit is visible to the next statement here.
    format!("{}\n\n", text.replace("flush;", "SELECT 1;"))
}

/// Every query of the corpus (`views/<query>.slt.part`), sorted.
fn queries() -> Vec<String> {
    let mut queries: Vec<String> = std::fs::read_dir(nexmark_directory().join("views"))
        .expect("the corpus has a views folder")
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            name.strip_suffix(".slt.part").map(str::to_string)
        })
        .collect();
    queries.sort();
    queries
}

fn script(query: &str, order: Order) -> String {
    let view = part(&format!("views/{query}.slt.part"));
    let data = ["insert_person", "insert_auction", "insert_bid"]
        .map(|name| part(&format!("{name}.slt.part")))
        .concat();
    let (first, second) = match order {
        Order::ViewFirst => (view, data),
        Order::DataFirst => (data, view),
    };
    [
        part("create_tables.slt.part"),
        first,
        second,
        as_postgres_prints(&part(&format!("expected/{query}.slt.part"))),
    ]
    .concat()
}

/// `text` with every timestamp's fraction of a second as PostgreSQL prints it: without trailing
/// zeros, and without the point when nothing is left.
fn as_postgres_prints(text: &str) -> String {
    let fraction = regex::Regex::new(r"(?m)(\d{2}:\d{2}:\d{2})\.(\d*[1-9])?0+([^0-9]|$)")
        .expect("a valid pattern");
    fraction
        .replace_all(text, |found: &regex::Captures| match found.get(2) {
            Some(digits) => format!("{}.{}{}", &found[1], digits.as_str(), &found[3]),
            None => format!("{}{}", &found[1], &found[3]),
        })
        .into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nexmark_views_give_risingwaves_results() {
    let queries = queries();
    for query in PASSING {
        assert!(
            queries.iter().any(|name| name == query),
            "PASSING names {query}, which is not in the corpus"
        );
    }
    let mut failures = Vec::new();
    for query in &queries {
        for order in [Order::ViewFirst, Order::DataFirst] {
            let server = TestServer::start().await;
            let name = format!("nexmark {query} ({order:?})");
            let outcome = run_slt_script_with(
                &server.config(),
                (&name, &script(query, order)),
                Dialect::RockStream,
                decimals_by_value,
            )
            .await;
            match (outcome, PASSING.contains(&query.as_str())) {
                (Ok(()), true) => {}
                (Ok(()), false) => println!("PASS {name}, not in PASSING yet"),
                (Err(report), passing) => {
                    let head: Vec<&str> = report.lines().take(REPORT_LINES_MAX).collect();
                    println!("FAIL {name}: {}", head.join("\n    "));
                    if passing {
                        failures.push(format!("{name}:\n{report}\n{}", server.log_tail()));
                    }
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} Nexmark views in PASSING fail:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}
