//! Access logs: file and stdout/stderr sinks in Envoy's format-string and JSON forms.

use crate::ctx::Ctx;
use crate::extensions::{
    FILE_ACCESS_LOG, HTTP_GRPC_ACCESS_LOG, OTEL_ACCESS_LOG, STDERR_ACCESS_LOG, STDOUT_ACCESS_LOG,
};
use crate::format::{self, FormatString};
use crate::listener::log_filter::{self, LogFilter};
use crate::listener::otel_access_log::{self, OtelAccessLog};
use crate::path::Path;
use crate::support::Support;
use envoy_types::pb::envoy::config::accesslog::v3 as pb;
use envoy_types::pb::envoy::config::core::v3::SubstitutionFormatString;
use envoy_types::pb::envoy::extensions::access_loggers::{file::v3 as file, stream::v3 as stream};
use envoy_types::pb::google::protobuf::{Any, Struct, Value, value::Kind};
use std::sync::Arc;

/// Fields of the access-log messages courier implements.
pub(crate) const SUPPORT: &[Support] = &[
    // `filter`'s kinds are in `log_filter`'s table.
    (
        "envoy.config.accesslog.v3.AccessLog",
        &["name", "typed_config", "filter"],
    ),
    (
        "envoy.extensions.access_loggers.file.v3.FileAccessLog",
        &["path", "log_format", "format", "json_format"],
    ),
    (
        "envoy.extensions.access_loggers.stream.v3.StdoutAccessLog",
        &["log_format"],
    ),
    (
        "envoy.extensions.access_loggers.stream.v3.StderrAccessLog",
        &["log_format"],
    ),
    // `content_type` only matters for local replies (access logs refuse it);
    // `formatters` and `json_format_options` are extensions courier does not
    // implement.
    (
        "envoy.config.core.v3.SubstitutionFormatString",
        &[
            "text_format",
            "text_format_source",
            "json_format",
            "omit_empty_values",
            "content_type",
        ],
    ),
];

/// Where a log's lines go.
#[derive(Debug, Clone, PartialEq)]
pub enum Sink {
    /// A file, opened for appending (`/dev/stdout` works too).
    File(String),
    /// The process's standard output.
    Stdout,
    /// The process's standard error.
    Stderr,
    /// OTLP log records to a collector (`envoy.access_loggers.open_telemetry`);
    /// the record's `body` and `attributes` are its format.
    OpenTelemetry(Arc<OtelAccessLog>),
    /// `HTTPAccessLogEntry`s to an access log service (`envoy.access_loggers.http_grpc`).
    HttpGrpc(Arc<super::grpc_access_log::HttpGrpcAccessLog>),
}

/// A value of a JSON log line.
#[derive(Debug, Clone, PartialEq)]
pub enum JsonValue {
    /// A format string, rendered per request (a lone `%COMMAND%` keeps its JSON type).
    Format(FormatString),
    /// A nested object.
    Object(Vec<(String, JsonValue)>),
    /// A list.
    List(Vec<JsonValue>),
    /// A literal number.
    Number(f64),
    /// A literal boolean.
    Bool(bool),
    /// A literal null.
    Null,
}

/// How a line is rendered.
#[derive(Debug, Clone, PartialEq)]
pub enum LogFormat {
    /// A text line (written as rendered: custom formats carry their own `\n`).
    Text(FormatString),
    /// One JSON object per line; keys keep config order.
    Json(Vec<(String, JsonValue)>),
}

/// A validated access log.
#[derive(Debug, Clone, PartialEq)]
pub struct AccessLog {
    /// Where lines go: a file path, or `/dev/stdout` / `/dev/stderr`.
    pub path: String,
    /// The sink (`path` classified).
    pub sink: Sink,
    /// The line format.
    pub format: LogFormat,
    /// `omit_empty_values`: empty values render as nothing (text) or are left
    /// out (JSON) instead of `-`.
    pub omit_empty_values: bool,
    /// `filter`: which entries get a line (none: all).
    pub filter: Option<LogFilter>,
}

impl AccessLog {
    /// A file log in Envoy's default format.
    pub fn file(path: &str) -> Self {
        Self {
            path: path.to_string(),
            sink: Sink::File(path.to_string()),
            format: default_format(),
            omit_empty_values: false,
            filter: None,
        }
    }

    fn stream(sink: Sink) -> Self {
        let path = match sink {
            Sink::Stderr => "/dev/stderr",
            _ => "/dev/stdout",
        };
        Self {
            path: path.into(),
            sink,
            format: default_format(),
            omit_empty_values: false,
            filter: None,
        }
    }
}

fn default_format() -> LogFormat {
    // The default format is a constant that format.rs's own tests parse.
    LogFormat::Text(
        format::parse(format::DEFAULT_ACCESS_LOG_FORMAT)
            .unwrap_or(FormatString { parts: Vec::new() }),
    )
}

/// Translates a list of `AccessLog`s.
pub fn translate_all(logs: &[pb::AccessLog], path: &Path<'_>, ctx: &mut Ctx) -> Vec<AccessLog> {
    logs.iter()
        .enumerate()
        .filter_map(|(i, l)| translate(l, &path.index(i), ctx))
        .collect()
}

