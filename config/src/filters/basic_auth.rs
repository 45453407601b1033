//! The Basic authentication HTTP filter
//! (`envoy.extensions.filters.http.basic_auth.v3.BasicAuth`) and its per-route config
//! (`BasicAuthPerRoute`): the users, read from an htpasswd file whose passwords are
//! `{SHA}` hashes (the only form Envoy accepts), the header the credential is read
//! from and the header the authenticated user name is forwarded in.
//!
//! `allow_missing` lets a request without Basic credentials through;
//! `emit_dynamic_metadata` records the authenticated user name.

use crate::core;
use crate::ctx::Ctx;
use crate::path::Path;
use crate::support::Support;
use envoy_types::pb::envoy::extensions::filters::http::basic_auth::v3 as pb;
use std::collections::HashMap;
use std::sync::Arc;

/// Fields of the basic_auth messages courier implements.
pub(crate) const SUPPORT: &[Support] = &[
    (
        "envoy.extensions.filters.http.basic_auth.v3.BasicAuth",
        &[
            "users",
            "forward_username_header",
            "authentication_header",
            "allow_missing",
            "emit_dynamic_metadata",
        ],
    ),
    (
        "envoy.extensions.filters.http.basic_auth.v3.BasicAuthPerRoute",
        &["users"],
    ),
];

/// The users of an htpasswd file: user name -> the base64 SHA-1 of the password (the
/// 28 characters after `{SHA}`), compared as text as Envoy does.
pub type Users = HashMap<Vec<u8>, String>;

/// A validated `BasicAuth`.
#[derive(Debug, Clone)]
pub struct BasicAuth {
    /// `users`.
    pub users: Arc<Users>,
    /// `forward_username_header`, lower-cased; `None` when unset.
    pub forward_username_header: Option<String>,
    /// `authentication_header`, lower-cased; `authorization` when unset.
    pub authentication_header: String,
    /// `allow_missing`: a request without the credential header, or with another
    /// scheme than `Basic`, goes on unauthenticated (and uncounted).
    pub allow_missing: bool,
    /// `emit_dynamic_metadata`: `username` is written to the filter's metadata
    /// namespace (its name in `http_filters`) on success.
    pub emit_dynamic_metadata: bool,
}

/// A validated `BasicAuthPerRoute`: the users that replace the filter's on the route.
#[derive(Debug, Clone)]
pub struct BasicAuthPerRoute {
    /// `users` (possibly none: every credential is then refused).
    pub users: Arc<Users>,
}

/// Envoy's `readHtpasswd`: one `name:{SHA}hash` per line, empty lines and `#`
/// comments skipped. The error is Envoy's message.
pub fn parse_htpasswd(data: &[u8]) -> Result<Users, String> {
    let mut users = Users::new();
    // `std::getline` on `\n`: a trailing `\r` stays in the line (and then fails the
    // hash length), as in Envoy.
    let mut lines: Vec<&[u8]> = data.split(|b| *b == b'\n').collect();
    if data.ends_with(b"\n") {
        lines.pop();
    }
    for (i, line) in lines.into_iter().enumerate() {
        if line.is_empty() || line[0] == b'#' {
            continue;
        }
        let at = |m: &str| format!("line {}: basic auth: {m}", i + 1);
        let Some(colon) = line.iter().position(|b| *b == b':') else {
            return Err(at("invalid htpasswd format, username:password is expected"));
        };
        let (name, hash) = (&line[..colon], &line[colon + 1..]);
        if name.is_empty() || hash.is_empty() {
            return Err(at("empty user name or password"));
        }
        if users.contains_key(name) {
            return Err(at("duplicate users"));
        }
        let Some(hash) = hash.strip_prefix(b"{SHA}") else {
            return Err(at("unsupported htpasswd format: please use {SHA}"));
        };
        if hash.len() != 28 {
            return Err(at("invalid htpasswd format, invalid SHA hash length"));
        }
        // Bytes that are not text cannot equal a base64 encoding: such a user never
        // authenticates, as in Envoy.
        users.insert(name.to_vec(), String::from_utf8_lossy(hash).into_owned());
    }
    Ok(users)
}

