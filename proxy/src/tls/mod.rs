//! Downstream TLS termination: one rustls `ServerConfig` per filter chain, built
//! once from the chain's validated `DownstreamTls` (DER certificate and key, ALPN,
//! versions, client-certificate validation with SAN matchers).

mod any_cert;
mod cert_select;
pub mod expiry;
pub mod fingerprint;
mod peer;
pub(crate) mod san;
pub mod sds;
mod stream;
pub mod xfcc;

pub use peer::{peer_cert, presented_cert};
pub use stream::DownstreamStream;

use courier_config::listener::Listener;
use courier_config::tls::{CommonTls, DownstreamTls, TlsVersion};
use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;
use std::collections::HashMap;
use std::sync::Arc;

/// The two server configs of one TLS context.
#[derive(Debug, Clone)]
pub struct ChainTls {
    /// With the configured ALPN protocols.
    pub with_alpn: Arc<ServerConfig>,
    /// Without ALPN: used when the client offers none of ours. rustls would fail
    /// that handshake (`no_application_protocol`); Envoy (BoringSSL) carries on
    /// without ALPN, and so does courier.
    pub without_alpn: Arc<ServerConfig>,
}

impl ChainTls {
    /// The config for a client offering `offered` ALPN protocols.
    pub fn for_client(&self, offered: &[Vec<u8>]) -> Arc<ServerConfig> {
        let ours = &self.with_alpn.alpn_protocols;
        if offered.is_empty() || ours.iter().any(|p| offered.contains(p)) {
            Arc::clone(&self.with_alpn)
        } else {
            Arc::clone(&self.without_alpn)
        }
    }
}

/// Server configs for every TLS context of a set of listeners, keyed by the
/// identity of the `DownstreamTls` they were built from (the snapshot shares it
/// by `Arc`), so a worker finds a chain's config without building it per connection.
#[derive(Debug, Default)]
pub struct ServerConfigs {
    // The `Arc` kept here pins the allocation, so its address cannot be reused
    // by another context while the entry exists.
    by_context: HashMap<usize, (Arc<DownstreamTls>, Built)>,
}

/// One context's configs: built once, or rebuilt as its SDS secrets change.
#[derive(Debug, Clone)]
enum Built {
    Static(ChainTls),
    Sds(Arc<sds::DynamicServer>),
}

impl ServerConfigs {
    /// Builds the configs of every filter chain with TLS in `listeners`.
    /// An error names the listener and chain (a key that does not match its
    /// certificate, say).
    pub fn build<'a>(listeners: impl IntoIterator<Item = &'a Listener>) -> Result<Self, String> {
        let mut by_context = HashMap::new();
        for l in listeners {
            for (i, fc) in l.all_filter_chains().enumerate() {
                let Some(tls) = &fc.tls else { continue };
                let built =
                    match sds::DynamicServer::new(Arc::clone(tls)) {
                        Some(d) => Built::Sds(d),
                        None => Built::Static(chain_tls(tls).map_err(|e| {
                            format!("listener {} filter chain {i}: TLS: {e}", l.name)
                        })?),
                    };
                by_context.insert(key(tls), (Arc::clone(tls), built));
            }
        }
        Ok(Self { by_context })
    }

    /// The configs for `tls`: the prebuilt ones, or (for a context this table
    /// was not built with, as after a config update) new ones.
    /// A context whose SDS secrets have not arrived gives `Err`
    /// ([`sds::NOT_READY`]).
    pub fn get(&self, tls: &Arc<DownstreamTls>) -> Result<ChainTls, String> {
        match self.by_context.get(&key(tls)) {
            Some((ctx, Built::Static(built))) if Arc::ptr_eq(ctx, tls) => Ok(built.clone()),
            Some((ctx, Built::Sds(d))) if Arc::ptr_eq(ctx, tls) => d.current(),
            _ => match sds::DynamicServer::new(Arc::clone(tls)) {
                Some(d) => d.current(),
                None => chain_tls(tls),
            },
        }
    }

    /// Waits until the SDS secrets of every context here had their first
    /// answer or timed out (a listener warms until then, as in Envoy).
    pub async fn warmed(&self) {
        for (_, built) in self.by_context.values() {
            if let Built::Sds(d) = built {
                d.secrets().warmed().await;
            }
        }
    }
}

fn key(tls: &Arc<DownstreamTls>) -> usize {
    Arc::as_ptr(tls) as usize
}

