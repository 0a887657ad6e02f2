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
    let settings = Settings::from_environment();
    let server = TestServer::start().await;
    let ours = server.client().await;
    let oracle_database = OracleDatabase::create("differential_orders").await;
    let oracle = oracle_database.client().await;
    let outcome = run(
        &orders_and_customers_scenario(),
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
        panic!("{report}\n{}", server.log_tail());
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
        transactions: 40,
        ..Settings::from_environment()
    };
    let scenario = orders_and_customers_scenario();
    let wrong_views: Vec<ViewSpec> = scenario
        .views
        .iter()
        .map(|view| match view.name {
            "big_orders" => ViewSpec {
                name: view.name,
                query: view.query.replace("o.amount > 100", "o.amount > 150"),
            },
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
