//! `header_key_format` with the `preserve_case` formatter: HTTP/1.1 header names
//! written in the case they were read in, as Envoy's stateful formatter does.
//!
//! hyper records the case of the names it reads (`preserve_header_case`) in a
//! request's or response's extensions, under a type of its own that is not
//! public, and writes a message with such a record in that case. The record is
//! carried by carrying the extensions hyper gave the message.

use http::Extensions;

/// The extensions hyper gave a downstream request read with
/// `preserve_header_case`, kept for the upstream request: its header names go
/// out in the case the client sent them (the names courier adds stay lower case).
#[derive(Debug, Clone)]
pub struct ReadCase(Extensions);

impl ReadCase {
    /// The case record among `extensions` (a request's, as hyper gave it).
    pub fn of(extensions: &Extensions) -> Self {
        let mut kept = extensions.clone();
        // The downstream connection's upgrade is the connection manager's own.
        kept.remove::<hyper::upgrade::OnUpgrade>();
        ReadCase(kept)
    }

    /// Extensions for an upstream request that carry the record.
    pub fn extensions(&self) -> Extensions {
        self.0.clone()
    }
}

/// What of an upstream response's extensions goes on with it when its cluster
/// reads header names with `preserve_case`: the case record, and the reason
/// phrase when `forward_reason_phrase` says so (otherwise hyper writes the
/// standard one).
pub fn response_extensions(
    mut from_upstream: Extensions,
    forward_reason_phrase: bool,
) -> Extensions {
    if !forward_reason_phrase {
        from_upstream.remove::<hyper::ext::ReasonPhrase>();
    }
    from_upstream.remove::<hyper::upgrade::OnUpgrade>();
    from_upstream
}
