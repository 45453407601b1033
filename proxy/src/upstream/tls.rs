//! Upstream TLS origination: one rustls `ClientConfig` per cluster, built at
//! startup from the cluster's validated `UpstreamTls`.
//!
//! Envoy's rules, which differ from a browser's:
//! - no `validation_context`: the server certificate is not verified at all (the
//!   handshake signatures still are, so the peer must hold the key it presents);
//! - with `trusted_ca`: the chain must lead to one of those roots and, when SAN
//!   matchers are set, a SAN must match one; the host name is NOT checked against
//!   the certificate (Envoy only does that with `auto_sni_san_validation`);
//! - `sni` unset: no SNI extension is sent.
//!
//! A cluster's `upstream_http_protocol_options` ([`AutoName`]) set the SNI and the
//! SAN to check per connection, from the request that opened it: `auto_sni` sends
//! the request's host as SNI; `auto_san_validation` requires it as a SAN of the
//! server certificate (in place of the configured SAN matchers, with or without
//! `trusted_ca`, as Envoy's SAN-list override does).

use courier_config::cluster::UpstreamProtocol;
use courier_config::matcher::{StringMatcher, StringPattern};
use courier_config::tls::{SanMatcher, SanType, UpstreamTls};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{Resumption, verify_server_cert_signed_by_trust_anchor};
use rustls::crypto::{WebPkiSupportedAlgorithms, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, Error, RootCertStore, SignatureScheme,
};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// Server-name slots of the session cache when resumption is on. rustls keeps
/// (up to 8) TLS 1.3 tickets per server name; without `sni` the name is the
/// host's IP, so this bounds the number of hosts remembered per cluster.
const SESSION_CACHE_NAMES: usize = 256;

/// A cluster's TLS client side: built once, or (a context naming SDS
/// secrets) rebuilt whenever its secrets change, each handshake taking the
/// one in force.
#[derive(Debug, Clone)]
pub struct UpstreamTlsContext {
    inner: Inner,
}

#[derive(Debug, Clone)]
enum Inner {
    Static(Arc<Built>),
    Sds(Arc<crate::tls::sds::DynamicUpstream<Built>>),
}

impl UpstreamTlsContext {
    /// Builds the context of a cluster speaking `protocol` upstream.
    pub fn new(tls: &UpstreamTls, protocol: UpstreamProtocol) -> Result<Self, String> {
        if let Some(d) =
            crate::tls::sds::DynamicUpstream::new(tls.clone(), move |t| Built::new(t, protocol))
        {
            return Ok(Self {
                inner: Inner::Sds(d),
            });
        }
        Ok(Self {
            inner: Inner::Static(Arc::new(Built::new(tls, protocol)?)),
        })
    }

    /// The context in force: `Err` as Envoy's `NotReadySslSocket` before the
    /// SDS secrets arrive.
    fn built(&self) -> std::io::Result<Arc<Built>> {
        match &self.inner {
            Inner::Static(b) => Ok(Arc::clone(b)),
            Inner::Sds(d) => d.current().ok_or_else(|| {
                std::io::Error::new(std::io::ErrorKind::NotConnected, crate::tls::sds::NOT_READY)
            }),
        }
    }

    /// `(ssl_context_update_by_sds, upstream_context_secrets_not_ready)`:
    /// Envoy's `client_ssl_socket_factory` counters (zero for a context
    /// without SDS secrets).
    pub fn factory_counters(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        match &self.inner {
            Inner::Static(_) => (0, 0),
            Inner::Sds(d) => (d.updates.load(Relaxed), d.not_ready.load(Relaxed)),
        }
    }

    /// Runs the TLS handshake over `tcp`, connected to `addr`; `auto`: the SNI
    /// and SAN taken from the request that opens the connection.
    pub async fn handshake(
        &self,
        tcp: TcpStream,
        addr: SocketAddr,
        auto: Option<&AutoName>,
        hostname: &str,
    ) -> std::io::Result<TlsStream<TcpStream>> {
        let built = self.built()?;
        match built.host_name(auto, hostname) {
            Some(name) => built.handshake(tcp, addr, Some(&name)).await,
            None => built.handshake(tcp, addr, auto).await,
        }
    }

    /// [`Self::handshake`] offering only `alpn`: a health check of an
    /// `auto_config` cluster speaks its own codec, so it must not let the
    /// server pick another.
    pub async fn handshake_offering(
        &self,
        tcp: TcpStream,
        addr: SocketAddr,
        alpn: &[u8],
    ) -> std::io::Result<TlsStream<TcpStream>> {
        self.built()?.handshake_offering(tcp, addr, alpn).await
    }
}

