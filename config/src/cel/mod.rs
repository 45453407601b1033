//! CEL expressions, as Envoy evaluates them: the access-log `extension_filter`
//! `envoy.access_loggers.extension_filters.cel` (a string expression) and the
//! unified matcher's `xds.type.matcher.v3.CelMatcher` (a parsed or checked
//! AST, or a string) over `HttpAttributesCelMatchInput`.
//!
//! An expression is compiled once, at config time, into the `cel` crate's AST;
//! evaluation binds only the attribute roots the expression names (`request`,
//! `response`, `source`, ...), each built by the caller from what it has
//! ([`Attributes`]). Envoy's rule for filters and matchers: an expression that
//! does not evaluate to `true` (an error, a missing attribute, a non-boolean)
//! does not match.

mod ast;
pub mod matcher_pb;

use crate::ctx::Ctx;
use crate::path::Path;
pub use cel::Value;
use cel::common::ast::{Expr as Node, IdedExpr};
use cel::common::value::Val;
use envoy_types::pb::xds::r#type::v3 as xtype;
use std::sync::{Arc, LazyLock};

/// The RBAC policy's `condition` / `checked_condition` messages: every field
/// is read (the AST) or, for a checked expression's type information, not
/// needed to evaluate it (Envoy too evaluates only its `expr`).
pub(crate) const SUPPORT: &[crate::support::Support] = &[
    ("google.api.expr.v1alpha1.Expr", crate::support::ALL),
    ("google.api.expr.v1alpha1.Expr.Ident", crate::support::ALL),
    ("google.api.expr.v1alpha1.Expr.Select", crate::support::ALL),
    ("google.api.expr.v1alpha1.Expr.Call", crate::support::ALL),
    (
        "google.api.expr.v1alpha1.Expr.CreateList",
        crate::support::ALL,
    ),
    (
        "google.api.expr.v1alpha1.Expr.CreateStruct",
        crate::support::ALL,
    ),
    (
        "google.api.expr.v1alpha1.Expr.CreateStruct.Entry",
        crate::support::ALL,
    ),
    (
        "google.api.expr.v1alpha1.Expr.Comprehension",
        crate::support::ALL,
    ),
    ("google.api.expr.v1alpha1.Constant", crate::support::ALL),
    ("google.api.expr.v1alpha1.CheckedExpr", crate::support::ALL),
    ("google.api.expr.v1alpha1.Reference", crate::support::ALL),
    ("google.api.expr.v1alpha1.Type", crate::support::ALL),
    (
        "google.api.expr.v1alpha1.Type.ListType",
        crate::support::ALL,
    ),
    ("google.api.expr.v1alpha1.Type.MapType", crate::support::ALL),
    (
        "google.api.expr.v1alpha1.Type.FunctionType",
        crate::support::ALL,
    ),
    (
        "google.api.expr.v1alpha1.Type.AbstractType",
        crate::support::ALL,
    ),
    ("google.api.expr.v1alpha1.SourceInfo", crate::support::ALL),
    (
        "google.api.expr.v1alpha1.SourceInfo.Extension",
        crate::support::ALL,
    ),
    (
        "google.api.expr.v1alpha1.SourceInfo.Extension.Version",
        crate::support::ALL,
    ),
];

/// The attribute roots Envoy defines (its "attributes" vocabulary); an
/// expression naming another top-level identifier evaluates to an error.
pub const ROOTS: &[&str] = &[
    "request",
    "response",
    "connection",
    "upstream",
    "source",
    "destination",
    "metadata",
    "filter_state",
    "xds",
];

/// A compiled CEL expression.
#[derive(Debug, Clone)]
pub struct Expr {
    node: Arc<IdedExpr>,
    /// The attribute roots it names, bound at evaluation.
    roots: Arc<[&'static str]>,
    /// Its source text (or a rendering of its AST), for debug output.
    source: Arc<str>,
}

impl PartialEq for Expr {
    fn eq(&self, other: &Self) -> bool {
        self.node == other.node
    }
}

/// What an expression may read: the value of one attribute root (`request`,
/// `response`, ...), built on demand; `None` when the caller has none (a
/// response attribute while the request is being decided, say).
pub trait Attributes {
    /// The value of `root`, one of [`ROOTS`].
    fn root(&self, root: &str) -> Option<Value>;
}

/// The standard environment (functions, macros), built once.
static ENV: LazyLock<Arc<cel::Env>> = LazyLock::new(|| Arc::new(cel::Env::stdlib()));

impl Expr {
    /// Compiles a CEL source string; a syntax error is reported at `path`.
    pub fn parse(source: &str, path: &Path<'_>, ctx: &mut Ctx) -> Option<Expr> {
        match Expr::compile(source) {
            Ok(e) => Some(e),
            Err(e) => {
                ctx.error(path, format!("invalid CEL expression: {e}"));
                None
            }
        }
    }

    /// Compiles a CEL source string outside a config walk (tests, tools).
    pub fn compile(source: &str) -> Result<Expr, String> {
        cel::Program::compile(source)
            .map(|p| Expr::new(p.expression().clone(), source.into()))
            .map_err(|e| e.to_string())
    }