/// Translates one `AccessLog`.
pub fn translate(l: &pb::AccessLog, path: &Path<'_>, ctx: &mut Ctx) -> Option<AccessLog> {
    // Both halves are translated, so that each reports its errors.
    let filter = l
        .filter
        .as_ref()
        .map(|f| log_filter::translate(f, &path.field("filter"), ctx));
    let log = sink(l, path, ctx)?;
    match filter {
        None => Some(log),
        Some(Some(f)) => Some(AccessLog {
            filter: Some(f),
            ..log
        }),
        Some(None) => None,
    }
}

/// The logger `l` names, with its format.
fn sink(l: &pb::AccessLog, path: &Path<'_>, ctx: &mut Ctx) -> Option<AccessLog> {
    let Some(pb::access_log::ConfigType::TypedConfig(any)) = &l.config_type else {
        // Envoy builds a stream logger from its empty config by name.
        return match l.name.as_str() {
            "envoy.access_loggers.stdout" => Some(AccessLog::stream(Sink::Stdout)),
            "envoy.access_loggers.stderr" => Some(AccessLog::stream(Sink::Stderr)),
            "envoy.access_loggers.file" | "envoy.file_access_log" => {
                ctx.error(
                    &path.field("typed_config"),
                    "is required (FileAccessLog.path)",
                );
                None
            }
            "" => {
                ctx.error(path, "name or typed_config is required");
                None
            }
            name => {
                ctx.unsupported(path, format!("access logger {name}"));
                None
            }
        };
    };
    let tp = path.field("typed_config");
    match any.type_url.as_str() {
        FILE_ACCESS_LOG => file_log(&decode::<file::FileAccessLog>(any, &tp, ctx)?, &tp, ctx),
        STDOUT_ACCESS_LOG => {
            use stream::stdout_access_log::AccessLogFormat as F;
            let m = decode::<stream::StdoutAccessLog>(any, &tp, ctx)?;
            let Some(F::LogFormat(f)) = &m.access_log_format else {
                return Some(AccessLog::stream(Sink::Stdout));
            };
            with_format(
                AccessLog::stream(Sink::Stdout),
                f,
                &tp.field("log_format"),
                ctx,
            )
        }
        STDERR_ACCESS_LOG => {
            use stream::stderr_access_log::AccessLogFormat as F;
            let m = decode::<stream::StderrAccessLog>(any, &tp, ctx)?;
            let Some(F::LogFormat(f)) = &m.access_log_format else {
                return Some(AccessLog::stream(Sink::Stderr));
            };
            with_format(
                AccessLog::stream(Sink::Stderr),
                f,
                &tp.field("log_format"),
                ctx,
            )
        }
        OTEL_ACCESS_LOG => {
            let m = decode(any, &tp, ctx)?;
            let o = otel_access_log::translate(&m, &tp, ctx)?;
            Some(AccessLog {
                path: String::new(),
                sink: Sink::OpenTelemetry(Arc::new(o)),
                format: default_format(),
                omit_empty_values: false,
                filter: None,
            })
        }
        HTTP_GRPC_ACCESS_LOG => {
            let m = decode(any, &tp, ctx)?;
            let g = super::grpc_access_log::translate(&m, &tp, ctx)?;
            Some(AccessLog {
                path: String::new(),
                sink: Sink::HttpGrpc(Arc::new(g)),
                format: default_format(),
                omit_empty_values: false,
                filter: None,
            })
        }
        other => {
            let name = if l.name.is_empty() { other } else { &l.name };
            ctx.unsupported(path, format!("access logger {name}"));
            None
        }
    }
}

fn decode<M: prost::Message + Default>(any: &Any, path: &Path<'_>, ctx: &mut Ctx) -> Option<M> {
    match M::decode(any.value.as_slice()) {
        Ok(m) => Some(m),
        Err(e) => {
            ctx.error(path, format!("cannot decode {}: {e}", any.type_url));
            None
        }
    }
}

fn file_log(m: &file::FileAccessLog, path: &Path<'_>, ctx: &mut Ctx) -> Option<AccessLog> {
    use file::file_access_log::AccessLogFormat as F;
    if m.path.is_empty() {
        ctx.error(&path.field("path"), "must not be empty");
        return None;
    }
    let log = AccessLog::file(&m.path);
    match &m.access_log_format {
        None => Some(log),
        // Envoy: an empty format string means the default format.
        Some(F::Format(s)) if s.is_empty() => Some(log),
        Some(F::Format(s)) => Some(AccessLog {
            format: LogFormat::Text(text(s, &path.field("format"), ctx, Use::Log)?),
            ..log
        }),
        Some(F::JsonFormat(s)) => Some(AccessLog {
            format: LogFormat::Json(json_object(s, &path.field("json_format"), ctx, Use::Log)?),
            ..log
        }),
        Some(F::LogFormat(f)) => with_format(log, f, &path.field("log_format"), ctx),
        // `typed_json_format` is refused by the support table.
        Some(_) => None,
    }
}

