//! Header mutations (`*_headers_to_add` / `*_headers_to_remove`) at route config,
//! virtual host, route and weighted-cluster level.

use crate::ctx::Ctx;
use crate::format::{self, FormatString};
use crate::path::Path;
use envoy_types::pb::envoy::config::core::v3 as core;

/// What to do when a header to add is already present (`HeaderValueOption.append_action`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppendAction {
    /// Append a value (comma-joined or a second header); add it if absent. Envoy's default.
    AppendIfExistsOrAdd,
    /// Add only if the header is absent.
    AddIfAbsent,
    /// Replace every existing value; add it if absent.
    OverwriteIfExistsOrAdd,
    /// Replace every existing value; do nothing if absent.
    OverwriteIfExists,
}

/// One header to add.
#[derive(Debug, Clone)]
pub struct HeaderToAdd {
    /// Lower-cased header name (never a `:` pseudo-header nor `host`).
    pub name: String,
    /// The value: a substitution format string (`%REQ(x)%`, `%DOWNSTREAM_REMOTE_ADDRESS%`, ...).
    pub value: FormatString,
    /// What to do when the header exists.
    pub action: AppendAction,
    /// Add the header even when the formatted value is empty (Envoy drops empty values by default).
    pub keep_empty_value: bool,
}

/// The headers to add and remove on one side (request or response) at one level.
#[derive(Debug, Clone, Default)]
pub struct HeaderMutations {
    /// Headers to add, in config order.
    pub add: Vec<HeaderToAdd>,
    /// Lower-cased names of headers to remove (applied before `add`, as Envoy does).
    pub remove: Vec<String>,
}

impl HeaderMutations {
    /// Whether there is nothing to do (lets the data plane skip the level).
    pub fn is_empty(&self) -> bool {
        self.add.is_empty() && self.remove.is_empty()
    }
}

/// Translates one side's `headers_to_add` and `headers_to_remove`; `add_field` and
/// `remove_field` are the field names at `path` (e.g. `request_headers_to_add`).
pub(crate) fn mutations(
    add: &[core::HeaderValueOption],
    remove: &[String],
    path: &Path<'_>,
    add_field: &str,
    remove_field: &str,
    ctx: &mut Ctx,
) -> HeaderMutations {
    let ap = path.field(add_field);
    let added = add
        .iter()
        .enumerate()
        .filter_map(|(i, hvo)| header_to_add(hvo, &ap.index(i), ctx))
        .collect();
    let rp = path.field(remove_field);
    let mut removed = Vec::with_capacity(remove.len());
    for (i, name) in remove.iter().enumerate() {
        let p = rp.index(i);
        if !valid_name_chars(name) {
            ctx.error(&p, "must not contain NUL, CR or LF");
        } else if !modifiable(name) {
            ctx.error(&p, ":-prefixed or host headers may not be removed");
        } else {
            removed.push(name.to_ascii_lowercase());
        }
    }
    HeaderMutations {
        add: added,
        remove: removed,
    }
}

/// Translates the request and response mutations of one level at once.
pub(crate) fn both(
    path: &Path<'_>,
    req: (&[core::HeaderValueOption], &[String]),
    resp: (&[core::HeaderValueOption], &[String]),
    ctx: &mut Ctx,
) -> (HeaderMutations, HeaderMutations) {
    let request = mutations(
        req.0,
        req.1,
        path,
        "request_headers_to_add",
        "request_headers_to_remove",
        ctx,
    );
    let response = mutations(
        resp.0,
        resp.1,
        path,
        "response_headers_to_add",
        "response_headers_to_remove",
        ctx,
    );
    (request, response)
}

/// Envoy refuses to let config add, change or remove pseudo-headers and `host`.
fn modifiable(name: &str) -> bool {
    !name.starts_with(':') && !name.eq_ignore_ascii_case("host")
}

/// Envoy's non-strict `HTTP_HEADER_NAME` / `HTTP_HEADER_VALUE` rule: no NUL, CR or LF.
pub(crate) fn valid_name_chars(s: &str) -> bool {
    !s.bytes().any(|b| matches!(b, 0 | b'\r' | b'\n'))
}

