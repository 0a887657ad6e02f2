//! Goal: no SQL text, however mangled, crashes the server or drops the connection that sent it:
//! every statement either runs or fails with a coded error, the session goes on, and the server
//! never panics (the harness fails any test whose server log shows a panic).
//! Method: the statements of our sqllogictest files, mutated token by token (tokens dropped,
//! repeated, swapped, replaced by extreme literals, keywords and operators), run over one
//! connection with a short `statement_timeout` and small memory bounds. `ROCKSTREAM_FUZZ_SQL`
//! sets how many (default 5000), `ROCKSTREAM_TEST_SEED` the seed.
#![allow(clippy::unwrap_used)] // Tests may unwrap: a panic is the failure report.

use std::path::Path;

use crate::harness::compare::fetch_text_rows;
use crate::harness::server::{Storage, TestServer};
use crate::harness::{environment_count, test_seed};

/// Replacements a mutation may put in place of a token.
const TOKENS: &[&str] = &[
    "9223372036854775808",
    "-9223372036854775808",
    "2147483648",
    "-32769",
    "1e400",
    "1e-400",
    "0.0000000000000000000000000000000000001",
    "'NaN'",
    "'-Infinity'",
    "''",
    "'\\x00'",
    "E'\\\\'",
    "'é世界🙂'",
    "NULL",
    "DEFAULT",
    "*",
    "(",
    ")",
    ",",
    ";",
    "::",
    "::int2",
    "::numeric(1000,999)",
    "::interval",
    "::date",
    "::regclass",
    "::text[]",
    "/ 0",
    "% 0",
    "^ 1e6",
    "||",
    "<>",
    "IS NOT DISTINCT FROM",
    "BETWEEN",
    "ANY",
    "ALL",
    "EXISTS",
    "SELECT",
    "FROM",
    "WHERE",
    "GROUP BY",
    "ORDER BY",
    "HAVING",
    "LIMIT",
    "OFFSET",
    "UNION",
    "JOIN",
    "LATERAL",
    "ON",
    "USING",
    "AS",
    "CASE",
    "WHEN",
    "END",
    "OVER ()",
    "count(*)",
    "sum(",
    "avg(",
    "generate_series(1, 100000)",
    "repeat('x', 1000000)",
    "lpad('', 3)",
    "chr(0)",
    "now()",
    "pg_catalog.pg_class",
    "information_schema.columns",
    "RETURNING",
    "ON CONFLICT",
    "$1",
    "$65536",
    "\"",
    "'",
    "--",
    "/*",
];

/// The SQL of every statement and query in the sqllogictest files under `directory`.
fn corpus(directory: &Path) -> Vec<String> {
    let mut statements = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(directory)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "slt"))
        .collect();
    files.sort();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let mut lines = text.lines();
        while let Some(line) = lines.next() {
            if !(line.starts_with("statement") || line.starts_with("query")) {
                continue;
            }
            let mut sql = Vec::new();
            for line in lines.by_ref() {
                if line.trim().is_empty() || line.starts_with("----") {
                    break;
                }
                sql.push(line);
            }
            if !sql.is_empty() {
                statements.push(sql.join("\n"));
            }
        }
    }
    statements
}

/// A small deterministic generator (SplitMix64).
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, bound: usize) -> usize {
        (self.next() % bound.max(1) as u64) as usize
    }
}

/// `sql` split into words and single punctuation characters.
fn tokens(sql: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut word = String::new();
    for c in sql.chars() {
        if c.is_alphanumeric() || c == '_' || c == '.' || c == '\'' {
            word.push(c);
            continue;
        }
        if !word.is_empty() {
            tokens.push(std::mem::take(&mut word));
        }
        if !c.is_whitespace() {
            tokens.push(c.to_string());
        }
    }
    if !word.is_empty() {
        tokens.push(word);
    }
    tokens
}

/// One to three random edits of `sql`'s tokens.
fn mutate(sql: &str, random: &mut Random) -> String {
    let mut tokens = tokens(sql);
    for _ in 0..1 + random.below(3) {
        if tokens.is_empty() {
            tokens.push(TOKENS[random.below(TOKENS.len())].to_string());
            continue;
        }
        let at = random.below(tokens.len());
        match random.below(5) {
            0 => {
                tokens.remove(at);
            }
            1 => {
                let token = tokens[at].clone();
                tokens.insert(at, token);
            }
            2 => {
                let other = random.below(tokens.len());
                tokens.swap(at, other);
            }
            3 => tokens[at] = TOKENS[random.below(TOKENS.len())].to_string(),
            _ => tokens.insert(at, TOKENS[random.below(TOKENS.len())].to_string()),
        }
    }
    tokens.join(" ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mangled_sql_never_crashes_the_server_or_drops_the_session() {
    let directory = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/slt");
    let statements = corpus(&directory);
    assert!(
        statements.len() > 100,
        "found {} statements",
        statements.len()
    );
    let count = environment_count("ROCKSTREAM_FUZZ_SQL", 5000);
    let seed = test_seed();
    let server = TestServer::start_with(
        Storage::new(),
        &[
            "--statement-memory",
            "64MB",
            "--total-statement-memory",
            "128MB",
        ],
    )
    .await;
    let client = server.client().await;
    let mut random = Random(seed);
    let mut failed = 0;
    // Errors PostgreSQL would give a proper code: shown, to be worked off.
    let mut internal = Vec::new();
    for n in 0..count {
        let original = &statements[random.below(statements.len())];
        let sql = mutate(original, &mut random);
        if client.is_closed() {
            panic!("the connection closed after the statement before #{n} (seed {seed})");
        }
        client
            .batch_execute("SET statement_timeout = '2s'")
            .await
            .unwrap_or_else(|error| panic!("session unusable before #{n} (seed {seed}): {error}"));
        match client.batch_execute(&sql).await {
            Ok(()) => {}
            Err(error) if error.as_db_error().is_some() => {
                let db = error.as_db_error().unwrap();
                assert!(
                    db.message().starts_with("RS-"),
                    "an error without a code for #{n} (seed {seed}): {sql}\n{db:?}"
                );
                failed += 1;
                if db.code().code() == "XX000" && internal.len() < 20 {
                    internal.push(format!("{sql}\n  -> {}", db.message()));
                }
            }
            Err(error) => panic!(
                "statement #{n} (seed {seed}) broke the connection: {error}\n{sql}\n{}",
                server.log_tail()
            ),
        }
        // Some mangled statements leave a transaction block open; a fresh one is wanted next.
        if let Err(error) = client.batch_execute("ROLLBACK").await {
            assert!(
                error.as_db_error().is_some(),
                "the connection broke after #{n} (seed {seed}): {error}\n{sql}"
            );
        }
    }
    eprintln!("{count} mangled statements (seed {seed}): {failed} failed with a coded error");
    for found in &internal {
        eprintln!("internal error: {found}");
    }
    let rows = fetch_text_rows(&client, "SELECT 1").await.unwrap();
    assert_eq!(
        format!("{rows:?}"),
        r#"[[Some("1")]]"#,
        "the session still answers"
    );
}
