//! Goal: every stateful operator's incremental output equals recomputation.
//! Method: random insert/delete histories over a small domain are cut into
//! random epochs; the sum of the operator's output deltas over all epochs
//! must equal the output of one step over the final input on fresh state
//! (DBSP's correctness condition, checked the way Feldera's dbsp does).

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Schema as ArrowSchema};
use datafusion::common::DFSchema;
use proptest::prelude::*;
use rockstream_plan::partition::{place, Partitioning};
use rockstream_plan::{
    AggregateCall, AggregateFunction, Column, JoinKind, Numbering, PlanNode, Schema, SetOperator,
    SortKey,
};
use rockstream_types::partition::{BucketMap, BUCKETS};
use rockstream_types::{Datum, ObjectId, Row, SqlType, ZSet};

use crate::dataflow::Step;
use crate::exchange::partition_key;
use crate::{ChannelExchange, Dataflow, MemoryStore};

pub(crate) const LEFT: ObjectId = 1;
pub(crate) const RIGHT: ObjectId = 2;

fn int_schema(names: &[&str]) -> Schema {
    Schema {
        columns: names
            .iter()
            .map(|name| Column {
                name: name.to_string(),
                sql_type: SqlType::Int64,
            })
            .collect(),
    }
}

fn source(object_id: ObjectId) -> PlanNode {
    PlanNode::Source {
        object_id,
        name: format!("t{object_id}"),
        schema: int_schema(&["k", "v"]),
        unique_key: None,
    }
}

/// `SELECT k, v % 2 FROM t`: maps distinct rows alike, so its output
/// repeats rows (`(1, 0)` retracted and `(1, 2)` inserted give `(1, 0)`
/// twice), which the operator above must sum.
fn folded_source(object_id: ObjectId) -> PlanNode {
    use datafusion::prelude::{col, lit};
    let fields: Vec<Field> = ["k", "v"]
        .iter()
        .map(|name| Field::new(*name, DataType::Int64, true))
        .collect();
    PlanNode::Map {
        input: Box::new(source(object_id)),
        exprs: vec![col("k"), col("v") % lit(2i64)],
        input_schema: Arc::new(DFSchema::try_from(ArrowSchema::new(fields)).expect("schema")),
        schema: int_schema(&["k", "v"]),
    }
}

fn joined_schema() -> Arc<DFSchema> {
    let fields: Vec<Field> = ["lk", "lv", "rk", "rv"]
        .iter()
        .map(|name| Field::new(*name, DataType::Int64, true))
        .collect();
    Arc::new(DFSchema::try_from(ArrowSchema::new(fields)).expect("schema"))
}

pub(crate) fn join(kind: JoinKind) -> PlanNode {
    join_of(kind, source(LEFT), source(RIGHT))
}

fn join_of(kind: JoinKind, left: PlanNode, right: PlanNode) -> PlanNode {
    let width = if matches!(kind, JoinKind::LeftSemi | JoinKind::LeftAnti) {
        2
    } else {
        4
    };
    PlanNode::Join {
        op_id: 10,
        left: Box::new(left),
        right: Box::new(right),
        kind,
        left_keys: vec![0],
        right_keys: vec![0],
        nulls_equal: false,
        residual: None,
        joined_schema: joined_schema(),
        null_aware: false,
        left_width: 2,
        right_width: 2,
        schema: int_schema(&["lk", "lv", "rk", "rv"][..width]),
    }
}

/// A join whose residual predicate `lv < rv` decides matches within a key.
fn join_with_residual(kind: JoinKind) -> PlanNode {
    let mut plan = join(kind);
    if let PlanNode::Join { residual, .. } = &mut plan {
        *residual = Some(datafusion::prelude::col("lv").lt(datafusion::prelude::col("rv")));
    }
    plan
}

/// `k NOT IN (SELECT k FROM right)`.
fn not_in() -> PlanNode {
    let mut plan = join(JoinKind::LeftAnti);
    if let PlanNode::Join { null_aware, .. } = &mut plan {
        *null_aware = true;
    }
    plan
}

fn aggregate(group_count: usize) -> PlanNode {
    aggregate_of(group_count, source(LEFT))
}

