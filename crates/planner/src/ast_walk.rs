//! Walking the expressions of a statement's part without entering its
//! subqueries, which have scopes of their own.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{Expr, Query, Select, SetExpr, VisitMut, VisitorMut};

/// Calls `f` on every expression of `node` outside its subqueries, children
/// before parents (so `f` may replace an expression it is given).
pub(crate) fn for_each_unnested_expr<T: VisitMut>(node: &mut T, f: &mut dyn FnMut(&mut Expr)) {
    let _ = node.visit(&mut Unnested { depth: 0, f });
}

struct Unnested<'a> {
    /// How many subqueries deep the visit is.
    depth: usize,
    f: &'a mut dyn FnMut(&mut Expr),
}

impl VisitorMut for Unnested<'_> {
    type Break = ();

    fn pre_visit_query(&mut self, _query: &mut Query) -> ControlFlow<()> {
        self.depth += 1;
        ControlFlow::Continue(())
    }

    fn post_visit_query(&mut self, _query: &mut Query) -> ControlFlow<()> {
        self.depth -= 1;
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if self.depth == 0 {
            (self.f)(expr);
        }
        ControlFlow::Continue(())
    }
}

/// Each SELECT of a body made of set operations (not those of nested
/// queries, which a visitor reaches on its own).
pub(crate) fn for_each_select(body: &SetExpr, f: &mut dyn FnMut(&Select)) {
    match body {
        SetExpr::Select(select) => f(select),
        SetExpr::SetOperation { left, right, .. } => {
            for_each_select(left, f);
            for_each_select(right, f);
        }
        _ => {}
    }
}

/// [`for_each_select`], to change them.
pub(crate) fn for_each_select_mut(body: &mut SetExpr, f: &mut dyn FnMut(&mut Select)) {
    match body {
        SetExpr::Select(select) => f(select),
        SetExpr::SetOperation { left, right, .. } => {
            for_each_select_mut(left, f);
            for_each_select_mut(right, f);
        }
        _ => {}
    }
}