/// The process-wide crypto provider: aws-lc-rs.
pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// Builds both server configs of one TLS context.
pub fn chain_tls(tls: &DownstreamTls) -> Result<ChainTls, String> {
    let mut config = server_config(tls)?;
    let without = Arc::new(config.clone());
    config.alpn_protocols = tls
        .common
        .alpn_protocols
        .iter()
        .map(|p| p.as_bytes().to_vec())
        .collect();
    Ok(ChainTls {
        with_alpn: Arc::new(config),
        without_alpn: without,
    })
}

/// The rustls protocol versions between `common`'s minimum and maximum.
pub(crate) fn protocol_versions(
    common: &CommonTls,
) -> Vec<&'static rustls::SupportedProtocolVersion> {
    [
        (TlsVersion::Tls12, &rustls::version::TLS12),
        (TlsVersion::Tls13, &rustls::version::TLS13),
    ]
    .into_iter()
    .filter(|(v, _)| (common.min_version..=common.max_version).contains(v))
    .map(|(_, p)| p)
    .collect()
}

/// A server config without ALPN.
fn server_config(tls: &DownstreamTls) -> Result<ServerConfig, String> {
    let provider = provider();
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&protocol_versions(&tls.common))
        .map_err(|e| format!("protocol versions: {e}"))?;
    let builder = match client_verifier(tls, &provider)? {
        Some(v) => builder.with_client_cert_verifier(v),
        None => builder.with_no_client_auth(),
    };
    let mut config = match tls.certificates.as_slice() {
        [cert] => builder
            .with_single_cert(cert.certificate_chain.clone(), cert.private_key.clone_key())
            .map_err(|e| format!("certificate and key: {e}"))?,
        // Several: picked per handshake by SNI and the client's key types.
        certs => builder.with_cert_resolver(Arc::new(cert_select::CertSelector::new(
            certs,
            tls.full_scan_certs_on_sni_mismatch,
            &provider,
        )?)),
    };
    resumption(&mut config, tls)?;
    Ok(config)
}

/// Session resumption as BoringSSL does it for Envoy: session tickets (the
/// only TLS 1.3 resumption there is, and one of TLS 1.2's) unless stateless
/// resumption is disabled, and TLS 1.2 session IDs from a server-side cache
/// unless stateful resumption is. (rustls would also resume TLS 1.3 from its
/// cache; without tickets, it sends no TLS 1.3 tickets at all.)
fn resumption(config: &mut ServerConfig, tls: &DownstreamTls) -> Result<(), String> {
    if tls.stateless_resumption {
        config.ticketer = rustls::crypto::aws_lc_rs::Ticketer::new()
            .map_err(|e| format!("session ticket keys: {e}"))?;
    } else {
        config.send_tls13_tickets = 0;
    }
    if !tls.stateful_resumption {
        config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    }
    Ok(())
}

/// The client-certificate verifier: `None` when client certificates are not
/// asked for; otherwise WebPKI against `trusted_ca`, then the SAN matchers.
fn client_verifier(
    tls: &DownstreamTls,
    provider: &Arc<CryptoProvider>,
) -> Result<Option<Arc<dyn ClientCertVerifier>>, String> {
    // Without a CA Envoy 1.40 asks for no certificate, even with
    // `require_client_certificate` (checked in tls_validation_fields_differential).
    let Some(validation) = &tls.common.validation else {
        return Ok(None);
    };
    if validation.accept_untrusted {
        // `ACCEPT_UNTRUSTED`: a certificate is asked for, and any presented passes.
        return Ok(Some(Arc::new(any_cert::AnyClientCert::new(
            provider,
            tls.require_client_certificate,
        ))));
    }
    let mut roots = rustls::RootCertStore::empty();
    for (i, ca) in validation.trusted_ca.iter().enumerate() {
        roots
            .add(ca.clone())
            .map_err(|e| format!("trusted_ca certificate {i}: {e}"))?;
    }
    let mut builder =
        WebPkiClientVerifier::builder_with_provider(Arc::new(roots), Arc::clone(provider));
    if !tls.require_client_certificate {
        // Envoy then verifies a certificate that is presented, and accepts none.
        builder = builder.allow_unauthenticated();
    }
    let mut webpki = builder
        .build()
        .map_err(|e| format!("client certificate validation: {e}"))?;
    if validation.allow_expired_certificate {
        // Under the SAN checks: an expired certificate is still matched.
        webpki = Arc::new(expiry::ExpiredClientOk::new(webpki));
    }
    if validation.san_matchers.is_empty() {
        return Ok(Some(webpki));
    }
    Ok(Some(Arc::new(san::SanVerifier::new(
        webpki,
        validation.san_matchers.clone(),
    ))))
}
