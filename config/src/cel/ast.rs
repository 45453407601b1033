//! `cel.expr.Expr` (the AST a control plane sends, parsed or checked) into the
//! `cel` crate's AST. Every node kind converts; a node with a required part
//! missing, or a constant kind courier has no value for (durations and
//! timestamps, deprecated in the proto), is refused with its path.

use crate::ctx::Ctx;
use crate::path::Path;
use cel::common::ast::{
    CallExpr, ComprehensionExpr, EntryExpr, Expr as Node, IdedEntryExpr, IdedExpr, ListExpr,
    LiteralValue, MapEntryExpr, MapExpr, SelectExpr, StructExpr, StructFieldExpr,
};
use envoy_types::pb::cel::expr as pb;
use pb::constant::ConstantKind;
use pb::expr::ExprKind;
use pb::expr::create_struct::entry::KeyKind;

/// Nesting deeper than this is refused: conversion recurses, and a config
/// must not be able to exhaust the stack.
const MAX_DEPTH: usize = 100;

/// Converts `e` (at `path`), or reports why not.
pub(super) fn convert(e: &pb::Expr, path: &Path<'_>, ctx: &mut Ctx) -> Option<IdedExpr> {
    expr(e, path, ctx, 0)
}

fn expr(e: &pb::Expr, path: &Path<'_>, ctx: &mut Ctx, depth: usize) -> Option<IdedExpr> {
    if depth > MAX_DEPTH {
        ctx.error(path, format!("nests deeper than {MAX_DEPTH} levels"));
        return None;
    }
    let d = depth + 1;
    let node = match &e.expr_kind {
        Some(ExprKind::ConstExpr(c)) => Node::Literal(constant(c, &path.field("const_expr"), ctx)?),
        Some(ExprKind::IdentExpr(i)) => Node::Ident(i.name.clone()),
        Some(ExprKind::SelectExpr(s)) => {
            let sp = path.field("select_expr");
            Node::Select(SelectExpr {
                operand: Box::new(required(
                    s.operand.as_deref(),
                    &sp.field("operand"),
                    ctx,
                    d,
                )?),
                field: s.field.clone(),
                test: s.test_only,
            })
        }
        Some(ExprKind::CallExpr(c)) => {
            let cp = path.field("call_expr");
            let target = match c.target.as_deref() {
                Some(t) => Some(Box::new(expr(t, &cp.field("target"), ctx, d)?)),
                None => None,
            };
            Node::Call(CallExpr {
                func_name: c.function.clone(),
                target,
                args: list(&c.args, &cp.field("args"), ctx, d)?,
            })
        }
        Some(ExprKind::ListExpr(l)) => {
            let lp = path.field("list_expr");
            let optional_indices = l
                .optional_indices
                .iter()
                .map(|i| usize::try_from(*i).ok())
                .collect::<Option<Vec<_>>>();
            let Some(optional_indices) = optional_indices else {
                ctx.error(&lp.field("optional_indices"), "must not be negative");
                return None;
            };
            Node::List(ListExpr::new_with_optionals(
                list(&l.elements, &lp.field("elements"), ctx, d)?,
                optional_indices,
            ))
        }
        Some(ExprKind::StructExpr(s)) => {
            let sp = path.field("struct_expr");
            let ep = sp.field("entries");
            let mut entries = Vec::with_capacity(s.entries.len());
            for (i, en) in s.entries.iter().enumerate() {
                let enp = ep.index(i);
                let value = required(en.value.as_ref(), &enp.field("value"), ctx, d)?;
                let kind = match &en.key_kind {
                    Some(KeyKind::FieldKey(f)) => EntryExpr::StructField(StructFieldExpr {
                        field: f.clone(),
                        value,
                        optional: en.optional_entry,
                    }),
                    Some(KeyKind::MapKey(k)) => EntryExpr::MapEntry(MapEntryExpr {
                        key: expr(k, &enp.field("map_key"), ctx, d)?,
                        value,
                        optional: en.optional_entry,
                    }),
                    None => {
                        ctx.error(&enp, "needs field_key or map_key");
                        return None;
                    }
                };
                entries.push(IdedEntryExpr {
                    id: id(en.id),
                    expr: kind,
                });
            }
            // An entry list without a message name is a map literal.
            if s.message_name.is_empty() {
                Node::Map(MapExpr { entries })
            } else {
                Node::Struct(StructExpr {
                    type_name: s.message_name.clone(),
                    entries,
                })
            }
        }
        Some(ExprKind::ComprehensionExpr(c)) => {
            let cp = path.field("comprehension_expr");
            Node::Comprehension(Box::new(ComprehensionExpr {
                iter_range: required(c.iter_range.as_deref(), &cp.field("iter_range"), ctx, d)?,
                iter_var: c.iter_var.clone(),
                iter_var2: None,
                accu_var: c.accu_var.clone(),
                accu_init: required(c.accu_init.as_deref(), &cp.field("accu_init"), ctx, d)?,
                loop_cond: required(
                    c.loop_condition.as_deref(),
                    &cp.field("loop_condition"),
                    ctx,
                    d,
                )?,
                loop_step: required(c.loop_step.as_deref(), &cp.field("loop_step"), ctx, d)?,
                result: required(c.result.as_deref(), &cp.field("result"), ctx, d)?,
            }))
        }
        None => {
            ctx.error(path, "needs an expression kind");
            return None;
        }
    };
    Some(IdedExpr {
        id: id(e.id),
        expr: node,
    })
}

fn required(e: Option<&pb::Expr>, path: &Path<'_>, ctx: &mut Ctx, d: usize) -> Option<IdedExpr> {
    match e {
        Some(e) => expr(e, path, ctx, d),
        None => {
            ctx.error(path, "is required");
            None
        }
    }
}

fn list(es: &[pb::Expr], path: &Path<'_>, ctx: &mut Ctx, d: usize) -> Option<Vec<IdedExpr>> {
    es.iter()
        .enumerate()
        .map(|(i, e)| expr(e, &path.index(i), ctx, d))
        .collect()
}

// Ids only label nodes (for error positions); a negative one cannot label
// anything the source info names.
fn id(i: i64) -> u64 {
    u64::try_from(i).unwrap_or(0)
}

fn constant(c: &pb::Constant, path: &Path<'_>, ctx: &mut Ctx) -> Option<LiteralValue> {
    Some(match &c.constant_kind {
        Some(ConstantKind::NullValue(_)) => LiteralValue::Null,
        Some(ConstantKind::BoolValue(b)) => LiteralValue::Boolean((*b).into()),
        Some(ConstantKind::Int64Value(i)) => LiteralValue::Int((*i).into()),
        Some(ConstantKind::Uint64Value(u)) => LiteralValue::UInt((*u).into()),
        Some(ConstantKind::DoubleValue(f)) => LiteralValue::Double((*f).into()),
        Some(ConstantKind::StringValue(s)) => LiteralValue::String(s.clone().into()),
        Some(ConstantKind::BytesValue(b)) => LiteralValue::Bytes(b.clone().into()),
        Some(ConstantKind::DurationValue(_)) => {
            ctx.unsupported(&path.field("duration_value"), "duration_value");
            return None;
        }
        Some(ConstantKind::TimestampValue(_)) => {
            ctx.unsupported(&path.field("timestamp_value"), "timestamp_value");
            return None;
        }
        None => {
            ctx.error(path, "needs a constant kind");
            return None;
        }
    })
}
