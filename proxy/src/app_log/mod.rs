//! courier's own log (Envoy's application log): each line rendered with an
//! spdlog pattern as Envoy renders its log, from `--log-format` (Envoy's
//! default `[%Y-%m-%d %T.%e][%t][%l][%n] [%g:%#] %v` when not given) or the
//! bootstrap's `application_log_config` (applied once the bootstrap is
//! loaded, as in Envoy), to stderr or `--log-path`.

pub mod component;
pub mod pattern;

use arc_swap::ArcSwap;
use once_cell::sync::Lazy;
use pattern::{Pattern, Record};
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::Context;

/// The format every line is rendered with (swapped, never locked).
static FORMAT: Lazy<ArcSwap<Pattern>> =
    Lazy::new(|| ArcSwap::from_pointee(Pattern::parse(pattern::ENVOY_DEFAULT)));

/// `--log-format-escaped`.
static ESCAPED: AtomicBool = AtomicBool::new(false);

/// When the previous line was logged (ns since the epoch), for `%i`/`%u`/`%o`/`%O`.
static LAST: AtomicU64 = AtomicU64::new(0);

/// Renders lines from now on with `pattern` (spdlog syntax).
pub fn set_format(pattern: &str) {
    FORMAT.store(Arc::new(Pattern::parse(pattern)));
}

/// `--log-format-escaped`: messages are C-escaped, one line each.
pub fn set_escaped(on: bool) {
    ESCAPED.store(on, Ordering::Relaxed);
}

/// Where lines go.
#[derive(Debug)]
enum Sink {
    Stderr,
    /// `--log-path`: appended (one `write` per line, so lines of different
    /// threads do not interleave).
    File(std::fs::File),
}

/// The `tracing` layer that writes the application log.
#[derive(Debug)]
pub struct Layer {
    sink: Sink,
}

impl Layer {
    /// Lines to stderr.
    pub fn stderr() -> Layer {
        Layer { sink: Sink::Stderr }
    }

    /// Lines appended to `path` (created if missing), as Envoy's `--log-path`.
    pub fn file(path: &std::path::Path) -> std::io::Result<Layer> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(Layer {
            sink: Sink::File(file),
        })
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Layer {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        let meta = event.metadata();
        let mut message = Message::default();
        event.record(&mut message);
        let message = message.finish();
        let time = SystemTime::now();
        let now = time
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let last = LAST.swap(now, Ordering::Relaxed);
        let record = Record {
            time,
            level: level_name(*meta.level()),
            component: component::of(meta.target()),
            file: meta.file().unwrap_or(""),
            line: meta.line().unwrap_or(0),
            function: meta.module_path().unwrap_or(""),
            message: &message,
            thread: thread_id(),
            since_last_ns: if last == 0 {
                0
            } else {
                now.saturating_sub(last)
            },
            escaped: ESCAPED.load(Ordering::Relaxed),
        };
        let mut line = String::with_capacity(160);
        FORMAT.load().render(&record, &mut line);
        line.push('\n');
        // A log line that cannot be written is dropped: logging never fails
        // the work that logs.
        let _ = match &self.sink {
            Sink::Stderr => std::io::stderr().lock().write_all(line.as_bytes()),
            Sink::File(f) => (&*f).write_all(line.as_bytes()),
        };
    }
}

/// Envoy's level names.
fn level_name(level: tracing::Level) -> &'static str {
    match level {
        tracing::Level::TRACE => "trace",
        tracing::Level::DEBUG => "debug",
        tracing::Level::INFO => "info",
        tracing::Level::WARN => "warning",
        tracing::Level::ERROR => "error",
    }
}

/// The calling thread's OS id (Envoy's `%t`), read once per thread from
/// `/proc/thread-self` (`<pid>/task/<tid>`).
fn thread_id() -> u64 {
    thread_local! {
        static TID: u64 = std::fs::read_link("/proc/thread-self")
            .ok()
            .and_then(|p| p.file_name()?.to_str()?.parse().ok())
            .unwrap_or(0);
    }
    TID.with(|t| *t)
}

/// An event's message followed by its other fields as ` key=value`, as
/// `tracing`'s own formatter writes them.
#[derive(Default)]
struct Message {
    text: String,
    fields: String,
}

impl Visit for Message {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.text.push_str(value);
        } else {
            self.field(field, format_args!("{value:?}"));
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            use std::fmt::Write as _;
            let _ = write!(self.text, "{value:?}");
        } else {
            self.field(field, format_args!("{value:?}"));
        }
    }
}

impl Message {
    /// The message with its fields after it.
    fn finish(mut self) -> String {
        if self.text.is_empty() {
            return self.fields.trim_start().to_string();
        }
        self.text.push_str(&self.fields);
        self.text
    }

    fn field(&mut self, field: &Field, value: std::fmt::Arguments<'_>) {
        use std::fmt::Write as _;
        let _ = write!(self.fields, " {}={value}", field.name());
    }
}
