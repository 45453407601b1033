//! The accept stage: listening sockets ([`socket`]), the listeners a worker
//! serves and their updates ([`listeners`]), the accept loop's batching
//! ([`batch`]), and which filter chain (and TLS context) takes a connection
//! ([`chain`]); the connection then goes to the codec stage ([`crate::codec`]).

pub mod batch;
pub mod chain;
pub mod connection_limit;
pub mod listeners;
pub mod network_rbac;
mod passthrough;
pub mod proxy_protocol;
pub mod socket;