pub(crate) fn aggregate_of(group_count: usize, input: PlanNode) -> PlanNode {
    let call = |function, argument: Option<usize>, distinct| AggregateCall {
        function,
        argument,
        distinct,
        input_type: argument.map(|_| SqlType::Int64),
        output_type: if function == AggregateFunction::Avg {
            SqlType::Float64
        } else {
            SqlType::Int64
        },
        delimiter: None,
        order_by: Vec::new(),
        fraction: None,
        filter: None,
    };
    let calls = vec![
        call(AggregateFunction::CountStar, None, false),
        call(AggregateFunction::Count, Some(1), false),
        call(AggregateFunction::Sum, Some(1), false),
        call(AggregateFunction::Min, Some(1), false),
        call(AggregateFunction::Max, Some(1), false),
        call(AggregateFunction::Count, Some(1), true),
        call(AggregateFunction::Sum, Some(1), true),
        call(AggregateFunction::BitXor, Some(1), false),
        call(AggregateFunction::BitXor, Some(1), true),
        AggregateCall {
            fraction: Some(0.5),
            ..call(AggregateFunction::PercentileDisc, Some(1), false)
        },
        AggregateCall {
            fraction: Some(0.25),
            order_by: vec![SortKey {
                column: 1,
                descending: true,
                nulls_first: true,
            }],
            ..call(AggregateFunction::PercentileDisc, Some(1), false)
        },
        call(AggregateFunction::Mode, Some(1), false),
    ];
    let mut columns = if group_count == 1 { vec!["k"] } else { vec![] };
    columns.extend([
        "count_star",
        "count",
        "sum",
        "min",
        "max",
        "count_distinct",
        "sum_distinct",
        "bit_xor",
        "bit_xor_distinct",
        "median",
        "quartile_descending",
        "mode",
    ]);
    PlanNode::Aggregate {
        op_id: 20,
        input: Box::new(input),
        group_count,
        aggregates: calls,
        schema: int_schema(&columns),
        retire: None,
    }
}

/// `SELECT * FROM SESSION(t, ts, gap µs [, k])` over `ts = 7 k + 5 v - 10`
/// µs: times from -10 to 14 (negative ones too), over up to 25 buckets
/// whatever the gap, with gaps between them, apart from NULL times.
fn session_window(partitioned: bool, gap_micros: i64) -> PlanNode {
    use datafusion::prelude::{cast, col, lit};
    let timestamp = DataType::Timestamp(datafusion::arrow::datatypes::TimeUnit::Microsecond, None);
    let fields: Vec<Field> = ["k", "v"]
        .iter()
        .map(|name| Field::new(*name, DataType::Int64, true))
        .collect();
    let column = |name: &str, sql_type| Column {
        name: name.to_string(),
        sql_type,
    };
    let time = col("k") * lit(7i64) + col("v") * lit(5i64) - lit(10i64);
    let input = PlanNode::Map {
        input: Box::new(source(LEFT)),
        exprs: vec![col("k"), cast(time, timestamp)],
        input_schema: Arc::new(DFSchema::try_from(ArrowSchema::new(fields)).expect("schema")),
        schema: Schema {
            columns: vec![
                column("k", SqlType::Int64),
                column("ts", SqlType::Timestamp),
            ],
        },
    };
    PlanNode::SessionWindow {
        op_id: 80,
        input: Box::new(input),
        partition: if partitioned { vec![0] } else { vec![] },
        time: 1,
        gap_micros,
        ends: vec![false, true],
        schema: Schema {
            columns: vec![
                column("k", SqlType::Int64),
                column("ts", SqlType::Timestamp),
                column("window_start", SqlType::Timestamp),
                column("window_end", SqlType::Timestamp),
            ],
        },
    }
}

/// A recursion's rows or an external input, as `(k, v)`.
fn loop_input(index: usize) -> PlanNode {
    PlanNode::LoopInput {
        index,
        schema: int_schema(&["k", "v"]),
    }
}

/// `SELECT r.k, t.v FROM r JOIN t ON r.v = t.k [AND residual]`, `r` the
/// recursion (loop input 0) and `t` loop input 1: one step along an edge.
fn path_step(op_id: ObjectId, residual: Option<datafusion::logical_expr::Expr>) -> PlanNode {
    use datafusion::prelude::col;
    let PlanNode::Join {
        joined_schema,
        schema,
        ..
    } = join(JoinKind::Inner)
    else {
        unreachable!("join() makes a join")
    };
    PlanNode::Map {
        input: Box::new(PlanNode::Join {
            op_id,
            left: Box::new(loop_input(0)),
            right: Box::new(loop_input(1)),
            kind: JoinKind::Inner,
            left_keys: vec![1],
            right_keys: vec![0],
            nulls_equal: false,
            residual,
            joined_schema: joined_schema.clone(),
            null_aware: false,
            left_width: 2,
            right_width: 2,
            schema,
        }),
        exprs: vec![col("lk"), col("rv")],
        input_schema: joined_schema,
        schema: int_schema(&["k", "v"]),
    }
}

/// `WITH RECURSIVE r(k, v) AS (SELECT k, v FROM t UNION [ALL] SELECT r.k,
/// t.v FROM r JOIN t ON r.v = t.k [AND t.k < t.v]) SELECT * FROM r`: the
/// pairs joined by paths of `t`'s edges (cycles included: with `UNION`;
/// with `UNION ALL` only along increasing edges, so that every path ends).
fn reachability(distinct: bool) -> PlanNode {
    use datafusion::prelude::col;
    let increasing = (!distinct).then(|| col("lv").lt(col("rv")));
    PlanNode::Recursive {
        op_id: 70,
        base: Box::new(source(LEFT)),
        external: vec![source(LEFT)],
        step: Box::new(path_step(71, increasing)),
        distinct,
        schema: int_schema(&["k", "v"]),
    }
}

