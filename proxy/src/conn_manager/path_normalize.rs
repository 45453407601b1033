//! Envoy's request path transformations: `path_with_escaped_slashes_action`,
//! `normalize_path` (RFC 3986 dot segments, with Chromium's canonicalisation
//! that Envoy uses: `\` is `/`, escaped unreserved characters are decoded,
//! `%2e` counts as a dot) and `merge_slashes`, in Envoy's order. Only the path
//! is touched; the query is kept as sent.

use courier_config::listener::hcm::EscapedSlashesAction;

/// What the transformations made of a path.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Unchanged.
    Same,
    /// Forward with this path and query.
    Rewrite(String),
    /// Redirect the client to this path and query (`UNESCAPE_AND_REDIRECT`).
    Redirect(String),
    /// 400: escaped slashes under `REJECT_REQUEST`, or a path that cannot be normalised.
    Reject,
}

/// The settings of one connection manager.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// `normalize_path`.
    pub normalize: bool,
    /// `merge_slashes`.
    pub merge_slashes: bool,
    /// `path_with_escaped_slashes_action`.
    pub escaped_slashes: EscapedSlashesAction,
}

impl Settings {
    /// Whether any transformation is configured.
    pub fn any(&self) -> bool {
        self.normalize
            || self.merge_slashes
            || self.escaped_slashes != EscapedSlashesAction::KeepUnchanged
    }
}

/// Applies `s` to `path_and_query`.
pub fn apply(path_and_query: &str, s: Settings) -> Outcome {
    let (path, query) = match path_and_query.find('?') {
        Some(i) => path_and_query.split_at(i),
        None => (path_and_query, ""),
    };
    let mut out = path.to_string();
    let mut redirect = false;
    if has_escaped_slash(path) {
        match s.escaped_slashes {
            EscapedSlashesAction::KeepUnchanged => {}
            EscapedSlashesAction::RejectRequest => return Outcome::Reject,
            EscapedSlashesAction::UnescapeAndForward => out = unescape_slashes(&out),
            EscapedSlashesAction::UnescapeAndRedirect => {
                out = unescape_slashes(&out);
                redirect = true;
            }
        }
    }
    if s.normalize {
        match canonical(&out) {
            Some(c) => out = c,
            None => return Outcome::Reject,
        }
    }
    if s.merge_slashes {
        out = merge_slashes(&out);
    }
    if out == path {
        return Outcome::Same;
    }
    out.push_str(query);
    if redirect {
        Outcome::Redirect(out)
    } else {
        Outcome::Rewrite(out)
    }
}

fn has_escaped_slash(path: &str) -> bool {
    path.as_bytes().windows(3).any(|w| {
        w[0] == b'%' && w[1] == b'2' && matches!(w[2], b'f' | b'F')
            || w[0] == b'%' && w[1] == b'5' && matches!(w[2], b'c' | b'C')
    })
}

fn unescape_slashes(path: &str) -> String {
    let b = path.as_bytes();
    let mut out = String::with_capacity(path.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            match (b[i + 1], b[i + 2]) {
                (b'2', b'f' | b'F') => {
                    out.push('/');
                    i += 3;
                    continue;
                }
                (b'5', b'c' | b'C') => {
                    out.push('\\');
                    i += 3;
                    continue;
                }
                _ => {}
            }
        }
        out.push(char::from(b[i]));
        i += 1;
    }
    out
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

fn unreserved(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~')
}

/// Decodes escaped unreserved characters and turns `\` into `/`, then removes
/// dot segments. None when the path does not start with `/`.
fn canonical(path: &str) -> Option<String> {
    if !path.starts_with('/') {
        return None;
    }
    let b = path.as_bytes();
    let mut decoded = String::with_capacity(path.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'%'
            && i + 2 < b.len()
            && let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2]))
        {
            let v = h * 16 + l;
            if unreserved(v) {
                decoded.push(char::from(v));
            } else {
                // Other escapes stay, with upper-case hex as Chromium writes them.
                decoded.push('%');
                decoded.push(char::from(b[i + 1].to_ascii_uppercase()));
                decoded.push(char::from(b[i + 2].to_ascii_uppercase()));
            }
            i += 3;
            continue;
        }
        decoded.push(if c == b'\\' { '/' } else { char::from(c) });
        i += 1;
    }
    Some(remove_dot_segments(&decoded))
}

/// RFC 3986 5.2.4 over `/`-separated segments.
fn remove_dot_segments(path: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    let segments: Vec<&str> = path[1..].split('/').collect();
    let last = segments.len().saturating_sub(1);
    for (i, seg) in segments.iter().enumerate() {
        match *seg {
            "." => {
                if i == last {
                    out.push("");
                }
            }
            ".." => {
                out.pop();
                if i == last {
                    out.push("");
                }
            }
            s => out.push(s),
        }
    }
    let mut s = String::with_capacity(path.len());
    for seg in &out {
        s.push('/');
        s.push_str(seg);
    }
    if s.is_empty() {
        s.push('/');
    }
    s
}

fn merge_slashes(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut prev_slash = false;
    for c in path.chars() {
        if c == '/' && prev_slash {
            continue;
        }
        prev_slash = c == '/';
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(normalize: bool, merge: bool, escaped: EscapedSlashesAction) -> Settings {
        Settings {
            normalize,
            merge_slashes: merge,
            escaped_slashes: escaped,
        }
    }

    #[test]
    fn normalises_dot_segments_escapes_and_backslashes() {
        let n = s(true, false, EscapedSlashesAction::KeepUnchanged);
        assert_eq!(
            apply("/a/./b/../c?x=/../", n),
            Outcome::Rewrite("/a/c?x=/../".into())
        );
        assert_eq!(apply("/../../etc", n), Outcome::Rewrite("/etc".into()));
        assert_eq!(apply("/%61%2e%2E/b", n), Outcome::Rewrite("/a../b".into()));
        assert_eq!(apply("/a/%2e%2e/b", n), Outcome::Rewrite("/b".into()));
        assert_eq!(apply("/a\\b", n), Outcome::Rewrite("/a/b".into()));
        assert_eq!(apply("/a/b/..", n), Outcome::Rewrite("/a/".into()));
        assert_eq!(apply("/a%2fb", n), Outcome::Rewrite("/a%2Fb".into()));
        assert_eq!(apply("/plain", n), Outcome::Same);
        assert_eq!(apply("*", n), Outcome::Reject);
    }

    #[test]
    fn merges_slashes_in_the_path_only() {
        let m = s(false, true, EscapedSlashesAction::KeepUnchanged);
        assert_eq!(
            apply("//a///b?q=//", m),
            Outcome::Rewrite("/a/b?q=//".into())
        );
    }

    #[test]
    fn escaped_slash_actions() {
        use EscapedSlashesAction as A;
        assert_eq!(
            apply("/a%2Fb", s(false, false, A::RejectRequest)),
            Outcome::Reject
        );
        assert_eq!(
            apply("/a%2fb%5Cc", s(false, false, A::UnescapeAndForward)),
            Outcome::Rewrite("/a/b\\c".into())
        );
        assert_eq!(
            apply("/a%2F%2Fb?q", s(true, true, A::UnescapeAndRedirect)),
            Outcome::Redirect("/a/b?q".into())
        );
        assert_eq!(
            apply("/a/b", s(true, true, A::UnescapeAndRedirect)),
            Outcome::Same
        );
        assert_eq!(
            apply("/a?%2F", s(false, false, A::RejectRequest)),
            Outcome::Same
        );
    }
}
