use super::*;
use crate::ctx::Ctx;
use crate::path::Path;
use envoy_types::pb::cel::expr as pb;
use std::collections::HashMap;

/// Attributes from a table of root values.
struct Table(HashMap<&'static str, Value>);

impl Attributes for Table {
    fn root(&self, root: &str) -> Option<Value> {
        self.0.get(root).cloned()
    }
}

fn attrs() -> Table {
    Table(HashMap::from([
        (
            "request",
            map([
                ("path", string("/admin/users?x=1")),
                ("method", string("POST")),
                ("headers", map([("x-env", string("prod"))])),
            ]),
        ),
        ("response", map([("code", Value::Int(404))])),
    ]))
}

fn errors(ctx: Ctx) -> Vec<String> {
    ctx.finish(())
        .err()
        .map(|e| e.errors.iter().map(ToString::to_string).collect())
        .unwrap_or_default()
}

fn parse(src: &str) -> Expr {
    let mut ctx = Ctx::new();
    let e = Expr::parse(src, &Path::ROOT.field("e"), &mut ctx);
    assert!(!ctx.has_errors(), "{:?}", errors(ctx));
    e.expect("compiles")
}

#[test]
fn string_expressions_evaluate_over_the_attributes() {
    let a = attrs();
    assert!(parse("response.code >= 400").matches(&a));
    assert!(!parse("response.code >= 500").matches(&a));
    assert!(parse("request.path.startsWith('/admin') && request.method == 'POST'").matches(&a));
    assert!(parse("request.headers['x-env'] == 'prod'").matches(&a));
    // Errors and non-booleans are no match (Envoy: "expression errors are considered false").
    assert!(!parse("request.headers['missing'] == 'x'").matches(&a));
    assert!(!parse("connection.mtls").matches(&a));
    assert!(!parse("response.code").matches(&a));
    assert_eq!(parse("response.code >= 400").roots.as_ref(), &["response"]);
}

#[test]
fn a_syntax_error_is_refused_with_the_path() {
    let mut ctx = Ctx::new();
    assert!(Expr::parse("response.code >=", &Path::ROOT.field("e"), &mut ctx).is_none());
    assert!(errors(ctx)[0].starts_with("e: invalid CEL expression"));
}

fn ident(id: i64, name: &str) -> pb::Expr {
    pb::Expr {
        id,
        expr_kind: Some(pb::expr::ExprKind::IdentExpr(pb::expr::Ident {
            name: name.into(),
        })),
    }
}

fn select(id: i64, operand: pb::Expr, field: &str) -> pb::Expr {
    pb::Expr {
        id,
        expr_kind: Some(pb::expr::ExprKind::SelectExpr(Box::new(pb::expr::Select {
            operand: Some(Box::new(operand)),
            field: field.into(),
            test_only: false,
        }))),
    }
}

fn call(id: i64, function: &str, target: Option<pb::Expr>, args: Vec<pb::Expr>) -> pb::Expr {
    pb::Expr {
        id,
        expr_kind: Some(pb::expr::ExprKind::CallExpr(Box::new(pb::expr::Call {
            target: target.map(Box::new),
            function: function.into(),
            args,
        }))),
    }
}

fn constant(id: i64, kind: pb::constant::ConstantKind) -> pb::Expr {
    pb::Expr {
        id,
        expr_kind: Some(pb::expr::ExprKind::ConstExpr(pb::Constant {
            constant_kind: Some(kind),
        })),
    }
}

fn parsed(expr: pb::Expr) -> envoy_types::pb::xds::r#type::v3::CelExpression {
    envoy_types::pb::xds::r#type::v3::CelExpression {
        cel_expr_parsed: Some(pb::ParsedExpr {
            expr: Some(expr),
            source_info: None,
        }),
        ..Default::default()
    }
}

#[test]
fn parsed_asts_evaluate_as_their_source_would() {
    use pb::constant::ConstantKind as K;
    // Envoy Gateway's `request.path.startsWith('/admin')`.
    let starts = call(
        3,
        "startsWith",
        Some(select(2, ident(1, "request"), "path")),
        vec![constant(4, K::StringValue("/admin".into()))],
    );
    // `response.code >= 501 && response.code <= 511`.
    let range = call(
        9,
        "_&&_",
        None,
        vec![
            call(
                3,
                "_>=_",
                None,
                vec![
                    select(2, ident(1, "response"), "code"),
                    constant(4, K::Int64Value(501)),
                ],
            ),
            call(
                7,
                "_<=_",
                None,
                vec![
                    select(6, ident(5, "response"), "code"),
                    constant(8, K::Int64Value(511)),
                ],
            ),
        ],
    );
    let mut ctx = Ctx::new();
    let p = Path::ROOT.field("m");
    let starts = Expr::from_xds(&parsed(starts), &p, &mut ctx).expect("converts");
    let range = Expr::from_xds(&parsed(range), &p, &mut ctx).expect("converts");
    assert!(!ctx.has_errors());
    let a = attrs();
    assert!(starts.matches(&a));
    assert!(!range.matches(&a));
    let five = Table(HashMap::from([(
        "response",
        map([("code", Value::Int(503))]),
    )]));
    assert!(range.matches(&five));
    assert!(
        !starts.matches(&five),
        "no request attributes: an error, no match"
    );
}

#[test]
fn malformed_asts_are_refused_with_their_path() {
    let mut ctx = Ctx::new();
    let broken = select(
        2,
        pb::Expr {
            id: 1,
            expr_kind: None,
        },
        "path",
    );
    assert!(Expr::from_xds(&parsed(broken), &Path::ROOT.field("m"), &mut ctx).is_none());
    assert_eq!(
        errors(ctx)[0],
        "m.cel_expr_parsed.expr.select_expr.operand: needs an expression kind"
    );
    let mut ctx = Ctx::new();
    let empty = envoy_types::pb::xds::r#type::v3::CelExpression::default();
    assert!(Expr::from_xds(&empty, &Path::ROOT.field("m"), &mut ctx).is_none());
    assert_eq!(
        errors(ctx)[0],
        "m: CEL expression not set (needs cel_expr_parsed or cel_expr_checked; Envoy does not read cel_expr_string here)"
    );
    // A config cannot nest deep enough to exhaust the stack.
    let mut deep = ident(0, "request");
    for i in 0..200 {
        deep = call(i, "!_", None, vec![deep]);
    }
    let mut ctx = Ctx::new();
    assert!(Expr::from_xds(&parsed(deep), &Path::ROOT.field("m"), &mut ctx).is_none());
    assert!(errors(ctx)[0].contains("nests deeper than 100 levels"));
}
