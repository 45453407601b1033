//! `RedirectAction`: answer with a 3xx and a `location` built from the request.

use super::headers;
use super::rewrite::{self, RegexRewrite};
use crate::ctx::Ctx;
use crate::path::Path;
use envoy_types::pb::envoy::config::route::v3 as pb;

/// How the redirect's path is formed.
#[derive(Debug, Clone)]
pub enum RedirectPath {
    /// `path_redirect`: this path (it may carry its own query).
    Path(String),
    /// `prefix_rewrite`: replace the matched prefix.
    Prefix(String),
    /// `regex_rewrite`: replace every match in the path.
    Regex(RegexRewrite),
}

/// A validated `RedirectAction`.
#[derive(Debug, Clone)]
pub struct RedirectAction {
    /// New scheme (`https_redirect` gives `https`); `None` keeps the request's.
    pub scheme: Option<String>,
    /// New host; `None` keeps the request's.
    pub host: Option<String>,
    /// New port; `None` keeps the request's.
    pub port: Option<u16>,
    /// New path; `None` keeps the request's.
    pub path: Option<RedirectPath>,
    /// 301 (default), 302, 303, 307 or 308.
    pub response_code: u16,
    /// Drop the query string.
    pub strip_query: bool,
}

/// Translates a `RedirectAction`; `path` is the `redirect` field.
pub(crate) fn redirect(
    r: &pb::RedirectAction,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<RedirectAction> {
    use pb::redirect_action::PathRewriteSpecifier as P;
    use pb::redirect_action::RedirectResponseCode as C;
    use pb::redirect_action::SchemeRewriteSpecifier as S;
    let before = ctx.error_count();
    let scheme = match &r.scheme_rewrite_specifier {
        Some(S::HttpsRedirect(true)) => Some("https".to_string()),
        Some(S::HttpsRedirect(false)) => None,
        Some(S::SchemeRedirect(s)) if s.is_empty() => None,
        Some(S::SchemeRedirect(s)) => {
            if !s
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
            {
                ctx.error(
                    &path.field("scheme_redirect"),
                    format!("\"{s}\" is not a URI scheme"),
                );
            }
            Some(s.to_ascii_lowercase())
        }
        None => None,
    };
    let host = (!r.host_redirect.is_empty()).then(|| r.host_redirect.clone());
    if !headers::valid_name_chars(&r.host_redirect) {
        ctx.error(
            &path.field("host_redirect"),
            "must not contain NUL, CR or LF",
        );
    }
    let port = match r.port_redirect {
        0 => None,
        p => match u16::try_from(p) {
            Ok(p) => Some(p),
            Err(_) => {
                ctx.error(
                    &path.field("port_redirect"),
                    format!("{p} is not a port (1..=65535)"),
                );
                None
            }
        },
    };
    let new_path = match &r.path_rewrite_specifier {
        None => None,
        Some(P::PathRedirect(p)) => {
            text(p, &path.field("path_redirect"), ctx).map(RedirectPath::Path)
        }
        Some(P::PrefixRewrite(p)) => {
            text(p, &path.field("prefix_rewrite"), ctx).map(RedirectPath::Prefix)
        }
        Some(P::RegexRewrite(rr)) => {
            rewrite::regex_rewrite(rr, &path.field("regex_rewrite"), ctx).map(RedirectPath::Regex)
        }
        // Refused by the support walker.
        Some(P::PathRewrite(_)) => None,
    };
    let response_code = match C::try_from(r.response_code) {
        Ok(C::MovedPermanently) => 301,
        Ok(C::Found) => 302,
        Ok(C::SeeOther) => 303,
        Ok(C::TemporaryRedirect) => 307,
        Ok(C::PermanentRedirect) => 308,
        Err(_) => {
            ctx.error(
                &path.field("response_code"),
                format!("unknown response code {}", r.response_code),
            );
            301
        }
    };
    if ctx.error_count() != before {
        return None;
    }
    Some(RedirectAction {
        scheme,
        host,
        port,
        path: new_path,
        response_code,
        strip_query: r.strip_query,
    })
}

fn text(s: &str, path: &Path<'_>, ctx: &mut Ctx) -> Option<String> {
    if headers::valid_name_chars(s) {
        Some(s.to_string())
    } else {
        ctx.error(path, "must not contain NUL, CR or LF");
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_https() {
        let mut ctx = Ctx::new();
        let r = redirect(
            &pb::RedirectAction {
                scheme_rewrite_specifier: Some(
                    pb::redirect_action::SchemeRewriteSpecifier::HttpsRedirect(true),
                ),
                ..Default::default()
            },
            &Path::ROOT,
            &mut ctx,
        )
        .unwrap();
        assert_eq!(r.scheme.as_deref(), Some("https"));
        assert_eq!(r.response_code, 301);
        assert!(r.host.is_none() && r.port.is_none() && r.path.is_none() && !r.strip_query);
    }

    #[test]
    fn bad_port_and_code() {
        let mut ctx = Ctx::new();
        let r = redirect(
            &pb::RedirectAction {
                port_redirect: 70000,
                response_code: 9,
                ..Default::default()
            },
            &Path::ROOT,
            &mut ctx,
        );
        assert!(r.is_none());
        let msgs: Vec<String> = ctx
            .finish(())
            .unwrap_err()
            .errors
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            msgs,
            vec![
                "port_redirect: 70000 is not a port (1..=65535)",
                "response_code: unknown response code 9"
            ]
        );
    }
}
