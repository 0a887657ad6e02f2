//! Goal: RockStream's views track PostgreSQL's under random DML, and the framework that says so is
//! sound. Method: the orders/customers scenario against a live server; and the framework run
//! PostgreSQL against PostgreSQL, where it must find no difference, and with one deliberately
//! wrong view, where it must find one.

use super::{
    orders_and_customers_scenario, orders_and_customers_tables, orders_and_customers_views, run,
    run_with_views, ColumnSpec, Scenario, Settings, Side, TableSpec, Values, ViewKind, ViewSpec,
};
use crate::harness::oracle::OracleDatabase;
use crate::harness::server::TestServer;

#[tokio::test]
async fn differential_orders_and_customers() {
    against_postgres(orders_and_customers_scenario(), "differential_orders").await;
}

/// Runs `scenario` on a fresh RockStream server (materialized views) and on
/// PostgreSQL database `oracle_name` (plain views); panics with the report
/// and the server's log on the first difference.
async fn against_postgres(scenario: Scenario, oracle_name: &str) {
    let settings = Settings::from_environment();
    let server = TestServer::start().await;
    let ours = server.client().await;
    let oracle_database = OracleDatabase::create(oracle_name).await;
    let oracle = oracle_database.client().await;
    let outcome = run(
        &scenario,
        &Side {
            label: "rockstream",
            client: &ours,
            view_kind: ViewKind::Materialized,
        },
        &Side {
            label: "postgres",
            client: &oracle,
            view_kind: ViewKind::Plain,
        },
        &settings,
    )
    .await;
    if let Err(report) = outcome {
        let stacks = match report.contains(super::STUCK) && report.contains("on rockstream:") {
            true => server.thread_stacks().unwrap_or_default(),
            false => String::new(),
        };
        panic!("{report}\n{}\n{stacks}", server.log_tail());
    }
}

/// The scenario of the RockStream test, plus a keyless table (exact duplicate rows) and a DISTINCT.
fn self_check_scenario() -> Scenario {
    const KINDS: &[&str] = &["click", "view", "buy"];
    let mut tables = orders_and_customers_tables();
    tables.push(TableSpec {
        name: "events",
        columns: vec![
            ColumnSpec::new("kind", "TEXT", Values::Text(KINDS)),
            ColumnSpec::new("weight", "INT", Values::Integer { min: -2, max: 3 }),
            ColumnSpec::new("flagged", "BOOLEAN", Values::Boolean),
        ],
        primary_key: None,
    });
    let mut views = orders_and_customers_views();
    views.push(ViewSpec::new(
        "events_by_kind",
        "SELECT kind, COUNT(*) AS events, SUM(weight) AS weight, BOOL_OR(flagged) AS any_flagged \
         FROM events GROUP BY kind",
    ));
    views.push(ViewSpec::new(
        "distinct_events",
        "SELECT DISTINCT kind, weight FROM events",
    ));
    Scenario {
        name: "self_check",
        tables,
        setup: Vec::new(),
        views,
    }
}

#[tokio::test]
async fn oracle_differential_framework_agrees_with_itself() {
    let settings = Settings::from_environment();
    let left_database = OracleDatabase::create("differential_self_left").await;
    let right_database = OracleDatabase::create("differential_self_right").await;
    let left = left_database.client().await;
    let right = right_database.client().await;
    let outcome = run(
        &self_check_scenario(),
        &Side {
            label: "postgres (as system under test)",
            client: &left,
            view_kind: ViewKind::Plain,
        },
        &Side {
            label: "postgres (as oracle)",
            client: &right,
            view_kind: ViewKind::Plain,
        },
        &settings,
    )
    .await;
    if let Err(report) = outcome {
        panic!("the framework reports a difference between two PostgreSQL databases:\n{report}");
    }
}