/// `WITH RECURSIVE r(k, v) AS (SELECT k, v FROM u UNION SELECT r.k, t.v
/// FROM r JOIN t ON r.v = t.k WHERE t.v IN (SELECT k FROM u)) SELECT * FROM
/// r`: seeds from one table, edges from another, each step kept only where
/// it lands on a seed's key (a semi join on a second external input).
fn seeded_reachability() -> PlanNode {
    let mut landing = join(JoinKind::LeftSemi);
    if let PlanNode::Join {
        op_id,
        left,
        right,
        left_keys,
        ..
    } = &mut landing
    {
        *op_id = 74;
        **left = path_step(73, None);
        **right = loop_input(2);
        *left_keys = vec![1];
    }
    PlanNode::Recursive {
        op_id: 72,
        base: Box::new(source(RIGHT)),
        external: vec![source(LEFT), source(RIGHT)],
        step: Box::new(landing),
        distinct: true,
        schema: int_schema(&["k", "v"]),
    }
}

/// `SELECT k, array_agg(v ORDER BY v DESC NULLS FIRST), array_agg(DISTINCT
/// v ORDER BY v), array_agg(v) FROM t GROUP BY k` (grouped when
/// `group_count` is 1, else global): NULL values kept.
fn array_aggregate(group_count: usize) -> PlanNode {
    let array = SqlType::array_of(SqlType::Int64).expect("an element type");
    let call = |order_by: Option<bool>, distinct| AggregateCall {
        function: AggregateFunction::ArrayAgg,
        argument: Some(1),
        distinct,
        input_type: Some(SqlType::Int64),
        output_type: array,
        delimiter: None,
        order_by: order_by
            .map(|descending| SortKey {
                column: 1,
                descending,
                nulls_first: descending,
            })
            .into_iter()
            .collect(),
        fraction: None,
        filter: None,
    };
    let mut columns = int_schema(&["k"]).columns;
    columns.truncate(group_count);
    for name in ["by_value_desc", "distinct", "unordered"] {
        columns.push(Column {
            name: name.to_string(),
            sql_type: array,
        });
    }
    PlanNode::Aggregate {
        op_id: 61,
        input: Box::new(source(LEFT)),
        group_count,
        aggregates: vec![
            call(Some(true), false),
            call(Some(false), true),
            call(None, false),
        ],
        schema: Schema { columns },
        retire: None,
    }
}

/// `SELECT k, string_agg(v::text, k::text ORDER BY v DESC NULLS FIRST),
/// string_agg(DISTINCT v::text, ',' ORDER BY v::text) FROM t GROUP BY k`
/// (grouped when `group_count` is 1, else global).
fn string_aggregate(group_count: usize) -> PlanNode {
    use datafusion::prelude::{cast, col, lit};
    let fields: Vec<Field> = ["k", "v"]
        .iter()
        .map(|name| Field::new(*name, DataType::Int64, true))
        .collect();
    let text = |name: &str| Column {
        name: name.to_string(),
        sql_type: SqlType::Text,
    };
    let input = PlanNode::Map {
        input: Box::new(source(LEFT)),
        exprs: vec![
            col("k"),
            cast(col("v"), DataType::Utf8),
            cast(col("k"), DataType::Utf8),
            col("v"),
            lit(","),
        ],
        input_schema: Arc::new(DFSchema::try_from(ArrowSchema::new(fields)).expect("schema")),
        schema: Schema {
            columns: vec![
                int_schema(&["k"]).columns.remove(0),
                text("s"),
                text("d"),
                int_schema(&["o"]).columns.remove(0),
                text("comma"),
            ],
        },
    };
    let call = |delimiter, order_by, distinct| AggregateCall {
        function: AggregateFunction::StringAgg,
        argument: Some(1),
        distinct,
        input_type: Some(SqlType::Text),
        output_type: SqlType::Text,
        delimiter: Some(delimiter),
        order_by,
        fraction: None,
        filter: None,
    };
    let mut columns = if group_count == 1 {
        vec![text("k")]
    } else {
        vec![]
    };
    columns.extend([text("by_value_desc"), text("distinct")]);
    PlanNode::Aggregate {
        op_id: 60,
        input: Box::new(input),
        group_count,
        aggregates: vec![
            call(
                2,
                vec![SortKey {
                    column: 3,
                    descending: true,
                    nulls_first: true,
                }],
                false,
            ),
            call(
                4,
                vec![SortKey {
                    column: 1,
                    descending: false,
                    nulls_first: false,
                }],
                true,
            ),
        ],
        schema: Schema { columns },
        retire: None,
    }
}

