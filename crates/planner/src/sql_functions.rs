//! SQL functions (`CREATE FUNCTION … LANGUAGE SQL`, RFC 0012), inlined.
//!
//! A call plans as a scalar UDF with the function's declared signature, so
//! it type-checks like any call (an unknown arity or argument type is
//! 42883). The first analyzer rule, [`InlineSqlFunctions`], replaces the
//! call by the function's body: each argument cast to its declared type
//! where the body names it, the result cast to the declared return type,
//! and for a `STRICT` function `NULL` when any argument is. The rules after
//! it (PostgreSQL's integer overflow, numeric scale, text casts, type
//! coercion) see the body as if the query spelled it out, so a view calling
//! a function is maintained exactly like one writing its body, and refused
//! for what its body does (`now()`, `random()`).
//!
//! A body is planned when a statement first calls its function, in the
//! statement's session, over a schema of its arguments, with the calls it
//! makes to other SQL functions expanded in turn (their arguments checked
//! as any call's); a function that reaches itself, or whose inlined calls
//! grow past [`INLINED_NODES_MAX`], is refused ([`check_function`] at
//! `CREATE`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::ControlFlow;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use datafusion::arrow::datatypes::{DataType, Field};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{DFSchema, Result};
use datafusion::error::DataFusionError;
use datafusion::execution::context::SessionContext;
use datafusion::execution::SessionState;
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::{
    cast, lit, ColumnarValue, Expr, ExprSchemable, LogicalPlan, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;
use datafusion::sql::sqlparser::ast::{Expr as SqlExpr, ObjectNamePart, Visit, Visitor};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use parking_lot::RwLock;
use rockstream_plan::arrow_types::{datafusion_error, sql_type_of};
use rockstream_types::{codes, ObjectId, RsError, RsResult};

use crate::plan_rewrite::{has_subquery, rewrite_exprs};

/// How deep calls of SQL functions within SQL functions may nest.
pub const SQL_FUNCTION_DEPTH_MAX: usize = 32;

/// A SQL function as the planner inlines it.
#[derive(Debug, Clone, PartialEq)]
pub struct SqlFunction {
    /// Its catalog id (`pg_proc.oid` is [`crate::relation_oid`] of it).
    pub id: ObjectId,
    /// Lower-case unless it was quoted.
    pub name: String,
    pub arguments: Vec<SqlArgument>,
    pub returns: DeclaredType,
    /// `returns` as declared, in PostgreSQL's spelling.
    pub returns_name: String,
    /// As declared (`pg_proc.provolatile`): `i`, `s` or `v`.
    pub volatility: char,
    /// One scalar expression over the arguments (by name, or `$1`, `$2`, …),
    /// in SQL.
    pub body: String,
    /// `STRICT`: `NULL` when any argument is.
    pub strict: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SqlArgument {
    pub name: Option<String>,
    pub data_type: DeclaredType,
    /// As declared, in PostgreSQL's spelling.
    pub type_name: String,
}

/// An argument's or a result's declared type.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum DeclaredType {
    /// Values are cast to it.
    Exact(DataType),
    /// `numeric`, whose precision and scale PostgreSQL ignores in a
    /// function's signature: an integer becomes a numeric, another number
    /// keeps its own precision and scale.
    AnyNumeric,
}

impl DeclaredType {
    /// What planning takes it for before the call is inlined.
    fn provisional(&self) -> DataType {
        match self {
            DeclaredType::Exact(data_type) => data_type.clone(),
            DeclaredType::AnyNumeric => DataType::Decimal128(38, 10),
        }
    }

    /// `expr`, of type `given` if known, as a value of this type. An
    /// integer given for any numeric becomes a numeric (`5 / 3` in the
    /// body divides numerics, as PostgreSQL's does).
    fn cast(&self, expr: Expr, given: Option<&DataType>) -> Expr {
        match self {
            DeclaredType::Exact(data_type) => cast(expr, data_type.clone()),
            DeclaredType::AnyNumeric if given.is_some_and(DataType::is_integer) => {
                cast(expr, DataType::Decimal128(38, 0))
            }
            // An untyped literal (`'1.50'`) is read with the scale it is
            // written with, as PostgreSQL reads it.
            DeclaredType::AnyNumeric => match literal_scale(&expr) {
                Some(scale) => cast(expr, DataType::Decimal128(38, scale)),
                None => expr,
            },
        }
    }

    fn accepts(&self, given: &DataType) -> bool {
        coerces_implicitly(given, &self.provisional())
    }

    fn pg_name(&self) -> String {
        match self {
            DeclaredType::Exact(data_type) => pg_type_name(data_type),
            DeclaredType::AnyNumeric => "numeric".to_string(),
        }
    }
}

/// The scale of a string literal written as a number (`'1.50'`: 2), at
/// most 38.
fn literal_scale(expr: &Expr) -> Option<i8> {
    let Expr::Literal(
        datafusion::common::ScalarValue::Utf8(Some(text))
        | datafusion::common::ScalarValue::Utf8View(Some(text)),
        _,
    ) = expr
    else {
        return None;
    };
    let digits = text.trim().split_once('.').map_or(0, |(_, fraction)| {
        fraction.chars().take_while(char::is_ascii_digit).count()
    });
    i8::try_from(digits.min(38)).ok()
}

impl SqlFunction {
    /// `name(type, …)`, as PostgreSQL names a function in messages.
    pub fn signature(&self) -> String {
        let types: Vec<String> = self
            .arguments
            .iter()
            .map(|argument| argument.data_type.pg_name())
            .collect();
        format!("{}({})", self.name, types.join(", "))
    }

    /// Its arguments as `pg_get_function_arguments` prints them:
    /// `s character varying, n integer`.
    pub fn arguments_text(&self) -> String {
        let arguments: Vec<String> = self
            .arguments
            .iter()
            .map(|argument| match &argument.name {
                Some(name) => format!("{} {}", crate::quote_ident(name), argument.type_name),
                None => argument.type_name.clone(),
            })
            .collect();
        arguments.join(", ")
    }

    /// The schema its body is planned over: one column per named argument.
    fn argument_schema(&self) -> Result<DFSchema> {
        let fields: Vec<Field> = self
            .arguments
            .iter()
            .filter_map(|argument| {
                let name = argument.name.as_ref()?;
                Some(Field::new(name, argument.data_type.provisional(), true))
            })
            .collect();
        DFSchema::from_unqualified_fields(fields.into(), HashMap::new())
    }
}

fn pg_type_name(data_type: &DataType) -> String {
    sql_type_of(data_type)
        .map(|sql_type| sql_type.pg_name())
        .unwrap_or_else(|_| data_type.to_string())
}

/// The UDF a call of a SQL function plans as, until it is inlined.
#[derive(Debug, PartialEq, Eq, Hash)]
struct SqlFunctionCall {
    name: String,
    /// `public.name`: DataFusion looks a qualified call up by its text.
    aliases: Vec<String>,
    arguments: Vec<DeclaredType>,
    returns: DataType,
    signature: Signature,
    /// `name(type, …)`.
    described: String,
}

impl ScalarUDFImpl for SqlFunctionCall {
    fn name(&self) -> &str {
        &self.name
    }

    fn aliases(&self) -> &[String] {
        &self.aliases
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arguments: &[DataType]) -> Result<DataType> {
        Ok(self.returns.clone())
    }

    /// Any: [`InlineSqlFunctions`] checks the arguments against the
    /// declared types (an error here would lose its code in DataFusion's
    /// message).
    fn coerce_types(&self, given: &[DataType]) -> Result<Vec<DataType>> {
        Ok(given.to_vec())
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        Err(DataFusionError::Internal(format!(
            "SQL function {} is inlined while planning and never called",
            self.described
        )))
    }
}

/// 42883 unless `args` (typed by `schema`) fit `function`'s arguments.
fn check_arguments(function: &SqlFunction, args: &[Expr], schema: &DFSchema) -> Result<()> {
    let given: Vec<Option<DataType>> = args.iter().map(|arg| arg.get_type(schema).ok()).collect();
    let fits = given.len() == function.arguments.len()
        && given
            .iter()
            .zip(&function.arguments)
            .all(|(given, declared)| {
                given
                    .as_ref()
                    .is_none_or(|given| declared.data_type.accepts(given))
            });
    if fits {
        return Ok(());
    }
    let given: Vec<String> = given
        .iter()
        .map(|given| {
            given
                .as_ref()
                .map(pg_type_name)
                .unwrap_or_else(|| "unknown".into())
        })
        .collect();
    Err(DataFusionError::External(Box::new(RsError::new(
        &codes::UNDEFINED_FUNCTION,
        format!(
            "function {}({}) does not exist (there is {})",
            function.name,
            given.join(", "),
            function.signature()
        ),
    ))))
}

/// Whether PostgreSQL would pass a value of type `given` to an argument
/// declared `declared` without an explicit cast. Strings stand for untyped
/// literals here (`'c'`), which PostgreSQL converts to any type.
fn coerces_implicitly(given: &DataType, declared: &DataType) -> bool {
    given == declared
        || given.is_null()
        || matches!(
            given,
            DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8
        )
        || given.is_numeric() && declared.is_numeric()
        || given.is_temporal() && declared.is_temporal()
}

/// Registers `functions` in `context`: a UDF per function, which `rule`
/// (first in the context's analyzer) replaces with the function's body,
/// planned in `context` when a statement first calls it.
pub(crate) fn register(
    context: &SessionContext,
    functions: &[Arc<SqlFunction>],
    rule: &InlineSqlFunctions,
) {
    for function in functions {
        context.register_udf(udf(function));
    }
    let _ = rule.state.set(context.state_weak_ref());
}

fn udf(function: &SqlFunction) -> ScalarUDF {
    ScalarUDF::from(SqlFunctionCall {
        name: function.name.clone(),
        aliases: vec![format!("public.{}", crate::quote_ident(&function.name))],
        arguments: function
            .arguments
            .iter()
            .map(|argument| argument.data_type.clone())
            .collect(),
        returns: function.returns.provisional(),
        // Whatever its body calls: a view is refused for that, once inlined.
        signature: Signature::user_defined(Volatility::Immutable),
        described: function.signature(),
    })
}

/// Each function's body, with the calls it makes to SQL functions expanded
/// (or why it cannot be planned).
pub(crate) type Bodies = HashMap<String, std::result::Result<Expr, RsError>>;

/// `function`'s body planned, calls of SQL functions in it replaced by
/// their bodies; `calling` holds the functions being expanded around it.
fn expand(
    state: &SessionState,
    functions: &HashMap<String, Arc<SqlFunction>>,
    function: &SqlFunction,
    calling: &mut Vec<String>,
    expanded: &mut Bodies,
) -> std::result::Result<Expr, RsError> {
    if let Some(done) = expanded.get(&function.name) {
        return done.clone();
    }
    if calling.contains(&function.name) || calling.len() >= SQL_FUNCTION_DEPTH_MAX {
        let path = calling.join(" → ");
        return Err(RsError::new(
            &codes::INVALID_FUNCTION_DEFINITION,
            format!(
                "function {} calls itself ({path} → {}): recursive SQL functions are not supported",
                function.name, function.name
            ),
        ));
    }
    let raw = function
        .argument_schema()
        .and_then(|schema| state.create_logical_expr(&function.body, &schema))
        .and_then(|raw| typed_parameters(function, raw))
        .map_err(|error| in_body(function, datafusion_error(error)));
    let expansion = match raw.map(|raw| (stray_column(function, &raw), raw)) {
        Err(error) => Err(error),
        Ok((Some(column), _)) => Err(RsError::new(
            &codes::UNDEFINED_COLUMN,
            format!(
                "column \"{column}\" does not exist (in the body of function {}, which reads its arguments only)",
                function.name
            ),
        )),
        Ok((None, raw)) => expand_calls(state, functions, function, raw, calling, expanded),
    };
    expanded.insert(function.name.clone(), expansion.clone());
    expansion
}

/// `raw`, the planned body of `function`, with the calls of SQL functions
/// in it replaced by their bodies.
fn expand_calls(
    state: &SessionState,
    functions: &HashMap<String, Arc<SqlFunction>>,
    function: &SqlFunction,
    raw: Expr,
    calling: &mut Vec<String>,
    expanded: &mut Bodies,
) -> std::result::Result<Expr, RsError> {
    let schema = function
        .argument_schema()
        .map_err(|error| in_body(function, datafusion_error(error)))?;
    calling.push(function.name.clone());
    let mut failure = None;
    // Nodes the body's calls inlined so far: many calls, each within the
    // bound, must not add up past it either.
    let mut spent = 0usize;
    let body = raw
        .transform_up(|expr| {
            let Some((callee, args)) = sql_function_call(&expr, functions) else {
                return Ok(Transformed::no(expr));
            };
            match expand(state, functions, &callee, calling, expanded) {
                Ok(body) => {
                    let inlined = substitute(&callee, body, args, &schema)?;
                    spent = spent.saturating_add(expr_nodes(&inlined));
                    if spent > INLINED_NODES_MAX {
                        return Err(too_large(function));
                    }
                    Ok(Transformed::yes(inlined))
                }
                Err(error) => {
                    failure = Some(error);
                    Err(DataFusionError::Plan(String::new()))
                }
            }
        })
        .map(|transformed| transformed.data);
    calling.pop();
    match (body, failure) {
        (_, Some(error)) => Err(error),
        (Ok(body), None) => {
            if let Some(refused) = refused_in_body(&body) {
                return Err(RsError::new(
                    &codes::INVALID_FUNCTION_DEFINITION,
                    format!(
                        "{refused} in the body of SQL function {} is not supported: its body must be one scalar expression",
                        function.name
                    ),
                ));
            }
            Ok(body)
        }
        (Err(error), None) => Err(in_body(function, datafusion_error(error))),
    }
}

/// The argument `$n` names (0-based), if it is a positional parameter.
fn parameter_index(placeholder: &datafusion::logical_expr::expr::Placeholder) -> Option<usize> {
    placeholder
        .id
        .strip_prefix('$')
        .and_then(|number| number.parse::<usize>().ok())
        .and_then(|number| number.checked_sub(1))
}

/// `body` with each `$n` typed as argument `n` is (untyped, it would read
/// as NULL to the checks of the calls it is passed to).
fn typed_parameters(function: &SqlFunction, body: Expr) -> Result<Expr> {
    Ok(body
        .transform_up(|expr| {
            let Expr::Placeholder(placeholder) = &expr else {
                return Ok(Transformed::no(expr));
            };
            let argument =
                parameter_index(placeholder).and_then(|index| function.arguments.get(index));
            match (argument, &placeholder.field) {
                (Some(argument), None) => {
                    let field = Field::new(&placeholder.id, argument.data_type.provisional(), true);
                    Ok(Transformed::yes(Expr::Placeholder(
                        datafusion::logical_expr::expr::Placeholder::new_with_field(
                            placeholder.id.clone(),
                            Some(Arc::new(field)),
                        ),
                    )))
                }
                _ => Ok(Transformed::no(expr)),
            }
        })?
        .data)
}

/// A column `body` reads that is none of `function`'s arguments: the body
/// sees its arguments only, never the columns around a call.
fn stray_column(function: &SqlFunction, body: &Expr) -> Option<String> {
    let mut stray = None;
    let _ = body.apply(|expr| {
        if let Expr::Column(column) = expr {
            let named = column.relation.is_none()
                && function
                    .arguments
                    .iter()
                    .any(|argument| argument.name.as_deref() == Some(column.name.as_str()));
            if !named {
                stray = Some(column.flat_name());
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    stray
}

fn in_body(function: &SqlFunction, error: RsError) -> RsError {
    let message = format!(
        "{} (in the body of function {})",
        error.message, function.name
    );
    RsError { message, ..error }
}

/// What a body may not hold: it is inlined into one row's expression.
fn refused_in_body(body: &Expr) -> Option<&'static str> {
    let mut refused = None;
    let _ = body.apply(|expr| {
        refused = match expr {
            Expr::AggregateFunction(_) => Some("an aggregate"),
            Expr::WindowFunction(_) => Some("a window function"),
            Expr::ScalarSubquery(_) | Expr::Exists(_) | Expr::InSubquery(_) => Some("a subquery"),
            _ => None,
        };
        Ok(if refused.is_some() {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    });
    refused
}

/// `expr` as a call of one of `functions`: the function and its arguments.
fn sql_function_call(
    expr: &Expr,
    functions: &HashMap<String, Arc<SqlFunction>>,
) -> Option<(Arc<SqlFunction>, Vec<Expr>)> {
    let Expr::ScalarFunction(ScalarFunction { func, args }) = expr else {
        return None;
    };
    func.inner().downcast_ref::<SqlFunctionCall>()?;
    let function = functions.get(func.name())?;
    Some((function.clone(), args.clone()))
}

/// Most expression nodes one inlined call (or one body's calls together)
/// may make: an argument is copied wherever the body reads it, so nested
/// calls multiply.
pub const INLINED_NODES_MAX: usize = 10_000;

/// Most expression nodes one statement's calls may inline together.
pub const STATEMENT_INLINED_NODES_MAX: usize = 100_000;

/// `body` of `function` with its arguments given by `args` (typed by
/// `schema`): 42883 unless they fit its declared ones.
fn substitute(
    function: &SqlFunction,
    body: Expr,
    args: Vec<Expr>,
    schema: &DFSchema,
) -> Result<Expr> {
    check_arguments(function, &args, schema)?;
    let position = |expr: &Expr| match expr {
        Expr::Column(column) if column.relation.is_none() => function
            .arguments
            .iter()
            .position(|argument| argument.name.as_deref() == Some(column.name.as_str())),
        Expr::Placeholder(placeholder) => parameter_index(placeholder),
        _ => None,
    };
    // PostgreSQL does not inline a call whose volatile argument the body
    // reads more than once (each copy would draw its own value).
    let mut reads = vec![usize::from(function.strict); args.len()];
    let _ = body.apply(|expr| {
        if let Some(count) = position(expr).and_then(|index| reads.get_mut(index)) {
            *count += 1;
        }
        Ok(TreeNodeRecursion::Continue)
    });
    // A subquery's volatility is not the expression's: count it as one.
    if let Some((arg, _)) = args
        .iter()
        .zip(&reads)
        .find(|(arg, reads)| **reads > 1 && (arg.is_volatile() || has_subquery(arg)))
    {
        return Err(DataFusionError::External(Box::new(RsError::new(
            &codes::UNSUPPORTED_STATEMENT,
            format!(
                "a volatile argument ({arg}) of SQL function {}, which reads it more than once, is not supported",
                function.name
            ),
        ))));
    }
    // What the call will make, before it is made: each argument copied
    // where the body reads it.
    let inlined = args
        .iter()
        .zip(&reads)
        .fold(expr_nodes(&body), |nodes, (arg, reads)| {
            nodes.saturating_add(reads.saturating_mul(expr_nodes(arg)))
        });
    if inlined > INLINED_NODES_MAX {
        return Err(too_large(function));
    }
    let args: Vec<Expr> = args
        .into_iter()
        .zip(&function.arguments)
        .map(|(arg, declared)| {
            let given = arg.get_type(schema).ok();
            declared.data_type.cast(arg, given.as_ref())
        })
        .collect();
    let body = body
        .transform_up(|expr| {
            let index = position(&expr);
            match index.and_then(|index| args.get(index)) {
                Some(arg) => Ok(Transformed::yes(arg.clone())),
                None if matches!(expr, Expr::Placeholder(_)) => {
                    Err(DataFusionError::External(Box::new(RsError::new(
                        &codes::INVALID_FUNCTION_DEFINITION,
                        format!(
                            "there is no parameter {expr} in function {}",
                            function.signature()
                        ),
                    ))))
                }
                None => Ok(Transformed::no(expr)),
            }
        })?
        .data;
    let result = match args.iter().cloned().map(Expr::is_null).reduce(Expr::or) {
        Some(any_null) if function.strict => Expr::Case(datafusion::logical_expr::Case {
            expr: None,
            when_then_expr: vec![(
                Box::new(any_null),
                Box::new(
                    function
                        .returns
                        .cast(lit(datafusion::common::ScalarValue::Null), None),
                ),
            )],
            else_expr: Some(Box::new(body)),
        }),
        _ => body,
    };
    let given = result.get_type(schema).ok();
    Ok(function.returns.cast(result, given.as_ref()))
}

/// How many nodes `expr` has (subqueries count as one).
fn expr_nodes(expr: &Expr) -> usize {
    let mut nodes = 0usize;
    let _ = expr.apply(|_| {
        nodes += 1;
        Ok(if nodes > INLINED_NODES_MAX {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    });
    nodes
}

fn too_large(function: &SqlFunction) -> DataFusionError {
    DataFusionError::External(Box::new(RsError::new(
        &codes::STATEMENT_TOO_COMPLEX,
        format!(
            "calls of SQL function {} inline to more than {INLINED_NODES_MAX} expression nodes (its arguments are copied wherever its body reads them)",
            function.name
        ),
    )))
}

/// Replaces every call of a SQL function with its body: the first rule of
/// the analyzer.
#[derive(Debug)]
pub(crate) struct InlineSqlFunctions {
    functions: HashMap<String, Arc<SqlFunction>>,
    /// The session bodies are planned in, set once it exists (weakly: the
    /// session holds this rule).
    state: OnceLock<Weak<RwLock<SessionState>>>,
    /// The bodies planned so far, each with the calls it makes expanded.
    bodies: Mutex<Bodies>,
}

impl InlineSqlFunctions {
    pub(crate) fn new(functions: &[Arc<SqlFunction>]) -> InlineSqlFunctions {
        InlineSqlFunctions {
            functions: functions
                .iter()
                .map(|function| (function.name.clone(), function.clone()))
                .collect(),
            state: OnceLock::new(),
            bodies: Mutex::new(Bodies::new()),
        }
    }

    /// `function`'s body, expanded.
    fn body(&self, function: &SqlFunction) -> Result<Expr> {
        let mut bodies = self
            .bodies
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let expanded = match bodies.get(&function.name) {
            Some(expanded) => expanded.clone(),
            None => {
                let Some(state) = self.state.get().and_then(Weak::upgrade) else {
                    return Err(DataFusionError::Internal(format!(
                        "SQL function {} is called outside its session",
                        function.name
                    )));
                };
                let state = state.read();
                expand(
                    &state,
                    &self.functions,
                    function,
                    &mut Vec::new(),
                    &mut bodies,
                )
            }
        };
        expanded.map_err(|error| DataFusionError::External(Box::new(error)))
    }
}

impl AnalyzerRule for InlineSqlFunctions {
    fn name(&self) -> &str {
        "inline_sql_functions"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        // Nodes this statement's calls inlined so far.
        let spent = std::cell::Cell::new(0usize);
        rewrite_exprs(plan, &|expr, schema| {
            let Some((function, args)) = sql_function_call(&expr, &self.functions) else {
                return Ok(Transformed::no(expr));
            };
            let body = self.body(&function)?;
            let inlined = substitute(&function, body, args, schema)?;
            spent.set(spent.get().saturating_add(expr_nodes(&inlined)));
            if spent.get() > STATEMENT_INLINED_NODES_MAX {
                return Err(DataFusionError::External(Box::new(RsError::new(
                    &codes::STATEMENT_TOO_COMPLEX,
                    format!(
                        "the statement's calls of SQL functions inline to more than {STATEMENT_INLINED_NODES_MAX} expression nodes"
                    ),
                ))));
            }
            Ok(Transformed::yes(inlined))
        })
    }
}

/// Checks a function about to be created: its body plans over its
/// arguments in `context` (which knows it, and every other function), is
/// one scalar expression, and reaches no function calling it back.
pub async fn check_function(context: &SessionContext, function: &SqlFunction) -> RsResult<()> {
    let nulls: Vec<String> = function
        .arguments
        .iter()
        .map(|argument| format!("CAST(NULL AS {})", argument.data_type.pg_name()))
        .collect();
    let call = format!(
        "SELECT {}({})",
        crate::quote_ident(&function.name),
        nulls.join(", ")
    );
    let state = context.state();
    let plan = state
        .create_logical_plan(&call)
        .await
        .map_err(datafusion_error)?;
    state.optimize(&plan).map_err(datafusion_error)?;
    Ok(())
}

/// The types of the parameters (`$n`) that `plan`, not yet analyzed, passes
/// as arguments of SQL functions: their declared types (DataFusion leaves
/// them untyped, which clients would take for text).
pub fn sql_function_parameter_types(plan: &LogicalPlan) -> BTreeMap<String, DataType> {
    let mut types = BTreeMap::new();
    let _ = plan.apply_with_subqueries(|node| {
        for expr in node.expressions() {
            let _ = expr.apply(|expr| {
                let Expr::ScalarFunction(ScalarFunction { func, args }) = expr else {
                    return Ok(TreeNodeRecursion::Continue);
                };
                if let Some(call) = func.inner().downcast_ref::<SqlFunctionCall>() {
                    for (arg, declared) in args.iter().zip(&call.arguments) {
                        if let Expr::Placeholder(placeholder) = arg {
                            if placeholder.field.is_none() {
                                types.insert(placeholder.id.clone(), declared.provisional());
                            }
                        }
                    }
                }
                Ok(TreeNodeRecursion::Continue)
            });
        }
        Ok(TreeNodeRecursion::Continue)
    });
    types
}

/// The SQL functions among `known` that `sql` calls, directly or through
/// the bodies of others: what a view defined by `sql` depends on.
pub fn called_functions(sql: &str, known: &[Arc<SqlFunction>]) -> BTreeSet<String> {
    let mut called = BTreeSet::new();
    let mut pending = vec![sql.to_string()];
    while let Some(sql) = pending.pop() {
        for name in function_names(&sql) {
            if let Some(function) = known.iter().find(|function| function.name == name) {
                if called.insert(name) {
                    pending.push(format!("SELECT {}", function.body));
                }
            }
        }
    }
    called
}

/// The (unqualified, normalized) names of the functions `sql` calls.
fn function_names(sql: &str) -> BTreeSet<String> {
    struct Calls(BTreeSet<String>);
    impl Visitor for Calls {
        type Break = ();
        fn pre_visit_expr(&mut self, expr: &SqlExpr) -> ControlFlow<()> {
            if let SqlExpr::Function(function) = expr {
                if let Some(ObjectNamePart::Identifier(ident)) = function.name.0.last() {
                    let name = match ident.quote_style {
                        Some(_) => ident.value.clone(),
                        None => ident.value.to_ascii_lowercase(),
                    };
                    self.0.insert(name);
                }
            }
            ControlFlow::Continue(())
        }
    }
    let mut calls = Calls(BTreeSet::new());
    if let Ok(statements) = Parser::parse_sql(&PostgreSqlDialect {}, sql) {
        for statement in &statements {
            let _ = statement.visit(&mut calls);
        }
    }
    calls.0
}

/// Whether `name` is a function every session knows (DataFusion's, or
/// PostgreSQL's as this crate provides them): a SQL function may not take
/// its name, which would hide the built-in from every query.
pub fn is_builtin_function(name: &str) -> bool {
    let context = crate::new_context(Arc::new(NoRelations));
    let state = context.state();
    state.scalar_functions().contains_key(name)
        || state.aggregate_functions().contains_key(name)
        || state.window_functions().contains_key(name)
}

#[derive(Debug)]
struct NoRelations;

#[async_trait::async_trait]
impl crate::TableResolver for NoRelations {
    async fn table(
        &self,
        _name: &str,
    ) -> std::result::Result<Option<Arc<dyn datafusion::catalog::TableProvider>>, RsError> {
        Ok(None)
    }

    fn table_names(&self) -> Vec<String> {
        Vec::new()
    }
}