/// One built TLS client context.
#[derive(Debug)]
pub struct Built {
    config: Arc<ClientConfig>,
    /// The configured server-certificate check, for connections whose SAN
    /// comes from the request ([`AutoName`]).
    verifier: Arc<ServerVerifier>,
    /// The configured SNI; `None` = none sent (the host's IP then names the
    /// session in the resumption cache).
    sni: Option<ServerName<'static>>,
    /// `auto_host_sni`.
    auto_host_sni: bool,
    /// `auto_sni_san_validation`.
    auto_sni_san_validation: bool,
}

impl Built {
    fn new(tls: &UpstreamTls, protocol: UpstreamProtocol) -> Result<Self, String> {
        let provider = crate::tls::provider();
        let verifier = Arc::new(ServerVerifier::new(tls, &provider)?);
        let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_protocol_versions(&crate::tls::protocol_versions(&tls.common))
            .map_err(|e| format!("protocol versions: {e}"))?
            .dangerous()
            .with_custom_certificate_verifier(Arc::clone(&verifier) as _);
        let mut config = match &tls.client_certificate {
            Some(c) => builder
                .with_client_auth_cert(c.certificate_chain.clone(), c.private_key.clone_key())
                .map_err(|e| format!("client certificate and key: {e}"))?,
            None => builder.with_no_client_auth(),
        };
        // Envoy's HTTP/2 pool overrides the ALPN list with "h2" (the codec is
        // fixed by the cluster, not negotiated); its HTTP/1.1 pool offers the
        // configured list, or "http/1.1" when none is configured (checked
        // against Envoy 1.40 in the differential tests). Its mixed pool
        // (`auto_config`) offers "h2" and "http/1.1" and speaks what the server
        // picks.
        config.alpn_protocols = match protocol {
            UpstreamProtocol::Http2 => vec![b"h2".to_vec()],
            UpstreamProtocol::Auto => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
            _ if tls.common.alpn_protocols.is_empty() => vec![b"http/1.1".to_vec()],
            _ => tls
                .common
                .alpn_protocols
                .iter()
                .map(|p| p.as_bytes().to_vec())
                .collect(),
        };
        config.enable_sni = tls.sni.is_some();
        config.resumption = if tls.max_session_keys == 0 {
            Resumption::disabled()
        } else {
            Resumption::in_memory_sessions(SESSION_CACHE_NAMES)
        };
        let sni = match &tls.sni {
            Some(s) => {
                Some(ServerName::try_from(s.clone()).map_err(|e| format!("sni {s:?}: {e}"))?)
            }
            None => None,
        };
        Ok(Self {
            config: Arc::new(config),
            verifier,
            sni,
            auto_host_sni: tls.auto_host_sni,
            auto_sni_san_validation: tls.auto_sni_san_validation,
        })
    }

    /// What `auto_host_sni` and `auto_sni_san_validation` make of a new
    /// connection to a host named `hostname`, as Envoy's socket factory: the
    /// request's name (`upstream_http_protocol_options`) wins, else the host's
    /// name is the SNI (not an IP address), else the configured `sni`; with
    /// the validation, the SNI sent is the one SAN required. `None`: nothing
    /// changes.
    fn host_name(&self, request: Option<&AutoName>, hostname: &str) -> Option<AutoName> {
        if !self.auto_host_sni && !self.auto_sni_san_validation {
            return None;
        }
        let host_sni = (self.auto_host_sni
            && !hostname.is_empty()
            && hostname.parse::<std::net::IpAddr>().is_err())
        .then_some(hostname);
        let (name, sni): (Arc<str>, bool) = match (request, host_sni, &self.sni) {
            (Some(r), _, _) if r.sni => (Arc::clone(&r.name), true),
            (_, Some(h), _) => (Arc::from(h), true),
            (_, None, Some(ServerName::DnsName(d))) => (Arc::from(d.as_ref()), false),
            // Nothing is sent as SNI: the request's own SAN check, if any, stays.
            _ => return None,
        };
        let san = self.auto_sni_san_validation || request.is_some_and(|r| r.san);
        Some(AutoName { name, sni, san })
    }

