//! `EXCEPT [ALL]` / `INTERSECT [ALL]` at the top of a view's query.
//!
//! DataFusion plans `EXCEPT`/`INTERSECT` as anti/semi joins, which is right
//! for the set forms but not for `ALL`, where multiplicities subtract or take
//! the minimum. So when a view's query is a tree of these operations, each
//! branch is planned on its own and the branches are combined with the
//! `SetOperation` operator, which keeps both sides' multiplicities. An `ALL`
//! form anywhere else (inside a subquery) is refused rather than computed
//! wrongly.

use datafusion::arrow::datatypes::DataType;
use datafusion::logical_expr::type_coercion::binary::comparison_coercion;
use datafusion::logical_expr::{cast, Expr, LogicalPlan};
use datafusion::sql::sqlparser::ast::{
    Query, SetExpr, SetOperator as SqlSetOperator, SetQuantifier,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
use rockstream_plan::arrow_types::{arrow_type, sql_type_of};
use rockstream_plan::{Column, PlanNode, Schema, SetOperator};
use rockstream_types::{RsError, RsResult};

/// True when the SQL text uses `EXCEPT ALL` or `INTERSECT ALL` anywhere.
pub fn uses_bag_set_operation(sql: &str) -> bool {
    let Ok(tokens) = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize() else {
        return false;
    };
    let words: Vec<Keyword> = tokens
        .iter()
        .filter_map(|token| match token {
            Token::Word(word) => Some(word.keyword),
            Token::Whitespace(_) => None,
            _ => Some(Keyword::NoKeyword),
        })
        .collect();
    words
        .windows(2)
        .any(|pair| matches!(pair, [Keyword::EXCEPT | Keyword::INTERSECT, Keyword::ALL]))
}

/// The top-level set-operation tree of `query`, if it has one we plan
/// ourselves: `(operator, all, left, right)`.
pub fn top_level_set_operation(query: &Query) -> Option<(SetOperator, bool, &SetExpr, &SetExpr)> {
    if query.with.is_some() || query.order_by.is_some() || query.limit_clause.is_some() {
        return None;
    }
    split(&query.body)
}

pub fn split(body: &SetExpr) -> Option<(SetOperator, bool, &SetExpr, &SetExpr)> {
    match body {
        SetExpr::SetOperation {
            op,
            set_quantifier,
            left,
            right,
        } => {
            let operator = match op {
                SqlSetOperator::Except => SetOperator::Except,
                SqlSetOperator::Intersect => SetOperator::Intersect,
                _ => return None,
            };
            Some((
                operator,
                matches!(set_quantifier, SetQuantifier::All),
                left,
                right,
            ))
        }
        SetExpr::Query(inner)
            if inner.with.is_none() && inner.order_by.is_none() && inner.limit_clause.is_none() =>
        {
            split(&inner.body)
        }
        _ => None,
    }
}

/// Casts `node` (planned from `plan`) to `target` column types where needed.
pub fn coerce(node: PlanNode, plan: &LogicalPlan, target: &[DataType]) -> RsResult<PlanNode> {
    let schema = plan.schema();
    let current: Vec<DataType> = schema
        .fields()
        .iter()
        .map(|field| field.data_type().clone())
        .collect();
    if current == target {
        return Ok(node);
    }
    let exprs: Vec<Expr> = schema
        .columns()
        .into_iter()
        .zip(target)
        .map(|(column, data_type)| cast(Expr::Column(column), data_type.clone()))
        .collect();
    let columns = node
        .schema()
        .columns
        .iter()
        .zip(target)
        .map(|(column, data_type)| {
            Ok(Column {
                name: column.name.clone(),
                sql_type: sql_type_of(data_type)?,
            })
        })
        .collect::<RsResult<Vec<_>>>()?;
    Ok(PlanNode::Map {
        input: Box::new(node),
        exprs,
        input_schema: schema.clone(),
        schema: Schema { columns },
    })
}

/// The common column types of two branches, as PostgreSQL would unify them.
pub fn unify(left: &LogicalPlan, right: &LogicalPlan) -> RsResult<Vec<DataType>> {
    let left_fields = left.schema().fields();
    let right_fields = right.schema().fields();
    if left_fields.len() != right_fields.len() {
        return Err(RsError::new(
            &rockstream_types::codes::PLAN_ERROR,
            "each EXCEPT/INTERSECT query must have the same number of columns",
        ));
    }
    left_fields
        .iter()
        .zip(right_fields.iter())
        .map(|(l, r)| {
            let unified = comparison_coercion(l.data_type(), r.data_type()).ok_or_else(|| {
                RsError::new(
                    &rockstream_types::codes::PLAN_ERROR,
                    format!(
                        "EXCEPT/INTERSECT types {} and {} cannot be matched",
                        l.data_type(),
                        r.data_type()
                    ),
                )
            })?;
            Ok(arrow_type(sql_type_of(&unified)?))
        })
        .collect()
}
