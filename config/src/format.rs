//! Envoy's substitution format strings (`%REQ(:PATH)%`, `%RESPONSE_CODE%`, ...),
//! parsed once at load into parts, for access logs and header values.

/// Envoy's default access-log line.
pub const DEFAULT_ACCESS_LOG_FORMAT: &str = "[%START_TIME%] \"%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%\" %RESPONSE_CODE% %RESPONSE_FLAGS% %BYTES_RECEIVED% %BYTES_SENT% %DURATION% %RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% \"%REQ(X-FORWARDED-FOR)%\" \"%REQ(USER-AGENT)%\" \"%REQ(X-REQUEST-ID)%\" \"%REQ(:AUTHORITY)%\" \"%UPSTREAM_HOST%\"\n";

/// A parsed format string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormatString {
    /// Literal text and commands, in order.
    pub parts: Vec<Part>,
}

impl FormatString {
    /// Whether the string has no commands (so it can be emitted as is).
    pub fn is_literal(&self) -> bool {
        self.parts.iter().all(|p| matches!(p, Part::Literal(_)))
    }

    /// The text, when the string has no commands.
    pub fn literal(&self) -> Option<String> {
        self.parts
            .iter()
            .map(|p| match p {
                Part::Literal(s) => Some(s.as_str()),
                Part::Command(_) => None,
            })
            .collect()
    }
}

/// One piece of a format string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    /// Text copied as is.
    Literal(String),
    /// A command operator, replaced per request.
    Command(Command),
}

/// A header lookup: `%REQ(main?alt):max_len%`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderLookup {
    /// Lower-cased header name (pseudo-headers keep their colon).
    pub main: String,
    /// Used when `main` is absent.
    pub alternative: Option<String>,
    /// Truncate the value to this many bytes.
    pub max_length: Option<usize>,
}

/// The command operators courier implements.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// `%START_TIME%` or `%START_TIME(<strftime format>)%`.
    StartTime(Option<String>),
    /// `%REQ(X)%`: a request header.
    Request(HeaderLookup),
    /// `%RESP(X)%`: a response header.
    Response(HeaderLookup),
    /// `%TRAILER(X)%`: a response trailer.
    Trailer(HeaderLookup),
    /// `%PROTOCOL%`: `HTTP/1.1`, `HTTP/2`.
    Protocol,
    /// `%RESPONSE_CODE%`.
    ResponseCode,
    /// `%RESPONSE_CODE_DETAILS%`.
    ResponseCodeDetails,
    /// `%RESPONSE_FLAGS%` (short form, e.g. `UH,UO`).
    ResponseFlags,
    /// `%RESPONSE_FLAGS_LONG%`.
    ResponseFlagsLong,
    /// `%BYTES_RECEIVED%`: request body bytes.
    BytesReceived,
    /// `%BYTES_SENT%`: response body bytes.
    BytesSent,
    /// `%DURATION%`: ms from start to last byte out.
    Duration,
    /// `%REQUEST_DURATION%`: ms to the last request byte.
    RequestDuration,
    /// `%RESPONSE_DURATION%`: ms to the first response byte.
    ResponseDuration,
    /// `%UPSTREAM_HOST%`.
    UpstreamHost,
    /// `%UPSTREAM_CLUSTER%`.
    UpstreamCluster,
    /// `%UPSTREAM_LOCAL_ADDRESS%`.
    UpstreamLocalAddress,
    /// `%UPSTREAM_TRANSPORT_FAILURE_REASON%`.
    UpstreamTransportFailureReason,
    /// `%UPSTREAM_REQUEST_ATTEMPT_COUNT%`.
    UpstreamRequestAttemptCount,
    /// `%DOWNSTREAM_REMOTE_ADDRESS%`.
    DownstreamRemoteAddress,
    /// `%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%`.
    DownstreamRemoteAddressWithoutPort,
    /// `%DOWNSTREAM_DIRECT_REMOTE_ADDRESS%`.
    DownstreamDirectRemoteAddress,
    /// `%DOWNSTREAM_DIRECT_REMOTE_ADDRESS_WITHOUT_PORT%`.
    DownstreamDirectRemoteAddressWithoutPort,
    /// `%DOWNSTREAM_LOCAL_ADDRESS%`.
    DownstreamLocalAddress,
    /// `%DOWNSTREAM_LOCAL_ADDRESS_WITHOUT_PORT%`.
    DownstreamLocalAddressWithoutPort,
    /// `%DOWNSTREAM_LOCAL_PORT%`.
    DownstreamLocalPort,
    /// `%REQUESTED_SERVER_NAME%` (SNI).
    RequestedServerName,
    /// `%TLS_JA3_FINGERPRINT%`: the ClientHello's JA3 hash (`tls_inspector`).
    TlsJa3Fingerprint,
    /// `%TLS_JA4_FINGERPRINT%`: its JA4 fingerprint.
    TlsJa4Fingerprint,
    /// `%ROUTE_NAME%`.
    RouteName,
    /// `%HOSTNAME%`: the machine's host name.
    Hostname,
    /// `%CONNECTION_ID%`.
    ConnectionId,
    /// `%ENVIRONMENT(X):Z%`: the environment variable `X`, read when the
    /// config is loaded, as Envoy reads it (none: `-`), at most `Z` characters.
    Environment {
        /// Its value, if the variable is set.
        value: Option<String>,
        /// The `:Z` length limit.
        max_length: Option<usize>,
    },
    /// `%CONNECTION_TERMINATION_DETAILS%`: set only by network filters that
    /// close a connection with a reason: network RBAC's denial
    /// (`rbac_access_denied_matched_policy[<policy>]`); `-` otherwise.
    ConnectionTerminationDetails,
    /// `%LOCAL_REPLY_BODY%`: the body a direct response's `body_format` wraps
    /// (its `body`). Only local reply bodies may use it (access logs refuse it).
    LocalReplyBody,
    /// `%DYNAMIC_METADATA(NAMESPACE:KEY:...):max_len%`.
    DynamicMetadata {
        /// The namespace.
        namespace: String,
        /// Keys into the namespace's object.
        path: Vec<String>,
        /// Truncate to this many bytes.
        max_length: Option<usize>,
    },
}

