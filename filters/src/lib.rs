//! courier's HTTP filters: the filter-chain interface the connection manager drives
//! ([`chain`]), what a filter sees of a request ([`request`]), and the jwt_authn and RBAC
//! filters' runtime over the validated configs of `courier-config`, and the compressor
//! filter (the response body path).

pub mod api_key_auth;
pub mod basic_auth;
pub mod buffer;
pub mod build;
pub mod cel_attributes;
pub mod chain;
pub mod compressor;
pub mod credential_injector;
pub mod csrf;
pub mod custom_response;
pub mod dynamic_forward_proxy;
pub mod ext_authz;
pub mod ext_proc;
pub mod fault;
pub mod grpc;
pub mod header_mutation;
pub mod health_check;
pub mod jwt_authn;
pub mod local_ratelimit;
pub mod oauth2;
pub mod per_worker;
pub mod ratelimit;
pub mod rbac;
pub mod request;
#[cfg(test)]
pub(crate) mod test_support;
#[cfg(test)]
mod timing_tests;
pub mod upstream;

pub use build::{build_chain, build_chain_full, build_chain_with};
pub use chain::{
    BodyEncoder, BodyEncoders, BodyWanted, ChainEntry, Decision, EncodeError, FilterChain,
    HttpFilter, LocalReply, PendingFuture, ResponseHead, Verdict,
};
pub use request::{ConnFacts, PeerCert, RequestState, SelectedRoute, TlsFacts};