    /// Compiles an `xds.type.v3.CelExpression` as Envoy 1.40 does:
    /// `cel_expr_checked`'s AST, else `cel_expr_parsed`'s, else the deprecated
    /// `checked_expr` / `parsed_expr` (the same AST under its old package).
    /// Envoy does not read `cel_expr_string` here: with nothing else set the
    /// expression is not set, an error, as in Envoy.
    pub fn from_xds(e: &xtype::CelExpression, path: &Path<'_>, ctx: &mut Ctx) -> Option<Expr> {
        use xtype::cel_expression::ExprSpecifier;
        let (ast, field) = if let Some(checked) = &e.cel_expr_checked {
            (checked.expr.clone(), "cel_expr_checked")
        } else if let Some(parsed) = &e.cel_expr_parsed {
            (parsed.expr.clone(), "cel_expr_parsed")
        } else {
            match &e.expr_specifier {
                Some(ExprSpecifier::ParsedExpr(p)) => (legacy(p.expr.as_ref()), "parsed_expr"),
                Some(ExprSpecifier::CheckedExpr(c)) => (legacy(c.expr.as_ref()), "checked_expr"),
                None => {
                    ctx.error(
                        path,
                        "CEL expression not set (needs cel_expr_parsed or cel_expr_checked; \
                         Envoy does not read cel_expr_string here)",
                    );
                    return None;
                }
            }
        };
        let ep = path.field(field);
        let ep = ep.field("expr");
        let Some(root) = ast else {
            ctx.error(&ep, "is required");
            return None;
        };
        ast::convert(&root, &ep, ctx).map(|n| Expr::new(n, format!("<{field}>").into()))
    }

    /// Compiles a `google.api.expr.v1alpha1.Expr` (the RBAC policy's
    /// `condition`, `checked_condition.expr`): the same AST under its old
    /// package, read as Envoy reads it, through its wire form.
    pub fn from_legacy(
        e: &envoy_types::pb::google::api::expr::v1alpha1::Expr,
        path: &Path<'_>,
        ctx: &mut Ctx,
    ) -> Option<Expr> {
        let Some(root) = legacy(Some(e)) else {
            ctx.error(path, "cannot be read as a cel.expr.Expr");
            return None;
        };
        ast::convert(&root, path, ctx).map(|n| Expr::new(n, "<condition>".into()))
    }

    fn new(node: IdedExpr, source: Arc<str>) -> Expr {
        let mut roots: Vec<&'static str> = Vec::new();
        collect_roots(&node, &mut roots);
        Expr {
            node: Arc::new(node),
            roots: roots.into(),
            source,
        }
    }

    /// The source text (or `<parsed expression>`).
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Evaluates the expression against `attrs`.
    pub fn eval(&self, attrs: &dyn Attributes) -> Result<Value, String> {
        let mut ctx = cel::Context::with_env(Arc::clone(&ENV));
        for root in self.roots.iter() {
            // A value that has no CEL form (none built here) stays unbound: the
            // expression then errs on it, which is no match.
            if let Some(v) = attrs
                .root(root)
                .and_then(|v| Box::<dyn Val>::try_from(v).ok())
            {
                ctx.add_variable_as_val(*root, v);
            }
        }
        Value::resolve(&self.node, &ctx).map_err(|e| e.to_string())
    }

    /// Whether the expression evaluates to `true` (an error or any other value
    /// is no match, as Envoy's filters and matchers take it).
    pub fn matches(&self, attrs: &dyn Attributes) -> bool {
        matches!(self.eval(attrs), Ok(Value::Bool(true)))
    }
}

/// Records each attribute root `node` names (an identifier among [`ROOTS`]).
fn collect_roots(node: &IdedExpr, out: &mut Vec<&'static str>) {
    let mut add = |name: &str| {
        if let Some(r) = ROOTS.iter().find(|r| **r == name)
            && !out.contains(r)
        {
            out.push(r);
        }
    };
    let mut stack = vec![node];
    while let Some(n) = stack.pop() {
        match &n.expr {
            Node::Ident(name) => add(name),
            Node::Select(s) => stack.push(&s.operand),
            Node::Call(c) => {
                stack.extend(c.target.as_deref());
                stack.extend(&c.args);
            }
            Node::List(l) => stack.extend(&l.elements),
            Node::Map(m) => {
                for e in &m.entries {
                    if let cel::common::ast::EntryExpr::MapEntry(me) = &e.expr {
                        stack.push(&me.key);
                        stack.push(&me.value);
                    }
                }
            }
            Node::Struct(s) => {
                for e in &s.entries {
                    if let cel::common::ast::EntryExpr::StructField(f) = &e.expr {
                        stack.push(&f.value);
                    }
                }
            }
            Node::Comprehension(c) => {
                stack.extend([
                    &c.iter_range,
                    &c.accu_init,
                    &c.loop_cond,
                    &c.loop_step,
                    &c.result,
                ]);
            }
            Node::Literal(_) | Node::Unspecified => {}
        }
    }
}

/// A `google.api.expr.v1alpha1.Expr` as the `cel.expr.Expr` of the same wire
/// form (how Envoy reads the deprecated fields); `None` when absent or, which
/// cannot happen for one wire format, undecodable.
fn legacy(
    e: Option<&envoy_types::pb::google::api::expr::v1alpha1::Expr>,
) -> Option<envoy_types::pb::cel::expr::Expr> {
    use prost::Message;
    envoy_types::pb::cel::expr::Expr::decode(e?.encode_to_vec().as_slice()).ok()
}

/// A string-keyed map value (header maps, attribute records).
pub fn map<I, K>(entries: I) -> Value
where
    I: IntoIterator<Item = (K, Value)>,
    K: Into<String>,
{
    let m: std::collections::HashMap<cel::objects::Key, Value> = entries
        .into_iter()
        .map(|(k, v)| (cel::objects::Key::String(Arc::new(k.into())), v))
        .collect();
    Value::Map(cel::objects::Map { map: Arc::new(m) })
}

/// A string value.
pub fn string(s: impl Into<String>) -> Value {
    Value::String(Arc::new(s.into()))
}

#[cfg(test)]
mod tests;