pub(crate) fn header_to_add(
    hvo: &core::HeaderValueOption,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<HeaderToAdd> {
    use core::header_value_option::HeaderAppendAction as A;
    let Some(h) = hvo.header.as_ref() else {
        ctx.error(&path.field("header"), "is required");
        return None;
    };
    let hp = path.field("header");
    let mut ok = true;
    if h.key.is_empty() {
        ctx.error(&hp.field("key"), "must not be empty");
        ok = false;
    } else if !valid_name_chars(&h.key) {
        ctx.error(&hp.field("key"), "must not contain NUL, CR or LF");
        ok = false;
    } else if !modifiable(&h.key) {
        ctx.error(
            &hp.field("key"),
            ":-prefixed or host headers may not be modified",
        );
        ok = false;
    }
    let text = if !h.raw_value.is_empty() {
        if !h.value.is_empty() {
            ctx.error(
                &hp.field("raw_value"),
                "only one of value or raw_value may be set",
            );
            ok = false;
        }
        match std::str::from_utf8(&h.raw_value) {
            Ok(s) => s,
            Err(_) => {
                ctx.error(&hp.field("raw_value"), "must be UTF-8 text");
                return None;
            }
        }
    } else {
        h.value.as_str()
    };
    let value_field = if h.raw_value.is_empty() {
        "value"
    } else {
        "raw_value"
    };
    if !valid_name_chars(text) {
        ctx.error(&hp.field(value_field), "must not contain NUL, CR or LF");
        return None;
    }
    let value = match format::parse(text) {
        Ok(v) => Some(v),
        Err(e) => {
            ctx.error(&hp.field(value_field), e);
            None
        }
    };
    let action = match (&hvo.append, A::try_from(hvo.append_action)) {
        (Some(_), Ok(a)) if a != A::AppendIfExistsOrAdd => {
            ctx.error(
                &path.field("append"),
                "append and append_action cannot both be set",
            );
            return None;
        }
        (Some(append), _) => {
            if append.value {
                AppendAction::AppendIfExistsOrAdd
            } else {
                AppendAction::OverwriteIfExistsOrAdd
            }
        }
        (None, Ok(A::AppendIfExistsOrAdd)) => AppendAction::AppendIfExistsOrAdd,
        (None, Ok(A::AddIfAbsent)) => AppendAction::AddIfAbsent,
        (None, Ok(A::OverwriteIfExistsOrAdd)) => AppendAction::OverwriteIfExistsOrAdd,
        (None, Ok(A::OverwriteIfExists)) => AppendAction::OverwriteIfExists,
        (None, Err(_)) => {
            ctx.error(
                &path.field("append_action"),
                format!("unknown append_action {}", hvo.append_action),
            );
            return None;
        }
    };
    if !ok {
        return None;
    }
    Some(HeaderToAdd {
        name: h.key.to_ascii_lowercase(),
        value: value?,
        action,
        keep_empty_value: hvo.keep_empty_value,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{Command, Part};

    fn hvo(key: &str, value: &str) -> core::HeaderValueOption {
        core::HeaderValueOption {
            header: Some(core::HeaderValue {
                key: key.into(),
                value: value.into(),
                raw_value: vec![],
            }),
            ..Default::default()
        }
    }

    fn run(
        add: &[core::HeaderValueOption],
        remove: &[&str],
    ) -> (HeaderMutations, Vec<crate::FieldError>) {
        let mut ctx = Ctx::new();
        let remove: Vec<String> = remove.iter().map(|s| s.to_string()).collect();
        let m = mutations(
            add,
            &remove,
            &Path::ROOT,
            "request_headers_to_add",
            "request_headers_to_remove",
            &mut ctx,
        );
        let errors = ctx.finish(()).err().map(|e| e.errors).unwrap_or_default();
        (m, errors)
    }

    #[test]
    fn names_are_lower_cased_and_values_parsed() {
        let (m, errors) = run(&[hvo("X-Trace", "%REQ(x-b3-traceid)%")], &["X-Old"]);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(m.add[0].name, "x-trace");
        assert_eq!(m.add[0].action, AppendAction::AppendIfExistsOrAdd);
        assert!(matches!(
            &m.add[0].value.parts[..],
            [Part::Command(Command::Request(h))] if h.main == "x-b3-traceid"
        ));
        assert_eq!(m.remove, vec!["x-old".to_string()]);
    }

    #[test]
    fn pseudo_headers_and_host_are_refused() {
        let (_, errors) = run(
            &[hvo(":path", "x"), hvo("Host", "y")],
            &[":authority", "HOST"],
        );
        let got: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(
            got,
            vec![
                "request_headers_to_add[0].header.key: :-prefixed or host headers may not be modified",
                "request_headers_to_add[1].header.key: :-prefixed or host headers may not be modified",
                "request_headers_to_remove[0]: :-prefixed or host headers may not be removed",
                "request_headers_to_remove[1]: :-prefixed or host headers may not be removed",
            ]
        );
    }

    #[test]
    fn append_forms() {
        let mut a = hvo("x-a", "1");
        a.append = Some(envoy_types::pb::google::protobuf::BoolValue { value: false });
        let mut b = hvo("x-b", "1");
        b.append_action = 1;
        let mut c = hvo("x-c", "1");
        c.append = Some(envoy_types::pb::google::protobuf::BoolValue { value: true });
        c.append_action = 2;
        let (m, errors) = run(&[a, b, c], &[]);
        assert_eq!(m.add[0].action, AppendAction::OverwriteIfExistsOrAdd);
        assert_eq!(m.add[1].action, AppendAction::AddIfAbsent);
        assert_eq!(errors.len(), 1);
        assert_eq!(
            errors[0].to_string(),
            "request_headers_to_add[2].append: append and append_action cannot both be set"
        );
    }

    #[test]
    fn bad_format_and_missing_header() {
        let missing = core::HeaderValueOption::default();
        let (_, errors) = run(&[hvo("x-a", "50%"), missing], &[]);
        assert_eq!(errors[0].path, "request_headers_to_add[0].header.value");
        assert_eq!(
            errors[1].to_string(),
            "request_headers_to_add[1].header: is required"
        );
    }
}