/// Applies a `SubstitutionFormatString` to a log.
fn with_format(
    log: AccessLog,
    f: &SubstitutionFormatString,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<AccessLog> {
    let typed = f.content_type.is_empty();
    if !typed {
        // Envoy reads it only for local replies; a log line has no content type.
        ctx.unsupported(
            &path.field("content_type"),
            "content_type in an access log format",
        );
    }
    let format = substitution_format(f, path, ctx, Use::Log)?;
    if !typed {
        return None;
    }
    Some(AccessLog {
        format,
        omit_empty_values: f.omit_empty_values,
        ..log
    })
}

/// Translates a `SubstitutionFormatString`'s format (text, text from an
/// inline source, or JSON); `omit_empty_values` and `content_type` are the
/// caller's.
pub(crate) fn substitution_format(
    f: &SubstitutionFormatString,
    path: &Path<'_>,
    ctx: &mut Ctx,
    usage: Use,
) -> Option<LogFormat> {
    use envoy_types::pb::envoy::config::core::v3::data_source::Specifier;
    use envoy_types::pb::envoy::config::core::v3::substitution_format_string::Format as F;
    Some(match &f.format {
        Some(F::TextFormat(s)) => LogFormat::Text(text(s, &path.field("text_format"), ctx, usage)?),
        Some(F::JsonFormat(s)) => {
            LogFormat::Json(json_object(s, &path.field("json_format"), ctx, usage)?)
        }
        Some(F::TextFormatSource(ds)) => {
            let sp = path.field("text_format_source");
            let (s, field) = match &ds.specifier {
                Some(Specifier::InlineString(s)) => (s.clone(), "inline_string"),
                Some(Specifier::InlineBytes(b)) => match String::from_utf8(b.clone()) {
                    Ok(s) => (s, "inline_bytes"),
                    Err(_) => {
                        ctx.error(&sp.field("inline_bytes"), "is not UTF-8");
                        return None;
                    }
                },
                Some(Specifier::Filename(_)) => {
                    ctx.unsupported(&sp.field("filename"), "a format read from a file");
                    return None;
                }
                Some(Specifier::EnvironmentVariable(_)) => {
                    ctx.unsupported(
                        &sp.field("environment_variable"),
                        "a format read from the environment",
                    );
                    return None;
                }
                None => {
                    ctx.error(&sp, "inline_string is required");
                    return None;
                }
            };
            LogFormat::Text(text(&s, &sp.field(field), ctx, usage)?)
        }
        None => {
            ctx.error(
                path,
                "one of text_format, text_format_source or json_format is required",
            );
            return None;
        }
    })
}

/// Where a format is rendered: an access log line, or a local reply body
/// (which may use `%LOCAL_REPLY_BODY%`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Use {
    /// An access log line.
    Log,
    /// A direct response's `body_format`.
    LocalReply,
}

fn text(s: &str, path: &Path<'_>, ctx: &mut Ctx, usage: Use) -> Option<FormatString> {
    match format::parse(s) {
        Ok(f) => {
            let body = f
                .parts
                .iter()
                .any(|p| matches!(p, format::Part::Command(format::Command::LocalReplyBody)));
            if body && usage == Use::Log {
                // Envoy fills it only while it formats a local reply.
                ctx.unsupported(path, "%LOCAL_REPLY_BODY% in an access log");
                return None;
            }
            Some(f)
        }
        Err(e) => {
            ctx.error(path, e);
            None
        }
    }
}

fn json_object(
    s: &Struct,
    path: &Path<'_>,
    ctx: &mut Ctx,
    usage: Use,
) -> Option<Vec<(String, JsonValue)>> {
    let before = ctx.error_count();
    // A protobuf Struct is a map: sort the keys so the line's order is stable.
    let mut fields: Vec<(&String, &Value)> = s.fields.iter().collect();
    fields.sort_by(|a, b| a.0.cmp(b.0));
    let out: Vec<(String, JsonValue)> = fields
        .into_iter()
        .filter_map(|(k, v)| Some((k.clone(), json_value(v, &path.key(k), ctx, usage)?)))
        .collect();
    (ctx.error_count() == before).then_some(out)
}

fn json_value(v: &Value, path: &Path<'_>, ctx: &mut Ctx, usage: Use) -> Option<JsonValue> {
    Some(match &v.kind {
        Some(Kind::StringValue(s)) => JsonValue::Format(text(s, path, ctx, usage)?),
        Some(Kind::StructValue(s)) => JsonValue::Object(json_object(s, path, ctx, usage)?),
        Some(Kind::ListValue(l)) => {
            let before = ctx.error_count();
            let items: Vec<JsonValue> = l
                .values
                .iter()
                .enumerate()
                .filter_map(|(i, v)| json_value(v, &path.index(i), ctx, usage))
                .collect();
            if ctx.error_count() > before {
                return None;
            }
            JsonValue::List(items)
        }
        Some(Kind::NumberValue(n)) => JsonValue::Number(*n),
        Some(Kind::BoolValue(b)) => JsonValue::Bool(*b),
        Some(Kind::NullValue(_)) | None => JsonValue::Null,
    })
}