/// A history: per epoch, changes `(source, row, weight)` that never delete
/// a row that is not present.
/// A generated change: `(source, key, value, insert)`.
type Change = (ObjectId, i64, Option<i64>, bool);

/// Epochs of changes with keys in `keys`.
fn epochs(keys: std::ops::Range<i64>) -> impl Strategy<Value = Vec<Vec<Change>>> {
    let change = (
        prop_oneof![Just(LEFT), Just(RIGHT)],
        keys,
        prop_oneof![Just(None), (0i64..3).prop_map(Some)],
        any::<bool>(),
    );
    proptest::collection::vec(proptest::collection::vec(change, 0..6), 1..8)
}

fn history() -> impl Strategy<Value = Vec<Vec<(ObjectId, Row, i64)>>> {
    epochs(0..4).prop_map(|epochs| {
        let mut present: HashMap<(ObjectId, Vec<u8>), (Row, i64)> = HashMap::new();
        epochs
            .into_iter()
            .map(|changes| {
                changes
                    .into_iter()
                    .map(|(source, key, value, insert)| {
                        let row = vec![
                            if key == 3 {
                                Datum::Null
                            } else {
                                Datum::Int64(key)
                            },
                            value.map(Datum::Int64).unwrap_or(Datum::Null),
                        ];
                        let id = (source, rockstream_types::encoding::encode_row(&row));
                        let count = present.get(&id).map(|(_, count)| *count).unwrap_or(0);
                        let weight = if insert || count == 0 { 1 } else { -1 };
                        present.insert(id, (row.clone(), count + weight));
                        (source, row, weight)
                    })
                    .collect()
            })
            .collect()
    })
}

/// A history of tables keyed by their first column (never NULL): at most
/// one row per key and source; an insert on a used key updates the row.
fn keyed_history() -> impl Strategy<Value = Vec<Vec<(ObjectId, Row, i64)>>> {
    epochs(0..3).prop_map(|epochs| {
        let mut present: HashMap<(ObjectId, i64), Row> = HashMap::new();
        epochs
            .into_iter()
            .map(|changes| {
                let mut out = Vec::new();
                for (source, key, value, insert) in changes {
                    let row = vec![
                        Datum::Int64(key),
                        value.map(Datum::Int64).unwrap_or(Datum::Null),
                    ];
                    match present.remove(&(source, key)) {
                        Some(old) => {
                            out.push((source, old, -1));
                            if insert {
                                out.push((source, row.clone(), 1));
                                present.insert((source, key), row);
                            }
                        }
                        None => {
                            out.push((source, row.clone(), 1));
                            present.insert((source, key), row);
                        }
                    }
                }
                out
            })
            .collect()
    })
}

/// A source keyed by its first column.
fn keyed_source(object_id: ObjectId) -> PlanNode {
    let mut plan = source(object_id);
    if let PlanNode::Source { unique_key, .. } = &mut plan {
        *unique_key = Some(vec![0]);
    }
    plan
}

/// [`folded_source`] over a keyed source: still keyed (the key passes
/// through), yet an update that changes only `v` by 2 repeats its row.
fn folded_keyed_source(object_id: ObjectId) -> PlanNode {
    let mut plan = folded_source(object_id);
    if let PlanNode::Map { input, .. } = &mut plan {
        **input = keyed_source(object_id);
    }
    plan
}

fn run(plan: &PlanNode, history: &[Vec<(ObjectId, Row, i64)>]) -> (ZSet, ZSet) {
    run_on(plan, history, &BucketMap::rendezvous(1).expect("one shard"))
}

/// The view's output key, as its rows are stored (and placed).
fn output_key(plan: &PlanNode) -> Vec<usize> {
    plan.unique_key()
        .unwrap_or_else(|| (0..plan.schema().len()).collect())
}