    async fn handshake(
        &self,
        tcp: TcpStream,
        addr: SocketAddr,
        auto: Option<&AutoName>,
    ) -> std::io::Result<TlsStream<TcpStream>> {
        let configured = || match &self.sni {
            Some(n) => n.clone(),
            None => ServerName::IpAddress(addr.ip().into()),
        };
        let Some(auto) = auto else {
            // A connector is an `Arc` of the config: nothing is built here.
            return TlsConnector::from(Arc::clone(&self.config))
                .connect(configured(), tcp)
                .await;
        };
        // A new connection is rare next to a pooled one: its own config.
        let mut config = (*self.config).clone();
        let auto_sni = auto
            .sni
            .then(|| ServerName::try_from(auto.name.to_string()).ok())
            .flatten();
        let name = match auto_sni {
            Some(n) => {
                config.enable_sni = true;
                n
            }
            None => configured(),
        };
        if auto.san {
            config
                .dangerous()
                .set_certificate_verifier(Arc::new(self.verifier.with_san(&auto.name)));
        }
        TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
    }
}

impl Built {
    async fn handshake_offering(
        &self,
        tcp: TcpStream,
        addr: SocketAddr,
        alpn: &[u8],
    ) -> std::io::Result<TlsStream<TcpStream>> {
        let mut config = (*self.config).clone();
        config.alpn_protocols = vec![alpn.to_vec()];
        let name = match &self.sni {
            Some(n) => n.clone(),
            None => ServerName::IpAddress(addr.ip().into()),
        };
        TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
    }
}

/// What a request sets on the TLS connection it opens (`auto_sni`,
/// `auto_san_validation`): its host, or the `override_auto_sni_header` value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AutoName {
    /// The host, without its port.
    pub name: Arc<str>,
    /// Sent as SNI (`auto_sni`, and the host is not an IP address).
    pub sni: bool,
    /// Required as a SAN of the server certificate (`auto_san_validation`).
    pub san: bool,
}

/// Envoy's server-certificate check (see the module docs).
#[derive(Debug)]
struct ServerVerifier {
    /// `None`: no validation context, any certificate passes (but for a SAN
    /// override).
    roots: Option<Arc<RootCertStore>>,
    san_matchers: Vec<SanMatcher>,
    /// `auto_san_validation`: the one SAN required, in place of `san_matchers`,
    /// checked with or without `roots`.
    san_override: Option<SanMatcher>,
    /// `allow_expired_certificate`.
    allow_expired: bool,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerVerifier {
    fn new(
        tls: &UpstreamTls,
        provider: &Arc<rustls::crypto::CryptoProvider>,
    ) -> Result<Self, String> {
        let algorithms = provider.signature_verification_algorithms;
        // `ACCEPT_UNTRUSTED`: Envoy's validator reports success whatever its
        // checks find, so nothing is checked.
        let validation = tls
            .common
            .validation
            .as_ref()
            .filter(|v| !v.accept_untrusted);
        let Some(validation) = validation else {
            return Ok(Self {
                roots: None,
                san_matchers: Vec::new(),
                san_override: None,
                allow_expired: false,
                algorithms,
            });
        };
        let mut roots = RootCertStore::empty();
        for (i, ca) in validation.trusted_ca.iter().enumerate() {
            roots
                .add(ca.clone())
                .map_err(|e| format!("trusted_ca certificate {i}: {e}"))?;
        }
        Ok(Self {
            roots: Some(Arc::new(roots)),
            san_matchers: validation.san_matchers.clone(),
            san_override: None,
            allow_expired: validation.allow_expired_certificate,
            algorithms,
        })
    }

    /// This check with `name` as the one SAN required (Envoy's SAN-list
    /// override: a DNS SAN matches it as `dnsNameMatch` does, wildcards
    /// included; URI and IP SANs match it exactly).
    fn with_san(&self, name: &str) -> Self {
        Self {
            roots: self.roots.clone(),
            san_matchers: Vec::new(),
            san_override: Some(SanMatcher {
                san_type: SanType::Any,
                matcher: StringMatcher {
                    pattern: StringPattern::Exact(name.to_string()),
                    ignore_case: false,
                },
            }),
            allow_expired: self.allow_expired,
            algorithms: self.algorithms,
        }
    }
}

impl ServerCertVerifier for ServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        if let Some(roots) = &self.roots {
            let cert = ParsedCertificate::try_from(end_entity)?;
            crate::tls::expiry::verify_allowing_expiry(
                self.allow_expired,
                end_entity,
                now,
                |at| {
                    verify_server_cert_signed_by_trust_anchor(
                        &cert,
                        roots,
                        intermediates,
                        at,
                        self.algorithms.all,
                    )
                },
            )?;
        }
        let matchers = match &self.san_override {
            Some(m) => std::slice::from_ref(m),
            None => &self.san_matchers[..],
        };
        if !matchers.is_empty() && !crate::tls::san::sans_match(end_entity, matchers) {
            return Err(Error::InvalidCertificate(
                CertificateError::ApplicationVerificationFailure,
            ));
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}
