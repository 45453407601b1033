//! spdlog patterns, as Envoy's `--log-format` and `application_log_config`
//! take them: `%` flags (with spdlog's `%-8l` style padding) and literal text.
//! Parsed once when the format is set; rendered per log line.

use std::fmt::Write;
use std::time::SystemTime;

/// Envoy's default `--log-format`.
pub const ENVOY_DEFAULT: &str = "[%Y-%m-%d %T.%e][%t][%l][%n] [%g:%#] %v";

/// spdlog's `%+`: its own full format.
const SPDLOG_FULL: &str = "[%Y-%m-%d %H:%M:%S.%e] [%n] [%l] [%s:%#] %v";

/// One log line's facts, as the pattern's flags read them.
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    /// When it was logged.
    pub time: SystemTime,
    /// Envoy's level name (`trace` .. `critical`).
    pub level: &'a str,
    /// Envoy's logger (component) name.
    pub component: &'a str,
    /// The source file, as the build names it.
    pub file: &'a str,
    /// The source line (0 when unknown).
    pub line: u32,
    /// The logging module (spdlog's function name has no equivalent in Rust's
    /// logs: the module is the closest).
    pub function: &'a str,
    /// The message with its fields.
    pub message: &'a str,
    /// The OS thread id.
    pub thread: u64,
    /// Nanoseconds since the previous log line (`%i`, `%u`, `%o`, `%O`).
    pub since_last_ns: u64,
    /// `--log-format-escaped`: `%v` prints the message C-escaped.
    pub escaped: bool,
}

/// Where a padded field goes in its width.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Align {
    Right,
    Left,
    Center,
}

/// spdlog's padding: `%8l` (right-aligned), `%-8l`, `%=8l`, `!` truncates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Pad {
    width: usize,
    align: Align,
    truncate: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Flag(char, Option<Pad>),
}

/// A parsed pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern(Vec<Piece>);

impl Pattern {
    /// Parses a pattern. Any text is a pattern (spdlog prints an unknown flag
    /// as written), so this cannot fail.
    pub fn parse(text: &str) -> Pattern {
        let mut pieces = Vec::new();
        let mut lit = String::new();
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            if c != '%' {
                lit.push(c);
                continue;
            }
            let mut pad = None;
            let align = match chars.peek() {
                Some('-') => Some(Align::Left),
                Some('=') => Some(Align::Center),
                _ => None,
            };
            if align.is_some() {
                chars.next();
            }
            let mut width = String::new();
            while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                width.push(*d);
                chars.next();
            }
            if let Ok(w) = width.parse::<usize>() {
                let truncate = chars.next_if_eq(&'!').is_some();
                pad = Some(Pad {
                    width: w.min(128),
                    align: align.unwrap_or(Align::Right),
                    truncate,
                });
            }
            let Some(flag) = chars.next() else {
                lit.push('%');
                break;
            };
            if !lit.is_empty() {
                pieces.push(Piece::Text(std::mem::take(&mut lit)));
            }
            if flag == '+' {
                pieces.extend(Pattern::parse(SPDLOG_FULL).0);
            } else {
                pieces.push(Piece::Flag(flag, pad));
            }
        }
        if !lit.is_empty() {
            pieces.push(Piece::Text(lit));
        }
        Pattern(pieces)
    }

    /// Appends the line `r` renders to (without a newline).
    pub fn render(&self, r: &Record<'_>, out: &mut String) {
        let mut field = String::new();
        for piece in &self.0 {
            match piece {
                Piece::Text(t) => out.push_str(t),
                Piece::Flag(f, None) => flag(*f, r, out),
                Piece::Flag(f, Some(pad)) => {
                    field.clear();
                    flag(*f, r, &mut field);
                    padded(&field, *pad, out);
                }
            }
        }
    }
}

fn padded(field: &str, pad: Pad, out: &mut String) {
    let len = field.chars().count();
    if len >= pad.width {
        match pad.truncate {
            true => out.extend(field.chars().take(pad.width)),
            false => out.push_str(field),
        }
        return;
    }
    let fill = pad.width - len;
    let (before, after) = match pad.align {
        Align::Right => (fill, 0),
        Align::Left => (0, fill),
        Align::Center => (fill / 2, fill - fill / 2),
    };
    out.extend(std::iter::repeat_n(' ', before));
    out.push_str(field);
    out.extend(std::iter::repeat_n(' ', after));
}