/// Runs `plan` over `history` on the shards of `map`, each with its own
/// state, the plan's exchanges placed for them; returns the output summed
/// over every epoch and shard, and one recomputation over the final input
/// on a single shard. Checks that every output row is on the shard that
/// owns its output key.
fn run_on(plan: &PlanNode, history: &[Vec<(ObjectId, Row, i64)>], map: &BucketMap) -> (ZSet, ZSet) {
    let shards = usize::from(map.shard_count());
    let key = output_key(plan);
    // Keyed sources are placed by their key, as tables by their primary
    // key; the others anywhere (here, an update's position picks it).
    let source_key = |object_id: ObjectId| {
        let mut found = None;
        plan.visit(&mut |node| {
            if let PlanNode::Source {
                object_id: id,
                unique_key,
                ..
            } = node
            {
                if *id == object_id {
                    found = unique_key.clone();
                }
            }
        });
        found
    };
    let placement = |object_id: ObjectId| match source_key(object_id) {
        Some(key) => Partitioning::Hash(key),
        None => Partitioning::Arbitrary,
    };
    let placed = place(plan.clone(), &key, map.shard_count(), &placement);
    let dataflow = Dataflow::compile(&placed).expect("compiles");
    let mut stores: Vec<MemoryStore> = (0..shards).map(|_| MemoryStore::default()).collect();
    let mut accumulated = ZSet::new();
    let mut step =
        |stores: &mut Vec<MemoryStore>, inputs: Vec<HashMap<ObjectId, ZSet>>, initial| {
            let exchanges = ChannelExchange::mesh(Arc::new(map.clone()));
            let steps = stores.iter_mut().zip(inputs).zip(exchanges).map(
                |((store, inputs), mut exchange)| {
                    let dataflow = &dataflow;
                    async move {
                        let output = dataflow
                            .step_on(
                                store,
                                &inputs,
                                &Step {
                                    initial,
                                    ..Step::at(0)
                                },
                                &mut exchange,
                            )
                            .await
                            .expect("step");
                        (exchange.shard(), output)
                    }
                },
            );
            for (shard, output) in futures::executor::block_on(futures::future::join_all(steps)) {
                assert!(output.is_consolidated());
                for (row, _) in &output.updates {
                    assert_eq!(
                        map.shard_of(&partition_key(row, &key)),
                        shard,
                        "an output row away from its key's shard"
                    );
                }
                accumulated.extend(output);
            }
        };
    step(&mut stores, vec![HashMap::new(); shards], true);
    let mut totals: HashMap<ObjectId, ZSet> = HashMap::new();
    for (epoch_index, epoch) in history.iter().enumerate() {
        let mut inputs: Vec<HashMap<ObjectId, ZSet>> = vec![HashMap::new(); shards];
        for (position, (source, row, weight)) in epoch.iter().enumerate() {
            let shard = match source_key(*source) {
                Some(key) => usize::from(map.shard_of(&partition_key(row, &key))),
                None => (position * 7 + epoch_index) % shards,
            };
            inputs[shard]
                .entry(*source)
                .or_default()
                .push(row.clone(), *weight);
            totals
                .entry(*source)
                .or_default()
                .push(row.clone(), *weight);
        }
        let inputs = inputs
            .into_iter()
            .map(|inputs| {
                inputs
                    .into_iter()
                    .map(|(id, delta)| (id, delta.consolidate()))
                    .collect()
            })
            .collect();
        step(&mut stores, inputs, false);
    }
    let totals = totals
        .into_iter()
        .map(|(id, delta)| (id, delta.consolidate()))
        .collect();
    let unsharded = Dataflow::compile(plan).expect("compiles");
    let mut fresh = MemoryStore::default();
    let recomputed = futures::executor::block_on(unsharded.step(
        &mut fresh,
        &totals,
        &Step {
            initial: true,
            ..Step::at(0)
        },
    ))
    .expect("recompute");
    (accumulated.consolidate(), recomputed.consolidate())
}

/// A random placement of the buckets on `shards` shards.
fn scattered(shards: u16, seed: u64) -> BucketMap {
    let mut state = seed | 1;
    let owners = (0..BUCKETS)
        .map(|_| {
            // xorshift64
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % u64::from(shards)) as u16
        })
        .collect();
    BucketMap::from_owners(shards, owners).expect("a valid placement")
}