#[tokio::test]
async fn oracle_differential_framework_detects_a_wrong_view() {
    let settings = Settings {
        seed: 1,
        transactions: 200,
        ..Settings::from_environment()
    };
    let scenario = orders_and_customers_scenario();
    let wrong_views: Vec<ViewSpec> = scenario
        .views
        .iter()
        .map(|view| match view.name {
            "big_orders" => ViewSpec::new(
                view.name,
                &view.query.replace("o.amount > 100", "o.amount > 150"),
            ),
            _ => view.clone(),
        })
        .collect();
    assert_ne!(
        wrong_views[4].query, scenario.views[4].query,
        "the view was altered"
    );
    let left_database = OracleDatabase::create("differential_wrong_left").await;
    let right_database = OracleDatabase::create("differential_wrong_right").await;
    let left = left_database.client().await;
    let right = right_database.client().await;
    let outcome = run_with_views(
        &scenario,
        &wrong_views,
        &Side {
            label: "wrong",
            client: &left,
            view_kind: ViewKind::Plain,
        },
        &Side {
            label: "right",
            client: &right,
            view_kind: ViewKind::Plain,
        },
        &settings,
    )
    .await;
    let report = outcome.expect_err("a view filtering on > 150 instead of > 100 must be caught");
    assert!(report.contains("SELECT * FROM big_orders"), "{report}");
    assert!(report.contains("only in right"), "{report}");
    assert!(report.contains("seed 1"), "{report}");
}

