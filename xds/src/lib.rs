//! courier's xDS client.
//!
//! It runs on the main thread's tokio runtime and fetches listeners, route
//! configurations, clusters, endpoints and runtime layers (RTDS) from a control plane (ADS or per-type
//! gRPC streams, State-of-the-World or Delta) or from `path_config_source` files.
//! Every resource is translated and validated by `courier_config::resource`;
//! valid ones are handed to the [`Consumer`] as one typed [`Update`] per response,
//! invalid ones (and the ones the consumer rejects) are NACKed with their name and
//! field path. What is in force per type is kept in the [`Store`] (for
//! `/config_dump`), which also provides versions on reconnect.
//!
//! The interface is narrow on purpose: the proxy implements [`Consumer`] (build a
//! new snapshot, swap it in) and tells the client which RDS and EDS names it wants
//! through [`XdsHandle::set_interest`].

mod apply;
mod backoff;
mod client;
mod decode;
mod delta;
mod error;
mod file;
pub mod from_config;
mod grpc;
mod interest;
mod resource_type;
mod rest;
mod sotw;
mod store;
mod update;

pub use backoff::Backoff;
pub use client::{Client, ClientConfig, GrpcSource, Source, XdsHandle};
pub use error::XdsError;
pub use file::FileSource;
pub use grpc::{Connector, UriConnector};
pub use interest::Interest;
pub use resource_type::ResourceType;
pub use rest::{RestSource, RestTransport};
pub use store::{Counters, Entry, Store, TypeState};
pub use update::{Consumer, Update, Upsert, Verdict};