/// Incremental output equals recomputation at one shard, and at two and
/// four shards over the placement `seed` picks.
fn check(
    plan: PlanNode,
    history: Vec<Vec<(ObjectId, Row, i64)>>,
    seed: u64,
) -> Result<(), TestCaseError> {
    for map in [
        BucketMap::rendezvous(1).expect("one shard"),
        scattered(2, seed),
        scattered(4, seed),
    ] {
        let (incremental, recomputed) = run_on(&plan, &history, &map);
        prop_assert_eq!(incremental, recomputed, "at {} shards", map.shard_count());
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn inner_join_matches_recomputation(seed: u64, history in history()) { check(join(JoinKind::Inner), history, seed)?; }

    #[test]
    fn left_join_matches_recomputation(seed: u64, history in history()) { check(join(JoinKind::Left), history, seed)?; }

    #[test]
    fn right_join_matches_recomputation(seed: u64, history in history()) { check(join(JoinKind::Right), history, seed)?; }

    #[test]
    fn full_join_matches_recomputation(seed: u64, history in history()) { check(join(JoinKind::Full), history, seed)?; }

    #[test]
    fn semi_join_matches_recomputation(seed: u64, history in history()) { check(join(JoinKind::LeftSemi), history, seed)?; }

    #[test]
    fn anti_join_matches_recomputation(seed: u64, history in history()) { check(join(JoinKind::LeftAnti), history, seed)?; }

    #[test]
    fn residual_joins_match_recomputation(seed: u64, history in history(), kind in prop_oneof![
        Just(JoinKind::Inner), Just(JoinKind::Left), Just(JoinKind::Right), Just(JoinKind::Full),
        Just(JoinKind::LeftSemi), Just(JoinKind::LeftAnti)]) {
        check(join_with_residual(kind), history, seed)?;
    }

    #[test]
    fn not_in_matches_recomputation(seed: u64, history in history()) { check(not_in(), history, seed)?; }

    #[test]
    fn grouped_aggregate_matches_recomputation(seed: u64, history in history()) { check(aggregate(1), history, seed)?; }

    #[test]
    fn aggregate_over_repeated_rows_matches_recomputation(seed: u64, history in history()) {
        check(aggregate_of(1, folded_source(LEFT)), history, seed)?;
    }

    #[test]
    fn joins_over_repeated_rows_match_recomputation(seed: u64, history in history(), kind in prop_oneof![
        Just(JoinKind::Inner), Just(JoinKind::Left), Just(JoinKind::Full), Just(JoinKind::LeftSemi),
        Just(JoinKind::LeftAnti)]) {
        check(join_of(kind, folded_source(LEFT), folded_source(RIGHT)), history, seed)?;
    }

    #[test]
    fn joins_over_keyed_inputs_match_recomputation(seed: u64, history in keyed_history(), folded: bool, kind in prop_oneof![
        Just(JoinKind::Inner), Just(JoinKind::Left), Just(JoinKind::Right), Just(JoinKind::Full),
        Just(JoinKind::LeftSemi), Just(JoinKind::LeftAnti)]) {
        let side = if folded { folded_keyed_source } else { keyed_source };
        check(join_of(kind, side(LEFT), side(RIGHT)), history, seed)?;
    }

    #[test]
    fn session_window_matches_recomputation(
        seed: u64,
        history in history(),
        partitioned: bool,
        gap in prop_oneof![Just(1i64), Just(3), Just(6), Just(12)],
    ) {
        check(session_window(partitioned, gap), history, seed)?;
    }

    #[test]
    fn recursive_union_is_the_transitive_closure(history in history()) {
        // An answer computed apart from the operator: the pairs joined by
        // paths of the final edges (each row once), by naive iteration.
        let mut edges: HashMap<Vec<u8>, (Row, i64)> = HashMap::new();
        for (source, row, weight) in history.iter().flatten() {
            if *source == LEFT {
                let entry = edges
                    .entry(rockstream_types::encoding::encode_row(row))
                    .or_insert((row.clone(), 0));
                entry.1 += weight;
            }
        }
        let edges: Vec<Row> = edges.into_values().filter(|(_, count)| *count > 0).map(|(row, _)| row).collect();
        let mut closure: Vec<Row> = edges.clone();
        loop {
            let mut grown = closure.clone();
            for pair in &closure {
                for edge in &edges {
                    let next = vec![pair[0].clone(), edge[1].clone()];
                    if !pair[1].is_null() && pair[1] == edge[0] && !grown.contains(&next) {
                        grown.push(next);
                    }
                }
            }
            if grown.len() == closure.len() {
                break;
            }
            closure = grown;
        }
        let mut expected = ZSet::new();
        for row in closure {
            expected.push(row, 1);
        }
        let (incremental, _) = run(&reachability(true), &history);
        prop_assert_eq!(incremental, expected.consolidate());
    }

    #[test]
    fn seeded_recursion_matches_recomputation(seed: u64, history in history()) {
        check(seeded_reachability(), history, seed)?;
    }

    #[test]
    fn recursive_union_matches_recomputation(seed: u64, history in history()) {
        check(reachability(true), history, seed)?;
    }

    #[test]
    fn recursive_union_all_matches_recomputation(seed: u64, history in history()) {
        check(reachability(false), history, seed)?;
    }

    #[test]
    fn array_agg_matches_recomputation(seed: u64, history in history(), grouped: bool) {
        check(array_aggregate(usize::from(grouped)), history, seed)?;
    }

    #[test]
    fn string_agg_matches_recomputation(seed: u64, history in history(), grouped: bool) {
        check(string_aggregate(usize::from(grouped)), history, seed)?;
    }

    #[test]
    fn aggregate_over_join_matches_recomputation(seed: u64, history in history(), kind in prop_oneof![
        Just(JoinKind::Inner), Just(JoinKind::Left), Just(JoinKind::Full)]) {
        check(aggregate_of(1, join(kind)), history, seed)?;
    }

    #[test]
    fn distinct_matches_recomputation(seed: u64, history in history()) {
        check(PlanNode::Distinct { op_id: 30, input: Box::new(source(LEFT)) }, history, seed)?;
    }

    #[test]
    fn unions_match_recomputation(seed: u64, history in history(), grouped: bool) {
        let union = PlanNode::UnionAll {
            inputs: vec![source(LEFT), folded_source(RIGHT)],
            schema: int_schema(&["k", "v"]),
        };
        check(aggregate_of(usize::from(grouped), union), history, seed)?;
    }

    #[test]
    fn top_k_matches_recomputation_and_sorting(
        seed: u64,
        history in history(),
        partitioned: bool,
        descending: bool,
        nulls_first: bool,
        offset in 0u64..3,
        limit in 0u64..4,
        folded: bool,
        numbering in prop_oneof![
            Just(None),
            Just(Some(Numbering::RowNumber)),
            Just(Some(Numbering::Rank)),
            Just(Some(Numbering::DenseRank)),
        ],
    ) {
        let input = if folded { folded_source(LEFT) } else { source(LEFT) };
        // Ranks are kept from the first.
        let offset = if matches!(numbering, Some(Numbering::Rank | Numbering::DenseRank)) { 0 } else { offset };
        let plan = top_k(input, partitioned, (descending, nulls_first), (offset, limit), numbering);
        check(plan.clone(), history.clone(), seed)?;
        if !folded {
            let (_, recomputed) = run_on(&plan, &history, &BucketMap::rendezvous(1).expect("one shard"));
            prop_assert_eq!(recomputed, sorted_window(&plan, &history));
        }
    }

    #[test]
    fn set_operations_match_recomputation(seed: u64, history in history(), operator in prop_oneof![Just(SetOperator::Except), Just(SetOperator::Intersect)], all: bool) {
        let plan = PlanNode::SetOperation { op_id: 40, left: Box::new(source(LEFT)), right: Box::new(source(RIGHT)), operator, all };
        check(plan, history, seed)?;
    }
}

fn top_k(
    input: PlanNode,
    partitioned: bool,
    (descending, nulls_first): (bool, bool),
    (offset, limit): (u64, u64),
    numbering: Option<Numbering>,
) -> PlanNode {
    let mut schema = input.schema().clone();
    if numbering.is_some() {
        schema.columns.push(Column {
            name: "n".to_string(),
            sql_type: SqlType::Int64,
        });
    }
    PlanNode::TopK {
        op_id: 60,
        input: Box::new(input),
        partition: if partitioned { vec![0] } else { Vec::new() },
        order_by: vec![SortKey {
            column: 1,
            descending,
            nulls_first,
        }],
        offset,
        limit,
        numbering,
        schema,
    }
}

/// What a top-K over `LEFT` must hold after `history`: each partition of
/// the final rows sorted (by the order key, then by the row), repeated
/// rows as often as they occur, cut to the window — by position, or by
/// rank (1 + the rows ordered strictly before) or dense rank (1 + the
/// distinct order keys before), numbered so.
fn sorted_window(plan: &PlanNode, history: &[Vec<(ObjectId, Row, i64)>]) -> ZSet {
    let PlanNode::TopK {
        partition,
        order_by,
        offset,
        limit,
        numbering,
        ..
    } = plan
    else {
        panic!("not a top-K");
    };
    let mut rows = ZSet::new();
    for (source, row, weight) in history.iter().flatten() {
        if *source == LEFT {
            rows.push(row.clone(), *weight);
        }
    }
    type Sorted = Vec<(Vec<u8>, Vec<u8>, Row)>;
    let mut partitions: std::collections::BTreeMap<Vec<u8>, Sorted> =
        std::collections::BTreeMap::new();
    for (row, weight) in rows.consolidate().updates {
        let values: Row = partition
            .iter()
            .map(|&column| row[column].clone())
            .collect();
        let mut order = Vec::new();
        crate::keys::push_order_key(&row, order_by, &mut order);
        let encoded = rockstream_types::encoding::encode_row(&row);
        for _ in 0..weight {
            partitions
                .entry(rockstream_types::encoding::encode_row(&values))
                .or_default()
                .push((order.clone(), encoded.clone(), row.clone()));
        }
    }
    let mut window = ZSet::new();
    for mut rows in partitions.into_values() {
        rows.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        let (mut rank, mut dense) = (0, 0);
        for position in 0..rows.len() {
            if position == 0 || rows[position].0 != rows[position - 1].0 {
                rank = position as u64 + 1;
                dense += 1;
            }
            let number = match numbering {
                None | Some(Numbering::RowNumber) => position as u64 + 1,
                Some(Numbering::Rank) => rank,
                Some(Numbering::DenseRank) => dense,
            };
            let kept = match numbering {
                None | Some(Numbering::RowNumber) => {
                    position as u64 >= *offset && (position as u64) < offset + limit
                }
                Some(_) => number <= *limit,
            };
            if kept {
                let mut row = rows[position].2.clone();
                if numbering.is_some() {
                    row.push(Datum::Int64(number as i64));
                }
                window.push(row, 1);
            }
        }
    }
    window.consolidate()
}

#[test]
fn global_aggregate_emits_one_row_on_empty_input() {
    // Goal: PostgreSQL returns one row for an aggregate without GROUP BY.
    let plan = PlanNode::Aggregate {
        op_id: 50,
        input: Box::new(source(LEFT)),
        group_count: 0,
        aggregates: vec![
            AggregateCall {
                function: AggregateFunction::CountStar,
                argument: None,
                distinct: false,
                input_type: None,
                output_type: SqlType::Int64,
                delimiter: None,
                order_by: Vec::new(),
                fraction: None,
                filter: None,
            },
            AggregateCall {
                function: AggregateFunction::Sum,
                argument: Some(1),
                distinct: false,
                input_type: Some(SqlType::Int64),
                output_type: SqlType::Int64,
                delimiter: None,
                order_by: Vec::new(),
                fraction: None,
                filter: None,
            },
        ],
        schema: int_schema(&["count", "sum"]),
        retire: None,
    };
    let history = [
        vec![(LEFT, vec![Datum::Int64(1), Datum::Int64(5)], 1)],
        vec![(LEFT, vec![Datum::Int64(1), Datum::Int64(5)], -1)],
    ];
    // Once however many shards compute it.
    for shards in [1, 3] {
        let map = BucketMap::rendezvous(shards).expect("a map");
        let (incremental, recomputed) = run_on(&plan, &history, &map);
        assert_eq!(incremental, recomputed);
        assert_eq!(
            incremental.updates,
            vec![(vec![Datum::Int64(0), Datum::Null], 1)]
        );
    }
}

/// The exchanges `place` puts in a plan, by their keys, bottom up.
fn exchanges(plan: &PlanNode) -> Vec<Vec<usize>> {
    let mut keys = Vec::new();
    plan.visit(&mut |node| {
        if let PlanNode::Exchange { key, .. } = node {
            keys.push(key.clone());
        }
    });
    keys.reverse();
    keys
}

#[test]
fn exchanges_go_where_the_partitioning_changes() {
    // Goal: rows move only where an operator needs them partitioned
    // otherwise than they are, and never at one shard.
    let keyed = |object_id| match object_id {
        LEFT | RIGHT => Partitioning::Hash(vec![0]),
        _ => Partitioning::Arbitrary,
    };
    let anywhere = |_| Partitioning::Arbitrary;
    let placed = |plan: PlanNode, shards, source: &dyn Fn(ObjectId) -> Partitioning| {
        let key = output_key(&plan);
        exchanges(&place(plan, &key, shards, source))
    };
    // GROUP BY the sources' key: already in place.
    assert_eq!(placed(aggregate(1), 4, &keyed), Vec::<Vec<usize>>::new());
    assert_eq!(placed(aggregate(1), 4, &anywhere), vec![vec![0]]);
    // A global aggregate gathers; its one row is then where its (empty)
    // output key puts it.
    assert_eq!(placed(aggregate(0), 4, &keyed), vec![Vec::<usize>::new()]);
    // A join on both sides' key, and its output kept by the left key, which
    // is not the view's key (it has none): each output row moves once.
    assert_eq!(
        placed(join(JoinKind::Inner), 4, &keyed),
        vec![vec![0, 1, 2, 3]]
    );
    assert_eq!(
        placed(join(JoinKind::Inner), 4, &anywhere),
        vec![vec![0], vec![0], vec![0, 1, 2, 3]]
    );
    // NOT IN gathers both sides.
    assert_eq!(
        placed(not_in(), 4, &keyed)[..2],
        [Vec::<usize>::new(), Vec::new()]
    );
    for plan in [aggregate(1), join(JoinKind::Full), not_in()] {
        assert!(placed(plan, 1, &anywhere).is_empty());
    }
}

#[test]
fn string_agg_joins_values_in_order_with_their_delimiters() {
    // Goal: PostgreSQL's string_agg: each value after the first is preceded
    // by its own row's delimiter; ORDER BY v DESC NULLS FIRST; DISTINCT
    // keeps one of each value; NULL values are skipped.
    let plan = string_aggregate(0);
    let row = |k: i64, v: Option<i64>| vec![Datum::Int64(k), v.map_or(Datum::Null, Datum::Int64)];
    let (incremental, _) = run(
        &plan,
        &[
            vec![(LEFT, row(1, Some(2)), 1), (LEFT, row(7, Some(5)), 1)],
            vec![(LEFT, row(3, Some(2)), 1), (LEFT, row(4, None), 1)],
            vec![(LEFT, row(7, Some(5)), -1), (LEFT, row(9, Some(10)), 1)],
        ],
    );
    let text = |value: &str| Datum::Text(value.to_string());
    assert_eq!(
        incremental.updates,
        vec![(vec![text("101232"), text("10,2")], 1)]
    );
}