/// Parses a format string; the error says what is wrong and where.
pub fn parse(text: &str) -> Result<FormatString, String> {
    let mut parts = Vec::new();
    let mut literal = String::new();
    let mut rest = text;
    while let Some(start) = rest.find('%') {
        literal.push_str(&rest[..start]);
        let after = &rest[start + 1..];
        if let Some(stripped) = after.strip_prefix('%') {
            literal.push('%');
            rest = stripped;
            continue;
        }
        let (command, consumed) = command(after)?;
        if !literal.is_empty() {
            parts.push(Part::Literal(std::mem::take(&mut literal)));
        }
        parts.push(Part::Command(command));
        rest = &after[consumed..];
    }
    literal.push_str(rest);
    if !literal.is_empty() {
        parts.push(Part::Literal(literal));
    }
    Ok(FormatString { parts })
}

/// Parses one command after its opening `%`; returns it and the bytes consumed
/// (including the closing `%`).
fn command(s: &str) -> Result<(Command, usize), String> {
    let name_len = s
        .bytes()
        .position(|b| !(b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_'))
        .unwrap_or(s.len());
    let name = &s[..name_len];
    if name.is_empty() {
        return Err(format!(
            "invalid format string: '%' not followed by a command near \"%{}\"",
            truncate(s)
        ));
    }
    let mut i = name_len;
    let mut arg = None;
    if s[i..].starts_with('(') {
        let close = s[i..]
            .find(')')
            .ok_or_else(|| format!("invalid format string: unterminated %{name}("))?;
        arg = Some(&s[i + 1..i + close]);
        i += close + 1;
    }
    let mut max_length = None;
    if let Some(tail) = s[i..].strip_prefix(':') {
        let digits = tail.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(format!("invalid format string: bad length after %{name}"));
        }
        max_length = tail[..digits].parse::<usize>().ok();
        i += 1 + digits;
    }
    if !s[i..].starts_with('%') {
        return Err(format!(
            "invalid format string: unterminated command %{name}"
        ));
    }
    let simple = |c: Command| -> Result<Command, String> {
        if arg.is_some() {
            Err(format!("invalid format string: %{name}% takes no argument"))
        } else {
            Ok(c)
        }
    };
    let cmd = match name {
        "START_TIME" => Command::StartTime(arg.filter(|a| !a.is_empty()).map(str::to_string)),
        "REQ" => Command::Request(header(name, arg, max_length)?),
        "RESP" => Command::Response(header(name, arg, max_length)?),
        "TRAILER" => Command::Trailer(header(name, arg, max_length)?),
        "DYNAMIC_METADATA" => {
            let arg =
                arg.ok_or("invalid format string: %DYNAMIC_METADATA% needs (NAMESPACE:KEY...)")?;
            let mut it = arg.split(':');
            let namespace = it.next().unwrap_or_default().to_string();
            if namespace.is_empty() {
                return Err("invalid format string: %DYNAMIC_METADATA% needs a namespace".into());
            }
            Command::DynamicMetadata {
                namespace,
                path: it.map(str::to_string).collect(),
                max_length,
            }
        }
        "PROTOCOL" => simple(Command::Protocol)?,
        "LOCAL_REPLY_BODY" => simple(Command::LocalReplyBody)?,
        "RESPONSE_CODE" => simple(Command::ResponseCode)?,
        "RESPONSE_CODE_DETAILS" => simple(Command::ResponseCodeDetails)?,
        "RESPONSE_FLAGS" => simple(Command::ResponseFlags)?,
        "RESPONSE_FLAGS_LONG" => simple(Command::ResponseFlagsLong)?,
        "BYTES_RECEIVED" => simple(Command::BytesReceived)?,
        "BYTES_SENT" => simple(Command::BytesSent)?,
        "DURATION" => simple(Command::Duration)?,
        "REQUEST_DURATION" => simple(Command::RequestDuration)?,
        "RESPONSE_DURATION" => simple(Command::ResponseDuration)?,
        "UPSTREAM_HOST" => simple(Command::UpstreamHost)?,
        "UPSTREAM_CLUSTER" => simple(Command::UpstreamCluster)?,
        "UPSTREAM_LOCAL_ADDRESS" => simple(Command::UpstreamLocalAddress)?,
        "UPSTREAM_TRANSPORT_FAILURE_REASON" => simple(Command::UpstreamTransportFailureReason)?,
        "UPSTREAM_REQUEST_ATTEMPT_COUNT" => simple(Command::UpstreamRequestAttemptCount)?,
        "DOWNSTREAM_REMOTE_ADDRESS" => simple(Command::DownstreamRemoteAddress)?,
        "DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT" => {
            simple(Command::DownstreamRemoteAddressWithoutPort)?
        }
        "DOWNSTREAM_DIRECT_REMOTE_ADDRESS" => simple(Command::DownstreamDirectRemoteAddress)?,
        "DOWNSTREAM_DIRECT_REMOTE_ADDRESS_WITHOUT_PORT" => {
            simple(Command::DownstreamDirectRemoteAddressWithoutPort)?
        }
        "DOWNSTREAM_LOCAL_ADDRESS" => simple(Command::DownstreamLocalAddress)?,
        "DOWNSTREAM_LOCAL_ADDRESS_WITHOUT_PORT" => {
            simple(Command::DownstreamLocalAddressWithoutPort)?
        }
        "DOWNSTREAM_LOCAL_PORT" => simple(Command::DownstreamLocalPort)?,
        "REQUESTED_SERVER_NAME" => simple(Command::RequestedServerName)?,
        "TLS_JA3_FINGERPRINT" => simple(Command::TlsJa3Fingerprint)?,
        "TLS_JA4_FINGERPRINT" => simple(Command::TlsJa4Fingerprint)?,
        "ROUTE_NAME" => simple(Command::RouteName)?,
        "HOSTNAME" => simple(Command::Hostname)?,
        "CONNECTION_ID" => simple(Command::ConnectionId)?,
        "ENVIRONMENT" => {
            let var = arg
                .filter(|a| !a.is_empty())
                .ok_or("invalid format string: %ENVIRONMENT% needs a variable name")?;
            Command::Environment {
                value: std::env::var(var).ok(),
                max_length,
            }
        }
        "CONNECTION_TERMINATION_DETAILS" => simple(Command::ConnectionTerminationDetails)?,
        other => return Err(format!("unsupported format command %{other}%")),
    };
    Ok((cmd, i + 1))
}

fn header(
    name: &str,
    arg: Option<&str>,
    max_length: Option<usize>,
) -> Result<HeaderLookup, String> {
    let arg = arg
        .filter(|a| !a.is_empty())
        .ok_or_else(|| format!("invalid format string: %{name}% needs a header name"))?;
    let (main, alternative) = match arg.split_once('?') {
        Some((m, a)) => (m, Some(a.to_ascii_lowercase())),
        None => (arg, None),
    };
    if main.is_empty() || alternative.as_deref() == Some("") {
        return Err(format!(
            "invalid format string: empty header name in %{name}({arg})%"
        ));
    }
    Ok(HeaderLookup {
        main: main.to_ascii_lowercase(),
        alternative,
        max_length,
    })
}

fn truncate(s: &str) -> &str {
    let end = s.char_indices().nth(16).map_or(s.len(), |(i, _)| i);
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_default_format() {
        let f = parse(DEFAULT_ACCESS_LOG_FORMAT).unwrap();
        assert!(
            f.parts
                .contains(&Part::Command(Command::Request(HeaderLookup {
                    main: "x-envoy-original-path".into(),
                    alternative: Some(":path".into()),
                    max_length: None,
                })))
        );
        assert!(matches!(f.parts.last(), Some(Part::Literal(s)) if s == "\"\n"));
    }

    #[test]
    fn literal_percent_and_errors() {
        assert_eq!(
            parse("100%% sure").unwrap().parts,
            vec![Part::Literal("100% sure".into())]
        );
        assert_eq!(
            parse("%REQ(x-a):5%").unwrap().parts,
            vec![Part::Command(Command::Request(HeaderLookup {
                main: "x-a".into(),
                alternative: None,
                max_length: Some(5)
            }))]
        );
        assert!(parse("%NOPE%").unwrap_err().contains("%NOPE%"));
        assert!(parse("%REQ(x-a)").is_err());
        assert!(parse("50% off").is_err());
        assert!(parse("%PROTOCOL(x)%").is_err());
    }
}