/// Every construct of a materialized view the engine maintains, over the
/// orders/customers tables plus a keyless table with exact duplicate rows.
fn constructs_scenario() -> Scenario {
    const KINDS: &[&str] = &["click", "view", "buy"];
    let mut tables = orders_and_customers_tables();
    tables.push(TableSpec {
        name: "events",
        columns: vec![
            ColumnSpec::new("kind", "TEXT", Values::Text(KINDS)),
            ColumnSpec::new("weight", "INT", Values::Integer { min: -2, max: 3 }),
            ColumnSpec::new("flagged", "BOOLEAN", Values::Boolean),
        ],
        primary_key: None,
    });
    let views = [
        (
            "scalar_expressions",
            "SELECT id, CASE WHEN amount > 1000 THEN 'big' WHEN amount IS NULL THEN 'unknown' ELSE 'small' END AS size, \
             COALESCE(region, 'none') AS region, NULLIF(customer_id, 3) AS customer, upper(COALESCE(region, '')) AS up, \
             length(COALESCE(region, '')) AS len, abs(amount) AS magnitude, amount * 2 - 1 AS arithmetic, \
             date_trunc('day', created_at) AS day, created_at + INTERVAL '1 day' AS next_day, \
             CAST(customer_id AS TEXT) || '-' || substr(COALESCE(region, 'x'), 1, 2) AS label \
             FROM orders WHERE (region IN ('eu', 'us') OR region LIKE 'la%') AND amount BETWEEN 0 AND 40000 \
             AND NOT (customer_id = 5)",
        ),
        ("left_join", "SELECT o.id, c.name FROM orders o LEFT JOIN customers c ON o.customer_id = c.id"),
        (
            "right_join_residual",
            "SELECT c.id, o.id AS order_id FROM orders o RIGHT JOIN customers c ON o.customer_id = c.id AND o.amount > 1000",
        ),
        ("full_join", "SELECT c.id AS customer, o.id AS order_id FROM customers c FULL JOIN orders o ON c.id = o.customer_id"),
        (
            "full_join_using",
            "SELECT * FROM (SELECT customer_id AS cid, amount FROM orders) o \
             FULL JOIN (SELECT id AS cid, tier FROM customers) c USING (cid)",
        ),
        (
            "natural_right_join",
            "SELECT cid, tier, amount FROM (SELECT customer_id AS cid, amount FROM orders WHERE amount > 100) o \
             NATURAL RIGHT JOIN (SELECT id AS cid, tier FROM customers) c",
        ),
        (
            "exists_semi",
            "SELECT c.id, c.name FROM customers c WHERE EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.id AND o.amount > 100)",
        ),
        ("not_exists_anti", "SELECT c.id FROM customers c WHERE NOT EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.id)"),
        ("in_subquery", "SELECT id FROM orders WHERE customer_id IN (SELECT id FROM customers WHERE tier = 'gold')"),
        (
            "not_in_subquery",
            "SELECT id FROM customers WHERE id NOT IN (SELECT customer_id FROM orders WHERE region = 'eu')",
        ),
        (
            "cross_join_small",
            "SELECT t.tier, r.region FROM (SELECT DISTINCT tier FROM customers) t CROSS JOIN (SELECT DISTINCT region FROM orders) r",
        ),
        (
            "three_way_join",
            "SELECT o.id, c.name, o2.id AS earlier FROM orders o JOIN customers c ON o.customer_id = c.id \
             JOIN orders o2 ON o2.customer_id = c.id AND o2.id < o.id",
        ),
        (
            "distinct_count_having",
            "SELECT customer_id, COUNT(DISTINCT region) AS regions, SUM(amount) AS total FROM orders \
             GROUP BY customer_id HAVING COUNT(*) > 1",
        ),
        ("distinct_rows", "SELECT DISTINCT region, customer_id FROM orders"),
        ("union_all", "SELECT id, 'order' AS kind FROM orders UNION ALL SELECT id, 'customer' FROM customers"),
        ("union_set", "SELECT customer_id AS id FROM orders UNION SELECT id FROM customers"),
        ("except_set", "SELECT customer_id FROM orders EXCEPT SELECT id FROM customers WHERE tier = 'gold'"),
        ("except_all", "SELECT customer_id FROM orders EXCEPT ALL SELECT id FROM customers"),
        ("intersect_set", "SELECT customer_id FROM orders INTERSECT SELECT id FROM customers"),
        ("intersect_all", "SELECT region FROM orders INTERSECT ALL SELECT region FROM orders WHERE amount > 100"),
        (
            "empty_global_aggregate",
            "SELECT COUNT(*) AS n, MAX(amount) AS top, AVG(amount) AS mean, SUM(customer_id) AS customers FROM orders \
             WHERE region = 'latam' AND amount > 45000",
        ),
        (
            "events_by_kind",
            "SELECT kind, COUNT(*) AS events, SUM(weight) AS weight, MIN(weight) AS low, \
             BIT_XOR(weight) AS xor_weight, BIT_XOR(DISTINCT weight) AS xor_distinct FROM events GROUP BY kind",
        ),
        (
            "filtered_aggregates",
            "SELECT kind, COUNT(*) FILTER (WHERE flagged) AS flagged, COUNT(DISTINCT weight) FILTER (WHERE weight > 0) AS positive, \
             SUM(weight) FILTER (WHERE NOT flagged) AS unflagged_weight, AVG(weight) FILTER (WHERE weight <> 0) AS mean, \
             MAX(weight) FILTER (WHERE flagged IS NULL) AS unknown_top, BOOL_AND(flagged) AS all_flagged, \
             BOOL_OR(weight > 2) AS any_heavy FROM events GROUP BY kind",
        ),
        (
            "filtered_global",
            "SELECT COUNT(*) FILTER (WHERE amount > 1000) AS big, SUM(amount) FILTER (WHERE region = 'eu') AS eu, \
             BOOL_AND(amount > 0) AS all_positive FROM orders",
        ),
        ("distinct_events", "SELECT DISTINCT kind, weight FROM events"),
        (
            "string_aggregates",
            "SELECT region, string_agg(id::text, ',' ORDER BY id) AS ids, \
             string_agg(DISTINCT customer_id::text, ';' ORDER BY customer_id::text) AS customers, \
             string_agg(id::text, customer_id::text ORDER BY amount DESC, id) FILTER (WHERE amount > 100) AS big \
             FROM orders GROUP BY region",
        ),
        (
            "array_aggregates",
            "SELECT region, array_agg(id ORDER BY id) AS ids, \
             array_agg(amount ORDER BY amount DESC NULLS LAST, id) AS amounts, \
             array_agg(DISTINCT customer_id ORDER BY customer_id DESC) AS customers, \
             array_agg(created_at ORDER BY id) AS times, \
             array_agg(id ORDER BY id) FILTER (WHERE amount > 100) AS big_ids FROM orders GROUP BY region",
        ),
        ("array_unnested", "SELECT region, unnest(amounts) AS amount, ids[1] AS first FROM array_aggregates"),
        (
            "values_join",
            "SELECT o.id, v.label FROM orders o JOIN (VALUES ('eu', 'Europe'), ('us', 'Americas'), ('us', 'USA')) v(region, label) \
             ON o.region = v.region UNION ALL SELECT 0, 'constant'",
        ),
        // Top-K: every order is total (ties broken by a key), or ties
        // are between equal rows, so PostgreSQL's rows are the only answer.
        ("top_orders", "SELECT id, customer_id, amount FROM orders ORDER BY amount DESC NULLS LAST, id LIMIT 5"),
        ("top_offset", "SELECT id, region FROM orders ORDER BY region NULLS FIRST, id DESC LIMIT 3 OFFSET 2"),
        ("top_by_expression", "SELECT id FROM orders ORDER BY amount * -1, id LIMIT 4"),
        (
            "offset_of_a_top",
            "SELECT id FROM (SELECT id, amount FROM orders ORDER BY amount DESC NULLS LAST, id LIMIT 5) t OFFSET 2",
        ),
        (
            "top_in_subquery",
            "SELECT region, COUNT(*) AS n FROM (SELECT region FROM orders ORDER BY id DESC LIMIT 6) recent GROUP BY region",
        ),
        (
            "top_of_aggregate",
            "SELECT customer_id, SUM(amount) AS total FROM orders GROUP BY customer_id \
             ORDER BY total DESC NULLS LAST, customer_id LIMIT 3",
        ),
        (
            "distinct_on_customer",
            "SELECT DISTINCT ON (customer_id) customer_id, id, amount FROM orders \
             ORDER BY customer_id, amount DESC NULLS LAST, id",
        ),
        ("distinct_on_region", "SELECT DISTINCT ON (region) id * 2 AS twice FROM orders ORDER BY region, id DESC"),
        (
            "distinct_on_then_filtered",
            "SELECT * FROM (SELECT DISTINCT ON (customer_id) customer_id, amount FROM orders \
             ORDER BY customer_id, amount DESC NULLS LAST, id) s WHERE amount < 20000",
        ),
        (
            "distinct_on_limited",
            "SELECT DISTINCT ON (customer_id) customer_id, id FROM orders ORDER BY customer_id NULLS FIRST, id DESC LIMIT 3",
        ),
        (
            "ranked_per_region",
            "SELECT region, amount, rk FROM (SELECT region, amount, rank() OVER \
             (PARTITION BY region ORDER BY amount DESC NULLS LAST) AS rk FROM orders) o WHERE rk <= 2",
        ),
        (
            "dense_ranked_per_customer",
            "SELECT customer_id, region, dr FROM (SELECT customer_id, region, dense_rank() OVER \
             (PARTITION BY customer_id ORDER BY region) AS dr FROM orders) o WHERE dr < 3",
        ),
        ("first_ranked", "SELECT kind FROM (SELECT kind, rank() OVER (ORDER BY weight DESC) AS r FROM events) e WHERE r = 1"),
        ("above_average", "SELECT id, amount FROM orders WHERE amount > (SELECT AVG(amount) FROM orders)"),
        (
            "with_a_scalar_subquery",
            "SELECT region, SUM(amount) AS total, (SELECT COUNT(*) FROM customers) AS customers FROM orders GROUP BY region",
        ),
        // Window functions.
        (
            "running_totals",
            "SELECT id, customer_id, amount, SUM(amount) OVER (PARTITION BY customer_id ORDER BY id) AS running FROM orders",
        ),
        (
            "neighbours",
            "SELECT id, region, LAG(id) OVER (PARTITION BY region ORDER BY id) AS prev, \
             LEAD(amount, 2, 0) OVER (PARTITION BY region ORDER BY id) AS later FROM orders",
        ),
        (
            "moving_average",
            "SELECT id, AVG(amount) OVER (PARTITION BY customer_id ORDER BY id ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS moving, \
             COUNT(*) OVER (PARTITION BY customer_id) AS orders, MAX(amount) OVER (PARTITION BY customer_id) AS top FROM orders",
        ),
        (
            "ranks_over_all",
            "SELECT id, RANK() OVER (ORDER BY amount DESC NULLS LAST) AS r, DENSE_RANK() OVER (ORDER BY amount DESC NULLS LAST) AS d, \
             NTILE(3) OVER (ORDER BY amount DESC NULLS LAST, id) AS tile FROM orders",
        ),
        (
            "frame_values",
            "SELECT id, FIRST_VALUE(id) OVER (PARTITION BY region ORDER BY id ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS first, \
             LAST_VALUE(id) OVER (PARTITION BY region ORDER BY id ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS last, \
             NTH_VALUE(id, 2) OVER (PARTITION BY region ORDER BY id ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS second \
             FROM orders",
        ),
        (
            "range_frame",
            "SELECT id, SUM(amount) OVER (PARTITION BY region ORDER BY customer_id RANGE BETWEEN 1 PRECEDING AND 1 FOLLOWING) AS near \
             FROM orders",
        ),
        (
            "windows_by_expressions",
            "SELECT id, SUM(amount) OVER (PARTITION BY customer_id % 3 ORDER BY amount * 2 DESC NULLS LAST, id) AS running, \
             LAG(id) OVER (PARTITION BY customer_id % 3 ORDER BY amount * 2 DESC NULLS LAST, id) AS prev, \
             COUNT(*) OVER (PARTITION BY upper(region)) AS in_region FROM orders",
        ),
        (
            "latest_per_expression",
            "SELECT id, amount FROM (SELECT id, amount, row_number() OVER (PARTITION BY customer_id % 4 \
             ORDER BY created_at DESC NULLS LAST, id) AS rn FROM orders) o WHERE rn <= 2",
        ),
        ("top_repeated_rows", "SELECT kind, weight FROM events ORDER BY weight DESC, kind LIMIT 4"),
        (
            "latest_per_customer",
            "SELECT id, customer_id, amount FROM (SELECT id, customer_id, amount, \
             row_number() OVER (PARTITION BY customer_id ORDER BY id DESC) AS rn FROM orders) o WHERE rn = 1",
        ),
        (
            "top_two_per_region",
            "SELECT region, id, rn FROM (SELECT region, id, row_number() OVER \
             (PARTITION BY region ORDER BY amount DESC NULLS LAST, id) AS rn FROM orders) o WHERE rn <= 2 AND id > 1",
        ),
        (
            "top_orders_per_customer_lateral",
            "SELECT c.id AS customer, c.name, x.id, x.amount FROM customers c, LATERAL \
             (SELECT o.id, o.amount FROM orders o WHERE o.customer_id = c.id \
             ORDER BY o.amount DESC NULLS LAST, o.id LIMIT 1) x",
        ),
        (
            "next_orders_left_lateral",
            "SELECT c.id AS customer, x.id, x.region FROM customers c LEFT JOIN LATERAL \
             (SELECT o.id, o.region FROM orders o \
             WHERE c.id = o.customer_id AND o.region <> 'eu' \
             ORDER BY o.created_at DESC NULLS FIRST, o.id LIMIT 2 OFFSET 1) x ON true",
        ),
        (
            "exists_over_a_left_join",
            "SELECT c.id, c.name FROM customers c WHERE NOT EXISTS (SELECT d.tier FROM orders o \
             LEFT JOIN customers d ON d.id = o.customer_id AND d.tier = c.tier \
             WHERE o.customer_id = c.id AND o.region = 'us')",
        ),
        (
            "larger_orders_counted",
            "SELECT o.id, (SELECT count(*) FROM orders p WHERE p.amount > o.amount) AS larger FROM orders o",
        ),
        (
            "earlier_max_per_customer",
            "SELECT o.id, (SELECT max(p.amount) FROM orders p \
             WHERE p.customer_id = o.customer_id AND p.id < o.id) AS earlier_max FROM orders o",
        ),
        (
            "customers_with_few_lower_orders",
            "SELECT c.id, (SELECT sum(o.amount) FROM orders o WHERE o.customer_id <= c.id AND o.region = 'eu') AS spend \
             FROM customers c WHERE (SELECT count(*) FROM orders o WHERE o.customer_id < c.id) < 8",
        ),
        (
            "last_amount_per_customer",
            "SELECT c.id, (SELECT o.amount FROM orders o WHERE o.customer_id = c.id \
             ORDER BY o.created_at DESC NULLS LAST, o.id DESC LIMIT 1) AS last_amount FROM customers c",
        ),
        (
            "second_order_in_us",
            "SELECT c.id, c.tier FROM customers c WHERE (SELECT o.region FROM orders o \
             WHERE o.customer_id = c.id ORDER BY o.id LIMIT 1 OFFSET 1) = 'us'",
        ),
        (
            "numbered_repeated_rows",
            "SELECT kind, weight, n FROM (SELECT kind, weight, row_number() OVER (PARTITION BY kind ORDER BY weight) AS n \
             FROM events) e WHERE n < 3",
        ),
        (
            "rollup_regions",
            "SELECT region, customer_id, COUNT(*) AS n, SUM(amount) AS total, GROUPING(region, customer_id) AS g \
             FROM orders GROUP BY ROLLUP (region, customer_id)",
        ),
        ("cube_events", "SELECT kind, flagged, COUNT(*) AS n, SUM(weight) AS w FROM events GROUP BY CUBE (kind, flagged)"),
        ("rollup_without_aggregates", "SELECT region, customer_id FROM orders GROUP BY ROLLUP (region, customer_id)"),
        (
            "rollup_repeating_a_key",
            "SELECT region, customer_id, COUNT(*) AS n FROM orders GROUP BY region, ROLLUP (region, customer_id)",
        ),
        (
            "grouping_sets_joined",
            "SELECT o.region, c.tier, COUNT(*) AS n, MAX(o.amount) AS top FROM orders o JOIN customers c \
             ON o.customer_id = c.id GROUP BY GROUPING SETS ((o.region), (c.tier), (), (o.region))",
        ),
        ("revenue_by_region", "SELECT region, COUNT(*) AS orders, SUM(amount) AS revenue FROM orders GROUP BY region"),
        (
            "amount_percentiles_by_region",
            "SELECT region, percentile_cont(0.5) WITHIN GROUP (ORDER BY amount) AS median, \
             percentile_disc(0.9) WITHIN GROUP (ORDER BY amount DESC) AS p90, \
             percentile_cont(0.25) WITHIN GROUP (ORDER BY customer_id DESC) AS q, \
             mode() WITHIN GROUP (ORDER BY customer_id) AS usual FROM orders GROUP BY region",
        ),
        (
            "percentiles_overall",
            "SELECT percentile_disc(0) WITHIN GROUP (ORDER BY region) AS first, \
             percentile_disc(1) WITHIN GROUP (ORDER BY created_at) AS last, \
             mode() WITHIN GROUP (ORDER BY region DESC) AS usual FROM orders",
        ),
        ("view_over_view", "SELECT region, revenue FROM revenue_by_region WHERE orders > 2"),
        // WITH RECURSIVE (RFC 0017): orders as edges from an order to the
        // order numbered as its customer, cycles included.
        (
            "order_chains",
            "WITH RECURSIVE chain(start, node) AS (SELECT id, customer_id FROM orders \
             UNION SELECT c.start, o.customer_id FROM chain c JOIN orders o ON o.id = c.node) \
             SELECT * FROM chain",
        ),
        (
            "order_walks",
            "WITH RECURSIVE walk(start, node, depth) AS (SELECT id, customer_id, 1 FROM orders \
             UNION ALL SELECT w.start, o.customer_id, w.depth + 1 FROM walk w JOIN orders o \
             ON o.id = w.node WHERE w.depth < 4 AND o.region <> 'us') SELECT * FROM walk",
        ),
        ("chain_lengths", "SELECT start, COUNT(*) AS reached FROM order_chains GROUP BY start"),
        // Set-returning functions: a series per row, a constant one joined,
        // a computed array unnested.
        ("order_units", "SELECT id, generate_series(1, customer_id % 4) AS unit FROM orders"),
        (
            "order_units_kept",
            "SELECT o.id, u FROM orders o LEFT JOIN LATERAL generate_series(1, o.customer_id % 3) AS u ON true",
        ),
        (
            "order_units_lateral",
            "SELECT o.id, u FROM orders o, generate_series(1, o.customer_id % 3) u WHERE o.region <> 'us'",
        ),
        (
            "orders_per_day_slot",
            "SELECT d, COUNT(*) AS n FROM generate_series(1, 3) d JOIN orders o              ON o.customer_id % 3 + 1 = d GROUP BY d",
        ),
        (
            "region_letters",
            "SELECT id, unnest(string_to_array(region, 'u')) AS part FROM orders WHERE region <> ''",
        ),
        // SQL functions (`setup` below), inlined.
        (
            "sql_functions",
            "SELECT id, taxed(amount, 0.2) AS gross, region_label(region, customer_id) AS label \
             FROM orders WHERE is_big(amount)",
        ),
        (
            "sql_function_groups",
            "SELECT region_label(region, 1) AS label, COUNT(*) AS n, SUM(taxed(amount, 0.1)) AS total \
             FROM orders GROUP BY 1",
        ),
    ];
    // Time windows, which PostgreSQL spells with date_bin.
    let windows = [
        ViewSpec::with_oracle(
            "tumbling_days",
            "SELECT region, window_start, window_end, COUNT(*) AS n, SUM(amount) AS total \
             FROM TUMBLE(orders, created_at, INTERVAL '1' DAY) GROUP BY region, window_start, window_end",
            "SELECT region, date_bin('1 day', created_at, TIMESTAMP '1970-01-01') AS window_start, \
             date_bin('1 day', created_at, TIMESTAMP '1970-01-01') + INTERVAL '1 day' AS window_end, \
             COUNT(*) AS n, SUM(amount) AS total FROM orders GROUP BY 1, 2, 3",
        ),
        ViewSpec::with_oracle(
            "hopping_days",
            "SELECT o.customer_id, window_start, window_end, COUNT(*) AS n \
             FROM HOP(orders, created_at, INTERVAL '1 day', INTERVAL '3 days') AS o \
             GROUP BY o.customer_id, window_start, window_end",
            "SELECT customer_id, window_start, window_start + INTERVAL '3 days' AS window_end, COUNT(*) AS n \
             FROM (SELECT customer_id, date_bin('1 day', created_at, TIMESTAMP '1970-01-01') - i * INTERVAL '1 day' \
             AS window_start FROM orders, generate_series(0, 2) i) h GROUP BY 1, 2, 3",
        ),
    ];
    Scenario {
        name: "constructs",
        tables,
        setup: vec![
            "CREATE FUNCTION taxed(amount numeric, rate numeric) RETURNS numeric LANGUAGE SQL \
             IMMUTABLE AS 'SELECT round(amount * (1 + rate), 2)'"
                .to_owned(),
            "CREATE FUNCTION region_label(r text, n bigint) RETURNS text LANGUAGE SQL STRICT \
             AS $$SELECT upper(r) || '#' || n$$"
                .to_owned(),
            "CREATE FUNCTION is_big(a numeric(12,2)) RETURNS boolean LANGUAGE SQL RETURN a > 1000"
                .to_owned(),
        ],
        views: views
            .iter()
            .map(|(name, query)| ViewSpec::new(name, query))
            .chain(windows)
            .chain(temporal_filters())
            .collect(),
    }
}