fn flag(f: char, r: &Record<'_>, out: &mut String) {
    if crate::log_time::spdlog_flag(r.time, f, out) {
        return;
    }
    let _ = match f {
        'v' if r.escaped => {
            c_escape(r.message, out);
            Ok(())
        }
        'v' => write!(out, "{}", r.message),
        // Envoy's own flags: the message with newlines escaped, and the
        // message escaped for a JSON string (`application_log_config`'s
        // json_format).
        '_' => write!(out, "{}", r.message.replace('\n', "\\n")),
        'j' => {
            json_escape(r.message, out);
            Ok(())
        }
        't' => write!(out, "{}", r.thread),
        'P' => write!(out, "{}", std::process::id()),
        'n' => write!(out, "{}", r.component),
        'l' => write!(out, "{}", r.level),
        'L' => write!(out, "{}", short_level(r.level)),
        '@' if r.line > 0 => write!(out, "{}:{}", r.file, r.line),
        '@' => Ok(()),
        's' => write!(out, "{}", r.file.rsplit('/').next().unwrap_or(r.file)),
        'g' => write!(out, "{}", r.file),
        '#' if r.line > 0 => write!(out, "{}", r.line),
        '#' => Ok(()),
        '!' => write!(out, "{}", r.function),
        'i' => write!(out, "{}", r.since_last_ns / 1_000_000),
        'u' => write!(out, "{}", r.since_last_ns / 1_000),
        'o' => write!(out, "{}", r.since_last_ns / 1_000_000_000),
        'O' => write!(out, "{}", r.since_last_ns),
        '%' => write!(out, "%"),
        // Colour range: Envoy's stderr sink prints no colours.
        '^' | '$' => Ok(()),
        // spdlog prints an unknown flag as written.
        other => write!(out, "%{other}"),
    };
}

fn short_level(level: &str) -> &'static str {
    match level {
        "trace" => "T",
        "debug" => "D",
        "info" => "I",
        "warning" => "W",
        "error" => "E",
        _ => "C",
    }
}

/// The message as the inside of a JSON string.
fn json_escape(s: &str, out: &mut String) {
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
}

/// `--log-format-escaped`: C-style escapes (absl's CEscape: named escapes,
/// other control and non-ASCII bytes in octal), so one message is one line.
fn c_escape(s: &str, out: &mut String) {
    for &b in s.as_bytes() {
        match b {
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            b'"' => out.push_str("\\\""),
            b'\'' => out.push_str("\\'"),
            b'\\' => out.push_str("\\\\"),
            0x20..=0x7e => out.push(b as char),
            other => {
                let _ = write!(out, "\\{other:03o}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    fn record(message: &str) -> Record<'_> {
        Record {
            time: UNIX_EPOCH + Duration::new(1_796_227_992, 464_912_345),
            level: "warning",
            component: "upstream",
            file: "proxy/src/upstream/pool.rs",
            line: 42,
            function: "courier::upstream::pool",
            message,
            thread: 4242,
            since_last_ns: 3_000_000,
            escaped: false,
        }
    }

    fn render(pattern: &str, r: &Record<'_>) -> String {
        let mut s = String::new();
        Pattern::parse(pattern).render(r, &mut s);
        s
    }

    #[test]
    fn envoy_default_format() {
        assert_eq!(
            render(ENVOY_DEFAULT, &record("no healthy host")),
            "[2026-12-02 16:13:12.464][4242][warning][upstream] \
             [proxy/src/upstream/pool.rs:42] no healthy host"
        );
    }

    #[test]
    fn istio_format() {
        // Istio's bootstrap: `%Y-%m-%dT%T.%fZ\t%l\tenvoy %n %g:%#\t%v\tthread=%t`.
        assert_eq!(
            render(
                "%Y-%m-%dT%T.%fZ\t%l\tenvoy %n %g:%#\t%v\tthread=%t",
                &record("m")
            ),
            "2026-12-02T16:13:12.464912Z\twarning\tenvoy upstream \
             proxy/src/upstream/pool.rs:42\tm\tthread=4242"
        );
    }

    #[test]
    fn padding_truncation_and_unknown_flags() {
        let r = record("x");
        assert_eq!(render("[%8l]", &r), "[ warning]");
        assert_eq!(render("[%-10n]", &r), "[upstream  ]");
        assert_eq!(render("[%=11n]", &r), "[ upstream  ]");
        assert_eq!(render("[%3!l]", &r), "[war]");
        assert_eq!(
            render("%L %s %@ %i %% %k %^x%$ 100%", &r),
            "W pool.rs proxy/src/upstream/pool.rs:42 3 % %k x 100%"
        );
    }

    #[test]
    fn message_escapes() {
        let r = record("a \"quoted\"\nline\\\t\u{1}é");
        assert_eq!(render("%j", &r), "a \\\"quoted\\\"\\nline\\\\\\t\\u0001é");
        assert_eq!(render("%_", &r), "a \"quoted\"\\nline\\\t\u{1}é");
        let escaped = Record { escaped: true, ..r };
        assert_eq!(
            render("%v", &escaped),
            "a \\\"quoted\\\"\\nline\\\\\\t\\001\\303\\251"
        );
    }
}
