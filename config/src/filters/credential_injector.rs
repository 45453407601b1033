//! `envoy.filters.http.credential_injector` with the generic credential
//! (`envoy.http.injected_credentials.generic`): a static generic secret set as
//! a request header. Envoy runs it as a cluster's upstream HTTP filter
//! (Envoy Gateway's backend credential injection); courier does too.

use crate::core;
use crate::ctx::Ctx;
use crate::path::Path;
use envoy_types::pb::envoy::extensions::filters::http::credential_injector::v3 as pb;
use envoy_types::pb::envoy::extensions::http::injected_credentials::generic::v3 as generic_pb;

/// The generic credential's type URL.
pub const GENERIC: &str =
    "type.googleapis.com/envoy.extensions.http.injected_credentials.generic.v3.Generic";

/// A validated `CredentialInjector`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialInjector {
    /// `overwrite`: replace a header the request already has (else it is
    /// kept and counted as `already_exists`).
    pub overwrite: bool,
    /// `allow_request_without_credential`: a failed injection lets the request
    /// go on (else 401).
    pub allow_request_without_credential: bool,
    /// The header the credential goes in (`header`, default `Authorization`),
    /// lower-cased.
    pub header: String,
    /// The header's value: `header_value_prefix` and the secret, trailing CR
    /// and LF removed (Envoy strips them: secret files end in a newline).
    /// Empty: the secret is empty, and every injection fails.
    pub value: Vec<u8>,
}

/// Translates a `CredentialInjector` (`path` is its `typed_config`).
pub fn translate(
    c: &pb::CredentialInjector,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<CredentialInjector> {
    let cp = path.field("credential");
    let Some(cred) = &c.credential else {
        ctx.error(&cp, "is required");
        return None;
    };
    let tp = cp.field("typed_config");
    let Some(any) = &cred.typed_config else {
        ctx.error(&tp, "is required");
        return None;
    };
    if any.type_url != GENERIC {
        ctx.unsupported(
            &tp,
            format!(
                "injected credential {} ({})",
                cred.name,
                any.type_url.rsplit('/').next().unwrap_or("")
            ),
        );
        return None;
    }
    let g = core::unpack::<generic_pb::Generic>(any, &tp, ctx)?;
    let sp = tp.field("credential");
    let Some(sds) = &g.credential else {
        ctx.error(&sp, "is required");
        return None;
    };
    let secret = crate::tls::secrets::generic(sds, &sp, ctx)?;
    let header = if g.header.is_empty() {
        "authorization".to_string()
    } else {
        g.header.to_ascii_lowercase()
    };
    if !header
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_|~`".contains(&b))
    {
        ctx.error(
            &tp.field("header"),
            format!("\"{}\" is not a valid header name", g.header),
        );
        return None;
    }
    let mut secret: &[u8] = &secret;
    while let [rest @ .., b'\n' | b'\r'] = secret {
        secret = rest;
    }
    let value = if secret.is_empty() {
        Vec::new()
    } else {
        let mut v = g.header_value_prefix.clone().into_bytes();
        v.extend_from_slice(secret);
        v
    };
    // A header value's bytes: no control characters but tab.
    if value.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f) {
        ctx.error(&sp, "the credential is not a valid header value");
        return None;
    }
    Some(CredentialInjector {
        overwrite: c.overwrite,
        allow_request_without_credential: c.allow_request_without_credential,
        header,
        value,
    })
}