fn users(
    ds: Option<&envoy_types::pb::envoy::config::core::v3::DataSource>,
    allow_empty: bool,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<Users> {
    let data = core::data_source(ds, path, ctx)?;
    if data.is_empty() && !allow_empty {
        ctx.error(path, "DataSource cannot be empty");
        return None;
    }
    match parse_htpasswd(&data) {
        Ok(u) => Some(u),
        Err(e) => {
            ctx.error(path, e);
            None
        }
    }
}

/// A header name field: token characters, lower-cased; `None` when empty. Envoy
/// accepts any string here; courier refuses a name no HTTP message can carry.
fn header_name(name: &str, path: &Path<'_>, ctx: &mut Ctx) -> Option<Option<String>> {
    if name.is_empty() {
        return Some(None);
    }
    if !name.bytes().all(super::ext_authz::is_header_name_byte) {
        ctx.error(
            path,
            format!("\"{name}\" is not a valid header name (courier cannot send it)"),
        );
        return None;
    }
    Some(Some(name.to_ascii_lowercase()))
}

/// Translates a `BasicAuth`.
pub fn translate(m: &pb::BasicAuth, path: &Path<'_>, ctx: &mut Ctx) -> Option<BasicAuth> {
    let users = users(m.users.as_ref(), false, &path.field("users"), ctx);
    let forward = header_name(
        &m.forward_username_header,
        &path.field("forward_username_header"),
        ctx,
    );
    let auth = header_name(
        &m.authentication_header,
        &path.field("authentication_header"),
        ctx,
    );
    Some(BasicAuth {
        users: Arc::new(users?),
        forward_username_header: forward?,
        authentication_header: auth?.unwrap_or_else(|| "authorization".to_string()),
        // Envoy's docs ask for `emit_dynamic_metadata` with `allow_missing`, but Envoy
        // 1.40 does not enforce it: neither does courier.
        allow_missing: m.allow_missing,
        emit_dynamic_metadata: m.emit_dynamic_metadata,
    })
}

/// Translates a `BasicAuthPerRoute`; `users` is required, but may hold no user.
pub fn per_route(
    m: &pb::BasicAuthPerRoute,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<BasicAuthPerRoute> {
    let p = path.field("users");
    if m.users.is_none() {
        ctx.error(&p, "is required");
        return None;
    }
    Some(BasicAuthPerRoute {
        users: Arc::new(users(m.users.as_ref(), true, &p, ctx)?),
    })
}

#[cfg(test)]
mod tests {
    use super::parse_htpasswd;
    use crate::filters::test_util::{errors, filter, per_route};
    use crate::filters::{HttpFilterConfig, PerRouteFilterConfig};

    const HEAD: &str = "name: envoy.filters.http.basic_auth\ntyped_config:\n  \"@type\": type.googleapis.com/envoy.extensions.filters.http.basic_auth.v3.BasicAuth\n";
    // sha1("pass1"), base64.
    const USER1: &str = "user1:{SHA}8FePHnF0saQcTqjG4X96ijuIySo=";

    #[test]
    fn htpasswd_as_envoy_reads_it() {
        let u = parse_htpasswd(
            format!("\n# c\n{USER1}\nu2:{{SHA}}i+UhJqb95FCnFio2UdWJu1HpV50=").as_bytes(),
        )
        .unwrap();
        assert_eq!(u.len(), 2);
        assert_eq!(u[b"user1".as_slice()], "8FePHnF0saQcTqjG4X96ijuIySo=");
        let err = |s: &str| parse_htpasswd(s.as_bytes()).unwrap_err();
        assert_eq!(
            err("u"),
            "line 1: basic auth: invalid htpasswd format, username:password is expected"
        );
        assert_eq!(
            err(":{SHA}x"),
            "line 1: basic auth: empty user name or password"
        );
        assert_eq!(err("u:"), "line 1: basic auth: empty user name or password");
        assert_eq!(
            err(&format!("{USER1}\n{USER1}")),
            "line 2: basic auth: duplicate users"
        );
        assert_eq!(
            err("u:$apr1$abc"),
            "line 1: basic auth: unsupported htpasswd format: please use {SHA}"
        );
        assert_eq!(
            err("u:{SHA}abc"),
            "line 1: basic auth: invalid htpasswd format, invalid SHA hash length"
        );
        // A CRLF file keeps its `\r`: the hash is one byte too long.
        assert_eq!(
            err(&format!("{USER1}\r\n")),
            "line 1: basic auth: invalid htpasswd format, invalid SHA hash length"
        );
    }

    #[test]
    fn filter_and_per_route_configs() {
        let f = filter(&format!(
            "{HEAD}  users: {{inline_string: \"{USER1}\"}}\n  forward_username_header: X-User\n"
        ))
        .unwrap();
        let HttpFilterConfig::BasicAuth(b) = f.config else {
            panic!("basic_auth")
        };
        assert_eq!(b.forward_username_header.as_deref(), Some("x-user"));
        assert_eq!(b.authentication_header, "authorization");
        assert_eq!(b.users.len(), 1);

        assert_eq!(
            errors(filter(&format!("{HEAD}  users: {{inline_string: \"\"}}\n"))),
            vec!["typed_config.users: DataSource cannot be empty".to_string()]
        );
        assert_eq!(
            errors(filter(&format!("{HEAD}  users: {{inline_string: \"u:x\"}}\n"))),
            vec![
                "typed_config.users: line 1: basic auth: unsupported htpasswd format: please use {SHA}"
                    .to_string()
            ]
        );
        assert_eq!(
            errors(filter(&format!(
                "{HEAD}  users: {{inline_string: \"{USER1}\"}}\n  forward_username_header: \"bad name\"\n"
            ))),
            vec![
                "typed_config.forward_username_header: \"bad name\" is not a valid header name (courier cannot send it)"
                    .to_string()
            ]
        );
        let f = filter(&format!(
            "{HEAD}  users: {{inline_string: \"{USER1}\"}}\n  allow_missing: true\n  emit_dynamic_metadata: true\n"
        ))
        .unwrap();
        let HttpFilterConfig::BasicAuth(b) = f.config else {
            panic!("basic_auth")
        };
        assert!(b.allow_missing && b.emit_dynamic_metadata);

        const PR: &str = "\"@type\": type.googleapis.com/envoy.extensions.filters.http.basic_auth.v3.BasicAuthPerRoute\n";
        let p = per_route(
            "envoy.filters.http.basic_auth",
            &format!("{PR}users: {{inline_string: \"\"}}\n"),
        )
        .unwrap();
        let Some(PerRouteFilterConfig::BasicAuth(p)) = p.config else {
            panic!("per-route")
        };
        assert!(p.users.is_empty());
        assert_eq!(
            errors(per_route("envoy.filters.http.basic_auth", PR)),
            vec!["users: is required".to_string()]
        );
    }
}
