//! PostgreSQL's spellings of types that DataFusion's SQL planner lacks.
//!
//! `CHARACTER VARYING [(n)]` is what PostgreSQL prints for `varchar`
//! (`pg_get_expr` shows a varchar column's default as
//! `'x'::character varying`, and clients send it back), but DataFusion
//! plans only the `VARCHAR` spelling. Casts and typed literals naming it
//! are rewritten, in place, to `VARCHAR` with the same length.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{DataType, Expr, TypedString, VisitMut, VisitorMut};

/// Rewrites the type spellings of a statement (or any part of one) in
/// place (see the module documentation).
pub fn normalize_type_spellings<T: VisitMut>(node: &mut T) {
    let _ = node.visit(&mut TypeSpellings);
}

struct TypeSpellings;

impl VisitorMut for TypeSpellings {
    type Break = ();

    fn pre_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        let data_type = match expr {
            Expr::Cast { data_type, .. } => data_type,
            Expr::TypedString(TypedString { data_type, .. }) => data_type,
            _ => return ControlFlow::Continue(()),
        };
        if let DataType::CharacterVarying(length) = data_type {
            *data_type = DataType::Varchar(*length);
        }
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests may unwrap: a panic is the failure report.
mod tests {
    //! Goal: `character varying` casts reach DataFusion as `VARCHAR`,
    //! with their length; other casts stay as written.
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    use super::*;

    fn normalized(sql: &str) -> String {
        let mut statement = Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .unwrap()
            .remove(0);
        normalize_type_spellings(&mut statement);
        statement.to_string()
    }

    #[test]
    fn character_varying_becomes_varchar() {
        assert_eq!(
            normalized(
                "SELECT 'a'::character varying, CAST('b' AS CHARACTER VARYING(3)), 'c'::text"
            ),
            "SELECT 'a'::VARCHAR, CAST('b' AS VARCHAR(3)), 'c'::TEXT"
        );
    }
}