/// Views filtering on `now()`, their bounds inside the generated
/// timestamps (January and February 2024) as days back from today; the
/// oracle reads its clock in UTC, as our sessions do.
fn temporal_filters() -> Vec<ViewSpec> {
    const DAY_MICROS: i64 = 86_400_000_000;
    // 2024-01-01 is day 19 723 since 1970.
    let today = rockstream_common::Runtime::system().now_micros() / DAY_MICROS;
    let back_to = |day_of_2024: i64| today - (19_723 + day_of_2024);
    let (jan_10, jan_20, feb_10) = (back_to(9), back_to(19), back_to(40));
    let views = [
        (
            "recent_orders",
            format!("SELECT id, region, amount FROM orders WHERE created_at > now() - INTERVAL '{jan_20} days'"),
        ),
        (
            "orders_between_by_region",
            format!(
                "SELECT region, COUNT(*) AS n, SUM(amount) AS total FROM orders \
                 WHERE created_at BETWEEN now() - INTERVAL '{jan_10} days' AND now() - INTERVAL '{feb_10} days' \
                 GROUP BY region"
            ),
        ),
        (
            "recent_customers_joined",
            format!(
                "SELECT c.name, o.amount FROM orders o JOIN customers c ON o.customer_id = c.id \
                 WHERE now() - INTERVAL '{jan_20} days' <= o.created_at + INTERVAL '2 days' AND c.tier <> 'gold'"
            ),
        ),
        (
            "customers_with_recent_orders",
            format!(
                "SELECT c.id, c.tier FROM customers c WHERE EXISTS (SELECT 1 FROM orders o \
                 WHERE o.customer_id = c.id AND o.created_at >= now() - INTERVAL '{jan_20} days')"
            ),
        ),
    ];
    views
        .into_iter()
        .map(|(name, query)| {
            let oracle = query.replace("now()", "(now() AT TIME ZONE 'UTC')");
            ViewSpec::with_oracle(name, &query, &oracle)
        })
        .collect()
}

#[tokio::test]
async fn differential_every_construct() {
    against_postgres(constructs_scenario(), "differential_constructs").await;
}
